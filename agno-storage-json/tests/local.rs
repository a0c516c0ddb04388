//! The conformance suite against a local directory, one fresh directory per case.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result};
use agno_storage_json::JsonDb;
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb, RawRunWriter, RawRunsDb};

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

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_with_raw_runs(&self, case: &str) -> Result<RawRunsDb> {
        let dir = common::scratch_dir(case);
        let db = JsonDb::open_local(&dir).await?.agno_db();
        Ok(RawRunsDb {
            db,
            writer: Arc::new(RawRuns(dir)),
        })
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

/// Rewrites the runs file of one directory past the adapter.
struct RawRuns(std::path::PathBuf);

#[async_trait]
impl RawRunWriter for RawRuns {
    /// A lone surrogate escape in the run's row, as agno's `JsonDb` writes one.
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        let path = self.0.join("agno_runs.json");
        let io = |e: std::io::Error| agno_storage_core::Error::invalid_input(e.to_string());
        let text = std::fs::read_to_string(&path).map_err(io)?;
        let content = format!("\"content\": \"output of {run_id}\"");
        let broken = format!("\"content\": \"caf\\udce9 {run_id}\"");
        std::fs::write(&path, text.replace(&content, &broken)).map_err(io)
    }
}

fn main() -> ExitCode {
    conformance_tests::main(Local)
}
