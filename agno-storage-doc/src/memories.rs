//! User memories (`agno_memories`): document id = `memory_id`, the body as the backend's
//! [`DocBackend::encode_memory`] writes it.

use agno_storage_core::user_memory::memory_stats;
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, MemoryQuery,
    MemoryStats, MemoryStore, Page, Pagination, Result, UserMemory,
};
use serde_json::Value;

use crate::backend::given;
use crate::{backoff, Commit, DocBackend, Docs, Pre, Stored, Table, CAS_ATTEMPTS};

impl<B: DocBackend> Docs<B> {
    /// A stored memory; agno writes `created_at` (and on some backends `updated_at`) as
    /// ISO text (naive = UTC), read as epoch seconds; a memory without `created_at` reads
    /// its `updated_at`.
    fn decode_memory(&self, stored: &Stored<B>) -> Result<UserMemory> {
        let mut fields = stored.fields.clone();
        for key in ["created_at", "updated_at"] {
            if let Some(Value::String(text)) = fields.get(key) {
                let seconds = chrono::DateTime::parse_from_rfc3339(text)
                    .map(|t| t.timestamp())
                    .or_else(|_| {
                        chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                            .map(|t| t.and_utc().timestamp())
                    })
                    .unwrap_or_default();
                fields.insert(key.into(), Value::from(seconds));
            }
        }
        if fields.get("created_at").is_none_or(Value::is_null) {
            let fallback = fields.get("updated_at").cloned().unwrap_or(Value::from(0));
            fields.insert("created_at".into(), fallback);
        }
        self.decode_fields(fields, "a memory")
    }

    async fn memories_of(&self, user_id: Option<&str>) -> Result<Vec<UserMemory>> {
        let eq = given(&[("user_id", user_id)]);
        self.query(self.collection(Table::Memories), &eq)
            .await?
            .iter()
            .map(|s| self.decode_memory(s))
            .filter(|m| {
                m.as_ref()
                    .map_or(true, |m| visible_to(m.user_id.as_deref(), user_id))
            })
            .collect()
    }
}

#[async_trait]
impl<B: DocBackend> MemoryStore for Docs<B> {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        let coll = self.collection(Table::Memories);
        for attempt in 0..CAS_ATTEMPTS {
            let mut next = memory.clone();
            let (doc, pre) = match self.find(coll, "memory_id", &memory.memory_id).await? {
                Some(stored) => {
                    let current = self.decode_memory(&stored)?;
                    if !writable_by(current.user_id.as_deref(), memory.user_id.as_deref()) {
                        return Err(owned_by_another_user("memory", &memory.memory_id));
                    }
                    next.user_id = current.user_id;
                    next.created_at = current.created_at;
                    next.updated_at = Some(now_epoch_seconds());
                    (stored.id.clone(), stored.unchanged())
                }
                None => {
                    next.updated_at = next.updated_at.or(Some(next.created_at));
                    (self.doc_id(&memory.memory_id), Pre::Absent)
                }
            };
            let write = self.put(coll, &doc, &self.encode_memory(&next)?, pre);
            match self.commit("upsert memory", vec![write]).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert memory"))
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        let Some(stored) = self
            .find(self.collection(Table::Memories), "memory_id", memory_id)
            .await?
        else {
            return Ok(None);
        };
        let m = self.decode_memory(&stored)?;
        Ok(visible_to(m.user_id.as_deref(), user_id).then_some(m))
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        let matches = query.matcher();
        let rows: Vec<UserMemory> = self
            .memories_of(query.user_id.as_deref())
            .await?
            .into_iter()
            .filter(|m| matches(m))
            .collect();
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let mut topics: Vec<String> = self
            .memories_of(user_id)
            .await?
            .into_iter()
            .flat_map(|m| m.topics.unwrap_or_default())
            .collect();
        topics.sort();
        topics.dedup();
        Ok(topics)
    }

    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>> {
        if let Some(page) = self.0.memory_stats(user_id, &pagination).await? {
            return Ok(page);
        }
        memory_stats(&self.memories_of(user_id).await?, user_id, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.delete_all_visible(
            Table::Memories,
            "memory_id",
            memory_ids,
            user_id,
            "delete memories",
        )
        .await
    }
}
