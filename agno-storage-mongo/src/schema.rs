//! Index definitions: agno 3.1.10's `db/mongo/schemas.py`, names included.

use mongodb::bson::{doc, Document};

/// The pre-v3 unique `(date, aggregation_period)` metrics index, dropped on open.
pub(crate) const LEGACY_METRICS_INDEX: &str = "date_1_aggregation_period_1";

/// The per-owner unique schedule-name index.
pub(crate) const UQ_USER_NAME: &str = "uq_user_name";

/// One index: ascending keys, its name (pymongo's default `k1_1_k2_1` unless given) and
/// options.
pub(crate) struct IndexSpec {
    keys: Vec<&'static str>,
    unique: bool,
    name: Option<&'static str>,
    partial: Option<Document>,
}

impl IndexSpec {
    pub(crate) fn to_doc(&self) -> Document {
        let mut key = Document::new();
        for k in &self.keys {
            key.insert(*k, 1i32);
        }
        let name = match self.name {
            Some(n) => n.to_owned(),
            None => self
                .keys
                .iter()
                .map(|k| format!("{k}_1"))
                .collect::<Vec<_>>()
                .join("_"),
        };
        let mut d = doc! {"key": key, "name": name};
        if self.unique {
            d.insert("unique", true);
        }
        if let Some(p) = &self.partial {
            d.insert("partialFilterExpression", p.clone());
        }
        d
    }
}

fn plain(keys: &[&'static str]) -> Vec<IndexSpec> {
    keys.iter()
        .map(|k| IndexSpec {
            keys: vec![k],
            unique: false,
            name: None,
            partial: None,
        })
        .collect()
}

fn unique(key: &'static str) -> IndexSpec {
    IndexSpec {
        keys: vec![key],
        unique: true,
        name: None,
        partial: None,
    }
}

fn compound(keys: &[&'static str], unique: bool, name: Option<&'static str>) -> IndexSpec {
    IndexSpec {
        keys: keys.to_vec(),
        unique,
        name,
        partial: None,
    }
}

fn with(first: IndexSpec, rest: Vec<IndexSpec>, tail: Vec<IndexSpec>) -> Vec<IndexSpec> {
    let mut all = vec![first];
    all.extend(rest);
    all.extend(tail);
    all
}

pub(crate) fn sessions() -> Vec<IndexSpec> {
    with(
        unique("session_id"),
        plain(&[
            "user_id",
            "session_type",
            "agent_id",
            "team_id",
            "workflow_id",
            "created_at",
            "updated_at",
        ]),
        vec![],
    )
}

pub(crate) fn runs() -> Vec<IndexSpec> {
    with(
        unique("run_id"),
        plain(&[
            "session_id",
            "run_type",
            "agent_id",
            "team_id",
            "workflow_id",
            "user_id",
            "parent_run_id",
            "status",
            "created_at",
            "updated_at",
        ]),
        vec![compound(&["session_id", "run_index"], false, None)],
    )
}

pub(crate) fn memories() -> Vec<IndexSpec> {
    with(
        unique("memory_id"),
        plain(&[
            "user_id",
            "agent_id",
            "team_id",
            "topics",
            "input",
            "feedback",
            "created_at",
            "updated_at",
        ]),
        vec![],
    )
}

pub(crate) fn metrics() -> Vec<IndexSpec> {
    with(
        unique("id"),
        plain(&[
            "date",
            "aggregation_period",
            "user_id",
            "created_at",
            "updated_at",
        ]),
        vec![compound(
            &["user_id", "date", "aggregation_period"],
            true,
            None,
        )],
    )
}

pub(crate) fn evals() -> Vec<IndexSpec> {
    with(
        unique("run_id"),
        plain(&[
            "eval_type",
            "eval_input",
            "agent_id",
            "team_id",
            "workflow_id",
            "model_id",
            "user_id",
            "created_at",
            "updated_at",
        ]),
        vec![],
    )
}

pub(crate) fn knowledge() -> Vec<IndexSpec> {
    with(
        unique("id"),
        plain(&[
            "name",
            "description",
            "type",
            "status",
            "status_message",
            "metadata",
            "size",
            "linked_to",
            "access_count",
            "created_at",
            "updated_at",
            "external_id",
        ]),
        vec![],
    )
}

pub(crate) fn learnings() -> Vec<IndexSpec> {
    with(
        unique("learning_id"),
        plain(&[
            "learning_type",
            "namespace",
            "user_id",
            "agent_id",
            "team_id",
            "workflow_id",
            "session_id",
            "entity_id",
            "entity_type",
            "created_at",
            "updated_at",
        ]),
        vec![],
    )
}

pub(crate) fn schedules() -> Vec<IndexSpec> {
    with(
        unique("id"),
        plain(&[
            "name",
            "enabled",
            "next_run_at",
            "locked_by",
            "locked_at",
            "user_id",
            "managed_by",
            "target_id",
            "created_at",
            "updated_at",
        ]),
        vec![
            compound(&["enabled", "next_run_at"], false, None),
            compound(&["user_id", "enabled", "next_run_at"], false, None),
            compound(&["user_id", "name"], true, Some(UQ_USER_NAME)),
        ],
    )
}

pub(crate) fn schedule_runs() -> Vec<IndexSpec> {
    with(
        unique("id"),
        plain(&[
            "schedule_id",
            "status",
            "triggered_at",
            "completed_at",
            "user_id",
            "created_at",
        ]),
        vec![],
    )
}

/// Ours (agno's `MongoDb` has no job queue): unique id, idempotency keys unique per user
/// (only where a key is set), and the claim order.
pub(crate) fn jobs() -> Vec<IndexSpec> {
    with(
        unique("id"),
        plain(&["session_id", "user_id", "status"]),
        vec![
            IndexSpec {
                keys: vec!["user_id", "idempotency_key"],
                unique: true,
                name: Some("uq_user_idempotency_key"),
                partial: Some(doc! {"idempotency_key": {"$type": "string"}}),
            },
            compound(&["status", "available_at", "created_at"], false, None),
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_are_pymongos() {
        let names: Vec<String> = schedules()
            .iter()
            .map(|s| s.to_doc().get_str("name").unwrap_or_default().to_owned())
            .collect();
        assert!(names.contains(&"user_id_1_enabled_1_next_run_at_1".to_owned()));
        assert!(names.contains(&UQ_USER_NAME.to_owned()));
        let runs: Vec<String> = runs()
            .iter()
            .map(|s| s.to_doc().get_str("name").unwrap_or_default().to_owned())
            .collect();
        assert_eq!(runs.first().map(String::as_str), Some("run_id_1"));
        assert!(runs.contains(&"session_id_1_run_index_1".to_owned()));
    }
}
