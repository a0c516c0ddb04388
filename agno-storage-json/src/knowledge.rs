//! Knowledge contents (`agno_knowledge.json`): `KnowledgeRow.model_dump()`. Reads see the
//! caller's and shared (unowned) rows; writes and deletes are strict.

use agno_storage_core::owner_or_shared;
use agno_storage_core::knowledge::{KnowledgeContent, KnowledgeQuery, KnowledgeStore};
use agno_storage_core::{async_trait, visible_to, Error, Page, Result};
use serde_json::Value;

use crate::doc::{fields, find, from_row, put, shape, text, Doc, Nulls};
use crate::files::{Step, Table};
use crate::store::JsonStore;

const KNOWLEDGE_KEYS: &[&str] = &[
    "id",
    "name",
    "description",
    "metadata",
    "type",
    "size",
    "linked_to",
    "access_count",
    "status",
    "status_message",
    "user_id",
    "created_at",
    "updated_at",
    "external_id",
];

impl Doc for KnowledgeContent {
    const TABLE: Table = Table::Knowledge;
    const KEY: &'static str = "id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Knowledge, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape(fields(self)?, KNOWLEDGE_KEYS, Nulls::Keep, existing))
    }
}

#[async_trait]
impl KnowledgeStore for JsonStore {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        self.files
            .modify(Table::Knowledge, |rows| {
                let found = find::<KnowledgeContent>(rows, &content.id)?;
                let merged = match &found {
                    Some((_, stored)) => {
                        if content.user_id.is_some() && stored.user_id != content.user_id {
                            return Err(Error::not_found(format!(
                                "Knowledge content {} not found",
                                content.id
                            )));
                        }
                        let mut doc = fields(stored)?;
                        for (k, v) in fields(&content)?.into_iter().filter(|(_, v)| !v.is_null()) {
                            doc.insert(k, v);
                        }
                        from_row(Table::Knowledge, "id", &Value::Object(doc))?
                    }
                    None => content.clone(),
                };
                put(rows, found.map(|(i, _)| i), &merged)?;
                Ok(Step::Write(merged))
            })
            .await
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        Ok(self
            .get::<KnowledgeContent>(id)
            .await?
            .filter(|c| owner_or_shared(c.user_id.as_deref(), user_id)))
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        let rows: Vec<KnowledgeContent> = self
            .all::<KnowledgeContent>()
            .await?
            .into_iter()
            .filter(|c| query.matches(c))
            .collect();
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.files
            .modify(Table::Knowledge, |rows| {
                let before = rows.len();
                rows.retain(|c| {
                    !(text(c, "id") == Some(id) && visible_to(text(c, "user_id"), user_id))
                });
                Ok(if rows.len() == before {
                    Step::Keep(false)
                } else {
                    Step::Write(true)
                })
            })
            .await
    }
}
