//! Deleting a session, SurrealDB's way (the rest of the sessions store is
//! `agno-storage-doc`'s): one transaction that deletes the session as read, its run-index
//! counter and exactly its runs. Sessions are records `agno_sessions:⟨session_id⟩`, the
//! component id an `agent`/`team`/`workflow` record link and no `session_type` field.

use agno_storage_core::Result;
use agno_storage_doc::{DocBackend, Docs, Table};

use crate::doc::{backoff, Commit, CAS_ATTEMPTS};
use crate::SurrealDb;

impl SurrealDb {
    /// [`DocBackend::delete_session`].
    pub(crate) async fn delete_session_and_runs(
        &self,
        session_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        let docs = Docs::of(self);
        for attempt in 0..CAS_ATTEMPTS {
            let Some(stored) = docs.deletable_session(session_id, user_id).await? else {
                return Ok(false);
            };
            // One transaction: the session as read, its run counter (which every run write
            // touches, so a concurrent append conflicts) and exactly its runs.
            let mut writes = docs.session_deletes(session_id, &stored, stored.unchanged());
            writes.push(self.delete_where(self.collection(Table::Runs), "session_id", session_id));
            match self.commit("delete sessions", writes).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("delete sessions"))
    }
}
