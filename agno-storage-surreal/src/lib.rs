//! SurrealDB storage for agno-storage, byte-compatible with agno 3.1.10's `SurrealDb`.
//!
//! [`SurrealDb`] implements every store trait of `agno-storage-core` over the tables agno's
//! Python `SurrealDb` uses (`agno_sessions`, `agno_runs`, `agno_memories`, …): record ids
//! `agno_sessions:⟨session_id⟩`, `agno_runs:⟨run_id⟩`, `agno_metrics:⟨date|user⟩`, agent,
//! team, workflow and user ids stored as record links, timestamps as `datetime`, and the
//! `agno_schema_versions:⟨table⟩` stamps, so a Rust service and a Python agent can share
//! one database.
//!
//! One type serves every engine: `surrealdb::Surreal<Any>`, opened on `mem://`,
//! `surrealkv://PATH` or `ws://HOST:PORT`.
//!
//! Every read-modify-write is one SurrealQL transaction that re-reads the record and
//! `THROW`s unless it is the version the caller read; a lost race is retried. `run_index`
//! comes from a per-session counter record bumped by one atomic `UPDATE` (O(1) per append);
//! schedule names are unique per owner through a unique index over a digest of
//! `(user_id, name)`; job idempotency keys are guard records created in the job's
//! transaction; a job claim is a compare-and-set that takes a new fencing token. Unlike agno, `delete_sessions`
//! deletes only the runs of the sessions it deleted, and the v3.0.0 migration never
//! overwrites a newer run and never stamps after a failed copy.
//!
//! The migration lock is a lease: a record `migration_lock` in the meta table
//! (`agno_storage_meta`) carrying its holder's token and `lease_until`, renewed every
//! lease/3 by a heartbeat task. A migration whose process died blocks the next one only
//! until its lease passes ([`SurrealOptions::migration_lock_lease`], default 30 s); then the
//! lock is taken over by compare-and-set. A holder that finds its lock taken over stops
//! renewing and its `release` reports `Conflict`. A lock record written by a version without
//! heartbeats (only `locked_at`) is still broken after 15 minutes, as that version did.
//!
//! The store logic is `agno-storage-doc`'s, shared with the Firestore adapter; this crate is
//! its `DocBackend`: the SurrealQL transactions, agno's record encoding, the run-index
//! counter, session deletes and the paged job claim.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `kv-mem`: the embedded in-memory engine (`mem://`).
//! - `surrealkv`: the embedded file engine, SurrealKV (`surrealkv://`).
//! - `remote`: a SurrealDB 3.x server over WebSocket (`ws://`).
//! - `full`: all of the above.
#![deny(missing_docs)]
#![cfg(any(feature = "kv-mem", feature = "surrealkv", feature = "remote"))]

mod db;
mod doc;
mod jobs;
mod legacy;
mod runs;

pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
pub use agno_storage_core::TableNames;
pub use db::{LinkTables, SurrealDb, SurrealOptions};
pub use surrealdb;
