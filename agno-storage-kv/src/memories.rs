//! User memories: `{prefix}:memories:{memory_id}` records in agno's field order, indexed
//! by last update (all, per owner) plus the set of users who have memories, so stats read
//! one count and one top score per user.

use std::collections::BTreeSet;

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, MemoryQuery,
    MemoryStats, MemoryStore, Page, Pagination, Result, UserMemory,
};
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, object, opt_int, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "memories";

pub(crate) fn decode(key: &str, raw: &str) -> Result<UserMemory> {
    let map = decode_object(key, raw)?;
    let memory = match map.get("memory") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    let topics = map.get("topics").and_then(Value::as_array).map(|ts| {
        ts.iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()
    });
    let updated_at = int(&map, "updated_at");
    Ok(UserMemory {
        memory_id: text(&map, "memory_id")
            .or_else(|| key.rsplit_once(":memories:").map(|(_, id)| id.to_owned()))
            .unwrap_or_default(),
        memory,
        topics,
        user_id: text(&map, "user_id"),
        input: text(&map, "input"),
        agent_id: text(&map, "agent_id"),
        team_id: text(&map, "team_id"),
        feedback: text(&map, "feedback"),
        created_at: int(&map, "created_at").or(updated_at).unwrap_or_default(),
        updated_at,
    })
}

/// The record as agno's `RedisDb.upsert_user_memory` lays it out.
pub(crate) fn encode_memory(m: &UserMemory) -> String {
    encode(&object([
        ("user_id", opt_str(&m.user_id)),
        ("agent_id", opt_str(&m.agent_id)),
        ("team_id", opt_str(&m.team_id)),
        ("memory_id", Value::String(m.memory_id.clone())),
        ("memory", Value::String(m.memory.clone())),
        (
            "topics",
            m.topics.as_ref().map_or(Value::Null, |t| {
                Value::Array(t.iter().cloned().map(Value::String).collect())
            }),
        ),
        ("input", opt_str(&m.input)),
        ("feedback", opt_str(&m.feedback)),
        ("created_at", Value::from(m.created_at)),
        ("updated_at", opt_int(m.updated_at)),
    ]))
}

impl KvStore {
    fn memories_all(&self) -> String {
        self.idx(TABLE, "updated:all")
    }

    pub(crate) fn memories_of_user(&self, user: &str) -> String {
        self.idx(TABLE, &format!("updated:user:{user}"))
    }

    /// The set of users owning at least one memory.
    fn memory_users(&self) -> String {
        self.idx(TABLE, "users")
    }

    pub(crate) fn memory_entries(&self, m: &UserMemory) -> Vec<Entry> {
        let score = m.updated_at.unwrap_or(m.created_at) as f64;
        let mut entries = vec![Entry::z(self.memories_all(), &m.memory_id, score)];
        if let Some(u) = &m.user_id {
            entries.push(Entry::z(self.memories_of_user(u), &m.memory_id, score));
            entries.push(Entry::s(self.memory_users(), u));
        }
        entries
    }

    /// Index entries to move from `old` to `new`, keeping the users set exact: a user
    /// leaves it only when their last memory does.
    fn memory_reindex(&self, cas: Cas, old: Option<&UserMemory>, new: Option<&UserMemory>) -> Cas {
        let entries = |m: Option<&UserMemory>| -> Vec<Entry> {
            m.map(|m| {
                self.memory_entries(m)
                    .into_iter()
                    .filter(|e| e.score.is_some())
                    .collect()
            })
            .unwrap_or_default()
        };
        let mut cas = cas.reindex(&entries(old), &entries(new));
        if let Some(u) = new.and_then(|m| m.user_id.as_deref()) {
            cas = cas.reindex(&[], &[Entry::s(self.memory_users(), u)]);
        }
        if let Some(u) = old.and_then(|m| m.user_id.as_deref()) {
            if new.and_then(|m| m.user_id.as_deref()) != Some(u) {
                cas = cas.prune(&self.memories_of_user(u), &self.memory_users(), u);
            }
        }
        cas
    }

