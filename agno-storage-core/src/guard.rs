//! Input rules checked once, in core, before any store sees a call: identifiers and
//! nesting depth. [`crate::AgnoDbBuilder::build`] wraps every store a backend offers in
//! [`Checked`], so the rules hold on every backend and no adapter repeats them.
//!
//! - **Identifiers** (session, run, user, memory, eval, knowledge, schedule, learning and
//!   job ids, agent/team/workflow ids, worker ids, and names and values used as keys or
//!   filters): U+0000 is refused with `InvalidInput` naming the field, on reads and writes
//!   alike (PostgreSQL text cannot hold it, and a backend that stripped it would let
//!   `alice\0` act as `alice`). Other control characters are ordinary characters: stored
//!   verbatim and compared exactly. An identifier longer than the backend declares
//!   ([`Capabilities::max_id_chars`]) is refused the same way. Nothing is ever altered.
//! - **Nesting**: a JSON value (run data, session data, payloads, ...) nested deeper than
//!   [`Capabilities::json_depth_limit`] is refused before anything is written, measured
//!   without recursion and dropped without recursion, so no input can overflow the stack.
//!
//! Data fields are not identifiers and keep agno's behaviour per backend (e.g. agno's
//! PostgreSQL adapter strips NUL inside JSON text).
//!
//! Every call also runs in a `tracing` span named `agno_storage` at `debug` level, with
//! `backend`, `domain` (`sessions`, `runs`, … `jobs`), `operation` (the trait method),
//! `table` (the backend's name for the table, collection or key space the call is about),
//! `duration_us`, `rows` (what the result says it touched: a count, a page's items, 1 for a
//! record written or found, 0 for none), `retries` (how many times the backend retried a
//! conflicting write, when it did: [`record_retry`]) and, when it fails, `error` (the
//! [`ErrorKind`]). A retry, a conflict or a lost lease also emits a `warn` event. No
//! argument is recorded: no run content, no payloads, no secrets and no user ids.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde_json::Value;
use tracing::Instrument as _;

