//! The plumbing agno-storage's own tests and benches share, kept out of the published
//! `conformance-tests` suite: where a test finds its server ([`servers`]), the crash-trial
//! driver ([`crash`]), the interop driver over agno's Python package ([`interop`]), the
//! append workload of the benches ([`bench`]) and a document backend on the engine's default
//! paths ([`default_paths`]). Not published.
#![deny(missing_docs)]

/// The README's examples, compiled (and run, but for `no_run` ones) by `cargo test`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

pub mod bench;
pub mod crash;
pub mod default_paths;
pub mod interop;
/// Server URLs from `AGNO_TEST_<BACKEND>_URL`, or containers (feature `containers`).
pub mod servers;
