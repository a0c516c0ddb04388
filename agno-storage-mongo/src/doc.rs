//! BSON ⇄ records and JSON, driver errors ⇄ [`agno_storage_core::Error`], filter helpers.

use agno_storage_core::{Error, ErrorKind, Result};
use mongodb::bson::{self, doc, Bson, Document};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

pub(crate) const BACKEND: &str = "mongodb";

/// MongoDB's duplicate-key error code.
const DUPLICATE_KEY: i32 = 11000;

/// A driver error as a storage error: unreachable servers are `Unavailable`, a duplicate
/// key is `AlreadyExists`, anything else `Unexpected`.
pub(crate) fn db_err(operation: &'static str) -> impl FnOnce(mongodb::error::Error) -> Error {
    move |e| {
        use mongodb::error::ErrorKind as K;
        let kind = match e.kind.as_ref() {
            K::Io(_) | K::ServerSelection { .. } | K::ConnectionPoolCleared { .. } => {
                ErrorKind::Unavailable
            }
            _ if is_duplicate_key(&e) => ErrorKind::AlreadyExists,
            _ => ErrorKind::Unexpected,
        };
        Error::new(kind, e.to_string())
            .with_backend(BACKEND)
            .with_operation(operation)
            .with_source(e)
    }
}

/// Whether `e` is a unique-index violation.
pub(crate) fn is_duplicate_key(e: &mongodb::error::Error) -> bool {
    use mongodb::error::{ErrorKind as K, WriteFailure};
    match e.kind.as_ref() {
        K::Write(WriteFailure::WriteError(w)) => w.code == DUPLICATE_KEY,
        K::Command(c) => c.code == DUPLICATE_KEY,
        K::InsertMany(m) => m
            .write_errors
            .as_ref()
            .is_some_and(|errs| errs.iter().any(|w| w.code == DUPLICATE_KEY)),
        _ => false,
    }
}

fn ser_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("cannot encode {what}: {e}"),
    )
    .with_backend(BACKEND)
}

fn de_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("cannot decode {what}: {e}"),
    )
    .with_backend(BACKEND)
}

/// A record as a document (serde field names, `None` as null).
pub(crate) fn to_doc<T: Serialize>(record: &T, what: &str) -> Result<Document> {
    bson::serialize_to_document(record).map_err(|e| ser_err(what, e))
}

/// A JSON value as BSON.
pub(crate) fn to_bson(value: &Value, what: &str) -> Result<Bson> {
    bson::serialize_to_bson(value).map_err(|e| ser_err(what, e))
}

/// A stored document as a record, ignoring `_id` and fields the record does not know.
pub(crate) fn from_doc<T: DeserializeOwned>(mut doc: Document, what: &str) -> Result<T> {
    doc.remove("_id");
    bson::deserialize_from_document(doc).map_err(|e| de_err(what, e))
}

/// A BSON value as JSON: numbers stay numbers, nested documents become objects in stored
/// key order; other BSON types (ObjectId, dates, binary) become their relaxed extended JSON.
pub(crate) fn to_json(value: Bson) -> Value {
    match value {
        Bson::Null | Bson::Undefined => Value::Null,
        Bson::Boolean(b) => Value::Bool(b),
        Bson::Int32(i) => Value::from(i),
        Bson::Int64(i) => Value::from(i),
        Bson::Double(f) => serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number),
        Bson::String(s) | Bson::Symbol(s) => Value::String(s),
        Bson::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Bson::Document(d) => doc_to_json(d),
        Bson::ObjectId(oid) => Value::String(oid.to_hex()),
        Bson::DateTime(dt) => Value::from(dt.timestamp_millis() / 1000),
        other => Value::String(other.to_string()),
    }
}

/// A document as a JSON object.
pub(crate) fn doc_to_json(doc: Document) -> Value {
    Value::Object(
        doc.into_iter()
            .map(|(k, v)| (k, to_json(v)))
            .collect::<Map<String, Value>>(),
    )
}

/// Matches rows `writer` may overwrite: unowned (null or missing `user_id`), or its own.
pub(crate) fn writable_filter(writer: Option<&str>) -> Document {
    match writer {
        Some(u) => doc! {"user_id": {"$in": [Bson::Null, u]}},
        None => doc! {"user_id": Bson::Null},
    }
}

/// Adds the strict owner filter of a scoped read (`user_id == caller`) when `caller` is set.
pub(crate) fn scope(filter: &mut Document, caller: Option<&str>) {
    if let Some(u) = caller {
        filter.insert("user_id", u);
    }
}

/// An optional string as BSON (`None` as null).
pub(crate) fn opt(value: Option<&str>) -> Bson {
    value.map_or(Bson::Null, |v| Bson::String(v.to_owned()))
}

/// Escapes `text` for a literal match inside a regular expression.
pub(crate) fn regex_literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\^$.|?*+()[]{}/-".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regex_literal_matches_only_itself() {
        assert_eq!(regex_literal("a.b*"), "a\\.b\\*");
        assert_eq!(regex_literal("{\"$ne\": null}"), "\\{\"\\$ne\": null\\}");
    }

    #[test]
    fn json_round_trips_through_bson() {
        let v = serde_json::json!({"b": [1, 2.5, true, null], "a": "t\u{e4}", "n": {"x": -7}});
        assert_eq!(to_json(to_bson(&v, "test").unwrap()), v);
    }
}
