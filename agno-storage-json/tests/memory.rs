//! The conformance suite against JSON documents in memory (`object_store`'s `InMemory`,
//! conditional puts), one fresh store per case.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Error, ErrorKind, Result};
use agno_storage_json::object_store::memory::InMemory;
use agno_storage_json::object_store::path::Path;
use agno_storage_json::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use agno_storage_json::JsonDb;
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb};

struct Memory;

#[async_trait]
impl Harness for Memory {
    fn name(&self) -> &str {
        "json-memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: false,
            ..Capabilities::all()
        }
    }

    /// Every claim rewrites the whole jobs document (one object, compare-and-swap): 200
    /// jobs keep the trial short (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 200,
            ..JobStress::default()
        }
    }

    async fn open(&self, _case: &str) -> Result<AgnoDb> {
        Ok(JsonDb::in_memory().await?.agno_db())
    }

    async fn open_legacy(&self, _case: &str) -> Result<LegacyDb> {
        let store = Arc::new(InMemory::new());
        for table in common::LEGACY_TABLES {
            store
                .put(
                    &Path::from(format!("agno/{table}.json")),
                    PutPayload::from_static(b"[]"),
                )
                .await
                .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        }
        let store: Arc<dyn ObjectStore> = store;
        let db = JsonDb::open_store(store, "agno/", "json-memory", false).await?;
        Ok(LegacyDb {
            db: db.agno_db(),
            writer: Arc::new(common::Writer(db)),
        })
    }
}

fn main() -> ExitCode {
    conformance_tests::main(Memory)
}
