//! Knowledge contents: `{prefix}:knowledge:{id}` records as `KnowledgeRow.model_dump()`,
//! indexed by creation time (all, per owner, shared). The store is the document engine's.

use agno_storage_doc::layout::KNOWLEDGE_ROW;

use crate::docs::{no_extra, score, TableLayout};

pub(crate) const TABLE: &str = "knowledge";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: KNOWLEDGE_ROW,
    key_field: "id",
    score: |f| score(f, "created_at"),
    group_field: "user_id",
    by_owner: |s, user| {
        Some(match user {
            Some(u) => s.idx(TABLE, &format!("created:user:{u}")),
            None => s.idx(TABLE, "created:shared"),
        })
    },
    owners: None,
    owned: |_| true,
    all: Some(|s| s.idx(TABLE, "created:all")),
    extra: no_extra,
    unique_key: None,
    score_field: "created_at",
};
