//! Amazon DynamoDB storage for agno-storage, byte-compatible with agno 3.1.10's `DynamoDb`.
//!
//! [`DynamoDb::agno_db`] serves every store of `agno-storage-core` over the tables agno's
//! Python `DynamoDb` uses (`agno_sessions`, `agno_runs`, `agno_memories`, `agno_metrics`,
//! `agno_eval_runs`, `agno_knowledge`, `agno_schema_versions`), with agno's key schema,
//! GSIs (provisioned 5/5, projection `ALL`) and attribute encoding (objects and arrays as
//! `S` JSON, bools as `BOOL`, `None` omitted), so a Rust service and a Python agent can
//! share one set of tables. Domains agno's `DynamoDb` lacks (schedules, schedule runs,
//! learnings, jobs) get tables of their own, plus `agno_storage_meta` for bookkeeping.
//! Tables are created on first use and described once per handle.
//!
//! Differences from agno, all keeping its format: `limit` without `page` is honoured;
//! `session_data` is replaced, not merged, so keys can be removed; eval `eval_input` and
//! knowledge `external_id` are stored; `delete_sessions(user_id=…)` deletes only the runs
//! of sessions it deleted; every scan and query follows `LastEvaluatedKey`
//! ([`DynamoOptions::page_size`] bounds each request).
//!
//! Reads scoped to one session (`get_session`'s runs, `get_runs(session_id)`, the delete
//! cascade) Query agno's `session_id-created_at-index`, as agno does, so they cost the
//! session's runs rather than the runs table. Like every GSI read they are eventually
//! consistent: on DynamoDB a run written a moment ago may not show yet.
//!
//! `DynamoDb` is a document backend of `agno-storage-doc` (items as documents, the item as
//! read as the compare-and-set version): every store is the engine's over it,
//! `agno_storage_doc::Docs<DynamoDb>`, with this crate's native paths as the engine's
//! hooks: the run-index counter, the legacy-run copy, the session delete cascade and the
//! paged read of agno 2.x's `runs` attributes.
//!
//! Every read-modify-write is a conditional write: a compare-and-set on the whole item
//! (owner guards, claims, releases, fenced job settlements), or `TransactWriteItems` with a
//! uniqueness item (schedule `(user_id, name)`, job idempotency keys). `run_index` comes
//! from a per-session counter item advanced by one atomic conditional update, seeded from
//! the session's stored runs only when it is missing, so an append costs the same whatever
//! the table holds.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `dynamodb`: the AWS SDK for Rust (`aws-sdk-dynamodb`), with `aws-config` for
//!   credentials and region, on tokio with the SDK's default HTTPS client.
//! - `full`: all of the above.
#![deny(missing_docs)]
#![cfg(feature = "dynamodb")]

mod codec;
mod db;
mod doc;
mod runs;

pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
pub use agno_storage_core::TableNames;
pub use aws_sdk_dynamodb;
pub use db::{DynamoDb, DynamoOptions, StaticCredentials};