use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind, Result};
use crate::eval::{EvalQuery, EvalRun, EvalStore};
use crate::job::{
    Continued, EnqueueOutcome, Job, JobCompletion, JobQuery, JobStatus, JobStore, QueueStats,
};
use crate::knowledge::{KnowledgeContent, KnowledgeQuery, KnowledgeStore};
use crate::learning::{Learning, LearningQuery, LearningStore, LearningUserStats};
use crate::metrics::{MetricsPage, MetricsQuery, MetricsRecord, MetricsStore};
use crate::pagination::{Page, Pagination, Sort};
use crate::run::{RunQuery, RunRecord, RunStore};
use crate::schedule::{Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
use crate::session::{Session, SessionQuery, SessionRead, SessionStore};
use crate::tables::{Table, TableNames};
use crate::user_memory::{MemoryQuery, MemoryStats, MemoryStore, UserMemory};

/// The rules of one backend: its name (for errors) and its declared limits.
#[derive(Debug, Clone, Copy)]
pub struct Rules {
    backend: &'static str,
    max_id_chars: Option<usize>,
    max_json_depth: usize,
}

impl Rules {
    /// The rules `capabilities` declare for `backend`.
    pub fn new(backend: &'static str, capabilities: &Capabilities) -> Self {
        Rules {
            backend,
            max_id_chars: capabilities.max_id_chars,
            max_json_depth: capabilities.json_depth_limit(),
        }
    }

    /// Refuses an identifier holding U+0000 or longer than the backend's maximum.
    pub fn id(&self, field: &str, value: &str) -> Result<()> {
        self.text(field, value)?;
        match self.max_id_chars {
            Some(max) if value.chars().count() > max => Err(self.refuse(format!(
                "{field} is {} characters long; {} keys hold at most {max}. Use a shorter {field}.",
                value.chars().count(),
                self.backend
            ))),
            _ => Ok(()),
        }
    }

    /// [`Rules::id`] of an optional identifier.
    pub fn opt_id(&self, field: &str, value: Option<&str>) -> Result<()> {
        value.map_or(Ok(()), |v| self.id(field, v))
    }

    /// [`Rules::id`] of each identifier.
    pub fn ids(&self, field: &str, values: &[String]) -> Result<()> {
        values.iter().try_for_each(|v| self.id(field, v))
    }

    /// Refuses a name or filter holding U+0000 (no length limit: it is not a key).
    pub fn text(&self, field: &str, value: &str) -> Result<()> {
        match value.find('\0') {
            Some(at) => Err(self.refuse(format!(
                "{field} contains a NUL character (U+0000) at byte {at}; identifiers, names \
                 and filters cannot hold NUL on any backend. Remove it: ids are matched \
                 exactly and never altered."
            ))),
            None => Ok(()),
        }
    }

    /// [`Rules::text`] of an optional value.
    pub fn opt_text(&self, field: &str, value: Option<&str>) -> Result<()> {
        value.map_or(Ok(()), |v| self.text(field, v))
    }

    /// Refuses a JSON value nested deeper than the backend's limit.
    pub fn json(&self, field: &str, value: &Value) -> Result<()> {
        crate::json::check_depth(field, value, self.max_json_depth)
            .map_err(|e| e.with_backend(self.backend))
    }

    /// [`Rules::json`] of an optional value.
    pub fn opt_json(&self, field: &str, value: Option<&Value>) -> Result<()> {
        value.map_or(Ok(()), |v| self.json(field, v))
    }

    fn refuse(&self, message: String) -> Error {
        Error::invalid_input(format!("{message} Nothing was read or written."))
            .with_backend(self.backend)
    }
}

/// Runs `check` over `record`; when it fails, drops the record without recursion (it may
/// be nested too deep for a recursive drop) and returns the error.
fn admit<T>(
    record: T,
    check: impl FnOnce(&T) -> Result<()>,
    values: impl FnOnce(T) -> Vec<Value>,
) -> Result<T> {
    match check(&record) {
        Ok(()) => Ok(record),
        Err(e) => {
            values(record).into_iter().for_each(crate::json::drop_deep);
            Err(e)
        }
    }
}

/// How many rows a call's result says it touched, for its span's `rows`; `None` where the
/// result does not say.
trait Touched {
    fn touched(&self) -> Option<u64>;
}

impl Touched for bool {
    fn touched(&self) -> Option<u64> {
        Some(u64::from(*self))
    }
}

impl Touched for u64 {
    fn touched(&self) -> Option<u64> {
        Some(*self)
    }
}

impl<T> Touched for Option<T> {
    fn touched(&self) -> Option<u64> {
        Some(u64::from(self.is_some()))
    }
}

impl<T> Touched for Vec<T> {
    fn touched(&self) -> Option<u64> {
        Some(self.len() as u64)
    }
}

impl<K, V> Touched for std::collections::HashMap<K, V> {
    fn touched(&self) -> Option<u64> {
        Some(self.len() as u64)
    }
}

impl<T> Touched for Page<T> {
    fn touched(&self) -> Option<u64> {
        Some(self.items.len() as u64)
    }
}

impl Touched for MetricsPage {
    fn touched(&self) -> Option<u64> {
        Some(self.rows.len() as u64)
    }
}

macro_rules! touches {
    ($rows:expr => $($ty:ty),*) => {
        $(impl Touched for $ty {
            fn touched(&self) -> Option<u64> {
                $rows
            }
        })*
    };
}

touches!(Some(1) => Session, RunRecord, UserMemory, EvalRun, KnowledgeContent, Schedule, ScheduleRun, Learning, Job, EnqueueOutcome);
touches!(None => QueueStats, Continued);

/// A store wrapped in the input rules: every call checks its arguments, then forwards.
pub struct Checked<S: ?Sized> {
    rules: Rules,
    inner: Arc<S>,
    tables: Arc<TableNames>,
}

/// Notes on the current store call's span that the backend is retrying a conflicting
/// write for the `attempt`th time (from 1), and emits a `warn` event. A backend calls it
/// from its retry loop (the document engine's backoff, MongoDB's transactions do).
pub fn record_retry(attempt: usize) {
    let span = tracing::Span::current();
    span.record("retries", attempt as u64);
    tracing::warn!(attempt, "conflicting write; retrying");
}

/// The table a call of `domain` is about: a schedule's runs have their own.
fn table_of(domain: &str, operation: &str) -> Table {
    match domain {
        "sessions" => Table::Sessions,
        "runs" => Table::Runs,
        "memories" => Table::Memories,
        "metrics" => Table::Metrics,
        "evals" => Table::Evals,
        "knowledge" => Table::Knowledge,
        "schedules" if operation.contains("schedule_run") => Table::ScheduleRuns,
        "schedules" => Table::Schedules,
        "learnings" => Table::Learnings,
        _ => Table::Jobs,
    }
}

impl<S: ?Sized> Checked<S> {
    /// `inner`, checked by `rules`; its spans name agno's default tables.
    pub fn new(rules: Rules, inner: Arc<S>) -> Self {
        Checked {
            rules,
            inner,
            tables: Arc::new(TableNames::default()),
        }
    }

    /// The same, its spans naming the tables `tables` names.
    pub fn with_tables(mut self, tables: Arc<TableNames>) -> Self {
        self.tables = tables;
        self
    }

    /// Runs one store call in a `tracing` span (see the module docs for its fields).
    async fn traced<T: Touched>(
        &self,
        domain: &'static str,
        operation: &'static str,
        call: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        let span = tracing::debug_span!(
            "agno_storage",
            backend = self.rules.backend,
            domain,
            operation,
            table = self.tables.get(table_of(domain, operation)),
            rows = tracing::field::Empty,
            retries = tracing::field::Empty,
            duration_us = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = call.instrument(span.clone()).await;
        span.record("duration_us", started.elapsed().as_micros() as u64);
        match &result {
            Ok(value) => {
                if let Some(rows) = value.touched() {
                    span.record("rows", rows);
                }
            }
            Err(e) => {
                span.record("error", e.kind().as_str());
                if matches!(e.kind(), ErrorKind::Conflict | ErrorKind::LeaseLost) {
                    tracing::warn!(parent: &span, kind = e.kind().as_str(), "{domain}.{operation} lost a race");
                }
            }
        }
        result
    }

    /// A session to write, if it passes the rules (dropped without recursion if not).
    fn admit_session(&self, session: Session) -> Result<Session> {
        let r = self.rules;
        admit(
            session,
            |s| {
                r.id("session_id", &s.session_id)?;
                r.opt_id("user_id", s.user_id.as_deref())?;
                r.opt_id("agent_id", s.agent_id.as_deref())?;
                r.opt_id("team_id", s.team_id.as_deref())?;
                r.opt_id("workflow_id", s.workflow_id.as_deref())?;
                r.opt_json("session_data", s.session_data.as_ref())?;
                r.opt_json("agent_data", s.agent_data.as_ref())?;
                r.opt_json("team_data", s.team_data.as_ref())?;
                r.opt_json("workflow_data", s.workflow_data.as_ref())?;
                r.opt_json("metadata", s.metadata.as_ref())?;
                r.opt_json("summary", s.summary.as_ref())
            },
            |s| {
                opt_values([
                    s.session_data,
                    s.agent_data,
                    s.team_data,
                    s.workflow_data,
                    s.metadata,
                    s.summary,
                ])
            },
        )
    }

    /// A memory to write, if it passes the rules.
    fn admit_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        let r = self.rules;
        r.id("memory_id", &memory.memory_id)?;
        r.opt_id("user_id", memory.user_id.as_deref())?;
        r.opt_id("agent_id", memory.agent_id.as_deref())?;
        r.opt_id("team_id", memory.team_id.as_deref())?;
        Ok(memory)
    }

    /// Checks each record with `admit` and hands the admitted ones to `write` in one call;
    /// one result per record, in order, a refused record's error in its place.
    async fn admit_each<T, Fut>(
        &self,
        records: Vec<T>,
        admit: impl Fn(&Self, T) -> Result<T>,
        write: impl FnOnce(Vec<T>) -> Fut,
    ) -> Result<Vec<Result<T>>>
    where
        Fut: Future<Output = Result<Vec<Result<T>>>>,
    {
        let mut refused = Vec::with_capacity(records.len());
        let mut admitted = Vec::new();
        for record in records {
            match admit(self, record) {
                Ok(record) => {
                    admitted.push(record);
                    refused.push(None);
                }
                Err(e) => refused.push(Some(e)),
            }
        }
        let expected = admitted.len();
        let mut written = write(admitted).await?.into_iter();
        let mut out = Vec::with_capacity(refused.len());
        for slot in refused {
            out.push(match slot {
                Some(e) => Err(e),
                None => written.next().unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorKind::Unexpected,
                        format!("the store returned fewer results than the {expected} records it was given"),
                    )
                    .with_backend(self.rules.backend))
                }),
            });
        }
        Ok(out)
    }

    /// The rules of a submitted job: its identifiers and its payload's nesting.
    fn job(&self, j: &Job) -> Result<()> {
        let r = self.rules;
        r.id("id", &j.id)?;
        r.id("component_id", &j.component_id)?;
        r.id("session_id", &j.session_id)?;
        r.opt_id("user_id", j.user_id.as_deref())?;
        r.opt_id("deployment_id", j.deployment_id.as_deref())?;
        r.opt_id("idempotency_key", j.idempotency_key.as_deref())?;
        r.json("payload", &j.payload)
    }
}

