//! The conformance suite against a local directory, one fresh directory per case.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result};
use agno_storage_json::JsonDb;
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb};

struct Local;

#[async_trait]
impl Harness for Local {
    fn name(&self) -> &str {
        "json-local"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// Every claim rewrites the whole jobs file under a lock: 400 jobs keep the trial to
    /// about a minute (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 400,
            ..JobStress::default()
        }
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(JsonDb::open_local(common::scratch_dir(case))
            .await?
            .agno_db())
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let dir = common::scratch_dir(case);
        for table in common::LEGACY_TABLES {
            std::fs::write(dir.join(format!("{table}.json")), "[]")
                .expect("write an agno 2.9.0 table file");
        }
        let db = JsonDb::open_local(&dir).await?;
        Ok(LegacyDb {
            db: db.agno_db(),
            writer: Arc::new(common::Writer(db)),
        })
    }
}

fn main() -> ExitCode {
    conformance_tests::main(Local)
}
