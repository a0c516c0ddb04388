//! Learnings (`agno_learnings`, document id = [`DocBackend::doc_id`] of `learning_id`).
//! agno's `FirestoreDb` and `SurrealDb` raise `NotImplementedError` for learnings; the layout
//! follows agno's `MongoDb`.

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Learning,
    LearningQuery, LearningStore, Page, Result,
};

use crate::{backoff, opt, Commit, DocBackend, Docs, Pre, Table, CAS_ATTEMPTS};
use serde_json::Value;

#[async_trait]
impl<B: DocBackend> LearningStore for Docs<B> {
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
        let coll = self.collection(Table::Learnings);
        let id = self.doc_id(&learning.learning_id);
        for attempt in 0..CAS_ATTEMPTS {
            let now = now_epoch_seconds();
            let (next, pre) = match self.get(coll, &id).await? {
                Some(stored) => {
                    let mut current: Learning = stored.decode("a learning")?;
                    if !writable_by(current.user_id.as_deref(), learning.user_id.as_deref()) {
                        return Err(owned_by_another_user("learning", &learning.learning_id));
                    }
                    current.content = learning.content.clone();
                    current.metadata = learning.metadata.clone();
                    current.updated_at = Some(now);
                    (current, stored.unchanged())
                }
                None => {
                    let mut new = learning.clone();
                    new.updated_at = new.updated_at.or(Some(now));
                    (new, Pre::Absent)
                }
            };
            let write = self.put(coll, &id, &self.to_fields(&next, "a learning")?, pre);
            match self.commit("upsert learning", vec![write]).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert learning"))
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        Ok(self
            .keyed(
                Table::Learnings,
                learning_id,
                "a learning",
                |l: &Learning| &l.learning_id,
            )
            .await?
            .map(|(_, l)| l)
            .filter(|l| visible_to(l.user_id.as_deref(), user_id)))
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        // A user's own learnings, and the global ones (no owner) when asked for.
        let owners = match (&query.user_id, query.include_global) {
            (None, _) => vec![Vec::new()],
            (Some(u), false) => vec![vec![("user_id", opt(Some(u)))]],
            (Some(u), true) => vec![
                vec![("user_id", opt(Some(u)))],
                vec![("user_id", Value::Null)],
            ],
        };
        let mut rows = Vec::new();
        for eq in owners {
            for d in self.query(self.collection(Table::Learnings), &eq).await? {
                let l: Learning = d.decode("a learning")?;
                if query.matches(&l) {
                    rows.push(l);
                }
            }
        }
        rows.sort_by(|a, b| a.learning_id.cmp(&b.learning_id));
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.delete_visible(
            Table::Learnings,
            "learning_id",
            learning_id,
            user_id,
            "delete learning",
        )
        .await
    }
}
