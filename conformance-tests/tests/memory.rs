//! The conformance suite against the in-memory store (the document engine over documents in
//! process memory).

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{json, AgnoDb, Capabilities, Error, Result, Session};
use agno_storage_doc::{DocBackend, InMemoryDb, Pre, Table};
use conformance_tests::{async_trait, Harness, LegacyDb, LegacyWriter, RawRunWriter, RawRunsDb};
use serde_json::{json, Value};

struct Memory;

struct Writer(InMemoryDb);

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        self.0.insert_legacy_session(session, runs_blob).await
    }
}

#[async_trait]
impl RawRunWriter for Writer {
    /// Nests the run's `run_data` one level deeper than `json::MAX_DEPTH`.
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        let runs = self.0.collection(Table::Runs);
        let mut stored = self
            .0
            .get(runs, run_id)
            .await?
            .ok_or_else(|| Error::not_found(format!("run {run_id} is not stored")))?;
        let mut data = json!({ "content": format!("output of {run_id}") });
        for _ in 0..json::MAX_DEPTH {
            data = json!({ "nested": data });
        }
        stored.fields.insert("run_data".into(), data);
        let write = self.0.put(runs, run_id, &stored.fields, Pre::Any);
        self.0.commit_all("make undecodable", vec![write]).await
    }
}

#[async_trait]
impl Harness for Memory {
    fn name(&self) -> &str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: false,
            ..Capabilities::all()
        }
    }

    async fn open(&self, _case: &str) -> Result<AgnoDb> {
        Ok(InMemoryDb::new().agno_db())
    }

    async fn open_with_raw_runs(&self, _case: &str) -> Result<RawRunsDb> {
        let db = InMemoryDb::new();
        Ok(RawRunsDb {
            db: db.agno_db(),
            writer: Arc::new(Writer(db)),
        })
    }

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_legacy(&self, _case: &str) -> Result<LegacyDb> {
        let db = InMemoryDb::new_legacy();
        Ok(LegacyDb {
            db: db.agno_db(),
            writer: Arc::new(Writer(db)),
        })
    }
}

fn main() -> ExitCode {
    conformance_tests::main(Memory)
}
