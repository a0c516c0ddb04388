//! JSON-file storage for agno-storage: a local directory, memory, Google Cloud Storage and
//! Amazon S3, all through `object_store`.
//!
//! The files are agno 3.1.10's: one JSON array per table (`agno_sessions.json`,
//! `agno_runs.json`, `agno_memories.json`, `agno_metrics.json`, `agno_eval_runs.json`,
//! `agno_knowledge.json`, `agno_schema_versions.json`) laid out as agno's `JsonDb` (a local
//! directory) and `GcsJsonDb` (a bucket and prefix, default `agno/`) write them, so a Rust
//! service and a Python agent can share one set of files. Schedules, schedule runs,
//! learnings and jobs, which agno's JSON stores lack, live in `agno_schedules.json`,
//! `agno_schedule_runs.json`, `agno_learnings.json` and `agno_jobs.json`.
//!
//! ```no_run
//! # #[cfg(feature = "fs")]
//! # async fn demo() -> agno_storage_core::Result<()> {
//! use agno_storage_json::JsonDb;
//! let db = JsonDb::open_local("agno_json_db").await?.agno_db();
//! # Ok(()) }
//! ```
//!
//! Fixes over agno kept on its format:
//!
//! - **No lost updates.** agno rewrites whole files without locking, so concurrent writers
//!   lose each other's changes. Here every write is a read-modify-write that cannot lose a
//!   concurrent one: conditional puts on the version read (GCS generation, S3 ETag,
//!   `PutMode::Create`/`Update`) with retry, and on a local directory an exclusive lock file
//!   per table (`.agno_sessions.json.lock`, held across processes) with an atomic rename.
//!   Writers that bypass this (agno itself) are not covered.
//! - **Memory timestamps round-trip.** agno writes a memory's `created_at` as the host's
//!   local time without an offset and reads it back as UTC, shifting it by the host's UTC
//!   offset; this crate writes the same ISO shape in UTC. (A timestamp agno wrote on a
//!   non-UTC host is read as agno reads it: as UTC.)
//! - Atomic `run_index` per session, owner guards on every upsert, scoped deletes, atomic
//!   schedule and job claims, and stamps written only after a table's migration succeeded.
//!
//! The stores are the document engine's (`agno-storage-doc`) over this crate's backend, a
//! row per document. One operation changes one file atomically; an operation touching two
//! files (deleting a session and its runs) writes them one after the other, as agno does. Reads take no lock:
//! a file is always replaced whole. Every operation reads the whole table, as agno does, so
//! its cost grows with the table. Keys of agno's rows this crate does not model (a legacy
//! `runs` blob, `workflow_name`, fields of newer releases) are kept on every rewrite.
//! Migrations hold `.agno_migrations.lock` on a directory; on object stores concurrent
//! migrations are safe without a lock (the copy never overwrites a stored run).
//!
//! **Durability.** A write is acknowledged only once it is durable as far as the store
//! promises. On a local directory the new file is `fsync`ed, renamed into place and its
//! directory `fsync`ed before the call returns (object_store's `LocalFileSystem::with_fsync`),
//! so an acknowledged write survives a power cut where the file system and disk honour
//! `fsync` (Unix; on Windows a directory cannot be synced). `set_local_fsync(false)` trades
//! that for speed (see `BENCHMARKS.md` for the cost). On GCS and S3 a put returns success
//! only after the service has stored the whole object redundantly (GCS across zones, S3
//! Standard across at least three availability zones), and both give strong
//! read-after-write consistency: any later read, from anywhere, sees the acknowledged
//! version, and a conditional put is checked against it. An S3-compatible server gives
//! whatever it implements. The in-memory store keeps nothing past the process.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `fs`: JSON files in a local directory (`JsonDb::open_local`).
//! - `memory`: JSON documents held in memory, for tests and demos (`JsonDb::in_memory`).
//! - `gcs`: JSON files in a Google Cloud Storage bucket (`JsonDb::open_gcs`).
//! - `s3`: JSON files in an Amazon S3 or S3-compatible bucket (`JsonDb::open_s3`).
//! - `full`: all of the above.
#![deny(missing_docs)]
#![cfg(any(feature = "fs", feature = "memory", feature = "gcs", feature = "s3"))]

mod backend;
mod db;
mod files;
mod migrate;
mod rows;
mod runs;

pub use db::JsonDb;
/// The `object_store` release this crate is built on, for building stores to pass to
/// [`JsonDb::open_store`].
pub use object_store;

#[cfg(feature = "fs")]
mod lockfile;

/// Whether local directories opened after this call (`JsonDb::open_local`) `fsync` every
/// write before acknowledging it; on by default. Turning it off makes writes faster and
/// leaves an acknowledged write safe from a crash of the process (files are still replaced
/// by an atomic rename) but not from a power cut or a kernel crash, which can leave the
/// previous file, or on some file systems an empty one. agno's own `JsonDb` never syncs.
/// Process-wide; meant for tests, benchmarks and scratch directories.
#[cfg(feature = "fs")]
pub fn set_local_fsync(enabled: bool) {
    files::set_local_fsync(enabled);
}
