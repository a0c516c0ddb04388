//! Runs (`agno_runs`): one document per run, document id = `run_id`, agno's
//! `build_single_run_row` shape.
//!
//! A run appended without a `run_index` gets one past the session's highest through a
//! per-session counter document: one server-side `increment` whose result is the index (a
//! single-document atomic transform, so concurrent appends never share an index and never
//! contend on a lock). The counter is seeded from the runs already stored only when it is
//! missing, so an append's cost does not grow with the session's history.

use agno_storage_core::legacy::{legacy_runs_list, sort_runs_for_session};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, sort_records, visible_to, writable_by,
    Error, ErrorKind, Page, Result, RunQuery, RunRecord, RunStore,
};
use firestore::gcloud_sdk::google::firestore::v1::document_transform::field_transform::TransformType;
use serde_json::Value;

use crate::doc::{
    backoff, digest_id, doc_id, from_pb, opt, to_fields, to_pb, Commit, Pre, CAS_ATTEMPTS,
};
use crate::sessions::{decode_session, LEGACY_RUNS};
use crate::FirestoreDb;
use agno_storage_doc::DocBackend;

/// The meta document holding `session_id`'s next `run_index`.
pub(crate) fn run_counter_id(session_id: &str) -> String {
    digest_id("run_index", &[Some(session_id)])
}

