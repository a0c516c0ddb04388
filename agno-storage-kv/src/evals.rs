//! Eval runs: `{prefix}:evals:{run_id}` records as agno's `create_eval_run` lays them out
//! (`created_at`, `updated_at`, then the record's fields, then the owner), indexed by
//! creation time (all, per owner). The store is the document engine's.

use std::sync::LazyLock;

use agno_storage_core::EvalRun;

use crate::docs::{score, TableLayout, DEFAULT_LAYOUT};

pub(crate) const TABLE: &str = "evals";

/// agno's order: the timestamps, the record's fields, the owner.
static ORDER: LazyLock<Vec<&str>> = LazyLock::new(|| {
    [
        &["created_at", "updated_at"][..],
        EvalRun::RECORD_FIELDS,
        &["user_id"],
    ]
    .concat()
});

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| &ORDER[..],
    key_field: "run_id",
    score: |f| score(f, "created_at"),
    by_owner: |s, user| user.map(|u| s.idx(TABLE, &format!("created:user:{u}"))),
    all: Some(|s| s.idx(TABLE, "created:all")),
    ..DEFAULT_LAYOUT
};
