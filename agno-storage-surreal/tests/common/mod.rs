//! Shared by the conformance suite and the crash trial: agno 2.9.0's legacy session writer.

use agno_storage_core::{Result, Session};
use agno_storage_surreal::SurrealDb;
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

/// Writes sessions as agno 2.9.0's `SurrealDb.upsert_session` did: record
/// `agno_sessions:⟨session_id⟩` holding the whole session, runs as a native array.
pub struct Writer {
    pub db: SurrealDb,
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        // 2.9.0 stored native arrays; a string that is not JSON stays a string: a corrupt blob.
        let runs = conformance_tests::native_runs_blob(runs_blob);
        self.db.insert_legacy_session(s, runs).await
    }
}
