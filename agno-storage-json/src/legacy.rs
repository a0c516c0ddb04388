//! Pre-v3 runs: agno 2.x kept a session's runs inside its row (`runs`). The v3.0.0 step
//! copies them into `agno_runs.json` and leaves the blob as a backup until
//! `cleanup_legacy_runs` drops it.

use std::collections::HashSet;

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::session::Session;
use agno_storage_core::{async_trait, Error, ErrorKind, Result, RunRecord};
use serde_json::Value;

use crate::doc::{position, put, text, Doc};
use crate::files::{Step, Table};
use crate::sessions::legacy_blob;
use crate::store::JsonStore;

impl JsonStore {
    /// Appends `session` as agno 2.x wrote it: the row with its runs inside.
    pub(crate) async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        self.files
            .modify(Table::Sessions, |rows| {
                if position(rows, "session_id", &session.session_id).is_some() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("session {} already exists", session.session_id),
                    ));
                }
                let mut row = session.encode(None)?;
                if let Some(map) = row.as_object_mut() {
                    map.insert("runs".into(), runs_blob.clone());
                }
                rows.push(row);
                Ok(Step::Write(()))
            })
            .await
    }
}

#[async_trait]
impl LegacyRunsStore for JsonStore {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        let rows = self.files.load(Table::Sessions).await?;
        let mut page: Vec<LegacySessionRuns> = rows
            .iter()
            .filter_map(|row| {
                let session_id = text(row, "session_id")?;
                let blob = legacy_blob(row).filter(|b| !b.is_null())?;
                after
                    .is_none_or(|a| session_id > a)
                    .then(|| LegacySessionRuns {
                        session_id: session_id.to_owned(),
                        user_id: text(row, "user_id").map(str::to_owned),
                        runs: blob.clone(),
                    })
            })
            .collect();
        page.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        page.dedup_by(|a, b| a.session_id == b.session_id);
        page.truncate(limit);
        Ok(page)
    }

    async fn insert_runs_if_absent(&self, runs: Vec<RunRecord>) -> Result<InsertedRuns> {
        self.files
            .modify(Table::Runs, |rows| {
                let mut stored: HashSet<String> = rows
                    .iter()
                    .filter_map(|r| text(r, "run_id").map(str::to_owned))
                    .collect();
                let mut outcome = InsertedRuns::default();
                for run in &runs {
                    if stored.insert(run.run_id.clone()) {
                        put(rows, None, run)?;
                        outcome.inserted += 1;
                    }
                    outcome.present += 1;
                }
                Ok(if outcome.inserted > 0 {
                    Step::Write(outcome)
                } else {
                    Step::Keep(outcome)
                })
            })
            .await
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let rows = self.files.load(Table::Sessions).await?;
        Ok(rows
            .iter()
            .filter(|row| {
                decode_legacy_runs(legacy_blob(row)).map_or(true, |runs| !runs.is_empty())
            })
            .count() as u64)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        self.files
            .modify(Table::Sessions, |rows| {
                let mut changed = 0;
                for row in rows.iter_mut() {
                    if let Some(map) = row.as_object_mut() {
                        if map.shift_remove("runs").is_some() {
                            changed += 1;
                        }
                    }
                }
                Ok(if changed > 0 {
                    Step::Write(changed)
                } else {
                    Step::Keep(0)
                })
            })
            .await
    }
}
