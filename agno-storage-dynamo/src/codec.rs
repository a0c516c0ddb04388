//! JSON ⇄ DynamoDB items with agno's encoding (`db/dynamo/utils.py`): `None` omitted,
//! bool as `BOOL`, numbers as `N`, strings as `S`, objects and arrays as an `S` holding
//! their JSON text as Python's `json.dumps` writes it (`", "`/`": "` separators, non-ASCII
//! escaped), byte for byte. Reading decodes an `S` back only when it holds a JSON object or array.

use std::collections::HashMap;

use agno_storage_core::json::to_python_json;
use agno_storage_core::{Error, ErrorKind, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Number, Value};

pub(crate) const BACKEND: &str = "dynamodb";

/// One DynamoDB item.
pub(crate) type Item = HashMap<String, AttributeValue>;

/// A JSON value as an attribute; `None` for null (agno omits it).
pub(crate) fn attr(value: &Value) -> Option<AttributeValue> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => AttributeValue::Bool(*b),
        Value::Number(n) => AttributeValue::N(n.to_string()),
        Value::String(s) => AttributeValue::S(s.clone()),
        Value::Array(_) | Value::Object(_) => AttributeValue::S(to_python_json(value)),
    })
}

/// A JSON object as an item.
pub(crate) fn to_item(value: &Value) -> Item {
    match value {
        Value::Object(map) => map
            .iter()
            .filter_map(|(k, v)| attr(v).map(|a| (k.clone(), a)))
            .collect(),
        _ => Item::new(),
    }
}

fn number(text: &str) -> Value {
    if let Ok(i) = text.parse::<i64>() {
        return Value::from(i);
    }
    text.parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map_or_else(|| Value::String(text.to_owned()), Value::Number)
}

/// An attribute as JSON; an `S` holding a JSON object or array is decoded.
pub(crate) fn value(attr: &AttributeValue) -> Value {
    match attr {
        AttributeValue::S(s) => match agno_storage_core::json::from_str::<Value>(s) {
            Ok(v @ (Value::Object(_) | Value::Array(_))) => v,
            _ => Value::String(s.clone()),
        },
        other => plain(other),
    }
}

/// An attribute as JSON, an `S` kept as the string it is.
fn plain(attr: &AttributeValue) -> Value {
    match attr {
        AttributeValue::S(s) => Value::String(s.clone()),
        AttributeValue::N(n) => number(n),
        AttributeValue::Bool(b) => Value::Bool(*b),
        AttributeValue::Null(_) => Value::Null,
        AttributeValue::L(items) => Value::Array(items.iter().map(value).collect()),
        AttributeValue::M(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), value(v)))
                .collect::<Map<String, Value>>(),
        ),
        AttributeValue::Ss(items) => {
            Value::Array(items.iter().cloned().map(Value::String).collect())
        }
        AttributeValue::Ns(items) => Value::Array(items.iter().map(|n| number(n)).collect()),
        _ => Value::Null,
    }
}

/// An item as a JSON object. Only the attributes named in `json` (the record's object and
/// array fields) have their `S` decoded as JSON: an identifier or text that happens to look
/// like JSON stays a string.
pub(crate) fn from_item(item: &Item, json: &[&str]) -> Map<String, Value> {
    item.iter()
        .map(|(k, v)| {
            let decoded = if json.contains(&k.as_str()) {
                value(v)
            } else {
                plain(v)
            };
            (k.clone(), decoded)
        })
        .collect()
}

/// A record as JSON (serde field names).
pub(crate) fn to_json<T: Serialize>(record: &T, what: &str) -> Result<Value> {
    serde_json::to_value(record).map_err(|e| Error::serialization(what, e).with_backend(BACKEND))
}

/// A record as an item.
pub(crate) fn record_item<T: Serialize>(record: &T, what: &str) -> Result<Item> {
    Ok(to_item(&to_json(record, what)?))
}

/// A JSON object as a record.
pub(crate) fn from_json<T: DeserializeOwned>(map: Map<String, Value>, what: &str) -> Result<T> {
    agno_storage_core::json::from_value(Value::Object(map))
        .map_err(|e| Error::serialization(what, e).with_backend(BACKEND))
}

/// The string attribute `name` of an item.
pub(crate) fn s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    match item.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// The numeric attribute `name` of an item as an integer.
pub(crate) fn n(item: &Item, name: &str) -> Option<i64> {
    match item.get(name) {
        Some(AttributeValue::N(n)) => n
            .parse::<i64>()
            .ok()
            .or_else(|| n.parse::<f64>().ok().map(|f| f as i64)),
        _ => None,
    }
}

/// A string attribute.
pub(crate) fn sv(text: &str) -> AttributeValue {
    AttributeValue::S(text.to_owned())
}

/// A numeric attribute.
pub(crate) fn nv(n: i64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// An error raised by this crate's own checks.
pub(crate) fn err(kind: ErrorKind, message: impl Into<String>) -> Error {
    Error::new(kind, message).with_backend(BACKEND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agno_encoding_round_trips() {
        let v = serde_json::json!({"a": {"x": [1, 2], "ü": "é"}, "b": true, "c": 3, "d": 2.5, "e": "t", "f": null, "g": "42", "h": "{\"$ne\": null}"});
        let item = to_item(&v);
        assert!(!item.contains_key("f"));
        assert_eq!(
            item.get("a"),
            // `json.dumps`: spaced separators, non-ASCII escaped.
            Some(&AttributeValue::S(
                "{\"x\": [1, 2], \"\\u00fc\": \"\\u00e9\"}".into()
            ))
        );
        assert_eq!(item.get("b"), Some(&AttributeValue::Bool(true)));
        let back = Value::Object(from_item(&item, &["a"]));
        let mut expected = v.clone();
        if let Value::Object(m) = &mut expected {
            m.remove("f");
        }
        assert_eq!(back, expected);
    }
}
