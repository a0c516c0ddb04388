//! The conformance suite against S3 (moto's server, which `./scripts/test.sh` starts), one
//! fresh prefix per case, writes conditional on the ETag. Skipped with a note when
//! `AGNO_TEST_S3_URL` is unset, except under `CI=true`.

mod common;

use std::process::ExitCode;

fn main() -> ExitCode {
    match common::s3_store() {
        Some(store) => conformance_tests::main(common::bucket::Bucket::new("s3-json", store)),
        None => ExitCode::SUCCESS,
    }
}
