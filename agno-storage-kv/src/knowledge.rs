//! Knowledge contents: `{prefix}:knowledge:{id}` records as `KnowledgeRow.model_dump()`,
//! indexed by creation time (all, per owner, shared). The store is the document engine's.

use agno_storage_doc::Fields;

use crate::cas::Entry;
use crate::docs::{score, text, TableLayout};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "knowledge";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: &[
        "id",
        "name",
        "description",
        "metadata",
        "type",
        "size",
        "linked_to",
        "access_count",
        "status",
        "status_message",
        "user_id",
        "created_at",
        "updated_at",
        "external_id",
    ],
    key_field: "id",
    entries,
    by_owner: |s, user| {
        Some(match user {
            Some(u) => s.idx(TABLE, &format!("created:user:{u}")),
            None => s.idx(TABLE, "created:shared"),
        })
    },
    all: |s| s.idx(TABLE, "created:all"),
    score_field: "created_at",
};

fn entries(s: &KvStore, id: &str, fields: &Fields) -> Vec<Entry> {
    let score = score(fields, "created_at");
    let mut entries = vec![Entry::z((LAYOUT.all)(s), id, score)];
    if let Some(index) = (LAYOUT.by_owner)(s, text(fields, "user_id")) {
        entries.push(Entry::z(index, id, score));
    }
    entries
}
