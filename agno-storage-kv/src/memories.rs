//! User memories: `{prefix}:memories:{memory_id}` records in agno's field order, indexed
//! by last update (all, per owner) plus the set of users who have memories, so stats read
//! one count and one top score per user. The store is the document engine's.

use agno_storage_core::{MemoryStats, Page, Pagination, Result};

use crate::docs::{updated_or_created, TableLayout, DEFAULT_LAYOUT};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "memories";

/// As agno's `RedisDb.upsert_user_memory` lays a memory out.
pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| {
        &[
            "user_id",
            "agent_id",
            "team_id",
            "memory_id",
            "memory",
            "topics",
            "input",
            "feedback",
            "created_at",
            "updated_at",
        ]
    },
    key_field: "memory_id",
    score: updated_or_created,
    by_owner: |s, user| user.map(|u| s.idx(TABLE, &format!("updated:user:{u}"))),
    all: Some(|s| s.idx(TABLE, "updated:all")),
    owners: Some(|s| s.idx(TABLE, "users")),
    score_field: "updated_at",
    ..DEFAULT_LAYOUT
};

impl KvStore {
    /// Memory counts per owner from the owners set: one `ZCARD` and one top score per
    /// owner's index, in one pipeline.
    pub(crate) async fn memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: &Pagination,
    ) -> Result<Page<MemoryStats>> {
        pagination.validate()?;
        let mut users: Vec<String> = match (user_id, LAYOUT.owners) {
            (Some(u), _) => vec![u.to_owned()],
            (None, Some(owners)) => self.query(redis::cmd("SMEMBERS").arg(owners(self))).await?,
            (None, None) => Vec::new(),
        };
        users.sort();
        let mut pipe = redis::pipe();
        for u in &users {
            let index = (LAYOUT.by_owner)(self, Some(u));
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
        Page::paginate(rows, pagination)
    }
}
