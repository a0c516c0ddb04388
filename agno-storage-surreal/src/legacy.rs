//! Pre-v3 runs: the `runs` array agno 2.x kept inside each session record.

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{async_trait, Result, RunRecord};

use crate::doc::{backoff, to_fields, Commit, Pre, Stored, CAS_ATTEMPTS};
use crate::sessions::LEGACY_RUNS;
use crate::SurrealDb;
use agno_storage_doc::DocBackend;

impl SurrealDb {
    /// Session records with a non-null `runs` field, ordered by `session_id`.
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
impl LegacyRunsStore for SurrealDb {
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
        // Create-only writes: a run already stored (newer than its legacy copy) is kept as it
        // is, unlike agno 3.1.10's `UPSERT`, which reverts it. A conflict is "present" only
        // once the run is seen stored; a lost transaction is retried, and an error aborts
        // the step before it is stamped.
        let mut outcome = InsertedRuns::default();
        for row in &rows {
            let fields = to_fields(row, "a run")?;
            let mut settled = false;
            for attempt in 0..CAS_ATTEMPTS {
                let writes = vec![
                    self.put(&self.inner.names.runs, &row.run_id, &fields, Pre::Absent),
                    self.touch(
                        &self.inner.names.meta,
                        &crate::runs::run_counter_id(&row.session_id),
                        row.run_index,
                    ),
                ];
                match self.commit("copy legacy runs", writes).await? {
                    Commit::Done => {
                        outcome.inserted += 1;
                        settled = true;
                    }
                    Commit::Conflict => {
                        if self
                            .get(&self.inner.names.runs, &row.run_id)
                            .await?
                            .is_some()
                        {
                            settled = true;
                        } else {
                            backoff(attempt).await;
                        }
                    }
                }
                if settled {
                    break;
                }
            }
            if !settled {
                return Err(self.contended("copy legacy runs"));
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

impl SurrealDb {
    /// Writes a session as agno 2.x stored it: record `agno_sessions:⟨session_id⟩`, its runs
    /// in a `runs` field (a native array, or a string when the blob is one), no stamps. For
    /// imports and migration tests.
    pub async fn insert_legacy_session(
        &self,
        session: agno_storage_core::Session,
        runs_blob: serde_json::Value,
    ) -> Result<()> {
        let mut session = session;
        session.runs = None;
        let mut fields = to_fields(&session, "a session")?;
        fields.insert(LEGACY_RUNS.into(), runs_blob);
        let write = self.put(
            &self.inner.names.sessions,
            &session.session_id,
            &fields,
            Pre::Absent,
        );
        self.commit_all("insert legacy session", vec![write]).await
    }
}
