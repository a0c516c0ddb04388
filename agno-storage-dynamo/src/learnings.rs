//! Learnings (`agno_learnings`; agno's `DynamoDb` has no learning store, the item shape is
//! agno's Mongo document in DynamoDB encoding).

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Learning,
    LearningQuery, LearningStore, Page, Result,
};

use crate::codec::{record, record_item, sv, Item};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

fn decode(item: &Item) -> Result<Learning> {
    record(item, &["content", "metadata"], "a learning")
}

#[async_trait]
impl LearningStore for DynamoDb {
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
        for _ in 0..MAX_ATTEMPTS {
            let now = now_epoch_seconds();
            let old = self.get(Table::Learnings, &learning.learning_id).await?;
            let next = match &old {
                Some(item) => {
                    let mut stored = decode(item)?;
                    if !writable_by(stored.user_id.as_deref(), learning.user_id.as_deref()) {
                        return Err(owned_by_another_user("learning", &learning.learning_id));
                    }
                    stored.content = learning.content.clone();
                    stored.metadata = learning.metadata.clone();
                    stored.updated_at = Some(now);
                    stored
                }
                None => {
                    let mut fresh = learning.clone();
                    fresh.updated_at = fresh.updated_at.or(Some(now));
                    fresh
                }
            };
            let item = record_item(&next, "a learning")?;
            if self.cas(Table::Learnings, old.as_ref(), item).await? {
                return Ok(next);
            }
        }
        Err(contention("upsert_learning"))
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        match self.get(Table::Learnings, learning_id).await? {
            Some(item) => {
                let l = decode(&item)?;
                Ok(visible_to(l.user_id.as_deref(), user_id).then_some(l))
            }
            None => Ok(None),
        }
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        let mut rows = Vec::new();
        for item in self.scan(Table::Learnings).await? {
            let l = decode(&item)?;
            if query.matches(&l) {
                rows.push(l);
            }
        }
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
        self.delete(Table::Learnings, learning_id, cond).await
    }
}
