//! The in-memory reference store: every trait of the contract, held in process memory.
//!
//! It is the executable definition of the contract (the conformance suite is proven against
//! it) and a fast store for unit tests. Nothing survives the process. Each call takes one
//! short lock over the whole state, so every read-modify-write is atomic.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use serde_json::Value;

use crate::eval::{EvalQuery, EvalRun, EvalStore};
use crate::job::{
    check_finish_status, lease_lost, EnqueueOutcome, EnqueueRejection, Job, JobQuery, JobStatus,
    JobStore,
};
use crate::knowledge::{KnowledgeContent, KnowledgeQuery, KnowledgeStore};
use crate::learning::{Learning, LearningQuery, LearningStore};
use crate::legacy::{
    decode_legacy_runs, last_context_runs, legacy_runs_list, merge_runs, InsertedRuns,
    LegacyRunsStore, LegacySessionRuns,
};
use crate::metrics::{MetricsPage, MetricsQuery, MetricsRecord, MetricsStore};
use crate::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, MigrationTarget, RekeyLearningsStep,
    SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use crate::pagination::{Page, Pagination};
use crate::run::{RunQuery, RunRecord, RunStore};
use crate::schedule::{page_newest_first, Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
use crate::session::{Session, SessionQuery, SessionRead, SessionStore};
use crate::user_memory::{memory_stats, MemoryQuery, MemoryStats, MemoryStore, UserMemory};
use crate::{
    now_epoch_seconds, owned_by_another_user, owner_or_shared, visible_to, writable_by, AgnoDb,
    Error, ErrorKind, Result,
};

const BACKEND: &str = "memory";

struct StoredSession {
    session: Session,
    legacy_runs: Option<Value>,
}

#[derive(Default)]
struct State {
    sessions: BTreeMap<String, StoredSession>,
    runs: BTreeMap<String, RunRecord>,
    memories: BTreeMap<String, UserMemory>,
    metrics: Vec<MetricsRecord>,
    evals: BTreeMap<String, EvalRun>,
    knowledge: BTreeMap<String, KnowledgeContent>,
    schedules: BTreeMap<String, Schedule>,
    schedule_runs: BTreeMap<String, ScheduleRun>,
    learnings: BTreeMap<String, Learning>,
    jobs: BTreeMap<String, Job>,
    versions: HashMap<String, SchemaVersion>,
}

impl State {
    fn session_runs(&self, session_id: &str) -> Vec<RunRecord> {
        self.runs
            .values()
            .filter(|r| r.session_id == session_id)
            .cloned()
            .collect()
    }

    fn with_runs(&self, stored: &StoredSession, runs_limit: Option<usize>) -> Session {
        let mut session = stored.session.clone();
        let merged = merge_runs(
            stored.legacy_runs.as_ref(),
            self.session_runs(&session.session_id),
        );
        session.runs = Some(match runs_limit {
            Some(n) => last_context_runs(merged, n),
            None => merged,
        });
        session
    }
}

/// The in-memory database. Cheap to clone: clones share one state.
#[derive(Clone)]
pub struct InMemoryDb {
    state: Arc<Mutex<State>>,
    migration_lock: Arc<tokio::sync::Mutex<()>>,
}

impl Default for InMemoryDb {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryDb {
    /// A new, empty database with every table stamped at the latest schema version.
    pub fn new() -> Self {
        let db = Self::new_legacy();
        {
            let mut state = db.lock();
            for t in TableType::ALL {
                state
                    .versions
                    .insert(t.default_name().to_owned(), SchemaVersion::LATEST);
            }
        }
        db
    }

    /// A new, empty database in the state agno 2.x leaves: nothing stamped. Fill it with
    /// [`InMemoryDb::insert_legacy_session`], then migrate it.
    pub fn new_legacy() -> Self {
        InMemoryDb {
            state: Arc::new(Mutex::new(State::default())),
            migration_lock: Arc::new(tokio::sync::Mutex::new(())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-written record: every write
        // replaces whole values. Recover the state instead of propagating the poison.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Writes a session as agno 2.x stored it, with its runs in a legacy blob (an array or
    /// an encoded JSON string), for migration tests and imports.
    pub fn insert_legacy_session(&self, mut session: Session, runs_blob: Value) {
        session.runs = None;
        self.lock().sessions.insert(
            session.session_id.clone(),
            StoredSession {
                session,
                legacy_runs: Some(runs_blob),
            },
        );
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        let me = Arc::new(self.clone());
        AgnoDb::builder(BACKEND)
            .sessions(me.clone())
            .runs(me.clone())
            .memories(me.clone())
            .metrics(me.clone())
            .evals(me.clone())
            .knowledge(me.clone())
            .schedules(me.clone())
            .learnings(me.clone())
            .jobs(me.clone())
            .migrations(me.clone())
            .legacy(me)
            .build()
    }
}

fn ids_set(ids: &[String]) -> std::collections::HashSet<&str> {
    ids.iter().map(String::as_str).collect()
}

#[async_trait]
impl SessionStore for InMemoryDb {
    async fn upsert_session(&self, mut session: Session) -> Result<Session> {
        session.runs = None;
        let mut state = self.lock();
        let now = now_epoch_seconds();
        let id = session.session_id.clone();
        match state.sessions.get_mut(&id) {
            Some(stored) => {
                if !writable_by(
                    stored.session.user_id.as_deref(),
                    session.user_id.as_deref(),
                ) {
                    return Err(owned_by_another_user("session", &id));
                }
                session.created_at = stored.session.created_at;
                session.session_type = stored.session.session_type;
                session.updated_at = Some(now);
                stored.session = session;
            }
            None => {
                session.updated_at = Some(session.created_at);
                state.sessions.insert(
                    id.clone(),
                    StoredSession {
                        session,
                        legacy_runs: None,
                    },
                );
            }
        }
        let stored = state
            .sessions
            .get(&id)
            .ok_or_else(|| Error::not_found(format!("session {id} vanished")))?;
        Ok(state.with_runs(stored, None))
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let state = self.lock();
        let Some(stored) = state.sessions.get(session_id) else {
            return Ok(None);
        };
        let s = &stored.session;
        if !visible_to(s.user_id.as_deref(), read.user_id.as_deref())
            || read.session_type.is_some_and(|t| t != s.session_type)
        {
            return Ok(None);
        }
        Ok(Some(state.with_runs(stored, read.runs_limit)))
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        query.pagination.validate()?;
        let state = self.lock();
        let matches = query.matcher();
        let sessions: Vec<Session> = state
            .sessions
            .values()
            .filter(|st| matches(&st.session))
            .map(|st| st.session.clone())
            .collect();
        let mut page = query.page(sessions)?;
        if query.include_runs {
            for s in &mut page.items {
                if let Some(stored) = state.sessions.get(&s.session_id) {
                    s.runs = state.with_runs(stored, None).runs;
                }
            }
        }
        Ok(page)
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        let mut state = self.lock();
        let Some(stored) = state.sessions.get_mut(session_id) else {
            return Ok(None);
        };
        if !visible_to(stored.session.user_id.as_deref(), user_id) {
            return Ok(None);
        }
        stored.session.set_session_name(session_name);
        stored.session.updated_at = Some(now_epoch_seconds());
        let stored = &state.sessions[session_id];
        Ok(Some(state.with_runs(stored, None)))
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut state = self.lock();
        let doomed: Vec<String> = session_ids
            .iter()
            .filter(|id| {
                state
                    .sessions
                    .get(*id)
                    .is_some_and(|s| visible_to(s.session.user_id.as_deref(), user_id))
            })
            .cloned()
            .collect();
        for id in &doomed {
            state.sessions.remove(id);
        }
        let doomed_set = ids_set(&doomed);
        state
            .runs
            .retain(|_, r| !doomed_set.contains(r.session_id.as_str()));
        Ok(doomed.len() as u64)
    }
}

#[async_trait]
impl RunStore for InMemoryDb {
    async fn upsert_run(&self, mut run: RunRecord) -> Result<RunRecord> {
        let mut state = self.lock();
        run.check_session(
            state
                .sessions
                .get(&run.session_id)
                .map(|s| s.session.user_id.as_deref()),
        )?;
        let now = now_epoch_seconds();
        let next_index = state
            .runs
            .values()
            .filter(|r| r.session_id == run.session_id)
            .filter_map(|r| r.run_index)
            .max()
            .map_or(0, |m| m + 1);
        let id = run.run_id.clone();
        match state.runs.get_mut(&id) {
            Some(stored) => {
                if !writable_by(stored.user_id.as_deref(), run.user_id.as_deref()) {
                    return Err(owned_by_another_user("run", &id));
                }
                stored.status = run.status;
                stored.run_data = run.run_data;
                if run.user_id.is_some() {
                    stored.user_id = run.user_id;
                }
                stored.parent_run_id = run.parent_run_id;
                stored.updated_at = Some(now);
                stored.run_index = stored.run_index.or(run.run_index);
                Ok(stored.clone())
            }
            None => {
                run.run_index = run.run_index.or(Some(next_index));
                run.updated_at = Some(now);
                state.runs.insert(id, run.clone());
                Ok(run)
            }
        }
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        Ok(self
            .lock()
            .runs
            .get(run_id)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        let rows: Vec<RunRecord> = self
            .lock()
            .runs
            .values()
            .filter(|r| query.matches(r))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut state = self.lock();
        let wanted = ids_set(run_ids);
        let doomed: Vec<String> = state
            .runs
            .values()
            .filter(|r| {
                wanted.contains(r.run_id.as_str()) && visible_to(r.user_id.as_deref(), user_id)
            })
            .map(|r| r.run_id.clone())
            .collect();
        for id in &doomed {
            state.runs.remove(id);
        }
        // Scrub legacy blobs of sessions the caller may see, so a merge cannot resurrect them.
        let scrub = ids_set(run_ids);
        for stored in state.sessions.values_mut() {
            if !visible_to(stored.session.user_id.as_deref(), user_id)
                || stored.legacy_runs.is_none()
            {
                continue;
            }
            let list = legacy_runs_list(stored.legacy_runs.as_ref());
            let kept: Vec<Value> = list
                .iter()
                .filter(|r| {
                    r.get("run_id")
                        .and_then(Value::as_str)
                        .is_none_or(|id| !scrub.contains(id))
                })
                .cloned()
                .collect();
            if kept.len() != list.len() {
                stored.legacy_runs = Some(Value::Array(kept));
            }
        }
        Ok(doomed.len() as u64)
    }
}

#[async_trait]
impl LegacyRunsStore for InMemoryDb {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        let state = self.lock();
        Ok(state
            .sessions
            .values()
            .filter(|s| after.is_none_or(|a| s.session.session_id.as_str() > a))
            .filter(|s| s.legacy_runs.as_ref().is_some_and(|b| !b.is_null()))
            .take(limit)
            .map(|s| LegacySessionRuns {
                session_id: s.session.session_id.clone(),
                user_id: s.session.user_id.clone(),
                runs: s.legacy_runs.clone().unwrap_or_default(),
            })
            .collect())
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        let mut state = self.lock();
        let mut outcome = InsertedRuns::default();
        for row in rows {
            if !state.runs.contains_key(&row.run_id) {
                state.runs.insert(row.run_id.clone(), row);
                outcome.inserted += 1;
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let state = self.lock();
        Ok(state
            .sessions
            .values()
            .filter(|s| {
                decode_legacy_runs(s.legacy_runs.as_ref()).map_or(true, |runs| !runs.is_empty())
            })
            .count() as u64)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        let mut state = self.lock();
        let mut changed = 0;
        for s in state.sessions.values_mut() {
            if s.legacy_runs.take().is_some() {
                changed += 1;
            }
        }
        Ok(changed)
    }
}

#[async_trait]
impl MemoryStore for InMemoryDb {
    async fn upsert_memory(&self, mut memory: UserMemory) -> Result<UserMemory> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        match state.memories.get_mut(&memory.memory_id) {
            Some(stored) => {
                if !writable_by(stored.user_id.as_deref(), memory.user_id.as_deref()) {
                    return Err(owned_by_another_user("memory", &memory.memory_id));
                }
                memory.user_id = stored.user_id.clone();
                memory.created_at = stored.created_at;
                memory.updated_at = Some(now);
                *stored = memory.clone();
            }
            None => {
                memory.updated_at = memory.updated_at.or(Some(memory.created_at));
                state
                    .memories
                    .insert(memory.memory_id.clone(), memory.clone());
            }
        }
        Ok(memory)
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        Ok(self
            .lock()
            .memories
            .get(memory_id)
            .filter(|m| visible_to(m.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        let matches = query.matcher();
        let rows: Vec<UserMemory> = self
            .lock()
            .memories
            .values()
            .filter(|m| matches(m))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let mut topics: Vec<String> = self
            .lock()
            .memories
            .values()
            .filter(|m| visible_to(m.user_id.as_deref(), user_id))
            .flat_map(|m| m.topics.clone().unwrap_or_default())
            .collect();
        topics.sort();
        topics.dedup();
        Ok(topics)
    }

    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>> {
        memory_stats(self.lock().memories.values(), user_id, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut state = self.lock();
        let mut deleted = 0;
        for id in memory_ids {
            if state
                .memories
                .get(id)
                .is_some_and(|m| visible_to(m.user_id.as_deref(), user_id))
            {
                state.memories.remove(id);
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl MetricsStore for InMemoryDb {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let mut state = self.lock();
        let mut stored = Vec::with_capacity(records.len());
        for mut record in records {
            let key = |r: &MetricsRecord| {
                (
                    r.stored_user_id().to_owned(),
                    r.date,
                    r.aggregation_period.clone(),
                )
            };
            let wanted = key(&record);
            match state.metrics.iter_mut().find(|r| key(r) == wanted) {
                Some(existing) => {
                    record.id = existing.id.clone();
                    record.created_at = existing.created_at;
                    *existing = record.clone();
                }
                None => state.metrics.push(record.clone()),
            }
            stored.push(record);
        }
        Ok(stored)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let state = self.lock();
        let owner_ok = |r: &MetricsRecord| {
            query
                .user_id
                .as_deref()
                .is_none_or(|u| r.stored_user_id() == u)
        };
        let mut rows: Vec<MetricsRecord> = state
            .metrics
            .iter()
            .filter(|r| {
                owner_ok(r)
                    && query.starting_date.is_none_or(|d| r.date >= d)
                    && query.ending_date.is_none_or(|d| r.date <= d)
            })
            .cloned()
            .collect();
        rows.sort_by(|a, b| (a.date, a.stored_user_id()).cmp(&(b.date, b.stored_user_id())));
        let latest_updated_at = if rows.is_empty() {
            None
        } else {
            state
                .metrics
                .iter()
                .filter(|r| owner_ok(r))
                .filter_map(|r| r.updated_at)
                .max()
        };
        Ok(MetricsPage {
            rows,
            latest_updated_at,
        })
    }
}

#[async_trait]
impl EvalStore for InMemoryDb {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        let mut state = self.lock();
        if state.evals.contains_key(&run.run_id) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "eval run {} already exists: every eval run needs its own run_id",
                    run.run_id
                ),
            ));
        }
        state.evals.insert(run.run_id.clone(), run.clone());
        Ok(run)
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        Ok(self
            .lock()
            .evals
            .get(run_id)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let rows: Vec<EvalRun> = self
            .lock()
            .evals
            .values()
            .filter(|r| query.matches(r))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        let mut state = self.lock();
        let Some(run) = state
            .evals
            .get_mut(run_id)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id))
        else {
            return Ok(None);
        };
        run.name = Some(name.to_owned());
        run.updated_at = Some(now_epoch_seconds());
        Ok(Some(run.clone()))
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut state = self.lock();
        let mut deleted = 0;
        for id in run_ids {
            if state
                .evals
                .get(id)
                .is_some_and(|r| visible_to(r.user_id.as_deref(), user_id))
            {
                state.evals.remove(id);
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl KnowledgeStore for InMemoryDb {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        let mut state = self.lock();
        let merged = match state.knowledge.get(&content.id) {
            Some(stored) => {
                if content.user_id.is_some() && stored.user_id != content.user_id {
                    return Err(Error::not_found(format!(
                        "Knowledge content {} not found",
                        content.id
                    )));
                }
                let mut doc = serde_json::to_value(stored)
                    .map_err(|e| Error::serialization("knowledge content", e))?;
                let update = serde_json::to_value(&content)
                    .map_err(|e| Error::serialization("knowledge content", e))?;
                if let (Value::Object(doc), Value::Object(update)) = (&mut doc, update) {
                    for (k, v) in update.into_iter().filter(|(_, v)| !v.is_null()) {
                        doc.insert(k, v);
                    }
                }
                crate::json::from_value(doc)
                    .map_err(|e| Error::serialization("knowledge content", e))?
            }
            None => content,
        };
        state.knowledge.insert(merged.id.clone(), merged.clone());
        Ok(merged)
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        Ok(self
            .lock()
            .knowledge
            .get(id)
            .filter(|c| owner_or_shared(c.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        let rows: Vec<KnowledgeContent> = self
            .lock()
            .knowledge
            .values()
            .filter(|c| query.matches(c))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut state = self.lock();
        if state
            .knowledge
            .get(id)
            .is_some_and(|c| visible_to(c.user_id.as_deref(), user_id))
        {
            state.knowledge.remove(id);
            return Ok(true);
        }
        Ok(false)
    }
}

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

#[async_trait]
impl ScheduleStore for InMemoryDb {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        let mut state = self.lock();
        if state.schedules.contains_key(&schedule.id) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("schedule {} already exists", schedule.id),
            ));
        }
        if state
            .schedules
            .values()
            .any(|s| s.user_id == schedule.user_id && s.name == schedule.name)
        {
            return Err(name_taken(&schedule.name));
        }
        state
            .schedules
            .insert(schedule.id.clone(), schedule.clone());
        Ok(schedule)
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        Ok(self
            .lock()
            .schedules
            .get(id)
            .filter(|s| visible_to(s.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        Ok(self
            .lock()
            .schedules
            .values()
            .find(|s| s.name == name && s.user_id.as_deref() == user_id)
            .cloned())
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        pagination.validate()?;
        let rows: Vec<Schedule> = self
            .lock()
            .schedules
            .values()
            .filter(|s| {
                enabled.is_none_or(|e| s.enabled == e) && visible_to(s.user_id.as_deref(), user_id)
            })
            .cloned()
            .collect();
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        let mut state = self.lock();
        let Some(current) = state
            .schedules
            .get(id)
            .filter(|s| visible_to(s.user_id.as_deref(), user_id))
        else {
            return Ok(None);
        };
        let updated = update.apply_to(current, now_epoch_seconds())?;
        if updated.name != current.name
            && state
                .schedules
                .values()
                .any(|s| s.id != id && s.user_id == updated.user_id && s.name == updated.name)
        {
            return Err(name_taken(&updated.name));
        }
        state.schedules.insert(id.to_owned(), updated.clone());
        Ok(Some(updated))
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut state = self.lock();
        if !state
            .schedules
            .get(id)
            .is_some_and(|s| visible_to(s.user_id.as_deref(), user_id))
        {
            return Ok(false);
        }
        state.schedules.remove(id);
        state.schedule_runs.retain(|_, r| r.schedule_id != id);
        Ok(true)
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        let due = state
            .schedules
            .values()
            .filter(|s| s.is_due(now, lock_grace_seconds))
            .min_by(|a, b| (a.next_run_at, &a.id).cmp(&(b.next_run_at, &b.id)))
            .map(|s| s.id.clone());
        let Some(id) = due else { return Ok(None) };
        let Some(schedule) = state.schedules.get_mut(&id) else {
            return Ok(None);
        };
        schedule.locked_by = Some(worker_id.to_owned());
        schedule.locked_at = Some(now);
        Ok(Some(schedule.clone()))
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let mut state = self.lock();
        let Some(s) = state.schedules.get_mut(id) else {
            return Ok(false);
        };
        Ok(s.release(worker_id, locked_at, next_run_at, now_epoch_seconds()))
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let mut state = self.lock();
        let Some(schedule) = state.schedules.get(&run.schedule_id) else {
            return Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            )));
        };
        run.user_id = schedule.user_id.clone();
        if state.schedule_runs.contains_key(&run.id) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("schedule run {} already exists", run.id),
            ));
        }
        state.schedule_runs.insert(run.id.clone(), run.clone());
        Ok(run)
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        let mut state = self.lock();
        let Some(stored) = state
            .schedule_runs
            .get_mut(&run.id)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id))
        else {
            return Ok(None);
        };
        *stored = ScheduleRun {
            id: stored.id.clone(),
            schedule_id: stored.schedule_id.clone(),
            user_id: stored.user_id.clone(),
            created_at: stored.created_at,
            ..run
        };
        Ok(Some(stored.clone()))
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        Ok(self
            .lock()
            .schedule_runs
            .get(id)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let rows: Vec<ScheduleRun> = self
            .lock()
            .schedule_runs
            .values()
            .filter(|r| r.schedule_id == schedule_id && visible_to(r.user_id.as_deref(), user_id))
            .cloned()
            .collect();
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }
}

#[async_trait]
impl LearningStore for InMemoryDb {
    async fn upsert_learning(&self, mut learning: Learning) -> Result<Learning> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        match state.learnings.get_mut(&learning.learning_id) {
            Some(stored) => {
                if !writable_by(stored.user_id.as_deref(), learning.user_id.as_deref()) {
                    return Err(owned_by_another_user("learning", &learning.learning_id));
                }
                stored.content = learning.content;
                stored.metadata = learning.metadata;
                stored.updated_at = Some(now);
                Ok(stored.clone())
            }
            None => {
                learning.updated_at = learning.updated_at.or(Some(now));
                state
                    .learnings
                    .insert(learning.learning_id.clone(), learning.clone());
                Ok(learning)
            }
        }
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        Ok(self
            .lock()
            .learnings
            .get(learning_id)
            .filter(|l| visible_to(l.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        let rows: Vec<Learning> = self
            .lock()
            .learnings
            .values()
            .filter(|l| query.matches(l))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut state = self.lock();
        if state
            .learnings
            .get(learning_id)
            .is_some_and(|l| visible_to(l.user_id.as_deref(), user_id))
        {
            state.learnings.remove(learning_id);
            return Ok(true);
        }
        Ok(false)
    }
}

fn fenced<'a>(
    state: &'a mut State,
    id: &str,
    worker_id: &str,
    attempt: i64,
) -> Result<&'a mut Job> {
    state
        .jobs
        .get_mut(id)
        .filter(|j| j.is_held_by(worker_id, attempt))
        .ok_or_else(|| lease_lost(id, worker_id, attempt))
}

#[async_trait]
impl JobStore for InMemoryDb {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        let mut state = self.lock();
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        if let Some(key) = &job.idempotency_key {
            if let Some(original) = state
                .jobs
                .values()
                .find(|j| j.idempotency_key.as_ref() == Some(key) && j.user_id == job.user_id)
            {
                return Ok(EnqueueOutcome {
                    rejection: Some(EnqueueRejection::Duplicate),
                    job: Some(original.clone()),
                });
            }
        }
        if max_depth > 0
            && state
                .jobs
                .values()
                .filter(|j| j.status == JobStatus::Queued)
                .count() as u64
                >= max_depth
        {
            return Ok(EnqueueOutcome {
                rejection: Some(EnqueueRejection::QueueFull),
                job: None,
            });
        }
        if state.jobs.contains_key(&job.id) {
            return Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("job {} already exists; job ids are never reused", job.id),
            ));
        }
        job.status = JobStatus::Queued;
        job.attempt = 0;
        state.jobs.insert(job.id.clone(), job.clone());
        Ok(EnqueueOutcome {
            rejection: None,
            job: Some(job),
        })
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        let candidate = state
            .jobs
            .values()
            .filter(|j| j.is_claimable(now, lock_grace_seconds, deployment_id))
            .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)))
            .map(|j| j.id.clone());
        let Some(id) = candidate else { return Ok(None) };
        let Some(job) = state.jobs.get_mut(&id) else {
            return Ok(None);
        };
        job.take_lease(worker_id, now);
        Ok(Some(job.clone()))
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        let mut held = 0;
        for id in ids {
            if let Some(job) = state.jobs.get_mut(id).filter(|j| {
                j.status == JobStatus::Running && j.locked_by.as_deref() == Some(worker_id)
            }) {
                job.locked_at = Some(now);
                held += 1;
            }
        }
        Ok(held)
    }

    async fn complete_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<Job> {
        check_finish_status(status)?;
        let mut state = self.lock();
        let job = fenced(&mut state, id, worker_id, attempt)?;
        job.finish(status, error, now_epoch_seconds());
        Ok(job.clone())
    }

    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job> {
        let mut state = self.lock();
        let job = fenced(&mut state, id, worker_id, attempt)?;
        job.retry_or_fail(error, retry_delay_seconds, now_epoch_seconds());
        Ok(job.clone())
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut state = self.lock();
        let now = now_epoch_seconds();
        let Some(job) = state
            .jobs
            .get_mut(id)
            .filter(|j| visible_to(j.user_id.as_deref(), user_id))
        else {
            return Ok(false);
        };
        if !matches!(job.status, JobStatus::Queued | JobStatus::Paused) {
            return Ok(false);
        }
        job.status = JobStatus::Cancelled;
        job.completed_at = Some(now);
        job.updated_at = Some(now);
        Ok(true)
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        Ok(self
            .lock()
            .jobs
            .get(id)
            .filter(|j| visible_to(j.user_id.as_deref(), user_id))
            .cloned())
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        let rows: Vec<Job> = self
            .lock()
            .jobs
            .values()
            .filter(|j| query.matches(j))
            .cloned()
            .collect();
        query.page(rows)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        let mut state = self.lock();
        let cutoff = now_epoch_seconds() - older_than_seconds;
        let before = state.jobs.len();
        state.jobs.retain(|_, j| {
            !(j.status.is_terminal() && j.completed_at.is_some_and(|t| t <= cutoff))
        });
        Ok((before - state.jobs.len()) as u64)
    }
}

#[async_trait]
impl SchemaVersionStore for InMemoryDb {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        Ok(self.lock().versions.get(table_name).copied())
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        self.lock().versions.insert(table_name.to_owned(), version);
        Ok(())
    }
}

#[async_trait]
impl MigrationTarget for InMemoryDb {
    fn tables(&self) -> Vec<TableRef> {
        TableType::ALL
            .iter()
            .map(|t| TableRef {
                table_type: *t,
                name: t.default_name().to_owned(),
            })
            .collect()
    }

    fn versions(&self) -> &dyn SchemaVersionStore {
        self
    }

    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        let me = Arc::new(self.clone());
        vec![
            Arc::new(CopyLegacyRunsStep::new(me.clone())),
            Arc::new(RekeyLearningsStep::new(me)),
        ]
    }

    async fn lock(&self) -> Result<MigrationLock> {
        Ok(Box::new(crate::migration::ReleasedOnDrop(
            self.migration_lock.clone().lock_owned().await,
        )))
    }
}
