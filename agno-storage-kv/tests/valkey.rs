//! The conformance suite against Valkey, one fresh key prefix per case.
//!
//! The server comes from `AGNO_TEST_VALKEY_URL`. Without it the suite is skipped with a
//! note, except under `CI=true`, where a missing or unreachable server fails the run.

mod common;

fn main() -> std::process::ExitCode {
    // The native paths (sorted-set pages, due sets, per-owner counts, the server clock),
    // then the engine's defaults on the same layout: both pass.
    common::run_suites(
        &[("valkey", false), ("valkey-default-paths", true)],
        agno_storage_testkit::servers::Backend::Valkey,
    )
}
