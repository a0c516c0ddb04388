//! Pre-v3 runs: the `runs` field agno 2.x kept inside each session document.

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{async_trait, Result, RunRecord};

use crate::doc::{backoff, doc_id, to_fields, Commit, Pre, Stored, CAS_ATTEMPTS};
use crate::sessions::LEGACY_RUNS;
use crate::FirestoreDb;
use agno_storage_doc::DocBackend;

impl FirestoreDb {
    /// Session documents with a non-null `runs` field, ordered by `session_id`.
    async fn legacy_sessions(&self) -> Result<Vec<Stored>> {
        let mut docs: Vec<Stored> = self
            .query(&self.inner.names.sessions, &[])
            .await?
            .into_iter()
            .filter(|d| d.fields.get(LEGACY_RUNS).is_some_and(|v| !v.is_null()))
            .collect();
        docs.sort_by(|a, b| a.str("session_id").cmp(&b.str("session_id")));
        Ok(docs)
    }
}

#[async_trait]
impl LegacyRunsStore for FirestoreDb {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        Ok(self
            .legacy_sessions()
            .await?
            .into_iter()
            .filter_map(|d| {
                let session_id = d.str("session_id")?.to_owned();
                if after.is_some_and(|a| session_id.as_str() <= a) {
                    return None;
                }
                Some(LegacySessionRuns {
                    session_id,
                    user_id: d.str("user_id").map(str::to_owned),
                    runs: d.fields.get(LEGACY_RUNS).cloned().unwrap_or_default(),
                })
            })
            .take(limit)
            .collect())
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        // Raise the sessions' run counters first, so an append racing the copy cannot take
        // an index a copied run is about to hold.
        let mut highest: Vec<(&str, i64)> = Vec::new();
        for row in &rows {
            let Some(index) = row.run_index else { continue };
            match highest.iter_mut().find(|(sid, _)| *sid == row.session_id) {
                Some((_, top)) => *top = (*top).max(index),
                None => highest.push((&row.session_id, index)),
            }
        }
        for (session_id, top) in highest {
            self.raise_run_counter(session_id, top + 1).await?;
        }
        // Create-only writes: a run already stored (newer than its legacy copy) is kept as it
        // is, unlike agno 3.1.10's `batch.set`, which reverts it.
        let mut outcome = InsertedRuns::default();
        for row in &rows {
            let write = self.put(
                &self.inner.names.runs,
                &doc_id(&row.run_id),
                &to_fields(row, "a run")?,
                Pre::Absent,
            );
            if let Commit::Done = self.commit("copy legacy runs", vec![write]).await? {
                outcome.inserted += 1;
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        Ok(self
            .legacy_sessions()
            .await?
            .iter()
            .filter(|d| {
                decode_legacy_runs(d.fields.get(LEGACY_RUNS)).map_or(true, |runs| !runs.is_empty())
            })
            .count() as u64)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        let mut changed = 0;
        for stored in self
            .query(&self.inner.names.sessions, &[])
            .await?
            .into_iter()
            .filter(|d| d.fields.contains_key(LEGACY_RUNS))
        {
            let mut current = stored;
            let mut done = false;
            for attempt in 0..CAS_ATTEMPTS {
                let mut fields = current.fields.clone();
                if fields.remove(LEGACY_RUNS).is_none() {
                    done = true;
                    break;
                }
                let write = self.put(
                    &self.inner.names.sessions,
                    &current.id,
                    &fields,
                    current.unchanged(),
                );
                match self.commit("drop legacy runs", vec![write]).await? {
                    Commit::Done => {
                        changed += 1;
                        done = true;
                        break;
                    }
                    Commit::Conflict => {
                        backoff(attempt).await;
                        match self.get(&self.inner.names.sessions, &current.id).await? {
                            Some(fresh) => current = fresh,
                            None => {
                                done = true;
                                break;
                            }
                        }
                    }
                }
            }
            if !done {
                return Err(self.contended("drop legacy runs"));
            }
        }
        Ok(changed)
    }
}

impl FirestoreDb {
    /// Writes a session as agno 2.x stored it: the whole session under an auto-style
    /// document id, its runs in a `runs` field (a native array, or a string when the blob
    /// is one), no stamps. For imports and migration tests.
    pub async fn insert_legacy_session(
        &self,
        session: agno_storage_core::Session,
        runs_blob: serde_json::Value,
    ) -> Result<()> {
        let mut session = session;
        session.runs = None;
        let mut fields = to_fields(&session, "a session")?;
        fields.insert(LEGACY_RUNS.into(), runs_blob);
        let auto_id: String = uuid::Uuid::new_v4().simple().to_string()[..20].to_owned();
        let write = self.put(&self.inner.names.sessions, &auto_id, &fields, Pre::Absent);
        self.commit_all("insert legacy session", vec![write]).await
    }
}
