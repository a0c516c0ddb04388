//! JSON-file storage for agno-storage: a local directory, memory, Google Cloud Storage
//! and Amazon S3.
//!
//! This crate will hold the JSON-document backends, byte-compatible with the files that
//! Agno's Python `JsonDb` (local directory) and `GcsJsonDb` (GCS bucket) write, so that
//! a Rust service and a Python agent can share one set of files. They store sessions,
//! runs, memories, metrics, evals, knowledge, schedules, schedule runs, learnings, jobs
//! and schema versions, all through `object_store`.
//!
//! The backends implement the per-domain store traits of `agno-storage-core` and prove
//! their behaviour by running the shared `conformance-tests` suite against each of them.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `fs`: JSON files in a local directory.
//! - `memory`: JSON documents held in memory, for tests and demos.
//! - `gcs`: JSON files in a Google Cloud Storage bucket.
//! - `s3`: JSON files in an Amazon S3 or S3-compatible bucket.
//! - `full`: all of the above.
#![deny(missing_docs)]