fn opt_values(values: impl IntoIterator<Item = Option<Value>>) -> Vec<Value> {
    values.into_iter().flatten().collect()
}

#[async_trait]
impl<S: SessionStore + ?Sized> SessionStore for Checked<S> {
    async fn upsert_session(&self, session: Session) -> Result<Session> {
        self.traced("sessions", "upsert_session", async move {
            let session = self.admit_session(session)?;
            self.inner.upsert_session(session).await
        })
        .await
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        self.traced("sessions", "get_session", async move {
            self.rules.id("session_id", session_id)?;
            self.rules.opt_id("user_id", read.user_id.as_deref())?;
            self.inner.get_session(session_id, read).await
        })
        .await
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        self.traced("sessions", "get_sessions", async move {
            self.rules.opt_id("user_id", query.user_id.as_deref())?;
            self.rules
                .opt_id("component_id", query.component_id.as_deref())?;
            self.rules
                .opt_text("session_name", query.session_name.as_deref())?;
            self.inner.get_sessions(query).await
        })
        .await
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        self.traced("sessions", "rename_session", async move {
            self.rules.id("session_id", session_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .rename_session(session_id, session_name, user_id)
                .await
        })
        .await
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.traced("sessions", "delete_sessions", async move {
            self.rules.ids("session_id", session_ids)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_sessions(session_ids, user_id).await
        })
        .await
    }

    async fn reassign_session_owner(
        &self,
        session_id: &str,
        previous_user_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        self.traced("sessions", "reassign_session_owner", async move {
            self.rules.id("session_id", session_id)?;
            self.rules.id("previous_user_id", previous_user_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .reassign_session_owner(session_id, previous_user_id, user_id)
                .await
        })
        .await
    }

    async fn upsert_sessions(&self, sessions: Vec<Session>) -> Result<Vec<Result<Session>>> {
        self.traced("sessions", "upsert_sessions", async move {
            self.admit_each(sessions, Self::admit_session, |ok| {
                self.inner.upsert_sessions(ok)
            })
            .await
        })
        .await
    }
}

#[async_trait]
impl<S: RunStore + ?Sized> RunStore for Checked<S> {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.traced("runs", "upsert_run", async move {
            let r = self.rules;
            let run = admit(
                run,
                |run| {
                    r.id("run_id", &run.run_id)?;
                    r.id("session_id", &run.session_id)?;
                    r.opt_id("user_id", run.user_id.as_deref())?;
                    r.opt_id("agent_id", run.agent_id.as_deref())?;
                    r.opt_id("team_id", run.team_id.as_deref())?;
                    r.opt_id("workflow_id", run.workflow_id.as_deref())?;
                    r.opt_id("parent_run_id", run.parent_run_id.as_deref())?;
                    r.opt_text("status", run.status.as_deref())?;
                    r.json("run_data", &run.run_data)
                },
                |run| vec![run.run_data],
            )?;
            self.inner.upsert_run(run).await
        })
        .await
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        self.traced("runs", "get_run", async move {
            self.rules.id("run_id", run_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_run(run_id, user_id).await
        })
        .await
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        self.traced("runs", "get_runs", async move {
            let r = self.rules;
            r.opt_id("session_id", query.session_id.as_deref())?;
            r.opt_id("user_id", query.user_id.as_deref())?;
            r.opt_id("agent_id", query.agent_id.as_deref())?;
            r.opt_id("team_id", query.team_id.as_deref())?;
            r.opt_id("workflow_id", query.workflow_id.as_deref())?;
            r.opt_text("status", query.status.as_deref())?;
            self.inner.get_runs(query).await
        })
        .await
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.traced("runs", "delete_runs", async move {
            self.rules.ids("run_id", run_ids)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_runs(run_ids, user_id).await
        })
        .await
    }
}

#[async_trait]
impl<S: MemoryStore + ?Sized> MemoryStore for Checked<S> {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        self.traced("memories", "upsert_memory", async move {
            let memory = self.admit_memory(memory)?;
            self.inner.upsert_memory(memory).await
        })
        .await
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        self.traced("memories", "get_memory", async move {
            self.rules.id("memory_id", memory_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_memory(memory_id, user_id).await
        })
        .await
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        self.traced("memories", "get_memories", async move {
            let r = self.rules;
            r.opt_id("user_id", query.user_id.as_deref())?;
            r.opt_id("agent_id", query.agent_id.as_deref())?;
            r.opt_id("team_id", query.team_id.as_deref())?;
            query.topics.iter().try_for_each(|t| r.text("topics", t))?;
            r.opt_text("search_content", query.search_content.as_deref())?;
            self.inner.get_memories(query).await
        })
        .await
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        self.traced("memories", "get_memory_topics", async move {
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_memory_topics(user_id).await
        })
        .await
    }

    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>> {
        self.traced("memories", "get_memory_stats", async move {
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_memory_stats(user_id, pagination).await
        })
        .await
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.traced("memories", "delete_memories", async move {
            self.rules.ids("memory_id", memory_ids)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_memories(memory_ids, user_id).await
        })
        .await
    }

    async fn upsert_memories(&self, memories: Vec<UserMemory>) -> Result<Vec<Result<UserMemory>>> {
        self.traced("memories", "upsert_memories", async move {
            self.admit_each(memories, Self::admit_memory, |ok| {
                self.inner.upsert_memories(ok)
            })
            .await
        })
        .await
    }

    async fn clear_memories(&self) -> Result<u64> {
        self.traced("memories", "clear_memories", self.inner.clear_memories())
            .await
    }
}

#[async_trait]
impl<S: MetricsStore + ?Sized> MetricsStore for Checked<S> {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        self.traced("metrics", "upsert_metrics", async move {
            let r = self.rules;
            let records = admit(
                records,
                |records| {
                    records.iter().try_for_each(|m| {
                        r.id("id", &m.id)?;
                        r.opt_id("user_id", m.user_id.as_deref())?;
                        r.json("token_metrics", &m.token_metrics)?;
                        r.json("model_metrics", &m.model_metrics)
                    })
                },
                |records| {
                    records
                        .into_iter()
                        .flat_map(|m| [m.token_metrics, m.model_metrics])
                        .collect()
                },
            )?;
            self.inner.upsert_metrics(records).await
        })
        .await
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        self.traced("metrics", "get_metrics", async move {
            self.rules.opt_id("user_id", query.user_id.as_deref())?;
            self.inner.get_metrics(query).await
        })
        .await
    }

    async fn delete_user_metrics(&self, user_id: &str) -> Result<u64> {
        self.traced("metrics", "delete_user_metrics", async move {
            self.rules.id("user_id", user_id)?;
            self.inner.delete_user_metrics(user_id).await
        })
        .await
    }
}

#[async_trait]
impl<S: EvalStore + ?Sized> EvalStore for Checked<S> {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        self.traced("evals", "create_eval_run", async move {
            let r = self.rules;
            let run = admit(
                run,
                |e| {
                    r.id("run_id", &e.run_id)?;
                    r.opt_id("user_id", e.user_id.as_deref())?;
                    r.opt_id("agent_id", e.agent_id.as_deref())?;
                    r.opt_id("team_id", e.team_id.as_deref())?;
                    r.opt_id("workflow_id", e.workflow_id.as_deref())?;
                    r.opt_id("model_id", e.model_id.as_deref())?;
                    r.json("eval_data", &e.eval_data)?;
                    r.opt_json("eval_input", e.eval_input.as_ref())
                },
                |e| opt_values([Some(e.eval_data), e.eval_input]),
            )?;
            self.inner.create_eval_run(run).await
        })
        .await
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        self.traced("evals", "get_eval_run", async move {
            self.rules.id("run_id", run_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_eval_run(run_id, user_id).await
        })
        .await
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        self.traced("evals", "get_eval_runs", async move {
            let r = self.rules;
            r.opt_id("user_id", query.user_id.as_deref())?;
            r.opt_id("agent_id", query.agent_id.as_deref())?;
            r.opt_id("team_id", query.team_id.as_deref())?;
            r.opt_id("workflow_id", query.workflow_id.as_deref())?;
            r.opt_id("model_id", query.model_id.as_deref())?;
            self.inner.get_eval_runs(query).await
        })
        .await
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        self.traced("evals", "rename_eval_run", async move {
            self.rules.id("run_id", run_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.rename_eval_run(run_id, name, user_id).await
        })
        .await
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.traced("evals", "delete_eval_runs", async move {
            self.rules.ids("run_id", run_ids)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_eval_runs(run_ids, user_id).await
        })
        .await
    }

    async fn update_eval_run_user_id(&self, run_id: &str, user_id: &str) -> Result<bool> {
        self.traced("evals", "update_eval_run_user_id", async move {
            self.rules.id("run_id", run_id)?;
            self.rules.id("user_id", user_id)?;
            self.inner.update_eval_run_user_id(run_id, user_id).await
        })
        .await
    }
}

#[async_trait]
impl<S: KnowledgeStore + ?Sized> KnowledgeStore for Checked<S> {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        self.traced("knowledge", "upsert_knowledge_content", async move {
            let r = self.rules;
            let content = admit(
                content,
                |k| {
                    r.id("id", &k.id)?;
                    r.opt_id("user_id", k.user_id.as_deref())?;
                    r.opt_id("linked_to", k.linked_to.as_deref())?;
                    r.opt_id("external_id", k.external_id.as_deref())?;
                    r.opt_json("metadata", k.metadata.as_ref())
                },
                |k| opt_values([k.metadata]),
            )?;
            self.inner.upsert_knowledge_content(content).await
        })
        .await
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        self.traced("knowledge", "get_knowledge_content", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_knowledge_content(id, user_id).await
        })
        .await
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        self.traced("knowledge", "get_knowledge_contents", async move {
            self.rules.opt_id("user_id", query.user_id.as_deref())?;
            self.rules.opt_id("linked_to", query.linked_to.as_deref())?;
            self.inner.get_knowledge_contents(query).await
        })
        .await
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("knowledge", "delete_knowledge_content", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_knowledge_content(id, user_id).await
        })
        .await
    }
}

