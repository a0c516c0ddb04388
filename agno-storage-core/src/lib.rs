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
pub use schedule::{Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
pub use session::{Session, SessionQuery, SessionRead, SessionStore, SessionType};
pub use tables::{Table, TableNames};
pub use user_data::{erase_user, export_user, DomainCounts, UserDomain, UserRecord};
pub use user_memory::{MemoryQuery, MemoryStats, MemoryStore, UserMemory};
