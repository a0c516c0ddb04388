//! User memories (`agno_memories`).

use std::collections::BTreeMap;

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, MemoryQuery, MemoryStats, MemoryStore,
    Page, Pagination, Result, UserMemory,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{
    db_err, from_doc, is_duplicate_key, regex_literal, scope, to_doc, writable_filter,
};
use crate::MongoDb;

/// A stored memory. agno's `upsert_user_memory` writes no `created_at`; such a memory
/// reads back with its `updated_at` (or 0) as creation time.
fn decode(mut d: Document) -> Result<UserMemory> {
    if !matches!(
        d.get("created_at"),
        Some(Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_))
    ) {
        let fallback = d
            .get("updated_at")
            .and_then(crate::runs::as_i64)
            .unwrap_or(0);
        d.insert("created_at", fallback);
    }
    from_doc(d, "a memory")
}

impl MongoDb {
    async fn find_memories(&self, filter: Document) -> Result<Vec<UserMemory>> {
        self.coll(&self.inner.names.memories)
            .find(filter)
            .await
            .map_err(db_err("get memories"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get memories"))?
            .into_iter()
            .map(decode)
            .collect()
    }
}

#[async_trait]
impl MemoryStore for MongoDb {
    async fn upsert_memory(&self, mut memory: UserMemory) -> Result<UserMemory> {
        let coll = self.coll(&self.inner.names.memories);
        let now = now_epoch_seconds();
        for _ in 0..3 {
            // Existing row the writer may write: keep owner and created_at.
            let mut filter = doc! {"memory_id": &memory.memory_id};
            filter.extend(writable_filter(memory.user_id.as_deref()));
            let mut set = to_doc(&memory, "a memory")?;
            for kept in ["memory_id", "user_id", "created_at"] {
                set.remove(kept);
            }
            set.insert("updated_at", now);
            let updated = coll
                .find_one_and_update(filter, doc! {"$set": set})
                .return_document(ReturnDocument::After)
                .await
                .map_err(db_err("upsert memory"))?;
            if let Some(d) = updated {
                return decode(d);
            }
            if coll
                .find_one(doc! {"memory_id": &memory.memory_id})
                .await
                .map_err(db_err("upsert memory"))?
                .is_some()
            {
                return Err(owned_by_another_user("memory", &memory.memory_id));
            }
            memory.updated_at = memory.updated_at.or(Some(memory.created_at));
            match coll.insert_one(to_doc(&memory, "a memory")?).await {
                Ok(_) => return Ok(memory),
                Err(e) if is_duplicate_key(&e) => continue,
                Err(e) => return Err(db_err("upsert memory")(e)),
            }
        }
        Err(agno_storage_core::Error::new(
            agno_storage_core::ErrorKind::Conflict,
            format!(
                "memory {} kept changing under concurrent writers; retry",
                memory.memory_id
            ),
        ))
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        let mut filter = doc! {"memory_id": memory_id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.memories)
            .find_one(filter)
            .await
            .map_err(db_err("get memory"))?
            .map(decode)
            .transpose()
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, UserMemory::SORTABLE)?;
        let mut filter = Document::new();
        scope(&mut filter, query.user_id.as_deref());
        if let Some(a) = &query.agent_id {
            filter.insert("agent_id", a);
        }
        if let Some(t) = &query.team_id {
            filter.insert("team_id", t);
        }
        if !query.topics.is_empty() {
            filter.insert("topics", doc! {"$all": &query.topics});
        }
        if let Some(s) = &query.search_content {
            filter.insert("memory", doc! {"$regex": regex_literal(s), "$options": "i"});
        }
        let rows = self.find_memories(filter).await?;
        query.page(rows)
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        let mut filter = Document::new();
        scope(&mut filter, user_id);
        let mut topics: Vec<String> = self
            .coll(&self.inner.names.memories)
            .distinct("topics", filter)
            .await
            .map_err(db_err("get memory topics"))?
            .into_iter()
            .filter_map(|b| match b {
                Bson::String(s) => Some(s),
                _ => None,
            })
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
        pagination.validate()?;
        let mut filter = doc! {"user_id": {"$type": "string"}};
        scope(&mut filter, user_id);
        let mut by_user: BTreeMap<String, MemoryStats> = BTreeMap::new();
        for m in self.find_memories(filter).await? {
            let Some(owner) = m.user_id.clone() else {
                continue;
            };
            let entry = by_user.entry(owner.clone()).or_insert_with(|| MemoryStats {
                user_id: owner,
                total_memories: 0,
                last_memory_updated_at: None,
            });
            entry.total_memories += 1;
            entry.last_memory_updated_at = entry.last_memory_updated_at.max(m.updated_at);
        }
        let mut rows: Vec<MemoryStats> = by_user.into_values().collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.last_memory_updated_at));
        Page::paginate(rows, &pagination)
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut filter = doc! {"memory_id": {"$in": memory_ids}};
        scope(&mut filter, user_id);
        Ok(self
            .coll(&self.inner.names.memories)
            .delete_many(filter)
            .await
            .map_err(db_err("delete memories"))?
            .deleted_count)
    }
}