#[async_trait]
impl<S: ScheduleStore + ?Sized> ScheduleStore for Checked<S> {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        self.traced("schedules", "create_schedule", async move {
            let r = self.rules;
            let schedule = admit(
                schedule,
                |s| {
                    r.id("id", &s.id)?;
                    r.id("name", &s.name)?;
                    r.opt_id("user_id", s.user_id.as_deref())?;
                    r.opt_id("managed_by", s.managed_by.as_deref())?;
                    r.opt_id("target_id", s.target_id.as_deref())?;
                    r.opt_json("payload", s.payload.as_ref())
                },
                |s| opt_values([s.payload]),
            )?;
            self.inner.create_schedule(schedule).await
        })
        .await
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        self.traced("schedules", "get_schedule", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_schedule(id, user_id).await
        })
        .await
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        self.traced("schedules", "get_schedule_by_name", async move {
            self.rules.id("name", name)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_schedule_by_name(name, user_id).await
        })
        .await
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        self.traced("schedules", "get_schedules", async move {
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_schedules(enabled, user_id, pagination).await
        })
        .await
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        self.traced("schedules", "update_schedule", async move {
            let r = self.rules;
            r.id("id", id)?;
            r.opt_id("user_id", user_id)?;
            let update = admit(
                update,
                |u| {
                    u.columns()
                        .iter()
                        .try_for_each(|(column, value)| match value {
                            Value::String(text) if column == "name" => r.id("name", text),
                            _ => r.json(column, value),
                        })
                },
                |u| u.into_columns().into_iter().map(|(_, v)| v).collect(),
            )?;
            self.inner.update_schedule(id, user_id, update).await
        })
        .await
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("schedules", "delete_schedule", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_schedule(id, user_id).await
        })
        .await
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        self.traced("schedules", "claim_due_schedule", async move {
            self.rules.id("worker_id", worker_id)?;
            self.inner
                .claim_due_schedule(worker_id, lock_grace_seconds)
                .await
        })
        .await
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        self.traced("schedules", "release_schedule", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            self.inner
                .release_schedule(id, worker_id, locked_at, next_run_at)
                .await
        })
        .await
    }

    async fn create_schedule_run(&self, run: ScheduleRun) -> Result<ScheduleRun> {
        self.traced("schedules", "create_schedule_run", async move {
            let run = self.admit_schedule_run(run)?;
            self.inner.create_schedule_run(run).await
        })
        .await
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        self.traced("schedules", "update_schedule_run", async move {
            self.rules.opt_id("user_id", user_id)?;
            let run = self.admit_schedule_run(run)?;
            self.inner.update_schedule_run(run, user_id).await
        })
        .await
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        self.traced("schedules", "get_schedule_run", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_schedule_run(id, user_id).await
        })
        .await
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        self.traced("schedules", "get_schedule_runs", async move {
            self.rules.id("schedule_id", schedule_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .get_schedule_runs(schedule_id, user_id, pagination)
                .await
        })
        .await
    }

    async fn get_latest_schedule_runs(
        &self,
        schedule_ids: &[String],
        user_id: Option<&str>,
    ) -> Result<std::collections::HashMap<String, ScheduleRun>> {
        self.traced("schedules", "get_latest_schedule_runs", async move {
            self.rules.ids("schedule_id", schedule_ids)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .get_latest_schedule_runs(schedule_ids, user_id)
                .await
        })
        .await
    }

    async fn delete_schedule_runs(
        &self,
        schedule_id: &str,
        before: i64,
        user_id: Option<&str>,
    ) -> Result<u64> {
        self.traced("schedules", "delete_schedule_runs", async move {
            self.rules.id("schedule_id", schedule_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .delete_schedule_runs(schedule_id, before, user_id)
                .await
        })
        .await
    }

    async fn stamp_schedule_provenance(&self, id: &str, stamp: ScheduleUpdate) -> Result<bool> {
        self.traced("schedules", "stamp_schedule_provenance", async move {
            self.rules.id("id", id)?;
            self.inner.stamp_schedule_provenance(id, stamp).await
        })
        .await
    }

    async fn disable_schedules_for_target(
        &self,
        target_type: &str,
        target_id: &str,
        reason: Option<&str>,
    ) -> Result<u64> {
        self.traced("schedules", "disable_schedules_for_target", async move {
            self.rules.id("target_type", target_type)?;
            self.rules.id("target_id", target_id)?;
            self.inner
                .disable_schedules_for_target(target_type, target_id, reason)
                .await
        })
        .await
    }
}

