//! The conformance suite against GCS (fake-gcs-server behind the XML shim that
//! `./scripts/test.sh` starts), one fresh prefix per case. Skipped with a note when
//! `AGNO_TEST_GCS_SERVICE_ACCOUNT` is unset, except under `CI=true`.

mod common;

use std::process::ExitCode;

fn main() -> ExitCode {
    match common::gcs_store() {
        Some(store) => conformance_tests::main(common::bucket::Bucket::new("gcs-json", store)),
        None => ExitCode::SUCCESS,
    }
}
