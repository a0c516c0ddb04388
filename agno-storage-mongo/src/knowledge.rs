//! Knowledge contents (`agno_knowledge`): reads see the caller's and shared rows.

use agno_storage_core::{
    async_trait, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Page, Result,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, is_duplicate_key, scope, to_doc};
use crate::MongoDb;

/// Own rows plus unowned (null or missing `user_id`) ones, agno's `$or`.
fn owner_or_shared(filter: &mut Document, caller: Option<&str>) {
    if let Some(u) = caller {
        filter.insert("user_id", doc! {"$in": [Bson::Null, u]});
    }
}

#[async_trait]
impl KnowledgeStore for MongoDb {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        let full = to_doc(&content, "knowledge content")?;
        let (mut set, mut on_insert) = (Document::new(), Document::new());
        for (k, v) in full {
            if k == "id" {
                continue;
            }
            if v == Bson::Null {
                on_insert.insert(k, v);
            } else {
                set.insert(k, v);
            }
        }
        // A scoped write matches only the writer's own row; over anyone else's (or a shared
        // one) the upsert collides with the unique id and is refused as agno refuses it.
        let mut filter = doc! {"id": &content.id};
        if let Some(u) = &content.user_id {
            filter.insert("user_id", u);
        }
        let mut update = doc! {};
        if !set.is_empty() {
            update.insert("$set", set);
        }
        if !on_insert.is_empty() {
            update.insert("$setOnInsert", on_insert);
        }
        let result = self
            .coll(&self.inner.names.knowledge)
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await;
        match result {
            Ok(Some(d)) => from_doc(d, "knowledge content"),
            Ok(None) => Err(Error::not_found(format!(
                "Knowledge content {} not found",
                content.id
            ))),
            Err(e) if is_duplicate_key(&e) => Err(Error::not_found(format!(
                "Knowledge content {} not found",
                content.id
            ))),
            Err(e) => Err(db_err("upsert knowledge content")(e)),
        }
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        let mut filter = doc! {"id": id};
        owner_or_shared(&mut filter, user_id);
        self.coll(&self.inner.names.knowledge)
            .find_one(filter)
            .await
            .map_err(db_err("get knowledge content"))?
            .map(|d| from_doc(d, "knowledge content"))
            .transpose()
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, KnowledgeContent::SORTABLE)?;
        let mut filter = Document::new();
        owner_or_shared(&mut filter, query.user_id.as_deref());
        if let Some(l) = &query.linked_to {
            filter.insert("linked_to", l);
        }
        let rows = self
            .coll(&self.inner.names.knowledge)
            .find(filter)
            .await
            .map_err(db_err("get knowledge contents"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get knowledge contents"))?
            .into_iter()
            .map(|d| from_doc(d, "knowledge content"))
            .collect::<Result<Vec<KnowledgeContent>>>()?;
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        Ok(self
            .coll(&self.inner.names.knowledge)
            .delete_one(filter)
            .await
            .map_err(db_err("delete knowledge content"))?
            .deleted_count
            > 0)
    }
}
