//! The contract of agno-storage: records, one store trait per domain, errors,
//! capabilities, pagination and the schema-version / migration contract, plus the logic
//! every adapter shares (legacy-run merging, pagination checks, metrics aggregation, entity
//! key digests, the schedule allow-list).
//!
//! Records use the field names agno 3.1.10 stores, so adapters can keep agno's on-disk
//! format. Every user-facing read and write takes an optional `user_id` and never returns
//! another user's rows; schedule polling is deliberately unscoped.
//!
//! `agno_storage_doc::InMemoryDb` implements every trait in process memory, for unit tests.
//! The examples below run on it; any backend's [`AgnoDb`] (SQLite, PostgreSQL, MySQL,
//! MongoDB, Redis, DynamoDB, Firestore, SurrealDB, JSON files) is used the same way.
//!
//! # Sessions and runs
//!
//! A session row, and one row per run in the runs table (agno v3's layout); reading the
//! session merges its runs back in.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{RunRecord, Session, SessionRead, SessionType};
//! use serde_json::json;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let session = Session::new("s1", SessionType::Agent, "my-agent").with_user("alice");
//! db.sessions()?.upsert_session(session).await?;
//! let run = RunRecord::from_run_data(
//!     "s1",
//!     Some("alice".into()),
//!     json!({"run_id": "r1", "agent_id": "my-agent", "status": "COMPLETED", "content": "Hi"}),
//! )?;
//! db.runs()?.upsert_run(run).await?; // run_index assigned atomically
//! let read = db.sessions()?.get_session("s1", SessionRead::for_user("alice")).await?;
//! let runs = read.and_then(|s| s.runs).unwrap_or_default();
//! assert_eq!(runs[0].to_value()?["content"], "Hi");
//! // Another user never sees it.
//! assert!(db.sessions()?.get_session("s1", SessionRead::for_user("bob")).await?.is_none());
//! # Ok(()) }
//! ```
//!
//! # Memories
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{MemoryQuery, UserMemory};
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let memories = db.memories()?;
//! memories
//!     .upsert_memory(UserMemory::new("m1", Some("alice".into()), "likes tea"))
//!     .await?;
//! let alices = memories
//!     .get_memories(MemoryQuery { user_id: Some("alice".into()), ..Default::default() })
//!     .await?;
//! assert_eq!(alices.items[0].memory, "likes tea");
//! # Ok(()) }
//! ```
//!
//! # Metrics
//!
//! Daily metrics are computed from the sessions, once for every backend.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{metrics::calculate_metrics, MetricsQuery, Session, SessionType};
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! db.sessions()?
//!     .upsert_session(Session::new("s1", SessionType::Agent, "my-agent"))
//!     .await?;
//! let today = chrono::Utc::now().date_naive();
//! calculate_metrics(db.sessions()?, db.metrics()?, today).await?;
//! let page = db.metrics()?.get_metrics(MetricsQuery::default()).await?;
//! assert_eq!(page.rows.len(), 1);
//! # Ok(()) }
//! ```
//!
//! # Eval runs
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{EvalRun, EvalType};
//! use serde_json::json;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let run = EvalRun {
//!     run_id: "e1".into(),
//!     eval_type: EvalType::Accuracy,
//!     eval_data: json!({"avg_score": 9.0}),
//!     eval_input: None,
//!     name: Some("capitals".into()),
//!     agent_id: Some("my-agent".into()),
//!     team_id: None,
//!     workflow_id: None,
//!     model_id: None,
//!     model_provider: None,
//!     evaluated_component_name: None,
//!     user_id: Some("alice".into()),
//!     created_at: agno_storage_core::now_epoch_seconds(),
//!     updated_at: None,
//! };
//! db.evals()?.create_eval_run(run).await?;
//! let found = db.evals()?.get_eval_run("e1", Some("alice")).await?;
//! assert_eq!(found.map(|r| r.eval_type), Some(EvalType::Accuracy));
//! # Ok(()) }
//! ```
//!
//! # Knowledge contents
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::KnowledgeContent;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let doc = KnowledgeContent::new("k1", "handbook.pdf", "the employee handbook");
//! db.knowledge()?.upsert_knowledge_content(doc).await?;
//! let found = db.knowledge()?.get_knowledge_content("k1", None).await?;
//! assert_eq!(found.map(|k| k.name), Some("handbook.pdf".to_owned()));
//! # Ok(()) }
//! ```
//!
//! # Schedules
//!
//! A poller claims due schedules of any owner; two pollers never get the same one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::Schedule;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let mut nightly = Schedule::new("sch1", "nightly", "/agents/my-agent/runs", "0 3 * * *");
//! nightly.next_run_at = Some(0); // due now
//! db.schedules()?.create_schedule(nightly).await?;
//! let claimed = db.schedules()?.claim_due_schedule("poller-1", 60).await?;
//! assert_eq!(claimed.map(|s| s.id), Some("sch1".to_owned()));
//! # Ok(()) }
//! ```
//!
//! # Learnings
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{EntityKey, EntityMemories, LearningQuery};
//! use serde_json::json;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let learnings = db.learnings()?;
//! let sarah = EntityKey {
//!     namespace: "user",
//!     user_id: Some("alice"),
//!     entity_type: "person",
//!     entity_id: "sarah_chen",
//! };
//! EntityMemories::new(learnings)
//!     .upsert(sarah, json!({"name": "Sarah Chen", "role": "CTO"}))
//!     .await?;
//! let alices = LearningQuery { user_id: Some("alice".into()), ..Default::default() };
//! let found = learnings.search_learnings("sarah chen", alices).await?;
//! assert_eq!(found.total, 1);
//! # Ok(()) }
//! ```
//!
//! # Jobs
//!
//! A durable queue with leases and fencing; `agno-storage-worker` runs it for you.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::{Job, JobStatus};
//! use serde_json::json;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let jobs = db.jobs()?;
//! jobs.enqueue_job(Job::new("j1", "agent", "my-agent", "s1", json!({})), 0).await?;
//! let job = jobs.claim_job("worker-1", 30, None).await?.expect("a queued job");
//! let done = jobs
//!     .complete_job(&job.id, "worker-1", job.attempt, JobStatus::Completed, None)
//!     .await?;
//! assert_eq!(done.status, JobStatus::Completed);
//! # Ok(()) }
//! ```
//!
//! # Schema versions and migrations
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> agno_storage_core::Result<()> {
//! use agno_storage_core::MigrationManager;
//!
//! let db = agno_storage_doc::InMemoryDb::new().agno_db();
//! let target = db.migrations()?;
//! let report = MigrationManager::new(target)
//!     .up()
//!     .await
//!     .map_err(|failure| failure.error)?;
//! println!("{report:?}");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub use async_trait::async_trait;

mod capabilities;
mod db;
mod error;
pub mod eval;
pub mod guard;
pub mod job;
pub mod json;
pub mod knowledge;
pub mod learning;
#[cfg(feature = "lease")]
pub mod lease;
pub mod legacy;
pub mod metrics;
pub mod migration;
mod open_mode;
mod pagination;
mod rules;
pub mod run;
pub mod run_events;
mod run_json;
mod run_view;
pub mod schedule;
pub mod session;
mod tables;
pub mod user_data;
pub mod user_memory;

pub use capabilities::Capabilities;
pub use db::{AgnoDb, AgnoDbBuilder, AllStores};
pub use error::{Error, ErrorKind, Result};
pub use eval::{EvalFilterType, EvalQuery, EvalRun, EvalStore, EvalType};
pub use job::{
    ContinueOutcome, Continued, EnqueueOutcome, EnqueueRejection, Job, JobCompletion, JobQuery,
    JobStatus, JobStore, JobWakeups, QueueStats,
};
pub use knowledge::{KnowledgeContent, KnowledgeQuery, KnowledgeStore};
pub use learning::{
    EntityKey, EntityMemories, Learning, LearningQuery, LearningStore, LearningUserStats,
};
pub use legacy::LegacyRunsStore;
pub use metrics::{MetricsPage, MetricsQuery, MetricsRecord, MetricsStore};
pub use migration::{
    MigrationManager, MigrationTarget, SchemaVersion, SchemaVersionStore, TableType,
};
pub use open_mode::OpenMode;
pub use pagination::{compare_json, sort_records, Page, Pagination, Sort, SortOrder, Unreadable};
pub(crate) use rules::same;
pub use rules::{
    now_epoch_seconds, owned_by_another_user, owner_or_shared, validate_sort, visible_to,
    writable_by,
};
pub use run::{RunQuery, RunRecord, RunStore, RunType, ACTIVE_RUN_STATUSES};
pub use run_json::RunJson;
pub use run_view::{
    Content, FunctionCallView, MessageView, MetricsView, RunView, SharedRunView, ToolCallView,
};
pub use schedule::{Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
pub use session::{Session, SessionQuery, SessionRead, SessionStore, SessionType};
pub use tables::{Table, TableNames};
pub use user_data::{erase_user, export_user, DomainCounts, UserDomain, UserRecord};
pub use user_memory::{MemoryQuery, MemoryStats, MemoryStore, UserMemory};
