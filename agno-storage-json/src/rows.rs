//! Rows of agno's JSON tables as the engine's documents: the layout a write takes (key
//! order, null handling, memory timestamps, keys this crate does not model carried forward:
//! agno's `workflow_name`, fields of newer agno releases) and the fields a read hands over.

use std::sync::LazyLock;

use agno_storage_core::{Error, ErrorKind, EvalRun, Result};
use agno_storage_doc::layout::{shape, shape_serde, Nulls, KNOWLEDGE_ROW, METRICS_ROW, RUN_ROW};
use agno_storage_doc::{Fields, LEGACY_RUNS};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde_json::Value;

use crate::files::{
    undecodable, undecodable_error, undecodable_field, undecodable_fields, undecodable_raw_field,
    Table, TableFile,
};

/// The string value of `key` in `row`.
pub(crate) fn text<'a>(row: &'a Value, key: &str) -> Option<&'a str> {
    row.get(key).and_then(Value::as_str)
}

/// Epoch seconds from a stored timestamp: an integer, a float, or an ISO-8601 string
/// (`2024-03-09T16:01:40`, with `Z`/offset, a space separator or a bare date). A naive
/// string is UTC, as agno's `to_epoch_s` reads it.
pub(crate) fn epoch_of(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => {
            let s = s.trim();
            if let Ok(t) = DateTime::parse_from_rfc3339(&s.replace(' ', "T")) {
                return Some(t.timestamp());
            }
            for format in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
                if let Ok(t) = NaiveDateTime::parse_from_str(s, format) {
                    return Some(t.and_utc().timestamp());
                }
            }
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|t| t.and_utc().timestamp())
        }
        _ => None,
    }
}

/// `ts` as a naive ISO-8601 string in UTC (`2024-03-09T16:01:40`), the shape of agno's
/// memory timestamps; agno and this crate read it back as the same instant on any host.
pub(crate) fn iso_utc(ts: i64) -> Value {
    match DateTime::from_timestamp(ts, 0) {
        Some(t) => Value::String(t.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string()),
        None => Value::from(ts),
    }
}

/// Replaces the timestamp fields `keys` of `row` by epoch seconds, so serde can decode them.
pub(crate) fn normalize_timestamps(row: &mut Value, keys: &[&str]) {
    let Some(map) = row.as_object_mut() else {
        return;
    };
    for key in keys {
        if let Some(v) = map.get_mut(*key) {
            if !v.is_null() && !v.is_i64() {
                if let Some(ts) = epoch_of(v) {
                    *v = Value::from(ts);
                }
            }
        }
    }
}

/// The row the engine's `fields` become in `table`, over `existing` (the row they replace),
/// laid out as agno's JSON stores write it. A session's legacy `runs` blob is the engine's
/// to keep or drop; every other key of `existing` the fields lack is carried forward.
pub(crate) fn layout(table: Table, mut fields: Fields, existing: Option<&Value>) -> Value {
    let (order, nulls): (&[&str], Nulls) = match table {
        Table::Sessions => {
            let order = match fields.get("session_type").and_then(Value::as_str) {
                Some("team") => TEAM_KEYS,
                Some("workflow") => WORKFLOW_KEYS,
                _ => AGENT_KEYS,
            };
            let runs = fields.shift_remove(LEGACY_RUNS);
            let mut row = shape(fields, order, Nulls::Keep, existing);
            if let Some(map) = row.as_object_mut() {
                // In its place when the row keeps it (an `IndexMap` insert keeps the slot).
                match runs.filter(|r| !r.is_null()) {
                    Some(runs) => {
                        map.insert(LEGACY_RUNS.into(), runs);
                    }
                    None => {
                        map.shift_remove(LEGACY_RUNS);
                    }
                }
            }
            return row;
        }
        Table::Runs => (RUN_ROW, Nulls::Keep),
        Table::Memories => {
            if let Some(ts) = fields.get("created_at").and_then(Value::as_i64) {
                fields.insert("created_at".into(), iso_utc(ts));
            }
            (MEMORY_KEYS, Nulls::Drop)
        }
        Table::Metrics => (METRICS_ROW, Nulls::Keep),
        Table::Evals => (&EVAL_KEYS[..], Nulls::Keep),
        Table::Knowledge => (KNOWLEDGE_ROW, Nulls::Keep),
        _ => return shape_serde(fields, existing),
    };
    shape(fields, order, nulls, existing)
}

/// A stored row as the engine reads it: timestamps agno writes as text (memories) as epoch
/// seconds, a session's `created_at` agno left null as its `updated_at` (else 0). A row this
/// crate cannot decode is a run's fields with its `run_data` as the stored text (the engine
/// names it unreadable and session reads pass the text on), and an error in other tables.
pub(crate) fn view(table: Table, mut row: Value) -> Result<Fields> {
    if let Some(stored) = undecodable(&row) {
        if table != Table::Runs {
            return Err(undecodable_row(table, &row, stored));
        }
        let mut fields = undecodable_fields(&row);
        if let Some(data) = undecodable_raw_field(&row, "run_data") {
            fields.insert("run_data".into(), Value::String(data));
        }
        return Ok(fields);
    }
    match table {
        Table::Memories => normalize_timestamps(&mut row, &["created_at", "updated_at"]),
        Table::Sessions => {
            if let Some(map) = row.as_object_mut() {
                if map.get("created_at").is_none_or(Value::is_null) {
                    let fallback = map.get("updated_at").cloned().filter(Value::is_i64);
                    map.insert("created_at".into(), fallback.unwrap_or(Value::from(0)));
                }
            }
        }
        _ => {}
    }
    match row {
        Value::Object(map) => Ok(map),
        other => Err(Error::new(
            ErrorKind::Serialization,
            format!(
                "{} holds a row that is not a JSON object ({other}); repair or remove it",
                table.file_name()
            ),
        )),
    }
}

