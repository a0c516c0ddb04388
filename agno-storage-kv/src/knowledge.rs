//! Knowledge contents: `{prefix}:knowledge:{id}` records as `KnowledgeRow.model_dump()`,
//! indexed by creation time (all, per owner, shared). The store is the document engine's.

use agno_storage_doc::layout::KNOWLEDGE_ROW;

use crate::docs::{score, TableLayout, DEFAULT_LAYOUT};

pub(crate) const TABLE: &str = "knowledge";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| KNOWLEDGE_ROW,
    score: |f| score(f, "created_at"),
    by_owner: |s, user| {
        Some(match user {
            Some(u) => s.idx(TABLE, &format!("created:user:{u}")),
            None => s.idx(TABLE, "created:shared"),
        })
    },
    all: Some(|s| s.idx(TABLE, "created:all")),
    ..DEFAULT_LAYOUT
};
