//! Deleting a session, Firestore's way (the rest of the sessions store is
//! `agno-storage-doc`'s): the session, its run-index counter and its runs, in commits of up
//! to 400 writes.

use agno_storage_core::Result;
use agno_storage_doc::{opt, DocBackend, Docs, Table};

use crate::doc::Pre;
use crate::FirestoreDb;

impl FirestoreDb {
    /// [`DocBackend::delete_session`].
    pub(crate) async fn delete_session_and_runs(
        &self,
        session_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        let docs = Docs::of(self);
        let Some(stored) = docs.deletable_session(session_id, user_id).await? else {
            return Ok(false);
        };
        let runs = self.collection(Table::Runs);
        let mut writes = docs.session_deletes(session_id, &stored, Pre::Any);
        for run in self
            .query(runs, &[("session_id", opt(Some(session_id)))])
            .await?
        {
            writes.push(self.delete(runs, &run.id, Pre::Any));
        }
        self.commit_all("delete sessions", writes).await?;
        Ok(true)
    }
}
