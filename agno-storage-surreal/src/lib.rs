//! SurrealDB storage for agno-storage.
//!
//! This crate will hold the SurrealDB backend, byte-compatible with the tables that
//! Agno's Python `SurrealDb` writes, so that a Rust service and a Python agent can
//! share one database. It stores sessions, runs, memories, metrics, evals, knowledge,
//! schedules, schedule runs, learnings, jobs and schema versions.
//!
//! The backend implements the per-domain store traits of `agno-storage-core` and proves
//! its behaviour by running the shared `conformance-tests` suite against it.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `kv-mem`: the embedded in-memory engine (`mem://`).
//! - `surrealkv`: the embedded file engine, SurrealKV (`surrealkv://`).
//! - `remote`: a SurrealDB server over WebSocket (`ws://`).
//! - `full`: all of the above.
#![deny(missing_docs)]
