//! Amazon DynamoDB storage for agno-storage.
//!
//! This crate will hold the DynamoDB backend, byte-compatible with the tables that
//! Agno's Python `DynamoDb` writes, so that a Rust service and a Python agent can share
//! one set of tables. It stores sessions, runs, memories, metrics, evals, knowledge,
//! schedules, schedule runs, learnings, jobs and schema versions.
//!
//! The backend implements the per-domain store traits of `agno-storage-core` and proves
//! its behaviour by running the shared `conformance-tests` suite against it.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `dynamodb`: the AWS SDK for Rust (`aws-sdk-dynamodb`), with `aws-config` for
//!   credentials and region, on tokio with the SDK's default HTTPS client.
//! - `full`: all of the above.
#![deny(missing_docs)]
