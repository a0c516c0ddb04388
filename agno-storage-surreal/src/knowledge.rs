//! Knowledge contents (`agno_knowledge`): record id = `id`. An update merges the non-null
//! fields.

use agno_storage_core::{
    async_trait, sort_records, visible_to, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore,
    Page, Result,
};
use serde_json::Value;

use crate::doc::{backoff, contended, from_fields, to_fields, Commit, Pre, CAS_ATTEMPTS};
use crate::SurrealDb;

fn owner_or_shared(row_owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || row_owner.is_none() || row_owner == caller
}

#[async_trait]
impl KnowledgeStore for SurrealDb {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        let coll = &self.inner.names.knowledge;
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
                    let mut fields = to_fields(&current, "knowledge content")?;
                    for (k, v) in to_fields(&content, "knowledge content")? {
                        if !v.is_null() {
                            fields.insert(k, v);
                        }
                    }
                    let merged: KnowledgeContent = from_fields(fields, "knowledge content")?;
                    (stored.id.clone(), stored.unchanged(), merged)
                }
                None => (content.id.clone(), Pre::Absent, content.clone()),
            };
            let write = self.put(coll, &doc, &to_fields(&merged, "knowledge content")?, pre);
            match self.commit("upsert knowledge content", vec![write]).await? {
                Commit::Done => return Ok(merged),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(contended("upsert knowledge content"))
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        let Some(stored) = self.find(&self.inner.names.knowledge, "id", id).await? else {
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
        let mut rows = Vec::new();
        for d in self.query(&self.inner.names.knowledge, &[]).await? {
            let c: KnowledgeContent = d.decode("knowledge content")?;
            if owner_or_shared(c.user_id.as_deref(), query.user_id.as_deref())
                && (query.linked_to.is_none() || query.linked_to == c.linked_to)
            {
                rows.push(c);
            }
        }
        sort_records(&mut rows, &query.sort, KnowledgeContent::SORTABLE)?;
        Page::paginate(rows, &query.pagination)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let coll = &self.inner.names.knowledge;
        let Some(stored) = self.find(coll, "id", id).await? else {
            return Ok(false);
        };
        let owner = stored.fields.get("user_id").and_then(Value::as_str);
        if !visible_to(owner, user_id) {
            return Ok(false);
        }
        self.commit_all(
            "delete knowledge content",
            vec![self.delete(coll, &stored.id, Pre::Any)],
        )
        .await?;
        Ok(true)
    }
}
