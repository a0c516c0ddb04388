//! Learnings: `{prefix}:learnings:{learning_id}` records in agno `ValkeyDb`'s layout (agno's
//! `RedisDb` has no learnings), indexed by last update (all, per owner, global). The store
//! is the document engine's.

use agno_storage_core::Learning;

use crate::docs::{updated_or_created, TableLayout, DEFAULT_LAYOUT};

pub(crate) const TABLE: &str = "learnings";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| Learning::FIELDS,
    key_field: "learning_id",
    score: updated_or_created,
    by_owner: |s, user| {
        Some(match user {
            Some(u) => s.idx(TABLE, &format!("updated:user:{u}")),
            None => s.idx(TABLE, "updated:global"),
        })
    },
    all: Some(|s| s.idx(TABLE, "updated:all")),
    score_field: "updated_at",
    ..DEFAULT_LAYOUT
};