    async fn user_memories(&self, user_id: Option<&str>) -> Result<Vec<UserMemory>> {
        let index = match user_id {
            Some(u) => self.memories_of_user(u),
            None => self.memories_all(),
        };
        self.load_index(TABLE, &index, "-inf", "+inf")
            .await?
            .iter()
            .map(|(id, raw)| decode(&self.key(TABLE, id), raw))
            .collect()
    }
}

#[async_trait]
impl MemoryStore for KvStore {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        let key = self.key(TABLE, &memory.memory_id);
        self.retry("upsert_memory", || async {
            let current = self.get(&key).await?;
            let mut next = memory.clone();
            let old = match &current {
                Some(raw) => {
                    let old = decode(&key, raw)?;
                    if !writable_by(old.user_id.as_deref(), next.user_id.as_deref()) {
                        return Err(owned_by_another_user("memory", &next.memory_id));
                    }
                    next.user_id = old.user_id.clone();
                    next.created_at = old.created_at;
                    next.updated_at = Some(now_epoch_seconds());
                    Some(old)
                }
                None => {
                    next.updated_at = next.updated_at.or(Some(next.created_at));
                    None
                }
            };
            let cas = Cas::on(&key)
                .expect(current.as_deref())
                .set(encode_memory(&next));
            let cas = self.memory_reindex(cas, old.as_ref(), Some(&next));
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(next))
        })
        .await
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        let key = self.key(TABLE, memory_id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let m = decode(&key, &raw)?;
        Ok(visible_to(m.user_id.as_deref(), user_id).then_some(m))
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, UserMemory::SORTABLE)?;
        let matches = query.matcher();
        let rows: Vec<UserMemory> = self
            .user_memories(query.user_id.as_deref())
            .await?
            .into_iter()
            .filter(|m| matches(m))
            .collect();
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let topics: BTreeSet<String> = self
            .user_memories(user_id)
            .await?
            .into_iter()
            .filter(|m| visible_to(m.user_id.as_deref(), user_id))
            .flat_map(|m| m.topics.unwrap_or_default())
            .collect();
        Ok(topics.into_iter().collect())
    }

    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>> {
        pagination.validate()?;
        let mut users: Vec<String> = match user_id {
            Some(u) => vec![u.to_owned()],
            None => {
                self.query(redis::cmd("SMEMBERS").arg(self.memory_users()))
                    .await?
            }
        };
        users.sort();
        let mut pipe = redis::pipe();
        for u in &users {
            let index = self.memories_of_user(u);
            pipe.cmd("ZCARD").arg(&index);
            pipe.cmd("ZRANGE")
                .arg(&index)
                .arg(-1)
                .arg(-1)
                .arg("WITHSCORES");
        }
        let mut rows = Vec::with_capacity(users.len());
        if !users.is_empty() {
            let replies: Vec<redis::Value> = self.pipe(&pipe).await?;
            for (u, pair) in users.into_iter().zip(replies.chunks(2)) {
                let [count, top] = pair else { continue };
                let total: u64 =
                    redis::from_redis_value_ref(count).map_err(|e| self.err(e.into()))?;
                let top: Vec<(String, f64)> =
                    redis::from_redis_value_ref(top).map_err(|e| self.err(e.into()))?;
                if total > 0 {
                    rows.push(MemoryStats {
                        user_id: u,
                        total_memories: total,
                        last_memory_updated_at: top.first().map(|(_, s)| *s as i64),
                    });
                }
            }
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.last_memory_updated_at));
        Page::paginate(rows, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in memory_ids {
            let key = self.key(TABLE, id);
            let gone = self
                .retry("delete_memories", || async {
                    let Some(raw) = self.get(&key).await? else {
                        return Ok(Some(false));
                    };
                    let m = decode(&key, &raw)?;
                    if !visible_to(m.user_id.as_deref(), user_id) {
                        return Ok(Some(false));
                    }
                    let cas = Cas::on(&key).expect(Some(&raw)).delete();
                    let cas = self.memory_reindex(cas, Some(&m), None);
                    Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
                })
                .await?;
            if gone {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
