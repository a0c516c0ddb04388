//! Learnings (`agno_learnings`): identity fields never change after the first write.

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, Learning,
    LearningQuery, LearningStore, Page, Result,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, is_duplicate_key, scope, to_bson, to_doc, writable_filter};
use crate::MongoDb;

#[async_trait]
impl LearningStore for MongoDb {
    async fn upsert_learning(&self, mut learning: Learning) -> Result<Learning> {
        let coll = self.coll(&self.inner.names.learnings);
        let now = now_epoch_seconds();
        let metadata = learning
            .metadata
            .as_ref()
            .map_or(Ok(Bson::Null), |m| to_bson(m, "metadata"))?;
        let content = to_bson(&learning.content, "learning content")?;
        for _ in 0..3 {
            let mut filter = doc! {"learning_id": &learning.learning_id};
            filter.extend(writable_filter(learning.user_id.as_deref()));
            let updated = coll
                .find_one_and_update(
                    filter,
                    doc! {"$set": {"content": content.clone(), "metadata": metadata.clone(), "updated_at": now}},
                )
                .return_document(ReturnDocument::After)
                .await
                .map_err(db_err("upsert learning"))?;
            if let Some(d) = updated {
                return from_doc(d, "a learning");
            }
            if coll
                .find_one(doc! {"learning_id": &learning.learning_id})
                .await
                .map_err(db_err("upsert learning"))?
                .is_some()
            {
                return Err(owned_by_another_user("learning", &learning.learning_id));
            }
            learning.updated_at = learning.updated_at.or(Some(now));
            match coll.insert_one(to_doc(&learning, "a learning")?).await {
                Ok(_) => return Ok(learning),
                Err(e) if is_duplicate_key(&e) => continue,
                Err(e) => return Err(db_err("upsert learning")(e)),
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "learning {} kept changing under concurrent writers; retry",
                learning.learning_id
            ),
        ))
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        let mut filter = doc! {"learning_id": learning_id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.learnings)
            .find_one(filter)
            .await
            .map_err(db_err("get learning"))?
            .map(|d| from_doc(d, "a learning"))
            .transpose()
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.effective_sort(), Learning::SORTABLE)?;
        let mut filter = Document::new();
        match (&query.user_id, query.include_global) {
            (None, _) => {}
            (Some(u), true) => {
                filter.insert("user_id", doc! {"$in": [Bson::Null, u]});
            }
            (Some(u), false) => {
                filter.insert("user_id", u);
            }
        }
        for (key, value) in [
            ("learning_type", &query.learning_type),
            ("agent_id", &query.agent_id),
            ("team_id", &query.team_id),
            ("session_id", &query.session_id),
            ("namespace", &query.namespace),
            ("entity_id", &query.entity_id),
            ("entity_type", &query.entity_type),
        ] {
            if let Some(v) = value {
                filter.insert(key, v);
            }
        }
        let rows = self
            .coll(&self.inner.names.learnings)
            .find(filter)
            .await
            .map_err(db_err("list learnings"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("list learnings"))?
            .into_iter()
            .map(|d| from_doc(d, "a learning"))
            .collect::<Result<Vec<Learning>>>()?;
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut filter = doc! {"learning_id": learning_id};
        scope(&mut filter, user_id);
        Ok(self
            .coll(&self.inner.names.learnings)
            .delete_one(filter)
            .await
            .map_err(db_err("delete learning"))?
            .deleted_count
            > 0)
    }
}
