//! The plumbing agno-storage's own tests and benches share, kept out of the published
//! `conformance-tests` suite: where a test finds its server ([`servers`]), the crash-trial
//! driver ([`crash`]), the interop driver over agno's Python package ([`interop`]) and the
//! append workload of the benches ([`bench`]). Not published.
#![deny(missing_docs)]

pub mod bench;
pub mod crash;
pub mod interop;
/// Server URLs from `AGNO_TEST_<BACKEND>_URL`, or containers (feature `containers`).
pub mod servers;
