//! The conformance suite against the in-memory reference store.

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result, Session};
use agno_storage_doc::InMemoryDb;
use conformance_tests::{async_trait, Harness, LegacyDb, LegacyWriter};
use serde_json::Value;

struct Memory;

struct Writer(InMemoryDb);

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        self.0.insert_legacy_session(session, runs_blob).await
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
