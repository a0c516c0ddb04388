//! The store logic agno-storage's document backends share: every store trait of
//! `agno-storage-core` written once over [`DocBackend`] (get, put, delete, equality queries
//! and atomic commits whose writes carry compare-and-set preconditions).
//!
//! An adapter implements [`DocBackend`] for its database type (its client, its encoding, and
//! the hooks where its layout differs, such as [`DocBackend::doc_id`]), then
//! [`doc_stores!`] implements the store traits for that type by delegating to [`Docs`].
//!
//! Every read-modify-write is a compare-and-set: the document is read, changed and written
//! under the precondition that it is still the version read, retried with [`backoff`] up to
//! [`CAS_ATTEMPTS`] times on a lost race.
#![deny(missing_docs)]

mod backend;
mod evals;
mod jobs;
mod knowledge;
mod learnings;
mod legacy;
mod memories;
mod metrics;
mod migrate;
mod runs;
mod schedules;
mod sessions;

pub use backend::{
    backoff, digest_id, opt, Collection, Commit, DocBackend, Fields, Pre, Stored, CAS_ATTEMPTS,
};
pub use jobs::claim_oldest_job;
pub use migrate::{holds_agno_docs, migration_steps, stamp_new_database};
pub use runs::{run_counter_id, updated_run};

use backend::object;

use std::sync::Arc;

use agno_storage_core::legacy::LegacyRunsStore;
use agno_storage_core::migration::MigrationTarget;
use agno_storage_core::{
    AgnoDb, EvalStore, JobStore, KnowledgeStore, LearningStore, MemoryStore, MetricsStore,
    RunStore, ScheduleStore, SessionStore,
};

/// The store traits of `agno-storage-core` over a [`DocBackend`]; it dereferences to the
/// backend. [`doc_stores!`] makes an adapter's type delegate to it.
#[derive(Debug)]
pub struct Docs<'a, B>(pub &'a B);

impl<B> std::ops::Deref for Docs<'_, B> {
    type Target = B;

    fn deref(&self) -> &B {
        self.0
    }
}

/// One [`AgnoDb`] over every store of `db`, durable.
pub fn agno_db<B>(db: &B) -> AgnoDb
where
    B: DocBackend
        + SessionStore
        + RunStore
        + MemoryStore
        + MetricsStore
        + EvalStore
        + KnowledgeStore
        + ScheduleStore
        + LearningStore
        + JobStore
        + MigrationTarget
        + LegacyRunsStore,
{
    let me = Arc::new(db.clone());
    let mut builder = AgnoDb::builder(B::BACKEND);
    if let Some(max) = B::MAX_ID_CHARS {
        builder = builder.max_id_chars(max);
    }
    if let Some(max) = B::MAX_JSON_DEPTH {
        builder = builder.max_json_depth(max);
    }
    builder
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
        .durable(true)
        .build()
}

#[doc(hidden)]
pub mod __private {
    pub use crate::{migration_steps, Docs};
    pub use agno_storage_core::legacy::{InsertedRuns, LegacyRunsStore, LegacySessionRuns};
    pub use agno_storage_core::migration::{
        MigrationLock, MigrationStep, MigrationTarget, SchemaVersion, SchemaVersionStore, TableRef,
    };
    pub use agno_storage_core::{
        async_trait, EnqueueOutcome, EvalQuery, EvalRun, EvalStore, Job, JobQuery, JobStatus,
        JobStore, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Learning, LearningQuery,
        LearningStore, MemoryQuery, MemoryStats, MemoryStore, MetricsPage, MetricsQuery,
        MetricsRecord, MetricsStore, Page, Pagination, Result, RunQuery, RunRecord, RunStore,
        Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate, Session, SessionQuery, SessionRead,
        SessionStore, UserMemory,
    };
    pub use std::sync::Arc;
}

