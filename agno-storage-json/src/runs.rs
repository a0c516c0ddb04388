//! Runs (`agno_runs.json`): one row per run, as agno's `build_single_run_row` lays it out.

use std::collections::HashSet;

use agno_storage_core::legacy::legacy_runs_list;
use agno_storage_core::run::{RunQuery, RunRecord, RunStore};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Page, Result,
    Unreadable,
};
use serde_json::Value;

use crate::doc::{fields, find, from_row, put, shape, text, Doc, Nulls};
use crate::files::{
    undecodable, undecodable_error, undecodable_field, undecodable_raw_field, Step, Table,
};
use crate::sessions::session_owner;
use crate::store::JsonStore;

const RUN_KEYS: &[&str] = &[
    "run_id",
    "session_id",
    "run_type",
    "agent_id",
    "team_id",
    "workflow_id",
    "user_id",
    "parent_run_id",
    "status",
    "run_index",
    "run_data",
    "created_at",
    "updated_at",
];

impl Doc for RunRecord {
    const TABLE: Table = Table::Runs;
    const KEY: &'static str = "run_id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Runs, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape(fields(self)?, RUN_KEYS, Nulls::Keep, existing))
    }
}

#[async_trait]
impl RunStore for JsonStore {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let sessions = self.files.load(Table::Sessions).await?;
        run.check_session(session_owner(&sessions, &run.session_id))?;
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Runs, |rows| {
                let mut run = run.clone();
                match find::<RunRecord>(rows, &run.run_id)? {
                    Some((index, mut stored)) => {
                        if !writable_by(stored.user_id.as_deref(), run.user_id.as_deref()) {
                            return Err(owned_by_another_user("run", &run.run_id));
                        }
                        stored.status = run.status;
                        stored.run_data = run.run_data;
                        if run.user_id.is_some() {
                            stored.user_id = run.user_id;
                        }
                        stored.parent_run_id = run.parent_run_id;
                        stored.updated_at = Some(now);
                        stored.run_index = stored.run_index.or(run.run_index);
                        put(rows, Some(index), &stored)?;
                        Ok(Step::Write(stored))
                    }
                    None => {
                        let sid = Some(run.session_id.as_str());
                        let next_index = rows
                            .iter()
                            .filter_map(|r| match undecodable(r) {
                                None => (text(r, "session_id") == sid)
                                    .then(|| r.get("run_index").and_then(Value::as_i64))
                                    .flatten(),
                                // A row kept undecoded still holds its place in the session.
                                Some(_) => (undecodable_field(r, "session_id").as_deref() == sid)
                                    .then(|| undecodable_raw_field(r, "run_index")?.parse().ok())
                                    .flatten(),
                            })
                            .max()
                            .map_or(0, |m| m + 1);
                        run.run_index = run.run_index.or(Some(next_index));
                        run.updated_at = Some(now);
                        put(rows, None, &run)?;
                        Ok(Step::Write(run))
                    }
                }
            })
            .await
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        Ok(self
            .get::<RunRecord>(run_id)
            .await?
            .filter(|r| visible_to(r.user_id.as_deref(), user_id)))
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        let (mut runs, mut unreadable) = (Vec::new(), Vec::new());
        for row in &self.files.load(Table::Runs).await? {
            let Some(stored) = undecodable(row) else {
                let run = RunRecord::decode(row)?;
                if query.matches(&run) {
                    runs.push(run);
                }
                continue;
            };
            // Named when it may match: in the session asked for, visible to the caller.
            let field = |key| undecodable_field(row, key);
            let in_session = query
                .session_id
                .as_ref()
                .is_none_or(|s| field("session_id").as_ref() == Some(s));
            if in_session && visible_to(field("user_id").as_deref(), query.user_id.as_deref()) {
                unreadable.push(Unreadable {
                    id: field("run_id").unwrap_or_default(),
                    error: undecodable_error(stored),
                });
            }
        }
        let mut page = query.page(runs)?;
        page.unreadable = unreadable;
        Ok(page)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let wanted: HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        let deleted = self
            .files
            .modify(Table::Runs, |rows| {
                let before = rows.len();
                rows.retain(|r| {
                    !(text(r, "run_id").is_some_and(|id| wanted.contains(id))
                        && visible_to(text(r, "user_id"), user_id))
                });
                let deleted = (before - rows.len()) as u64;
                Ok(if deleted == 0 {
                    Step::Keep(0)
                } else {
                    Step::Write(deleted)
                })
            })
            .await?;
        // Scrub legacy blobs of sessions the caller may see, so a merge cannot resurrect them.
        self.files
            .modify(Table::Sessions, |rows| {
                let mut changed = false;
                for row in rows.iter_mut() {
                    if !visible_to(text(row, "user_id"), user_id) {
                        continue;
                    }
                    let Some(blob) = row.get("runs").filter(|b| !b.is_null()) else {
                        continue;
                    };
                    let list = legacy_runs_list(Some(blob));
                    let kept: Vec<Value> = list
                        .iter()
                        .filter(|r| text(r, "run_id").is_none_or(|id| !wanted.contains(id)))
                        .cloned()
                        .collect();
                    if kept.len() != list.len() {
                        if let Some(map) = row.as_object_mut() {
                            map.insert("runs".into(), Value::Array(kept));
                            changed = true;
                        }
                    }
                }
                Ok(if changed {
                    Step::Write(())
                } else {
                    Step::Keep(())
                })
            })
            .await?;
        Ok(deleted)
    }
}
