//! Knowledge contents (`agno_knowledge`): document id = [`DocBackend::doc_id`] of `id`;
//! found by [`DocBackend::find`] on `id`. An update merges the non-null fields.

use agno_storage_core::owner_or_shared;
use agno_storage_core::{
    async_trait, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Page, Result,
};

use crate::{backoff, opt, Commit, DocBackend, Docs, Pre, Table, CAS_ATTEMPTS};
use serde_json::Value;

#[async_trait]
impl<B: DocBackend> KnowledgeStore for Docs<B> {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        let coll = self.collection(Table::Knowledge);
        for attempt in 0..CAS_ATTEMPTS {
            let (doc, pre, merged) = match self.find(coll, "id", &content.id).await? {
                Some(stored) => {
                    let current: KnowledgeContent = stored.decode("knowledge content")?;
                    if content.user_id.is_some() && current.user_id != content.user_id {
                        return Err(Error::not_found(format!(
                            "Knowledge content {} not found",
                            content.id
                        )));
                    }
                    let mut fields = self.to_fields(&current, "knowledge content")?;
                    for (k, v) in self.to_fields(&content, "knowledge content")? {
                        if !v.is_null() {
                            fields.insert(k, v);
                        }
                    }
                    let merged: KnowledgeContent =
                        self.decode_fields(fields, "knowledge content")?;
                    (stored.id.clone(), stored.unchanged(), merged)
                }
                None => (self.doc_id(&content.id), Pre::Absent, content.clone()),
            };
            let write = self.put(
                coll,
                &doc,
                &self.to_fields(&merged, "knowledge content")?,
                pre,
            );
            match self.commit("upsert knowledge content", vec![write]).await? {
                Commit::Done => return Ok(merged),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert knowledge content"))
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        let Some(stored) = self
            .find(self.collection(Table::Knowledge), "id", id)
            .await?
        else {
            return Ok(None);
        };
        let c: KnowledgeContent = stored.decode("knowledge content")?;
        Ok(owner_or_shared(c.user_id.as_deref(), user_id).then_some(c))
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        let coll = self.collection(Table::Knowledge);
        // A user sees their own contents and the shared ones: two owner queries.
        let owners = match query.user_id.as_deref() {
            Some(u) => vec![
                vec![("user_id", opt(Some(u)))],
                vec![("user_id", Value::Null)],
            ],
            None => vec![Vec::new()],
        };
        let mut rows = Vec::new();
        for eq in owners {
            for d in self.query(coll, &eq).await? {
                let c: KnowledgeContent = d.decode("knowledge content")?;
                if query.matches(&c) {
                    rows.push(c);
                }
            }
        }
        // Creation order across both owners; `page` keeps it unless `sort` names a column,
        // and for ties.
        rows.sort_by_key(|c| c.created_at);
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.delete_visible(
            Table::Knowledge,
            "id",
            id,
            user_id,
            "delete knowledge content",
        )
        .await
    }
}