/// The error of reading a row this crate cannot decode.
fn undecodable_row(table: Table, row: &Value, stored: &str) -> Error {
    let key = table.key_field();
    let id = undecodable_field(row, key).unwrap_or_else(|| "?".to_owned());
    Error::new(
        ErrorKind::Serialization,
        format!(
            "the row {key}={id:?} of {} holds JSON this crate cannot decode ({}); it is \
             kept as stored, and agno reads it",
            table.file_name(),
            undecodable_error(stored)
        ),
    )
}

/// A row's version: a digest of its content (keys, values and their order) under this
/// process's random hash keys, so a compare-and-set compares rows without keeping a copy of
/// each row read.
pub(crate) fn fingerprint(row: &Value) -> u64 {
    use std::hash::{BuildHasher, Hash, Hasher};
    static KEYS: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    fn feed(v: &Value, h: &mut impl Hasher) {
        match v {
            Value::Null => h.write_u8(0),
            Value::Bool(b) => {
                h.write_u8(1);
                b.hash(h);
            }
            Value::Number(n) => {
                h.write_u8(2);
                n.to_string().hash(h);
            }
            Value::String(s) => {
                h.write_u8(3);
                s.hash(h);
            }
            Value::Array(items) => {
                h.write_u8(4);
                h.write_usize(items.len());
                items.iter().for_each(|i| feed(i, h));
            }
            Value::Object(map) => {
                h.write_u8(5);
                h.write_usize(map.len());
                for (k, v) in map {
                    k.hash(h);
                    feed(v, h);
                }
            }
        }
    }
    let mut h = KEYS.get_or_init(Default::default).build_hasher();
    feed(row, &mut h);
    h.finish()
}

/// The document id of a stored row: its key, read from the text of an undecodable row.
pub(crate) fn row_id(table: Table, row: &Value) -> Option<String> {
    let key = table.key_field();
    match undecodable(row) {
        Some(_) => undecodable_field(row, key),
        None => text(row, key).map(str::to_owned),
    }
}

const AGENT_KEYS: &[&str] = &[
    "session_id",
    "agent_id",
    "team_id",
    "user_id",
    "workflow_id",
    "session_data",
    "metadata",
    "agent_data",
    "summary",
    "created_at",
    "updated_at",
    "session_type",
];
const TEAM_KEYS: &[&str] = &[
    "session_id",
    "team_id",
    "user_id",
    "workflow_id",
    "team_data",
    "session_data",
    "metadata",
    "summary",
    "created_at",
    "updated_at",
    "session_type",
];
const WORKFLOW_KEYS: &[&str] = &[
    "session_id",
    "user_id",
    "workflow_id",
    "workflow_name",
    "session_data",
    "workflow_data",
    "metadata",
    "created_at",
    "updated_at",
    "session_type",
];
const MEMORY_KEYS: &[&str] = &[
    "memory_id",
    "memory",
    "topics",
    "created_at",
    "updated_at",
    "input",
    "user_id",
    "agent_id",
    "team_id",
    "feedback",
];
/// agno's eval rows: the record's fields, then the timestamps.
static EVAL_KEYS: LazyLock<Vec<&str>> =
    LazyLock::new(|| [EvalRun::RECORD_FIELDS, &["created_at", "updated_at"][..]].concat());

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timestamps_parse_like_agno() {
        assert_eq!(epoch_of(&json!("2024-03-09T16:01:40")), Some(1_710_000_100));
        assert_eq!(
            epoch_of(&json!("2024-03-09T17:01:40+01:00")),
            Some(1_710_000_100)
        );
        assert_eq!(epoch_of(&json!("2024-03-09 16:01:40")), Some(1_710_000_100));
        assert_eq!(epoch_of(&json!(1_710_000_100)), Some(1_710_000_100));
        assert_eq!(iso_utc(1_710_000_100), json!("2024-03-09T16:01:40"));
    }

    #[test]
    fn shape_orders_and_carries_unknown_keys() {
        let existing = json!({"b": 1, "legacy": [1], "a": 0});
        let row = shape(
            json!({"a": 5, "c": null, "z": 2})
                .as_object()
                .cloned()
                .unwrap(),
            &["b", "a", "c"],
            Nulls::Keep,
            Some(&existing),
        );
        assert_eq!(
            row,
            json!({"b": 1, "a": 5, "c": null, "z": 2, "legacy": [1]})
        );
        assert_eq!(
            serde_json::to_string(&row).unwrap(),
            r#"{"b":1,"a":5,"c":null,"z":2,"legacy":[1]}"#
        );
    }
}