/// Implements the store traits of `agno-storage-core` for `$db` (a [`DocBackend`]) by
/// delegating every call to [`Docs`].
#[macro_export]
macro_rules! doc_stores {
    ($db:ty) => {
        const _: () = {
            use $crate::__private::*;

            #[async_trait]
            impl EvalStore for $db {
                async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
                    Docs(self).create_eval_run(run).await
                }
                async fn get_eval_run(
                    &self,
                    run_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<EvalRun>> {
                    Docs(self).get_eval_run(run_id, user_id).await
                }
                async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
                    Docs(self).get_eval_runs(query).await
                }
                async fn rename_eval_run(
                    &self,
                    run_id: &str,
                    name: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<EvalRun>> {
                    Docs(self).rename_eval_run(run_id, name, user_id).await
                }
                async fn delete_eval_runs(
                    &self,
                    run_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_eval_runs(run_ids, user_id).await
                }
            }

            #[async_trait]
            impl KnowledgeStore for $db {
                async fn upsert_knowledge_content(
                    &self,
                    content: KnowledgeContent,
                ) -> Result<KnowledgeContent> {
                    Docs(self).upsert_knowledge_content(content).await
                }
                async fn get_knowledge_content(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<KnowledgeContent>> {
                    Docs(self).get_knowledge_content(id, user_id).await
                }
                async fn get_knowledge_contents(
                    &self,
                    query: KnowledgeQuery,
                ) -> Result<Page<KnowledgeContent>> {
                    Docs(self).get_knowledge_contents(query).await
                }
                async fn delete_knowledge_content(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<bool> {
                    Docs(self).delete_knowledge_content(id, user_id).await
                }
            }

            #[async_trait]
            impl LearningStore for $db {
                async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
                    Docs(self).upsert_learning(learning).await
                }
                async fn get_learning(
                    &self,
                    learning_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<Learning>> {
                    Docs(self).get_learning(learning_id, user_id).await
                }
                async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
                    Docs(self).list_learnings(query).await
                }
                async fn delete_learning(
                    &self,
                    learning_id: &str,
                    user_id: Option<&str>,
                ) -> Result<bool> {
                    Docs(self).delete_learning(learning_id, user_id).await
                }
            }

            #[async_trait]
            impl MemoryStore for $db {
                async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
                    Docs(self).upsert_memory(memory).await
                }
                async fn get_memory(
                    &self,
                    memory_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<UserMemory>> {
                    Docs(self).get_memory(memory_id, user_id).await
                }
                async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
                    Docs(self).get_memories(query).await
                }
                async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
                    Docs(self).get_memory_topics(user_id).await
                }
                async fn get_memory_stats(
                    &self,
                    user_id: Option<&str>,
                    pagination: Pagination,
                ) -> Result<Page<MemoryStats>> {
                    Docs(self).get_memory_stats(user_id, pagination).await
                }
                async fn delete_memories(
                    &self,
                    memory_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_memories(memory_ids, user_id).await
                }
            }

            #[async_trait]
            impl MetricsStore for $db {
                async fn upsert_metrics(
                    &self,
                    records: Vec<MetricsRecord>,
                ) -> Result<Vec<MetricsRecord>> {
                    Docs(self).upsert_metrics(records).await
                }
                async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
                    Docs(self).get_metrics(query).await
                }
            }
            #[async_trait]
            impl SessionStore for $db {
                async fn upsert_session(&self, session: Session) -> Result<Session> {
                    Docs(self).upsert_session(session).await
                }
                async fn get_session(
                    &self,
                    session_id: &str,
                    read: SessionRead,
                ) -> Result<Option<Session>> {
                    Docs(self).get_session(session_id, read).await
                }
                async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
                    Docs(self).get_sessions(query).await
                }
                async fn rename_session(
                    &self,
                    session_id: &str,
                    session_name: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<Session>> {
                    Docs(self)
                        .rename_session(session_id, session_name, user_id)
                        .await
                }
                async fn delete_sessions(
                    &self,
                    session_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_sessions(session_ids, user_id).await
                }
            }

            #[async_trait]
            impl RunStore for $db {
                async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
                    Docs(self).upsert_run(run).await
                }
                async fn get_run(
                    &self,
                    run_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<RunRecord>> {
                    Docs(self).get_run(run_id, user_id).await
                }
                async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
                    Docs(self).get_runs(query).await
                }
                async fn delete_runs(
                    &self,
                    run_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_runs(run_ids, user_id).await
                }
            }

            #[async_trait]
            impl ScheduleStore for $db {
                async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
                    Docs(self).create_schedule(schedule).await
                }
                async fn get_schedule(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<Schedule>> {
                    Docs(self).get_schedule(id, user_id).await
                }
                async fn get_schedule_by_name(
                    &self,
                    name: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<Schedule>> {
                    Docs(self).get_schedule_by_name(name, user_id).await
                }
                async fn get_schedules(
                    &self,
                    enabled: Option<bool>,
                    user_id: Option<&str>,
                    pagination: Pagination,
                ) -> Result<Page<Schedule>> {
                    Docs(self).get_schedules(enabled, user_id, pagination).await
                }
                async fn update_schedule(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                    update: ScheduleUpdate,
                ) -> Result<Option<Schedule>> {
                    Docs(self).update_schedule(id, user_id, update).await
                }
                async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
                    Docs(self).delete_schedule(id, user_id).await
                }
                async fn claim_due_schedule(
                    &self,
                    worker_id: &str,
                    lock_grace_seconds: i64,
                ) -> Result<Option<Schedule>> {
                    Docs(self)
                        .claim_due_schedule(worker_id, lock_grace_seconds)
                        .await
                }
                async fn release_schedule(
                    &self,
                    id: &str,
                    worker_id: &str,
                    locked_at: Option<i64>,
                    next_run_at: Option<i64>,
                ) -> Result<bool> {
                    Docs(self)
                        .release_schedule(id, worker_id, locked_at, next_run_at)
                        .await
                }
                async fn create_schedule_run(&self, run: ScheduleRun) -> Result<ScheduleRun> {
                    Docs(self).create_schedule_run(run).await
                }
                async fn update_schedule_run(
                    &self,
                    run: ScheduleRun,
                    user_id: Option<&str>,
                ) -> Result<Option<ScheduleRun>> {
                    Docs(self).update_schedule_run(run, user_id).await
                }
                async fn get_schedule_run(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<ScheduleRun>> {
                    Docs(self).get_schedule_run(id, user_id).await
                }
                async fn get_schedule_runs(
                    &self,
                    schedule_id: &str,
                    user_id: Option<&str>,
                    pagination: Pagination,
                ) -> Result<Page<ScheduleRun>> {
                    Docs(self)
                        .get_schedule_runs(schedule_id, user_id, pagination)
                        .await
                }
            }

            #[async_trait]
            impl JobStore for $db {
                async fn enqueue_job(&self, job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
                    Docs(self).enqueue_job(job, max_depth).await
                }
                async fn claim_job(
                    &self,
                    worker_id: &str,
                    lock_grace_seconds: i64,
                    deployment_id: Option<&str>,
                ) -> Result<Option<Job>> {
                    Docs(self)
                        .claim_job(worker_id, lock_grace_seconds, deployment_id)
                        .await
                }
                async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
                    Docs(self).heartbeat_jobs(worker_id, ids).await
                }
                async fn complete_job(
                    &self,
                    id: &str,
                    worker_id: &str,
                    attempt: i64,
                    status: JobStatus,
                    error: Option<String>,
                ) -> Result<Job> {
                    Docs(self)
                        .complete_job(id, worker_id, attempt, status, error)
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
                    Docs(self)
                        .retry_or_fail_job(id, worker_id, attempt, error, retry_delay_seconds)
                        .await
                }
                async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
                    Docs(self).cancel_job(id, user_id).await
                }
                async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
                    Docs(self).get_job(id, user_id).await
                }
                async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
                    Docs(self).list_jobs(query).await
                }
                async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
                    Docs(self).cleanup_jobs(older_than_seconds).await
                }
            }

            #[async_trait]
            impl LegacyRunsStore for $db {
                async fn legacy_runs_page(
                    &self,
                    after: Option<&str>,
                    limit: usize,
                ) -> Result<Vec<LegacySessionRuns>> {
                    Docs(self).legacy_runs_page(after, limit).await
                }
                async fn insert_runs_if_absent(
                    &self,
                    rows: Vec<RunRecord>,
                ) -> Result<InsertedRuns> {
                    Docs(self).insert_runs_if_absent(rows).await
                }
                async fn count_legacy_runs(&self) -> Result<u64> {
                    Docs(self).count_legacy_runs().await
                }
                async fn drop_legacy_runs(&self) -> Result<u64> {
                    Docs(self).drop_legacy_runs().await
                }
            }

            #[async_trait]
            impl SchemaVersionStore for $db {
                async fn get_schema_version(
                    &self,
                    table_name: &str,
                ) -> Result<Option<SchemaVersion>> {
                    Docs(self).get_schema_version(table_name).await
                }
                async fn set_schema_version(
                    &self,
                    table_name: &str,
                    version: SchemaVersion,
                ) -> Result<()> {
                    Docs(self).set_schema_version(table_name, version).await
                }
            }

            #[async_trait]
            impl MigrationTarget for $db {
                fn tables(&self) -> Vec<TableRef> {
                    Docs(self).tables()
                }
                fn versions(&self) -> &dyn SchemaVersionStore {
                    self
                }
                fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
                    migration_steps(Arc::new(self.clone()))
                }
                /// Takes the migration lock: creates the lock document, or takes over one
                /// whose lease has passed, retrying every 100 ms. `Conflict` after a minute
                /// (or two leases, if longer) while a live holder keeps renewing it.
                async fn lock(&self) -> Result<MigrationLock> {
                    Docs(self).lock().await
                }
            }
        };
    };
}
