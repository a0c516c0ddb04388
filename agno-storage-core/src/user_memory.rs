//! User memories: facts an agent remembers about a user.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::pagination::{Page, Pagination, Sort};

/// A memory as agno 3.1.10 stores it (`agno_memories`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UserMemory {
    /// Primary key.
    pub memory_id: String,
    /// The remembered text.
    pub memory: String,
    /// Topics, e.g. `["food"]`.
    #[serde(default)]
    pub topics: Option<Vec<String>>,
    /// Owner.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The input the memory was derived from.
    #[serde(default)]
    pub input: Option<String>,
    /// Agent that wrote it.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Team that wrote it.
    #[serde(default)]
    pub team_id: Option<String>,
    /// User feedback on the memory.
    #[serde(default)]
    pub feedback: Option<String>,
    /// Creation time, epoch seconds; round-trips unchanged.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl UserMemory {
    /// A new memory for `user_id`, created now.
    pub fn new(
        memory_id: impl Into<String>,
        user_id: Option<String>,
        memory: impl Into<String>,
    ) -> Self {
        UserMemory {
            memory_id: memory_id.into(),
            memory: memory.into(),
            topics: None,
            user_id,
            input: None,
            agent_id: None,
            team_id: None,
            feedback: None,
            created_at: crate::now_epoch_seconds(),
            updated_at: None,
        }
    }

    /// Columns accepted by [`Sort::sort_by`] on memories.
    pub const SORTABLE: &'static [&'static str] = &[
        "memory_id",
        "user_id",
        "agent_id",
        "team_id",
        "created_at",
        "updated_at",
    ];
}

/// Filters of [`MemoryStore::get_memories`].
#[derive(Debug, Clone, Default)]
pub struct MemoryQuery {
    /// Only this user's memories.
    pub user_id: Option<String>,
    /// Only memories written by this agent.
    pub agent_id: Option<String>,
    /// Only memories written by this team.
    pub team_id: Option<String>,
    /// Memories carrying every one of these topics.
    pub topics: Vec<String>,
    /// Case-insensitive substring of the memory text.
    pub search_content: Option<String>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction.
    pub sort: Sort,
}

impl MemoryQuery {
    /// A test of whether a memory passes the filters: owner (see [`crate::visible_to`]),
    /// agent, team, every one of `topics`, and case-insensitive `search_content` substring.
    pub fn matcher(&self) -> impl Fn(&UserMemory) -> bool + '_ {
        let search = self.search_content.as_ref().map(|s| s.to_lowercase());
        move |m| {
            crate::visible_to(m.user_id.as_deref(), self.user_id.as_deref())
                && crate::same(&self.agent_id, &m.agent_id)
                && crate::same(&self.team_id, &m.team_id)
                && self
                    .topics
                    .iter()
                    .all(|t| m.topics.as_ref().is_some_and(|ts| ts.contains(t)))
                && search
                    .as_deref()
                    .is_none_or(|s| m.memory.to_lowercase().contains(s))
        }
    }

    /// Sorts `rows` (already filtered by [`MemoryQuery::matcher`]) by `sort`, then cuts out
    /// the page; `total` counts every memory.
    pub fn page(&self, rows: Vec<UserMemory>) -> Result<Page<UserMemory>> {
        Page::sorted(rows, &self.sort, UserMemory::SORTABLE, &self.pagination)
    }
}

/// Per-user memory counts of [`MemoryStore::get_memory_stats`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryStats {
    /// The user.
    pub user_id: String,
    /// How many memories they have.
    pub total_memories: u64,
    /// Newest `updated_at` among them.
    pub last_memory_updated_at: Option<i64>,
}

/// Per-user counts over `memories` (only `user_id`'s when given; unowned memories are not
/// counted), newest activity first, then paged: `get_memory_stats` for stores that aggregate
/// in memory.
pub fn memory_stats<'a>(
    memories: impl IntoIterator<Item = &'a UserMemory>,
    user_id: Option<&str>,
    pagination: &Pagination,
) -> Result<Page<MemoryStats>> {
    pagination.validate()?;
    let mut by_user: std::collections::BTreeMap<&str, MemoryStats> =
        std::collections::BTreeMap::new();
    for m in memories {
        let Some(owner) = m.user_id.as_deref() else {
            continue;
        };
        if !crate::visible_to(Some(owner), user_id) {
            continue;
        }
        let entry = by_user.entry(owner).or_insert_with(|| MemoryStats {
            user_id: owner.to_owned(),
            total_memories: 0,
            last_memory_updated_at: None,
        });
        entry.total_memories += 1;
        entry.last_memory_updated_at = entry.last_memory_updated_at.max(m.updated_at);
    }
    let mut rows: Vec<MemoryStats> = by_user.into_values().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.last_memory_updated_at));
    Page::paginate(rows, pagination)
}

/// User memories.
#[async_trait]
pub trait MemoryStore: Send + Sync {
    /// Inserts or updates a memory. On an existing id the owner and `created_at` are kept and
    /// `updated_at` becomes now; a memory owned by another user is refused with
    /// `PermissionDenied` (agno would overwrite it).
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory>;

    /// The memory, or `None` when absent or not owned by `user_id`.
    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>>;

    /// Memories matching `query`, with the count before paging.
    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>>;

    /// Every distinct topic (of `user_id`'s memories when given), sorted.
    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>>;

    /// Per-user counts, newest activity first; only `user_id` when given.
    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>>;

    /// Deletes the memories among `memory_ids` owned by `user_id` (any when `None`).
    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64>;

    /// Writes each memory as [`MemoryStore::upsert_memory`] does, owner check included, and
    /// returns one result per memory in order: a row another user owns is refused alone
    /// (`PermissionDenied`) and the others are written. agno's bulk paths skipped that
    /// check on several backends.
    ///
    /// Provided as one call per memory; a backend with a bulk write may override it.
    async fn upsert_memories(&self, memories: Vec<UserMemory>) -> Result<Vec<Result<UserMemory>>> {
        let mut written = Vec::with_capacity(memories.len());
        for memory in memories {
            written.push(self.upsert_memory(memory).await);
        }
        Ok(written)
    }

    /// Deletes every memory of every user, as agno's `clear_memories`; returns how many.
    ///
    /// Provided over [`MemoryStore::get_memories`] and [`MemoryStore::delete_memories`],
    /// a page at a time (rows that do not decode are deleted by id too).
    async fn clear_memories(&self) -> Result<u64> {
        let mut deleted = 0;
        loop {
            let query = MemoryQuery {
                pagination: Pagination::limit(500),
                ..Default::default()
            };
            let page = self.get_memories(query).await?;
            let ids: Vec<String> = page
                .items
                .into_iter()
                .map(|m| m.memory_id)
                .chain(page.unreadable.into_iter().map(|u| u.id))
                .collect();
            if ids.is_empty() {
                return Ok(deleted);
            }
            let gone = self.delete_memories(&ids, None).await?;
            if gone == 0 {
                // Listed but not deletable: stop rather than loop over them forever.
                return Ok(deleted);
            }
            deleted += gone;
        }
    }
}
