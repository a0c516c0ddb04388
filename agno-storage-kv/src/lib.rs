//! Key-value storage for agno-storage: Redis and Valkey.
//!
//! This crate will hold the Redis and Valkey backends, byte-compatible with the keys
//! that Agno's Python `RedisDb` and `ValkeyDb` write, so that a Rust service and a
//! Python agent can share one server. They store sessions, runs, memories, metrics,
//! evals, knowledge, schedules, schedule runs, learnings, jobs and schema versions.
//!
//! The backends implement the per-domain store traits of `agno-storage-core` and prove
//! their behaviour by running the shared `conformance-tests` suite against each of them.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `redis`: Redis through the `redis` crate's tokio client (connection manager, Lua
//!   scripts).
//! - `valkey`: Valkey, which speaks the Redis protocol, through the same client.
//! - `full`: all of the above.
#![deny(missing_docs)]
