//! User memories (`agno_memories`): `UserMemory.to_dict()` items, with `created_at` as a
//! naive ISO string and `updated_at` as a UTC ISO string, as agno writes them (both are
//! the range keys of agno's `S`-typed GSIs). Naive times are written and read as UTC.

use agno_storage_core::user_memory::memory_stats;
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, MemoryQuery,
    MemoryStats, MemoryStore, Page, Pagination, Result, UserMemory,
};
use chrono::{DateTime, NaiveDateTime};
use serde_json::Value;

use crate::codec::{from_item, from_json, sv, to_item, to_json, Item};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

fn iso_naive(ts: i64) -> Value {
    DateTime::from_timestamp(ts, 0).map_or(Value::Null, |d| {
        Value::String(d.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string())
    })
}

fn iso_utc(ts: i64) -> Value {
    DateTime::from_timestamp(ts, 0).map_or(Value::Null, |d| {
        Value::String(d.format("%Y-%m-%dT%H:%M:%S%.f+00:00").to_string())
    })
}

/// An ISO string (naive = UTC) or a number as epoch seconds.
fn epoch(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => DateTime::parse_from_rfc3339(s)
            .map(|d| d.timestamp())
            .ok()
            .or_else(|| {
                NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                    .ok()
                    .map(|d| d.and_utc().timestamp())
            }),
        _ => None,
    }
}

fn encode(m: &UserMemory) -> Result<Item> {
    let mut v = to_json(m, "a memory")?;
    if let Value::Object(map) = &mut v {
        map.insert("created_at".into(), iso_naive(m.created_at));
        map.insert(
            "updated_at".into(),
            m.updated_at.map_or(Value::Null, iso_utc),
        );
    }
    Ok(to_item(&v))
}

fn decode(item: &Item) -> Result<UserMemory> {
    let mut map = from_item(item, &["topics"]);
    for key in ["created_at", "updated_at"] {
        let ts = map.get(key).and_then(epoch);
        map.insert(key.into(), ts.map_or(Value::Null, Value::from));
    }
    if map.get("created_at").is_none_or(Value::is_null) {
        let fallback = map.get("updated_at").cloned().unwrap_or(Value::from(0));
        map.insert("created_at".into(), fallback);
    }
    from_json(map, "a memory")
}

impl DynamoDb {
    async fn all_memories(&self) -> Result<Vec<UserMemory>> {
        self.scan(Table::Memories)
            .await?
            .iter()
            .map(decode)
            .collect()
    }
}

#[async_trait]
impl MemoryStore for DynamoDb {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        for _ in 0..MAX_ATTEMPTS {
            let old = self.get(Table::Memories, &memory.memory_id).await?;
            let mut next = memory.clone();
            match &old {
                Some(item) => {
                    let stored = decode(item)?;
                    if !writable_by(stored.user_id.as_deref(), next.user_id.as_deref()) {
                        return Err(owned_by_another_user("memory", &next.memory_id));
                    }
                    next.user_id = stored.user_id;
                    next.created_at = stored.created_at;
                    next.updated_at = Some(now_epoch_seconds());
                }
                None => next.updated_at = next.updated_at.or(Some(next.created_at)),
            }
            if self
                .cas(Table::Memories, old.as_ref(), encode(&next)?)
                .await?
            {
                return Ok(next);
            }
        }
        Err(contention("upsert_memory"))
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        match self.get(Table::Memories, memory_id).await? {
            Some(item) => {
                let m = decode(&item)?;
                Ok(visible_to(m.user_id.as_deref(), user_id).then_some(m))
            }
            None => Ok(None),
        }
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        let matches = query.matcher();
        let rows: Vec<UserMemory> = self
            .all_memories()
            .await?
            .into_iter()
            .filter(|m| matches(m))
            .collect();
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let mut topics: Vec<String> = self
            .all_memories()
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
        memory_stats(&self.all_memories().await?, user_id, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in memory_ids {
            let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
            if self.delete(Table::Memories, id, cond).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
