//! Runs (`agno_runs`): one document per run, document id = [`DocBackend::doc_id`] of
//! `run_id`, agno's `build_single_run_row` shape.
//!
//! A run appended without a `run_index` gets one past the session's highest through a
//! per-session counter document in the meta collection ([`run_counter_id`]); writing a run
//! is the backend's [`DocBackend::write_run`], as the counter is its own atomic operation.

use agno_storage_core::legacy::{legacy_runs_list, sort_runs_for_session};
use agno_storage_core::{
    async_trait, owned_by_another_user, visible_to, writable_by, Page, Result, RunQuery, RunRecord,
    RunStore,
};
use serde_json::Value;

use crate::sessions::LEGACY_RUNS;
use crate::{backoff, digest_id, opt, Collection, Commit, DocBackend, Docs, Pre, CAS_ATTEMPTS};

/// The meta document holding `session_id`'s next `run_index`.
pub fn run_counter_id(session_id: &str) -> String {
    digest_id("run_index", &[Some(session_id)])
}

impl<B: DocBackend> Docs<'_, B> {
    /// Every run of `session_id`, in session order.
    pub async fn session_runs(&self, session_id: &str) -> Result<Vec<RunRecord>> {
        let docs = self
            .query(
                self.collection(Collection::Runs),
                &[("session_id", opt(Some(session_id)))],
            )
            .await?;
        let mut runs: Vec<RunRecord> = docs
            .iter()
            .map(|d| d.decode("a run"))
            .collect::<Result<_>>()?;
        sort_runs_for_session(&mut runs);
        Ok(runs)
    }
}

#[async_trait]
impl<B: DocBackend> RunStore for Docs<'_, B> {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.write_run(run).await
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let Some(stored) = self
            .get(self.collection(Collection::Runs), &self.doc_id(run_id))
            .await?
        else {
            return Ok(None);
        };
        let run: RunRecord = stored.decode("a run")?;
        Ok((run.run_id == run_id && visible_to(run.user_id.as_deref(), user_id)).then_some(run))
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        let mut eq = Vec::new();
        if let Some(s) = &query.session_id {
            eq.push(("session_id", opt(Some(s))));
        }
        if let Some(u) = &query.user_id {
            eq.push(("user_id", opt(Some(u))));
        }
        let docs = self.query(self.collection(Collection::Runs), &eq).await?;
        let mut rows = Vec::new();
        for d in &docs {
            let r: RunRecord = d.decode("a run")?;
            if query.matches(&r) {
                rows.push(r);
            }
        }
        query.page(rows)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let coll = self.collection(Collection::Runs);
        let mut deleted = 0;
        for run_id in run_ids {
            let id = self.doc_id(run_id);
            let Some(stored) = self.get(coll, &id).await? else {
                continue;
            };
            let run: RunRecord = stored.decode("a run")?;
            if run.run_id != *run_id || !visible_to(run.user_id.as_deref(), user_id) {
                continue;
            }
            self.commit_all("delete runs", vec![self.delete(coll, &id, Pre::Any)])
                .await?;
            deleted += 1;
        }
        // Scrub the legacy blobs of sessions the caller may see, by compare-and-set, so a merge
        // cannot resurrect the runs (agno's `FirestoreDb` scrubs a document id that does not
        // exist, its `SurrealDb` by a read-then-write that can lose a concurrent update).
        let scrub: std::collections::HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        let mut eq = Vec::new();
        if let Some(u) = user_id {
            eq.push(("user_id", opt(Some(u))));
        }
        for stored in self
            .query(self.collection(Collection::Sessions), &eq)
            .await?
        {
            if stored.fields.get(LEGACY_RUNS).is_none_or(Value::is_null) {
                continue;
            }
            let mut current = stored;
            for attempt in 0..CAS_ATTEMPTS {
                let (s, legacy) = self.decode_session(&current)?;
                if !visible_to(s.user_id.as_deref(), user_id) {
                    break;
                }
                let list = legacy_runs_list(legacy.as_ref());
                let kept: Vec<Value> = list
                    .iter()
                    .filter(|r| {
                        r.get("run_id")
                            .and_then(Value::as_str)
                            .is_none_or(|id| !scrub.contains(id))
                    })
                    .cloned()
                    .collect();
                if kept.len() == list.len() {
                    break;
                }
                let mut fields = current.fields.clone();
                fields.insert(LEGACY_RUNS.into(), Value::Array(kept));
                let write = self.put(
                    self.collection(Collection::Sessions),
                    &current.id,
                    &fields,
                    current.unchanged(),
                );
                match self.commit("delete runs", vec![write]).await? {
                    Commit::Done => break,
                    Commit::Conflict => {
                        backoff(attempt).await;
                        match self
                            .get(self.collection(Collection::Sessions), &current.id)
                            .await?
                        {
                            Some(fresh) => current = fresh,
                            None => break,
                        }
                    }
                }
            }
        }
        Ok(deleted)
    }
}

/// `current` updated by an upsert of `run` at `now` (status, data, owner when given, parent);
/// `run_index` is left to the caller. `PermissionDenied` when `run` is another user's write.
pub fn updated_run(mut current: RunRecord, run: &RunRecord, now: i64) -> Result<RunRecord> {
    if !writable_by(current.user_id.as_deref(), run.user_id.as_deref()) {
        return Err(owned_by_another_user("run", &run.run_id));
    }
    current.status = run.status.clone();
    current.run_data = run.run_data.clone();
    if run.user_id.is_some() {
        current.user_id = run.user_id.clone();
    }
    current.parent_run_id = run.parent_run_id.clone();
    current.updated_at = Some(now);
    Ok(current)
}
