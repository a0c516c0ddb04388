//! Pre-v3 sessions, as agno 2.x wrote them.

use agno_storage_core::{Result, Session};
use agno_storage_doc::Docs;

use crate::FirestoreDb;

impl FirestoreDb {
    /// Writes a session as agno 2.x stored it: the whole session under an auto-style
    /// document id, its runs in a `runs` field (a native array, or a string when the blob
    /// is one), no stamps. For imports and migration tests.
    pub async fn insert_legacy_session(
        &self,
        session: Session,
        runs_blob: serde_json::Value,
    ) -> Result<()> {
        let auto_id: String = uuid::Uuid::new_v4().simple().to_string()[..20].to_owned();
        Docs::of(self)
            .write_legacy_session(&auto_id, session, runs_blob)
            .await
    }
}
