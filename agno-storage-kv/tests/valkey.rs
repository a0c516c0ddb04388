//! The conformance suite against Valkey, one fresh key prefix per case.
//!
//! The server comes from `AGNO_TEST_VALKEY_URL`. Without it the suite is skipped with a
//! note, except under `CI=true`, where a missing or unreachable server fails the run.

mod common;

fn main() -> std::process::ExitCode {
    common::run_suite("valkey", agno_storage_testkit::servers::Backend::Valkey)
}
