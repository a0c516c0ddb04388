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
pub mod run;
mod run_json;
pub mod schedule;
pub mod session;
mod tables;
pub mod user_memory;

pub use capabilities::Capabilities;
pub use db::{AgnoDb, AgnoDbBuilder};
pub use error::{Error, ErrorKind, Result};
pub use eval::{EvalFilterType, EvalQuery, EvalRun, EvalStore, EvalType};
pub use job::{EnqueueOutcome, EnqueueRejection, Job, JobQuery, JobStatus, JobStore};
pub use knowledge::{KnowledgeContent, KnowledgeQuery, KnowledgeStore};
pub use learning::{Learning, LearningQuery, LearningStore};
pub use legacy::LegacyRunsStore;
pub use metrics::{MetricsPage, MetricsQuery, MetricsRecord, MetricsStore};
pub use migration::{
    MigrationManager, MigrationTarget, SchemaVersion, SchemaVersionStore, TableType,
};
pub use open_mode::OpenMode;
pub use pagination::{compare_json, sort_records, Page, Pagination, Sort, SortOrder, Unreadable};
pub use run::{RunQuery, RunRecord, RunStore, RunType};
pub use run_json::RunJson;
pub use schedule::{Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
pub use session::{Session, SessionQuery, SessionRead, SessionStore, SessionType};
pub use tables::{Table, TableNames};
pub use user_memory::{MemoryQuery, MemoryStats, MemoryStore, UserMemory};

/// Now, in epoch seconds (the unit of every stored timestamp except schema stamps).
pub fn now_epoch_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Checks a `sort_by` column against a record's sortable columns.
pub fn validate_sort(sort: &Sort, allowed: &[&str]) -> Result<()> {
    match &sort.sort_by {
        Some(column) if !allowed.contains(&column.as_str()) => Err(Error::invalid_input(format!(
            "cannot sort by {column:?}: sortable columns are {}",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

/// Whether a row owned by `row_owner` is visible to `caller`: everything is visible to an
/// unscoped caller (`None`); a user sees only their own rows (strict equality).
pub fn visible_to(row_owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || row_owner == caller
}

/// Whether a row owned by `row_owner` is readable by `caller` where unowned rows are shared:
/// everything for an unscoped caller (`None`), else the caller's own and unowned rows.
pub fn owner_or_shared(row_owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || row_owner.is_none() || row_owner == caller
}

/// Whether a row's `have` passes an optional equality filter `want` (any when `None`).
pub(crate) fn same(want: &Option<String>, have: &Option<String>) -> bool {
    want.is_none() || want == have
}

/// Whether `writer` may overwrite a row owned by `row_owner` (agno's owner guard): the row is
/// unowned, or owned by the writer.
pub fn writable_by(row_owner: Option<&str>, writer: Option<&str>) -> bool {
    row_owner.is_none() || row_owner == writer
}

/// `PermissionDenied` for a write onto another user's row.
pub fn owned_by_another_user(what: &str, id: &str) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!("{what} {id} belongs to another user; nothing was written. Use a new id, or write as its owner."),
    )
}
