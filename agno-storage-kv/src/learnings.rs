//! Learnings: `{prefix}:learnings:{learning_id}` records in agno `ValkeyDb`'s layout (agno's
//! `RedisDb` has no learnings), indexed by last update (all, per owner, global). The store
//! is the document engine's.

use agno_storage_doc::Fields;

use crate::cas::Entry;
use crate::docs::{score, text, TableLayout};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "learnings";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: &[
        "learning_id",
        "learning_type",
        "namespace",
        "user_id",
        "agent_id",
        "team_id",
        "workflow_id",
        "session_id",
        "entity_id",
        "entity_type",
        "content",
        "metadata",
        "created_at",
        "updated_at",
    ],
    key_field: "learning_id",
    entries,
    by_owner: |s, user| {
        Some(match user {
            Some(u) => s.idx(TABLE, &format!("updated:user:{u}")),
            None => s.idx(TABLE, "updated:global"),
        })
    },
    all: |s| s.idx(TABLE, "updated:all"),
    score_field: "updated_at",
};

fn entries(s: &KvStore, id: &str, fields: &Fields) -> Vec<Entry> {
    let score = match fields.get("updated_at").filter(|v| !v.is_null()) {
        Some(_) => score(fields, "updated_at"),
        None => score(fields, "created_at"),
    };
    let mut entries = vec![Entry::z((LAYOUT.all)(s), id, score)];
    if let Some(index) = (LAYOUT.by_owner)(s, text(fields, "user_id")) {
        entries.push(Entry::z(index, id, score));
    }
    entries
}
