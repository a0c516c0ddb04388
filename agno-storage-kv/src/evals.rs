//! Eval runs: `{prefix}:evals:{run_id}` records as agno's `create_eval_run` lays them out
//! (`created_at`, `updated_at`, then the record's fields, then the owner), indexed by
//! creation time (all, per owner). The store is the document engine's.

use crate::docs::{score, TableLayout, DEFAULT_LAYOUT};

pub(crate) const TABLE: &str = "evals";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| {
        &[
            "created_at",
            "updated_at",
            "agent_id",
            "model_id",
            "model_provider",
            "team_id",
            "workflow_id",
            "name",
            "evaluated_component_name",
            "run_id",
            "eval_type",
            "eval_data",
            "eval_input",
            "user_id",
        ]
    },
    key_field: "run_id",
    score: |f| score(f, "created_at"),
    by_owner: |s, user| user.map(|u| s.idx(TABLE, &format!("created:user:{u}"))),
    all: Some(|s| s.idx(TABLE, "created:all")),
    ..DEFAULT_LAYOUT
};
