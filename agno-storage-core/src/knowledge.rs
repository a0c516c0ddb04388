//! Knowledge contents: documents added to a knowledge base.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::pagination::{Page, Pagination, Sort};

/// One knowledge content row (`agno_knowledge`). `user_id = None` is shared content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KnowledgeContent {
    /// Primary key.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Content type (`type` in storage).
    #[serde(default, rename = "type")]
    pub content_type: Option<String>,
    /// Size in bytes.
    #[serde(default)]
    pub size: Option<i64>,
    /// Id of the knowledge base it is linked to.
    #[serde(default)]
    pub linked_to: Option<String>,
    /// How often it was read.
    #[serde(default)]
    pub access_count: Option<i64>,
    /// Processing status.
    #[serde(default)]
    pub status: Option<String>,
    /// Status detail.
    #[serde(default)]
    pub status_message: Option<String>,
    /// Creation time, epoch seconds.
    #[serde(default)]
    pub created_at: Option<i64>,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
    /// Id in an external system.
    #[serde(default)]
    pub external_id: Option<String>,
    /// Owner; `None` is shared with every user.
    #[serde(default)]
    pub user_id: Option<String>,
}

impl KnowledgeContent {
    /// A new content row.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        description: impl Into<String>,
    ) -> Self {
        let now = crate::now_epoch_seconds();
        KnowledgeContent {
            id: id.into(),
            name: name.into(),
            description: description.into(),
            metadata: None,
            content_type: None,
            size: None,
            linked_to: None,
            access_count: None,
            status: None,
            status_message: None,
            created_at: Some(now),
            updated_at: Some(now),
            external_id: None,
            user_id: None,
        }
    }

    /// Columns accepted by [`Sort::sort_by`] on knowledge contents.
    pub const SORTABLE: &'static [&'static str] = &[
        "id",
        "name",
        "type",
        "size",
        "linked_to",
        "access_count",
        "status",
        "created_at",
        "updated_at",
        "user_id",
    ];
}

/// Filters of [`KnowledgeStore::get_knowledge_contents`].
#[derive(Debug, Clone, Default)]
pub struct KnowledgeQuery {
    /// The caller: sees their own and shared contents; `None` sees all.
    pub user_id: Option<String>,
    /// Only contents linked to this knowledge base.
    pub linked_to: Option<String>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction.
    pub sort: Sort,
}

impl KnowledgeQuery {
    /// Whether `content` passes the filters: `user_id`'s or shared (any when `None`), and
    /// linked to `linked_to` when set.
    pub fn matches(&self, content: &KnowledgeContent) -> bool {
        crate::owner_or_shared(content.user_id.as_deref(), self.user_id.as_deref())
            && crate::same(&self.linked_to, &content.linked_to)
    }

    /// Sorts `rows` (already filtered by [`KnowledgeQuery::matches`]) stably by `sort` when
    /// it names a column (else keeps their order), then cuts out the page; `total` counts
    /// every row.
    pub fn page(&self, rows: Vec<KnowledgeContent>) -> Result<Page<KnowledgeContent>> {
        Page::sorted(
            rows,
            &self.sort,
            KnowledgeContent::SORTABLE,
            &self.pagination,
        )
    }
}

/// Knowledge contents. Reads match the owner or shared rows; writes and deletes are strict.
#[async_trait]
pub trait KnowledgeStore: Send + Sync {
    /// Inserts or updates a content row. An existing row owned by someone else (or shared,
    /// when `content.user_id` is set) is refused with `NotFound`, as agno does.
    async fn upsert_knowledge_content(&self, content: KnowledgeContent)
        -> Result<KnowledgeContent>;

    /// The content if it is `user_id`'s or shared (any when `None`).
    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>>;

    /// Contents matching `query`, with the count before paging.
    async fn get_knowledge_contents(&self, query: KnowledgeQuery)
        -> Result<Page<KnowledgeContent>>;

    /// Deletes the content if owned by `user_id` (any when `None`); true when a row went.
    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool>;
}
