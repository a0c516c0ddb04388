//! Pre-v3 runs: the `runs` field agno 2.x kept inside each session document. Copying them
//! is the backend's [`DocBackend::copy_legacy_runs`].

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{async_trait, Result, RunRecord};

use crate::{
    backoff, Commit, DocBackend, Docs, Fields, Pre, Stored, Table, CAS_ATTEMPTS, LEGACY_RUNS,
};

impl<B: DocBackend> Docs<B> {
    /// Session documents with a non-null `runs` field, ordered by `session_id`.
    async fn legacy_sessions(&self) -> Result<Vec<Stored<B>>> {
        let mut docs: Vec<Stored<B>> = self
            .query(self.collection(Table::Sessions), &[])
            .await?
            .into_iter()
            .filter(|d| d.fields.get(LEGACY_RUNS).is_some_and(|v| !v.is_null()))
            .collect();
        docs.sort_by(|a, b| a.str("session_id").cmp(&b.str("session_id")));
        Ok(docs)
    }

    /// Rewrites session `stored` with the fields `change` makes of it, by compare-and-set;
    /// after a conflict the session is read again and changed afresh. Whether it was
    /// written (not when `change` gives `None` or the session is gone), `None` when every
    /// attempt lost a race.
    pub(crate) async fn rewrite_session(
        &self,
        stored: Stored<B>,
        operation: &'static str,
        change: impl Fn(&Stored<B>) -> Result<Option<Fields>>,
    ) -> Result<Option<bool>> {
        let mut current = stored;
        for attempt in 0..CAS_ATTEMPTS {
            let Some(fields) = change(&current)? else {
                return Ok(Some(false));
            };
            let write = self.rewrite_fields(Table::Sessions, &current, &fields);
            match self.commit(operation, vec![write]).await? {
                Commit::Done => return Ok(Some(true)),
                Commit::Conflict => {
                    backoff(attempt).await;
                    match self
                        .get(self.collection(Table::Sessions), &current.id)
                        .await?
                    {
                        Some(fresh) => current = fresh,
                        None => return Ok(Some(false)),
                    }
                }
            }
        }
        Ok(None)
    }
}

/// [`LegacyRunsStore::legacy_runs_page`] over [`DocBackend::query`]: the sessions with a
/// legacy `runs` field, ordered by `session_id`, after `after`.
pub async fn legacy_page_by_id<B: DocBackend>(
    db: &B,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<LegacySessionRuns>> {
    Ok(Docs::of(db)
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

#[async_trait]
impl<B: DocBackend> LegacyRunsStore for Docs<B> {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        self.legacy_page(after, limit).await
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        self.copy_legacy_runs(rows).await
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
            .query(self.collection(Table::Sessions), &[])
            .await?
            .into_iter()
            .filter(|d| d.fields.contains_key(LEGACY_RUNS))
        {
            let dropped = self.rewrite_session(stored, "drop legacy runs", |current| {
                let mut fields = current.fields.clone();
                Ok(fields.remove(LEGACY_RUNS).map(|_| fields))
            });
            match dropped.await? {
                Some(written) => changed += u64::from(written),
                None => return Err(self.contended("drop legacy runs")),
            }
        }
        Ok(changed)
    }
}

impl<B: DocBackend> Docs<B> {
    /// Writes a session as agno 2.x stored it: the whole session as document `id`, its runs
    /// in a `runs` field (a native array, or a string when the blob is one), no stamps. For
    /// imports and migration tests.
    pub async fn write_legacy_session(
        &self,
        id: &str,
        session: agno_storage_core::Session,
        runs_blob: serde_json::Value,
    ) -> Result<()> {
        let mut session = session;
        session.runs = None;
        let mut fields = self.to_fields(&session, "a session")?;
        fields.insert(LEGACY_RUNS.into(), runs_blob);
        let write = self.put(self.collection(Table::Sessions), id, &fields, Pre::Absent);
        self.commit_all("insert legacy session", vec![write]).await
    }
}