impl<S: ?Sized> Checked<S> {
    fn admit_schedule_run(&self, run: ScheduleRun) -> Result<ScheduleRun> {
        let r = self.rules;
        admit(
            run,
            |run| {
                r.id("id", &run.id)?;
                r.id("schedule_id", &run.schedule_id)?;
                r.opt_id("run_id", run.run_id.as_deref())?;
                r.opt_id("session_id", run.session_id.as_deref())?;
                r.opt_id("user_id", run.user_id.as_deref())?;
                r.opt_json("input", run.input.as_ref())?;
                r.opt_json("output", run.output.as_ref())?;
                r.opt_json("requirements", run.requirements.as_ref())
            },
            |run| opt_values([run.input, run.output, run.requirements]),
        )
    }
}

#[async_trait]
impl<S: LearningStore + ?Sized> LearningStore for Checked<S> {
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
        self.traced("learnings", "upsert_learning", async move {
            let r = self.rules;
            let learning = admit(
                learning,
                |l| {
                    r.id("learning_id", &l.learning_id)?;
                    r.id("learning_type", &l.learning_type)?;
                    r.opt_id("namespace", l.namespace.as_deref())?;
                    r.opt_id("user_id", l.user_id.as_deref())?;
                    r.opt_id("agent_id", l.agent_id.as_deref())?;
                    r.opt_id("team_id", l.team_id.as_deref())?;
                    r.opt_id("workflow_id", l.workflow_id.as_deref())?;
                    r.opt_id("session_id", l.session_id.as_deref())?;
                    r.opt_id("entity_id", l.entity_id.as_deref())?;
                    r.opt_id("entity_type", l.entity_type.as_deref())?;
                    r.json("content", &l.content)?;
                    r.opt_json("metadata", l.metadata.as_ref())
                },
                |l| opt_values([Some(l.content), l.metadata]),
            )?;
            self.inner.upsert_learning(learning).await
        })
        .await
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        self.traced("learnings", "get_learning", async move {
            self.rules.id("learning_id", learning_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_learning(learning_id, user_id).await
        })
        .await
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        self.traced("learnings", "list_learnings", async move {
            let r = self.rules;
            r.opt_id("learning_type", query.learning_type.as_deref())?;
            r.opt_id("user_id", query.user_id.as_deref())?;
            r.opt_id("agent_id", query.agent_id.as_deref())?;
            r.opt_id("team_id", query.team_id.as_deref())?;
            r.opt_id("session_id", query.session_id.as_deref())?;
            r.opt_id("namespace", query.namespace.as_deref())?;
            r.opt_id("entity_id", query.entity_id.as_deref())?;
            r.opt_id("entity_type", query.entity_type.as_deref())?;
            self.inner.list_learnings(query).await
        })
        .await
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("learnings", "delete_learning", async move {
            self.rules.id("learning_id", learning_id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.delete_learning(learning_id, user_id).await
        })
        .await
    }

    async fn delete_user_learnings(
        &self,
        user_id: &str,
        learning_type: Option<&str>,
    ) -> Result<u64> {
        self.traced("learnings", "delete_user_learnings", async move {
            self.rules.id("user_id", user_id)?;
            self.rules.opt_id("learning_type", learning_type)?;
            self.inner
                .delete_user_learnings(user_id, learning_type)
                .await
        })
        .await
    }

    async fn get_learnings_user_stats(
        &self,
        learning_type: Option<&str>,
        user_id: Option<&str>,
        sort: Sort,
        pagination: Pagination,
    ) -> Result<Page<LearningUserStats>> {
        self.traced("learnings", "get_learnings_user_stats", async move {
            self.rules.opt_id("learning_type", learning_type)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner
                .get_learnings_user_stats(learning_type, user_id, sort, pagination)
                .await
        })
        .await
    }

    async fn search_learnings(&self, text: &str, filters: LearningQuery) -> Result<Page<Learning>> {
        self.traced("learnings", "search_learnings", async move {
            self.rules.text("text", text)?;
            self.rules.opt_id("user_id", filters.user_id.as_deref())?;
            self.inner.search_learnings(text, filters).await
        })
        .await
    }
}

#[async_trait]
impl<S: JobStore + ?Sized> JobStore for Checked<S> {
    async fn enqueue_job(&self, job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        self.traced("jobs", "enqueue_job", async move {
            let job = admit(job, |j| self.job(j), |j| vec![j.payload])?;
            self.inner.enqueue_job(job, max_depth).await
        })
        .await
    }

