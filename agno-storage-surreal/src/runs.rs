//! Runs (`agno_runs`): one record per run, record id `agno_runs:⟨run_id⟩`, agno's
//! `build_single_run_row` shape with `datetime` timestamps.
//!
//! A run appended without a `run_index` gets one from a per-session counter record in the
//! meta table, bumped by one atomic `UPDATE … SET next += 1` (O(1); a counter never seeded
//! is seeded once from the runs already stored). Every run write raises a seeded counter
//! past its `run_index`, so explicit indexes and migrated runs are never handed out again. The run itself is written in a transaction
//! that re-checks its session (still there, same owner) and the run record it read.

use agno_storage_core::legacy::{legacy_runs_list, sort_runs_for_session};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, sort_records, visible_to, writable_by,
    Error, ErrorKind, Page, Result, RunQuery, RunRecord, RunStore,
};
use serde_json::Value;
use surrealdb::types::{Number, Value as SValue};

use crate::doc::{backoff, digest_id, opt, rid, to_fields, Commit, Pre, CAS_ATTEMPTS};
use crate::sessions::{decode_session, LEGACY_RUNS};
use crate::SurrealDb;
use agno_storage_doc::DocBackend;

/// The meta record holding `session_id`'s next `run_index`.
pub(crate) fn run_counter_id(session_id: &str) -> String {
    digest_id("run_index", &[Some(session_id)])
}

impl SurrealDb {
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

    /// The next free `run_index` of `session_id`, taken atomically: one `UPDATE` bumping the
    /// session's counter; only a counter never seeded is seeded from the runs stored (one
    /// past the highest `run_index`).
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let counter = rid(&self.inner.names.meta, &run_counter_id(session_id));
        let next_of = |values: Vec<SValue>| -> Option<i64> {
            let row = match values.into_iter().next()? {
                SValue::Array(a) => a.into_iter().next()?,
                other => other,
            };
            match row {
                SValue::Object(o) => match o.get("next") {
                    Some(SValue::Number(Number::Int(n))) => Some(*n),
                    _ => None,
                },
                _ => None,
            }
        };
        for attempt in 0..CAS_ATTEMPTS {
            let bumped = self
                .run(
                    "next run index",
                    "UPDATE $c SET next += 1 WHERE next != NONE RETURN AFTER;",
                    vec![("c".into(), counter.clone())],
                )
                .await;
            let seeded = match bumped {
                Ok(values) => match next_of(values) {
                    Some(n) => return Ok(n - 1),
                    None => {
                        let floor = self
                            .session_runs(session_id)
                            .await?
                            .iter()
                            .filter_map(|r| r.run_index)
                            .max()
                            .unwrap_or(-1)
                            + 1;
                        self.run(
                            "next run index",
                            "UPSERT ONLY $c SET next = math::max([next OR 0, $floor]) + 1, \
                             session_id = $sid RETURN AFTER;",
                            vec![
                                ("c".into(), counter.clone()),
                                ("floor".into(), SValue::Number(Number::Int(floor))),
                                ("sid".into(), SValue::String(session_id.to_owned())),
                            ],
                        )
                        .await
                    }
                },
                Err(e) => Err(e),
            };
            match seeded {
                Ok(values) => {
                    return next_of(values).map(|n| n - 1).ok_or_else(|| {
                        Error::new(ErrorKind::Unexpected, "run index counter returned no value")
                    })
                }
                Err(e) if e.kind() == ErrorKind::Conflict => backoff(attempt).await,
                Err(e) => return Err(e),
            }
        }
        Err(self.contended("next run index"))
    }
}

#[async_trait]
impl RunStore for SurrealDb {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let coll = &self.inner.names.runs;
        let id = run.run_id.clone();
        let mut index: Option<i64> = None;
        for attempt in 0..CAS_ATTEMPTS {
            // The session is read here and re-checked in the run's transaction: a run goes
            // only into an existing session that is unowned or the writer's.
            let Some(session) = self.find_session(&run.session_id).await? else {
                return Err(run.missing_session());
            };
            run.check_session(Some(session.str("user_id")))?;
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
                    current.run_index = current.run_index.or(run.run_index);
                    (current, stored.unchanged())
                }
                None => {
                    let mut new = run.clone();
                    if new.run_index.is_none() {
                        if index.is_none() {
                            index = Some(self.next_run_index(&run.session_id).await?);
                        }
                        new.run_index = index;
                    }
                    new.updated_at = Some(now);
                    (new, Pre::Absent)
                }
            };
            let writes = vec![
                self.check(&self.inner.names.sessions, &session.id, session.unchanged()),
                // Conflicts with a concurrent `delete_sessions`, which deletes the counter.
                self.touch(
                    &self.inner.names.meta,
                    &run_counter_id(&run.session_id),
                    next.run_index,
                ),
                self.put(coll, &id, &to_fields(&next, "a run")?, pre),
            ];
            match self.commit("upsert run", writes).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert run"))
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let Some(stored) = self.get(&self.inner.names.runs, run_id).await? else {
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
            let id = run_id.to_owned();
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
        // the runs (agno's scrub is a read-then-write that can lose a concurrent update).
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
