//! Knowledge contents (`agno_knowledge`): agno's item plus `external_id` (which agno
//! drops). Unowned rows are shared: visible to every caller.

use agno_storage_core::owner_or_shared;
use agno_storage_core::{
    async_trait, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Page, Result,
};
use serde_json::Value;

use crate::codec::{from_json, record, record_item, sv, to_json};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

fn decode(item: &crate::codec::Item) -> Result<KnowledgeContent> {
    record(item, &["metadata"], "a knowledge content")
}

#[async_trait]
impl KnowledgeStore for DynamoDb {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        for _ in 0..MAX_ATTEMPTS {
            let old = self.get(Table::Knowledge, &content.id).await?;
            let merged = match &old {
                Some(item) => {
                    let stored = decode(item)?;
                    if content.user_id.is_some() && stored.user_id != content.user_id {
                        return Err(Error::not_found(format!(
                            "Knowledge content {} not found",
                            content.id
                        )));
                    }
                    let mut doc = to_json(&stored, "a knowledge content")?;
                    let update = to_json(&content, "a knowledge content")?;
                    if let (Value::Object(doc), Value::Object(update)) = (&mut doc, update) {
                        for (k, v) in update.into_iter().filter(|(_, v)| !v.is_null()) {
                            doc.insert(k, v);
                        }
                    }
                    match doc {
                        Value::Object(map) => from_json(map, "a knowledge content")?,
                        _ => content.clone(),
                    }
                }
                None => content.clone(),
            };
            let item = record_item(&merged, "a knowledge content")?;
            if self.cas(Table::Knowledge, old.as_ref(), item).await? {
                return Ok(merged);
            }
        }
        Err(contention("upsert_knowledge_content"))
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        match self.get(Table::Knowledge, id).await? {
            Some(item) => {
                let c = decode(&item)?;
                Ok(owner_or_shared(c.user_id.as_deref(), user_id).then_some(c))
            }
            None => Ok(None),
        }
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        let mut rows = Vec::new();
        for item in self.scan(Table::Knowledge).await? {
            let c = decode(&item)?;
            if query.matches(&c) {
                rows.push(c);
            }
        }
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
        self.delete(Table::Knowledge, id, cond).await
    }
}