impl FirestoreDb {
    /// Every run of `session_id`, in session order.
    pub(crate) async fn session_runs(&self, session_id: &str) -> Result<Vec<RunRecord>> {
        let docs = self
            .query(
                &self.inner.names.runs,
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

    /// The next free `run_index` of `session_id`, taken atomically: one server-side
    /// `increment` of the session's counter document (a single-document atomic transform,
    /// so concurrent appends never share an index and never contend on a lock), whose
    /// result is the index. The write requires the counter to exist, so an append costs one
    /// write whatever the number of runs stored.
    ///
    /// Only a missing counter is seeded, once, from the highest index among the session's
    /// stored runs (a server-side `maximum`, so racing seeders agree). Indexes this crate
    /// writes without the counter (explicit `run_index`, the v3 migration's copies) raise an
    /// existing counter ([`FirestoreDb::raise_run_counter`]); runs another writer (agno
    /// itself) adds to a session whose counter exists do not move it. agno numbers runs by
    /// their position in the session, so such a mix may share an index; reads order equal
    /// indexes by `created_at`.
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let meta = &self.inner.names.meta;
        let id = run_counter_id(session_id);
        for attempt in 0..CAS_ATTEMPTS {
            let bump = self.transform_if(
                meta,
                &id,
                vec![("next", TransformType::Increment(to_pb(&Value::from(1))))],
                Pre::At(None),
            );
            if let Some(results) = self.commit_results("next run index", vec![bump]).await? {
                return results
                    .into_iter()
                    .next()
                    .and_then(|r| r.transform_results.into_iter().next())
                    .map(from_pb)
                    .and_then(|v| v.as_i64())
                    .map(|n| n - 1)
                    .ok_or_else(|| {
                        Error::new(ErrorKind::Unexpected, "run index counter returned no value")
                    });
            }
            // No counter yet: seed it from the stored runs, then take an index.
            let highest = self
                .session_runs(session_id)
                .await?
                .iter()
                .filter_map(|r| r.run_index)
                .max()
                .unwrap_or(-1);
            let seed = self.transform(
                meta,
                &id,
                vec![(
                    "next",
                    TransformType::Maximum(to_pb(&Value::from(highest + 1))),
                )],
            );
            self.commit_all("next run index", vec![seed]).await?;
            if attempt > 0 {
                backoff(attempt).await;
            }
        }
        Err(self.contended("next run index"))
    }

    /// Moves the counter of `session_id` to at least `next` when it exists (a server-side
    /// `maximum`; a missing counter is seeded from the stored runs on the next append,
    /// which sees these): for indexes this crate writes without taking them from the counter.
    pub(crate) async fn raise_run_counter(&self, session_id: &str, next: i64) -> Result<()> {
        let raise = self.transform_if(
            &self.inner.names.meta,
            &run_counter_id(session_id),
            vec![("next", TransformType::Maximum(to_pb(&Value::from(next))))],
            Pre::At(None),
        );
        // `Conflict` here is the missing counter: nothing to raise.
        self.commit("raise run index counter", vec![raise]).await?;
        Ok(())
    }
}

#[async_trait]
impl RunStore for FirestoreDb {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let session = self.find_session(&run.session_id).await?;
        run.check_session(
            session
                .as_ref()
                .map(|s| s.fields.get("user_id").and_then(Value::as_str)),
        )?;
        let coll = &self.inner.names.runs;
        let id = doc_id(&run.run_id);
        let mut index: Option<i64> = None;
        for attempt in 0..CAS_ATTEMPTS {
            let now = now_epoch_seconds();
            let (next, pre) = match self.get(coll, &id).await? {
                Some(stored) => {
                    let mut current: RunRecord = stored.decode("a run")?;
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
                    if let (None, Some(given)) = (current.run_index, run.run_index) {
                        self.raise_run_counter(&current.session_id, given + 1)
                            .await?;
                        current.run_index = Some(given);
                    }
                    (current, stored.unchanged())
                }
                None => {
                    let mut new = run.clone();
                    match new.run_index {
                        Some(given) => self.raise_run_counter(&run.session_id, given + 1).await?,
                        None => {
                            if index.is_none() {
                                index = Some(self.next_run_index(&run.session_id).await?);
                            }
                            new.run_index = index;
                        }
                    }
                    new.updated_at = Some(now);
                    (new, Pre::Absent)
                }
            };
            let write = self.put(coll, &id, &to_fields(&next, "a run")?, pre);
            match self.commit("upsert run", vec![write]).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert run"))
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let Some(stored) = self.get(&self.inner.names.runs, &doc_id(run_id)).await? else {
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
        let docs = self.query(&self.inner.names.runs, &eq).await?;
        let same = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        let mut rows = Vec::new();
        for d in &docs {
            let r: RunRecord = d.decode("a run")?;
            if query
                .session_id
                .as_deref()
                .is_none_or(|s| s == r.session_id)
                && visible_to(r.user_id.as_deref(), query.user_id.as_deref())
                && same(&query.agent_id, &r.agent_id)
                && same(&query.team_id, &r.team_id)
                && same(&query.workflow_id, &r.workflow_id)
                && same(&query.status, &r.status)
            {
                rows.push(r);
            }
        }
        sort_runs_for_session(&mut rows);
        sort_records(&mut rows, &query.sort, RunRecord::SORTABLE)?;
        Page::paginate(rows, &query.pagination)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let coll = &self.inner.names.runs;
        let mut deleted = 0;
        for run_id in run_ids {
            let id = doc_id(run_id);
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
        // Scrub the legacy blobs of sessions the caller may see, so a merge cannot resurrect
        // the runs (agno scrubs a document id that does not exist, so its runs come back).
        let scrub: std::collections::HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        let mut eq = Vec::new();
        if let Some(u) = user_id {
            eq.push(("user_id", opt(Some(u))));
        }
        for stored in self.query(&self.inner.names.sessions, &eq).await? {
            if stored.fields.get(LEGACY_RUNS).is_none_or(Value::is_null) {
                continue;
            }
            let mut current = stored;
            for attempt in 0..CAS_ATTEMPTS {
                let (s, legacy) = decode_session(&current)?;
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
                    &self.inner.names.sessions,
                    &current.id,
                    &fields,
                    current.unchanged(),
                );
                match self.commit("delete runs", vec![write]).await? {
                    Commit::Done => break,
                    Commit::Conflict => {
                        backoff(attempt).await;
                        match self.get(&self.inner.names.sessions, &current.id).await? {
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
