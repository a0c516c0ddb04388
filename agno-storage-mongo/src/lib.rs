//! MongoDB storage for agno-storage.
//!
//! This crate will hold the MongoDB backend, byte-compatible with the collections that
//! Agno's Python `MongoDb` writes, so that a Rust service and a Python agent can share
//! one database. It stores sessions, runs, memories, metrics, evals, knowledge,
//! schedules, schedule runs, learnings, jobs and schema versions.
//!
//! The backend implements the per-domain store traits of `agno-storage-core` and proves
//! its behaviour by running the shared `conformance-tests` suite against it.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `mongodb`: the official async `mongodb` driver (tokio, rustls, `mongodb+srv://`
//!   seed lists, bson 3).
//! - `full`: all of the above.
#![deny(missing_docs)]
