//! Pre-v3 runs blobs: the `runs` array agno 2.x kept inside `{prefix}:sessions:{id}`.
//!
//! The blobs are found by `SCAN` (agno 2.x maintained none of our indexes), once per copy:
//! the first page refreshes the lexicographic `legacy` index, later pages read it with
//! `ZRANGEBYLEX`. Counting and dropping scan too; these are maintenance calls.

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{async_trait, Error, ErrorKind, Result, RunRecord};
use agno_storage_doc::{backoff, Commit, CAS_ATTEMPTS};
use serde_json::Value;

use crate::codec::{decode_object, text};
use crate::docs::{Entry, Expect};
use crate::sessions::TABLE;
use crate::store::KvStore;

impl KvStore {
    /// `(session_id, raw record)` of every session whose record has a non-null `runs`.
    async fn scan_legacy_sessions(&self) -> Result<Vec<(String, String)>> {
        let mut out = Vec::new();
        for (id, raw) in self.scan_records(TABLE).await? {
            let map = decode_object(&self.key(TABLE, &id), &raw)?;
            if map.get("runs").is_some_and(|b| !b.is_null()) {
                out.push((id, raw));
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl LegacyRunsStore for KvStore {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        let index = self.sessions_legacy();
        if after.is_none() {
            let found = self.scan_legacy_sessions().await?;
            let entries: Vec<Entry> = found
                .iter()
                .map(|(id, _)| Entry::z(index.clone(), id, 0.0))
                .collect();
            self.add_entries(&entries).await?;
        }
        let mut out = Vec::with_capacity(limit);
        let mut cursor = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        while out.len() < limit {
            let ids: Vec<String> = self
                .query(
                    redis::cmd("ZRANGEBYLEX")
                        .arg(&index)
                        .arg(&cursor)
                        .arg("+")
                        .arg("LIMIT")
                        .arg(0)
                        .arg(limit - out.len()),
                )
                .await?;
            let Some(last) = ids.last() else { break };
            cursor = format!("({last}");
            let keys: Vec<String> = ids.iter().map(|id| self.key(TABLE, id)).collect();
            let mut gone = Vec::new();
            for ((id, key), raw) in ids.iter().zip(&keys).zip(self.mget(&keys).await?) {
                let map = match raw {
                    Some(raw) => decode_object(key, &raw)?,
                    None => {
                        gone.push(id.clone());
                        continue;
                    }
                };
                match map.get("runs").filter(|b| !b.is_null()) {
                    Some(blob) => out.push(LegacySessionRuns {
                        session_id: id.clone(),
                        user_id: text(&map, "user_id"),
                        runs: blob.clone(),
                    }),
                    None => gone.push(id.clone()),
                }
            }
            if !gone.is_empty() {
                self.query::<i64>(redis::cmd("ZREM").arg(&index).arg(&gone))
                    .await?;
            }
        }
        Ok(out)
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        let mut outcome = InsertedRuns::default();
        for row in rows {
            // The insert is atomic: either it wrote the row or the run_id was already
            // stored, so every row is present afterwards.
            if crate::runs::insert_if_absent(self, &row).await? {
                outcome.inserted += 1;
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let mut pending = 0;
        for (id, raw) in self.scan_legacy_sessions().await? {
            let map = decode_object(&self.key(TABLE, &id), &raw)?;
            if decode_legacy_runs(map.get("runs")).map_or(true, |runs| !runs.is_empty()) {
                pending += 1;
            }
        }
        Ok(pending)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        let mut changed = 0;
        'sessions: for (id, _) in self.scan_records(TABLE).await? {
            let key = self.key(TABLE, &id);
            for attempt in 0..CAS_ATTEMPTS {
                let Some(raw) = self.get(&key).await? else {
                    continue 'sessions;
                };
                let mut fields = crate::docs::view(self, TABLE, &id, &raw)?;
                if !fields.contains_key("runs") {
                    continue 'sessions;
                }
                // A null `runs` is written as no `runs` key (and leaves the legacy index).
                fields.insert("runs".into(), Value::Null);
                let write = self.plan(TABLE, &id, Expect::Text(raw), Some(&fields))?;
                if self.commit(vec![write]).await? == Commit::Done {
                    changed += 1;
                    continue 'sessions;
                }
                backoff(attempt).await;
            }
            return Err(Error::new(
                ErrorKind::Conflict,
                format!("drop_legacy_runs: session {id} kept changing; run it again"),
            )
            .with_backend(self.server)
            .set_temporary(true));
        }
        Ok(changed)
    }
}
