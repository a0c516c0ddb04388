//! MongoDB storage for agno-storage, byte-compatible with agno 3.1.10's `MongoDb`.
//!
//! [`MongoDb`] implements every store trait of `agno-storage-core` over the collections
//! agno's Python `MongoDb` uses (`agno_sessions`, `agno_runs`, `agno_memories`, …), with
//! the same document shapes, server-assigned `_id`s, index names and the
//! `agno_schema_versions` stamps, so a Rust service and a Python agent can share one
//! database. Runs are one document per run; session reads merge a pre-v3 `runs` field.
//!
//! Read-modify-writes are single-document atomic operations: owner guards are filters
//! (with the unique keys as backstop), schedule and job claims are `findOneAndUpdate`
//! compare-and-sets, a `run_index` the store assigns is claimed by the run's insert
//! (`_id: {session_id, run_index}`; see the `runs` module). It proves its
//! behaviour with the shared `conformance-tests` suite.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `mongodb`: the official async `mongodb` driver (tokio, rustls, `mongodb+srv://`
//!   seed lists, bson 3).
//! - `full`: all of the above.
#![deny(missing_docs)]

#[cfg(feature = "mongodb")]
mod db;
#[cfg(feature = "mongodb")]
mod doc;
#[cfg(feature = "mongodb")]
mod evals;
#[cfg(feature = "mongodb")]
mod jobs;
#[cfg(feature = "mongodb")]
mod knowledge;
#[cfg(feature = "mongodb")]
mod learnings;
#[cfg(feature = "mongodb")]
mod legacy;
#[cfg(feature = "mongodb")]
mod memories;
#[cfg(feature = "mongodb")]
mod metrics;
#[cfg(feature = "mongodb")]
mod migrate;
#[cfg(feature = "mongodb")]
mod runs;
#[cfg(feature = "mongodb")]
mod schedules;
#[cfg(feature = "mongodb")]
mod schema;
#[cfg(feature = "mongodb")]
mod sessions;

#[cfg(feature = "mongodb")]
pub use agno_storage_core::TableNames;
#[cfg(feature = "mongodb")]
#[allow(deprecated)]
pub use db::CollectionNames;
#[cfg(feature = "mongodb")]
pub use db::MongoDb;
#[cfg(feature = "mongodb")]
pub use migrate::{RepairScheduleIndexesStep, DEFAULT_MIGRATION_LOCK_LEASE};
#[cfg(feature = "mongodb")]
pub use mongodb;
