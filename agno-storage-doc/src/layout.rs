//! Laying out a document body the way agno's Python writes it: its keys in agno's order,
//! nulls kept or dropped as agno's serializer does, and the keys of the stored body the
//! record does not model (fields of other agno releases) carried forward. For backends
//! whose stored text is compared byte for byte with agno's (JSON files, Redis/Valkey).

use serde_json::{Map, Value};

/// A run row as agno's `build_single_run_row` lays it out.
pub const RUN_ROW: &[&str] = &[
    "run_id",
    "session_id",
    "run_type",
    "agent_id",
    "team_id",
    "workflow_id",
    "user_id",
    "parent_run_id",
    "status",
    "run_index",
    "run_data",
    "created_at",
    "updated_at",
];

/// A metrics row as agno's `calculate_date_metrics` lays it out.
pub const METRICS_ROW: &[&str] = &[
    "id",
    "date",
    "completed",
    "token_metrics",
    "model_metrics",
    "created_at",
    "updated_at",
    "aggregation_period",
    "user_id",
    "users_count",
    "agent_sessions_count",
    "team_sessions_count",
    "workflow_sessions_count",
    "agent_runs_count",
    "team_runs_count",
    "workflow_runs_count",
];

/// agno's `KnowledgeRow` fields in `model_dump()` order: a knowledge row as every agno
/// store that writes JSON text lays it out.
pub const KNOWLEDGE_ROW: &[&str] = &[
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
];

/// Whether a null field is written (`asdict`, `model_dump`) or dropped (`UserMemory.to_dict`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nulls {
    /// Written as `null`.
    Keep,
    /// Left out.
    Drop,
}

/// Lays out a row: the `order` keys first (a key the record lacks takes the existing row's
/// value, else null), then the record's other non-null fields, then the existing row's keys
/// the record does not model. With [`Nulls::Drop`] null values are left out.
pub fn shape(
    mut fields: Map<String, Value>,
    order: &[&str],
    nulls: Nulls,
    existing: Option<&Value>,
) -> Value {
    let modeled: Vec<String> = fields.keys().cloned().collect();
    let old = existing.and_then(Value::as_object);
    let mut out = Map::with_capacity(fields.len() + 2);
    for key in order {
        let value = match fields.remove(*key) {
            Some(v) => v,
            None if modeled.iter().any(|m| m == key) => Value::Null,
            None => old
                .and_then(|o| o.get(*key))
                .cloned()
                .unwrap_or(Value::Null),
        };
        if nulls == Nulls::Keep || !value.is_null() {
            out.insert((*key).to_owned(), value);
        }
    }
    for (key, value) in fields {
        if !value.is_null() {
            out.insert(key, value);
        }
    }
    for (key, value) in old.into_iter().flatten() {
        if !out.contains_key(key) && !modeled.contains(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// Lays out a record that agno's JSON stores never wrote: its fields in declaration order
/// (nulls kept), then the existing row's keys it does not model.
pub fn shape_serde(fields: Map<String, Value>, existing: Option<&Value>) -> Value {
    let mut out = fields;
    for (key, value) in existing.and_then(Value::as_object).into_iter().flatten() {
        if !out.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
}
