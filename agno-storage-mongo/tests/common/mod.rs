//! Shared by the conformance suite and the crash trial: agno 2.9.0's legacy session writer.

use agno_storage_core::{Error, ErrorKind, Result, Session};
use agno_storage_mongo::mongodb::bson::{self, Document};
use agno_storage_mongo::mongodb::Database;
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

/// A driver error as a storage error.
pub fn mongo_err(e: agno_storage_mongo::mongodb::error::Error) -> Error {
    Error::new(ErrorKind::Unavailable, e.to_string())
}

/// Writes sessions as agno 2.9.0's `MongoDb.upsert_session` did: the whole session dict,
/// runs included as a BSON array, no stamps.
pub struct Writer {
    pub db: Database,
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        // 2.9.0 on MongoDB stored BSON arrays, never encoded JSON; a string that is not
        // JSON stays a string: a corrupt blob.
        let runs = conformance_tests::native_runs_blob(runs_blob);
        let mut d: Document =
            bson::serialize_to_document(&s).map_err(|e| Error::invalid_input(e.to_string()))?;
        d.insert(
            "runs",
            bson::serialize_to_bson(&runs).map_err(|e| Error::invalid_input(e.to_string()))?,
        );
        self.db
            .collection::<Document>("agno_sessions")
            .insert_one(d)
            .await
            .map_err(mongo_err)?;
        Ok(())
    }
}
