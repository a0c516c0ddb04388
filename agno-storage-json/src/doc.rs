//! Records as rows of agno's JSON tables: key order, null handling, timestamps, and
//! carrying forward keys this crate does not model (agno's `workflow_name`, a legacy `runs`
//! blob, fields of newer agno releases).

use agno_storage_core::{Error, ErrorKind, Result};
use chrono::{DateTime, NaiveDate, NaiveDateTime};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::files::{undecodable, undecodable_error, undecodable_field, Table, TableFile};

/// A record stored as one row of one table.
pub(crate) trait Doc: Sized {
    /// Its table.
    const TABLE: Table;
    /// Its primary-key field.
    const KEY: &'static str;

    /// Decodes a row (as agno or this crate wrote it).
    fn decode(row: &Value) -> Result<Self>;

    /// Encodes the record, keeping the keys of `existing` it does not model.
    fn encode(&self, existing: Option<&Value>) -> Result<Value>;
}

/// Whether a null field is written (`asdict`, `model_dump`) or dropped (`UserMemory.to_dict`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nulls {
    Keep,
    Drop,
}

/// The string value of `key` in `row`.
pub(crate) fn text<'a>(row: &'a Value, key: &str) -> Option<&'a str> {
    row.get(key).and_then(Value::as_str)
}

/// The index of the first row whose `key` is `id` (a row kept undecoded included).
pub(crate) fn position(rows: &[Value], key: &str, id: &str) -> Option<usize> {
    rows.iter().position(|r| {
        text(r, key) == Some(id)
            || (undecodable(r).is_some() && undecodable_field(r, key).as_deref() == Some(id))
    })
}

/// Decodes `row` into `T` with serde, naming the table and row on failure.
pub(crate) fn from_row<T: DeserializeOwned>(table: Table, key: &str, row: &Value) -> Result<T> {
    if let Some(stored) = undecodable(row) {
        let id = undecodable_field(row, key).unwrap_or_else(|| "?".to_owned());
        return Err(Error::new(
            ErrorKind::Serialization,
            format!(
                "the row {key}={id:?} of {} holds JSON this crate cannot decode ({}); it is \
                 kept as stored, and agno reads it",
                table.file_name(),
                undecodable_error(stored)
            ),
        ));
    }
    let id = text(row, key).unwrap_or("?").to_owned();
    agno_storage_core::json::from_ref(row).map_err(|e| {
        Error::new(
            ErrorKind::Serialization,
            format!(
                "cannot decode the row {key}={id:?} of {}: {e}; repair or remove that row",
                table.file_name()
            ),
        )
        .with_source(e)
    })
}

/// The fields of a record as a JSON object.
pub(crate) fn fields<T: Serialize>(record: &T) -> Result<Map<String, Value>> {
    match serde_json::to_value(record) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(Error::new(
            ErrorKind::Serialization,
            "a record did not serialize to a JSON object",
        )),
        Err(e) => Err(Error::serialization("a record", e)),
    }
}

/// Lays out a row: the `order` keys first (a key the record lacks takes the existing row's
/// value, else null), then the record's other non-null fields, then the existing row's keys
/// the record does not model. With [`Nulls::Drop`] null values are left out.
pub(crate) fn shape(
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
            None => old.and_then(|o| o.get(*key)).cloned().unwrap_or(Value::Null),
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
pub(crate) fn shape_serde(fields: Map<String, Value>, existing: Option<&Value>) -> Value {
    let mut out = fields;
    for (key, value) in existing.and_then(Value::as_object).into_iter().flatten() {
        if !out.contains_key(key) {
            out.insert(key.clone(), value.clone());
        }
    }
    Value::Object(out)
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

/// Decodes every row of a table.
pub(crate) fn decode_all<T: Doc>(rows: &[Value]) -> Result<Vec<T>> {
    rows.iter().map(T::decode).collect()
}

/// The first row with `id`, decoded.
pub(crate) fn find<T: Doc>(rows: &[Value], id: &str) -> Result<Option<(usize, T)>> {
    match position(rows, T::KEY, id) {
        Some(i) => Ok(Some((i, T::decode(&rows[i])?))),
        None => Ok(None),
    }
}

/// Writes `record` over row `index`, or appends it.
pub(crate) fn put<T: Doc>(rows: &mut Vec<Value>, index: Option<usize>, record: &T) -> Result<()> {
    match index {
        Some(i) => rows[i] = record.encode(Some(&rows[i]))?,
        None => rows.push(record.encode(None)?),
    }
    Ok(())
}

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
            json!({"a": 5, "c": null, "z": 2}).as_object().cloned().unwrap(),
            &["b", "a", "c"],
            Nulls::Keep,
            Some(&existing),
        );
        assert_eq!(row, json!({"b": 1, "a": 5, "c": null, "z": 2, "legacy": [1]}));
        assert_eq!(
            serde_json::to_string(&row).unwrap(),
            r#"{"b":1,"a":5,"c":null,"z":2,"legacy":[1]}"#
        );
    }
}
