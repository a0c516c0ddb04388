//! Pre-v3 sessions, as agno 2.x wrote them.

use agno_storage_core::{Result, Session};
use agno_storage_doc::Docs;

use crate::SurrealDb;

impl SurrealDb {
    /// Writes a session as agno 2.x stored it: record `agno_sessions:⟨session_id⟩`, its runs
    /// in a `runs` field (a native array, or a string when the blob is one), no stamps. For
    /// imports and migration tests.
    pub async fn insert_legacy_session(
        &self,
        session: Session,
        runs_blob: serde_json::Value,
    ) -> Result<()> {
        let id = session.session_id.clone();
        Docs::of(self)
            .write_legacy_session(&id, session, runs_blob)
            .await
    }
}