    async fn enqueue_jobs(
        &self,
        jobs: Vec<Job>,
        max_depth: u64,
    ) -> Result<Vec<Result<EnqueueOutcome>>> {
        self.traced("jobs", "enqueue_jobs", async move {
            let jobs = admit(
                jobs,
                |jobs| {
                    jobs.iter().enumerate().try_for_each(|(i, j)| {
                        self.job(j)
                            .map_err(|e| e.within(format_args!("job {i} ({})", j.id)))
                    })
                },
                |jobs| jobs.into_iter().map(|j| j.payload).collect(),
            )?;
            self.inner.enqueue_jobs(jobs, max_depth).await
        })
        .await
    }

    async fn claim_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.traced("jobs", "claim_jobs", async move {
            self.rules.id("worker_id", worker_id)?;
            self.rules.opt_id("deployment_id", deployment_id)?;
            self.inner
                .claim_jobs(worker_id, lock_grace_seconds, deployment_id, limit)
                .await
        })
        .await
    }

    async fn complete_jobs(
        &self,
        worker_id: &str,
        completions: Vec<JobCompletion>,
    ) -> Result<Vec<Result<()>>> {
        self.traced("jobs", "complete_jobs", async move {
            self.rules.id("worker_id", worker_id)?;
            completions
                .iter()
                .try_for_each(|c| self.rules.id("id", &c.id))?;
            self.inner.complete_jobs(worker_id, completions).await
        })
        .await
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        self.traced("jobs", "claim_job", async move {
            self.rules.id("worker_id", worker_id)?;
            self.rules.opt_id("deployment_id", deployment_id)?;
            self.inner
                .claim_job(worker_id, lock_grace_seconds, deployment_id)
                .await
        })
        .await
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        self.traced("jobs", "heartbeat_jobs", async move {
            self.rules.id("worker_id", worker_id)?;
            self.rules.ids("id", ids)?;
            self.inner.heartbeat_jobs(worker_id, ids).await
        })
        .await
    }

