//! Google Cloud Firestore storage for agno-storage, byte-compatible with agno 3.1.10's
//! `FirestoreDb`.
//!
//! [`FirestoreDb`] implements every store trait of `agno-storage-core` over the collections
//! agno's Python `FirestoreDb` uses (`agno_sessions`, `agno_runs`, `agno_memories`, …) with
//! native Firestore maps and arrays, run documents keyed by `run_id`, agno's metrics document
//! ids and the `agno_schema_versions` documents keyed by table name, so a Rust service and a
//! Python agent can share one database.
//!
//! Unlike agno it keeps no duplicates and no ghosts: sessions, memories, knowledge and eval
//! runs get deterministic document ids (agno's auto ids let two concurrent creates make two
//! documents), and deleting a run scrubs it from the right session's legacy `runs` field.
//!
//! Every read-modify-write is a compare-and-set: one atomic commit whose writes carry
//! `update_time` / `exists` preconditions, retried on a lost race. Uniqueness (schedule
//! names per owner, job idempotency keys) is a guard document created in the same commit as
//! the record; `run_index` comes from server-side `maximum` + `increment` transforms on a
//! per-session counter. No query needs a composite index: filters are equalities served by
//! single-field indexes, ordering happens in the client. `firestore.indexes.json` in this
//! crate declares the composite indexes agno itself creates, for projects that run both.
//!
//! The store logic is `agno-storage-doc`'s, shared with the SurrealDB adapter; this crate is
//! its `DocBackend`: the gRPC calls, the value encoding, document ids, metrics ids, the
//! run-index counter and session deletes.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `firestore`: the `firestore` crate (gRPC over rustls with webpki roots, Google
//!   application default credentials, `FIRESTORE_EMULATOR_HOST`).
//! - `full`: all of the above.
#![deny(missing_docs)]
#![cfg(feature = "firestore")]

mod db;
mod doc;
mod legacy;
mod runs;
mod sessions;

pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
pub use agno_storage_core::TableNames;
#[allow(deprecated)]
pub use db::CollectionNames;
pub use db::{FirestoreDb, FirestoreOptions};
pub use firestore;
