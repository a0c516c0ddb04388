//! The conformance suite against Redis, one fresh key prefix per case.
//!
//! The server comes from `AGNO_TEST_REDIS_URL`. Without it the suite is skipped with a
//! note, except under `CI=true`, where a missing or unreachable server fails the run.

mod common;

fn main() -> std::process::ExitCode {
    common::run_suite("redis", agno_storage_testkit::servers::Backend::Redis)
}
