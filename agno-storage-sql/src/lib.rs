//! SQL storage for agno-storage: SQLite, PostgreSQL and MySQL.
//!
//! This crate will hold the SQL backends, byte-compatible with the tables that Agno's
//! Python `SqliteDb`, `PostgresDb` and `MySQLDb` write, so that a Rust service and a
//! Python agent can share one database. They store sessions, runs, memories, metrics,
//! evals, knowledge, schedules, schedule runs, learnings, jobs and schema versions.
//!
//! The backends implement the per-domain store traits of `agno-storage-core` and prove
//! their behaviour by running the shared `conformance-tests` suite against each of them.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `sqlite`: SQLite through `rusqlite`, with SQLite itself compiled in (`bundled`).
//! - `postgres`: PostgreSQL through `sqlx` on the tokio runtime.
//! - `mysql`: MySQL through `sqlx` on the tokio runtime.
//! - `full`: all of the above.
#![deny(missing_docs)]
