//! User memories (`agno_memories.json`): `UserMemory.to_dict()` (null keys dropped,
//! `created_at` as an ISO-8601 string) with `updated_at` in epoch seconds.


use agno_storage_core::user_memory::memory_stats;
use agno_storage_core::user_memory::{MemoryQuery, MemoryStats, MemoryStore, UserMemory};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by,
    Page, Pagination, Result,
};
use serde_json::Value;

use crate::doc::{fields, find, from_row, iso_utc, normalize_timestamps, put, shape, text, Doc, Nulls};
use crate::files::{Step, Table};
use crate::store::JsonStore;

const MEMORY_KEYS: &[&str] = &[
    "memory_id",
    "memory",
    "topics",
    "created_at",
    "updated_at",
    "input",
    "user_id",
    "agent_id",
    "team_id",
    "feedback",
];

impl Doc for UserMemory {
    const TABLE: Table = Table::Memories;
    const KEY: &'static str = "memory_id";

    fn decode(row: &Value) -> Result<Self> {
        let mut row = agno_storage_core::json::clone_deep(row);
        normalize_timestamps(&mut row, &["created_at", "updated_at"]);
        from_row(Table::Memories, Self::KEY, &row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        let mut f = fields(self)?;
        f.insert("created_at".into(), iso_utc(self.created_at));
        Ok(shape(f, MEMORY_KEYS, Nulls::Drop, existing))
    }
}

#[async_trait]
impl MemoryStore for JsonStore {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Memories, |rows| {
                let mut memory = memory.clone();
                let found = find::<UserMemory>(rows, &memory.memory_id)?;
                match &found {
                    Some((_, stored)) => {
                        if !writable_by(stored.user_id.as_deref(), memory.user_id.as_deref()) {
                            return Err(owned_by_another_user("memory", &memory.memory_id));
                        }
                        memory.user_id = stored.user_id.clone();
                        memory.created_at = stored.created_at;
                        memory.updated_at = Some(now);
                    }
                    None => memory.updated_at = memory.updated_at.or(Some(memory.created_at)),
                }
                put(rows, found.map(|(i, _)| i), &memory)?;
                Ok(Step::Write(memory))
            })
            .await
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        Ok(self
            .get::<UserMemory>(memory_id)
            .await?
            .filter(|m| visible_to(m.user_id.as_deref(), user_id)))
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        let matches = query.matcher();
        let rows: Vec<UserMemory> = self
            .all::<UserMemory>()
            .await?
            .into_iter()
            .filter(|m| matches(m))
            .collect();
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let mut topics: Vec<String> = self
            .all::<UserMemory>()
            .await?
            .into_iter()
            .filter(|m| visible_to(m.user_id.as_deref(), user_id))
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
        memory_stats(&self.all::<UserMemory>().await?, user_id, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.files
            .modify(Table::Memories, |rows| {
                let before = rows.len();
                rows.retain(|m| {
                    !(text(m, "memory_id").is_some_and(|id| memory_ids.iter().any(|w| w == id))
                        && visible_to(text(m, "user_id"), user_id))
                });
                let deleted = (before - rows.len()) as u64;
                Ok(if deleted == 0 {
                    Step::Keep(0)
                } else {
                    Step::Write(deleted)
                })
            })
            .await
    }
}
