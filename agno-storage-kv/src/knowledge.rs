//! Knowledge contents: `{prefix}:knowledge:{id}` records as `KnowledgeRow.model_dump()`,
//! indexed by creation time (all, per owner, shared). A user reads their own and shared
//! rows; writes and deletes are strict.

use agno_storage_core::owner_or_shared;
use agno_storage_core::{
    async_trait, visible_to, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Page, Result,
};
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, json, object, opt_int, opt_json, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "knowledge";

pub(crate) fn decode(key: &str, raw: &str) -> Result<KnowledgeContent> {
    let map = decode_object(key, raw)?;
    Ok(KnowledgeContent {
        id: text(&map, "id")
            .or_else(|| key.rsplit_once(":knowledge:").map(|(_, id)| id.to_owned()))
            .unwrap_or_default(),
        name: text(&map, "name").unwrap_or_default(),
        description: text(&map, "description").unwrap_or_default(),
        metadata: json(&map, "metadata"),
        content_type: text(&map, "type"),
        size: int(&map, "size"),
        linked_to: text(&map, "linked_to"),
        access_count: int(&map, "access_count"),
        status: text(&map, "status"),
        status_message: text(&map, "status_message"),
        created_at: int(&map, "created_at"),
        updated_at: int(&map, "updated_at"),
        external_id: text(&map, "external_id"),
        user_id: text(&map, "user_id"),
    })
}

/// The record in `KnowledgeRow`'s field order.
pub(crate) fn encode_knowledge(c: &KnowledgeContent) -> String {
    encode(&object([
        ("id", Value::String(c.id.clone())),
        ("name", Value::String(c.name.clone())),
        ("description", Value::String(c.description.clone())),
        ("metadata", opt_json(&c.metadata)),
        ("type", opt_str(&c.content_type)),
        ("size", opt_int(c.size)),
        ("linked_to", opt_str(&c.linked_to)),
        ("access_count", opt_int(c.access_count)),
        ("status", opt_str(&c.status)),
        ("status_message", opt_str(&c.status_message)),
        ("user_id", opt_str(&c.user_id)),
        ("created_at", opt_int(c.created_at)),
        ("updated_at", opt_int(c.updated_at)),
        ("external_id", opt_str(&c.external_id)),
    ]))
}

impl KvStore {
    fn knowledge_all(&self) -> String {
        self.idx(TABLE, "created:all")
    }

    fn knowledge_of(&self, user: Option<&str>) -> String {
        match user {
            Some(u) => self.idx(TABLE, &format!("created:user:{u}")),
            None => self.idx(TABLE, "created:shared"),
        }
    }

    pub(crate) fn knowledge_entries(&self, c: &KnowledgeContent) -> Vec<Entry> {
        let score = c.created_at.unwrap_or_default() as f64;
        vec![
            Entry::z(self.knowledge_all(), &c.id, score),
            Entry::z(self.knowledge_of(c.user_id.as_deref()), &c.id, score),
        ]
    }
}

#[async_trait]
impl KnowledgeStore for KvStore {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> Result<KnowledgeContent> {
        let key = self.key(TABLE, &content.id);
        self.retry("upsert_knowledge_content", || async {
            let current = self.get(&key).await?;
            let (next, old_entries) = match &current {
                Some(raw) => {
                    let stored = decode(&key, raw)?;
                    if content.user_id.is_some() && stored.user_id != content.user_id {
                        return Err(Error::not_found(format!(
                            "Knowledge content {} not found",
                            content.id
                        )));
                    }
                    // Fields the update sets replace the stored ones; unset fields are kept.
                    let mut doc = serde_json::to_value(&stored)
                        .map_err(|e| Error::serialization("knowledge content", e))?;
                    let update = serde_json::to_value(&content)
                        .map_err(|e| Error::serialization("knowledge content", e))?;
                    if let (Value::Object(doc), Value::Object(update)) = (&mut doc, update) {
                        for (k, v) in update.into_iter().filter(|(_, v)| !v.is_null()) {
                            doc.insert(k, v);
                        }
                    }
                    let merged: KnowledgeContent = agno_storage_core::json::from_value(doc)
                        .map_err(|e| Error::serialization("knowledge content", e))?;
                    let entries = self.knowledge_entries(&stored);
                    (merged, entries)
                }
                None => (content.clone(), Vec::new()),
            };
            let cas = Cas::on(&key)
                .expect(current.as_deref())
                .set(encode_knowledge(&next))
                .reindex(&old_entries, &self.knowledge_entries(&next));
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(next))
        })
        .await
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        let key = self.key(TABLE, id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let c = decode(&key, &raw)?;
        Ok(owner_or_shared(c.user_id.as_deref(), user_id).then_some(c))
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, KnowledgeContent::SORTABLE)?;
        let indexes = match query.user_id.as_deref() {
            Some(u) => vec![self.knowledge_of(Some(u)), self.knowledge_of(None)],
            None => vec![self.knowledge_all()],
        };
        let mut rows = Vec::new();
        for index in indexes {
            for (id, raw) in self.load_index(TABLE, &index, "-inf", "+inf").await? {
                let c = decode(&self.key(TABLE, &id), &raw)?;
                if query.matches(&c) {
                    rows.push(c);
                }
            }
        }
        // Creation order across the caller's and the shared index; `page` keeps it unless
        // `sort` names a column, and for ties.
        rows.sort_by_key(|c| c.created_at);
        query.page(rows)
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let key = self.key(TABLE, id);
        self.retry("delete_knowledge_content", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(false));
            };
            let c = decode(&key, &raw)?;
            if !visible_to(c.user_id.as_deref(), user_id) {
                return Ok(Some(false));
            }
            let cas = Cas::on(&key)
                .expect(Some(&raw))
                .delete()
                .reindex(&self.knowledge_entries(&c), &[]);
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
        })
        .await
    }
}