    async fn complete_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<Job> {
        self.traced("jobs", "complete_job", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            self.inner
                .complete_job(id, worker_id, attempt, status, error)
                .await
        })
        .await
    }

    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job> {
        self.traced("jobs", "retry_or_fail_job", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            self.inner
                .retry_or_fail_job(id, worker_id, attempt, error, retry_delay_seconds)
                .await
        })
        .await
    }

    async fn release_job(&self, id: &str, worker_id: &str, attempt: i64) -> Result<Job> {
        self.traced("jobs", "release_job", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            self.inner.release_job(id, worker_id, attempt).await
        })
        .await
    }

    async fn requeue_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("jobs", "requeue_job", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.requeue_job(id, user_id).await
        })
        .await
    }

    async fn settle_paused_job(
        &self,
        id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        self.traced("jobs", "settle_paused_job", async move {
            self.rules.id("id", id)?;
            self.inner.settle_paused_job(id, status, error).await
        })
        .await
    }

    async fn count_queued_jobs(&self) -> Result<u64> {
        self.traced("jobs", "count_queued_jobs", async move {
            self.inner.count_queued_jobs().await
        })
        .await
    }

    async fn queue_stats(&self) -> Result<crate::job::QueueStats> {
        self.traced("jobs", "queue_stats", async move {
            self.inner.queue_stats().await
        })
        .await
    }

    async fn continue_job(
        &self,
        id: &str,
        user_id: Option<&str>,
        continue_payload: Value,
    ) -> Result<crate::job::Continued> {
        self.traced("jobs", "continue_job", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.rules.json("continue_payload", &continue_payload)?;
            self.inner.continue_job(id, user_id, continue_payload).await
        })
        .await
    }

    async fn sweep_exhausted_jobs(
        &self,
        lock_grace_seconds: i64,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.traced("jobs", "sweep_exhausted_jobs", async move {
            self.inner
                .sweep_exhausted_jobs(lock_grace_seconds, limit)
                .await
        })
        .await
    }

    async fn acquire_sweep(
        &self,
        id: &str,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<bool> {
        self.traced("jobs", "acquire_sweep", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            self.inner
                .acquire_sweep(id, worker_id, lock_grace_seconds)
                .await
        })
        .await
    }

    async fn settle_swept_job(
        &self,
        id: &str,
        worker_id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        self.traced("jobs", "settle_swept_job", async move {
            self.rules.id("id", id)?;
            self.rules.id("worker_id", worker_id)?;
            crate::job::check_finish_status(status)?;
            self.inner
                .settle_swept_job(id, worker_id, status, error)
                .await
        })
        .await
    }

    async fn cancel_running_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("jobs", "cancel_running_job", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.cancel_running_job(id, user_id).await
        })
        .await
    }

    async fn job_wakeups(&self) -> Result<Option<Box<dyn crate::job::JobWakeups>>> {
        self.traced("jobs", "job_wakeups", async move {
            self.inner.job_wakeups().await
        })
        .await
    }

    async fn session_blocker(&self, id: &str) -> Result<Option<String>> {
        self.traced("jobs", "session_blocker", async move {
            self.rules.id("id", id)?;
            self.inner.session_blocker(id).await
        })
        .await
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.traced("jobs", "cancel_job", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.cancel_job(id, user_id).await
        })
        .await
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        self.traced("jobs", "get_job", async move {
            self.rules.id("id", id)?;
            self.rules.opt_id("user_id", user_id)?;
            self.inner.get_job(id, user_id).await
        })
        .await
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        self.traced("jobs", "list_jobs", async move {
            self.rules
                .opt_id("session_id", query.session_id.as_deref())?;
            self.rules.opt_id("user_id", query.user_id.as_deref())?;
            self.inner.list_jobs(query).await
        })
        .await
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        self.traced("jobs", "cleanup_jobs", async move {
            self.inner.cleanup_jobs(older_than_seconds).await
        })
        .await
    }

    async fn delete_user_jobs(&self, user_id: &str) -> Result<u64> {
        self.traced("jobs", "delete_user_jobs", async move {
            self.rules.id("user_id", user_id)?;
            self.inner.delete_user_jobs(user_id).await
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(max_id_chars: Option<usize>) -> Rules {
        let caps = Capabilities {
            max_id_chars,
            max_json_depth: Some(5),
            ..Capabilities::all()
        };
        Rules::new("test", &caps)
    }

    #[test]
    fn nul_is_refused_other_controls_are_ordinary() {
        let r = rules(None);
        let err = r.id("user_id", "alice\0").expect_err("NUL refused");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(err.message().contains("user_id"), "{}", err.message());
        assert!(r.id("user_id", "a\u{1}\t\n\u{7f}b").is_ok());
    }

    #[test]
    fn length_counts_characters_up_to_the_declared_maximum() {
        let r = rules(Some(3));
        assert!(r.id("session_id", "äöü").is_ok());
        let err = r.id("session_id", "abcd").expect_err("too long");
        assert!(err.message().contains("at most 3"), "{}", err.message());
    }

    #[test]
    fn depth_beyond_the_limit_is_refused_and_dropped_flat() {
        let r = rules(None);
        let mut deep = Value::Null;
        for _ in 0..200_000 {
            deep = Value::Array(vec![deep]);
        }
        assert_eq!(crate::json::depth(&deep), 200_000);
        let err = admit(deep, |v| r.json("run_data", v), |v| vec![v]).expect_err("too deep");
        assert!(err.message().contains("200000 levels"), "{}", err.message());
    }
}
