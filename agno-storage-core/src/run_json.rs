//! Run dicts as a session read hands them over: JSON, parsed only when asked.

use std::borrow::Cow;
use std::fmt;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::legacy::decode_legacy_json;
use crate::run::RunRecord;

/// One run dict of [`crate::Session::runs`].
///
/// A store that keeps runs as JSON text (SQL) hands each one over as checked, unparsed
/// text, so reading a long session does not build a tree per run; other stores hand over
/// the parsed value. Either way [`RunJson::to_value`] gives the dict, [`RunJson::fields`]
/// reads a few keys without building the rest, and equality compares the dicts (not the
/// text). With serde, a run serializes as the dict it holds and deserializes from any dict.
#[derive(Clone)]
pub struct RunJson(Repr);

#[derive(Clone)]
enum Repr {
    Parsed(Value),
    Text(Box<RawValue>),
}

impl RunJson {
    /// A run dict as a store keeps it in a JSON text column. An object is checked to be
    /// well-formed JSON and kept as text; anything else is decoded as agno 2.x may have
    /// written it (a double-encoded string is unwrapped, JSON `null` becomes `null`).
    /// Malformed JSON is a [`crate::ErrorKind::Serialization`] error.
    pub fn from_stored_text(text: String) -> Result<Self> {
        if text.trim_start().starts_with('{') {
            return RawValue::from_string(text)
                .map(|raw| RunJson(Repr::Text(raw)))
                .map_err(|e| Error::serialization("a run's JSON", e));
        }
        Ok(RunJson(Repr::Parsed(
            decode_legacy_json(Some(&text))?.unwrap_or(Value::Null),
        )))
    }

    /// The dict, parsed now when it is held as text.
    pub fn to_value(&self) -> Result<Value> {
        self.as_value().map(Cow::into_owned)
    }

    /// The dict, borrowed when it is already parsed.
    pub fn as_value(&self) -> Result<Cow<'_, Value>> {
        match &self.0 {
            Repr::Parsed(value) => Ok(Cow::Borrowed(value)),
            Repr::Text(raw) => crate::json::parse_value(raw.get().as_bytes())
                .map(Cow::Owned)
                .map_err(|e| Error::serialization("a run's JSON", e)),
        }
    }

    /// The dict, consumed.
    pub fn into_value(self) -> Result<Value> {
        match self.0 {
            Repr::Parsed(value) => Ok(value),
            Repr::Text(raw) => crate::json::parse_value(raw.get().as_bytes())
                .map_err(|e| Error::serialization("a run's JSON", e)),
        }
    }

    /// The JSON text as the store holds it, when it was handed over unparsed: ready to be
    /// written into a JSON response as it is.
    pub fn as_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::Parsed(_) => None,
            Repr::Text(raw) => Some(raw.get()),
        }
    }

    /// Reads the dict into `T`, skipping the keys `T` does not name, without building a
    /// tree of the rest when the dict is held as text.
    pub fn fields<T: DeserializeOwned>(&self) -> Result<T> {
        match &self.0 {
            Repr::Parsed(value) => T::deserialize(value),
            Repr::Text(raw) => serde_json::from_str(raw.get()),
        }
        .map_err(|e| Error::serialization("a run's fields", e))
    }

    /// The dict's `run_id`, when it is a non-empty string.
    pub fn run_id(&self) -> Option<String> {
        #[derive(Deserialize)]
        struct RunId {
            run_id: Option<Value>,
        }
        match self.fields::<RunId>().ok()?.run_id? {
            Value::String(id) if !id.is_empty() => Some(id),
            _ => None,
        }
    }

    /// [`RunRecord::is_context_run`] of the dict. A dict that cannot be read as an object
    /// has neither `parent_run_id` nor `status`, so it is a context run, as for a value.
    pub fn is_context_run(&self) -> bool {
        #[derive(Deserialize)]
        struct ContextFields {
            parent_run_id: Option<Value>,
            status: Option<Value>,
        }
        match &self.0 {
            Repr::Parsed(value) => RunRecord::is_context_run(value),
            Repr::Text(_) => self.fields::<ContextFields>().map_or(true, |f| {
                let mut dict = serde_json::Map::new();
                dict.extend(f.parent_run_id.map(|p| ("parent_run_id".to_owned(), p)));
                dict.extend(f.status.map(|s| ("status".to_owned(), s)));
                RunRecord::is_context_run(&Value::Object(dict))
            }),
        }
    }
}

impl From<Value> for RunJson {
    fn from(value: Value) -> Self {
        RunJson(Repr::Parsed(value))
    }
}

impl PartialEq for RunJson {
    /// Equal dicts, whatever their text: key order and spacing do not count.
    fn eq(&self, other: &Self) -> bool {
        if let (Some(a), Some(b)) = (self.as_text(), other.as_text()) {
            if a == b {
                return true;
            }
        }
        match (self.as_value(), other.as_value()) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl PartialEq<Value> for RunJson {
    fn eq(&self, other: &Value) -> bool {
        self.as_value().is_ok_and(|v| *v == *other)
    }
}

impl fmt::Debug for RunJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Repr::Parsed(value) => fmt::Debug::fmt(value, f),
            Repr::Text(raw) => f.write_str(raw.get()),
        }
    }
}

impl Serialize for RunJson {
    /// The dict (parsed first when held as text, so every format sees a map, not text).
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.as_value()
            .map_err(serde::ser::Error::custom)?
            .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for RunJson {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        Value::deserialize(deserializer).map(RunJson::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stored_text_is_kept_unparsed_and_reads_back_as_the_dict() {
        let run = RunJson::from_stored_text(r#"{"run_id": "r1", "status": "COMPLETED"}"#.into())
            .expect("valid JSON");
        assert_eq!(
            run.as_text(),
            Some(r#"{"run_id": "r1", "status": "COMPLETED"}"#)
        );
        assert_eq!(
            run.to_value().expect("parses"),
            json!({"run_id": "r1", "status": "COMPLETED"})
        );
        assert_eq!(
            run,
            RunJson::from(json!({"status": "COMPLETED", "run_id": "r1"}))
        );
        assert_eq!(
            serde_json::to_value(&run).expect("serializes"),
            json!({"run_id": "r1", "status": "COMPLETED"})
        );
    }

    #[test]
    fn double_encoded_and_null_text_decode_as_agno_2_wrote_them() {
        let doubled = serde_json::to_string(r#"{"run_id":"r1"}"#).expect("encodes");
        let run = RunJson::from_stored_text(doubled).expect("decodes");
        assert_eq!(run, json!({"run_id": "r1"}));
        assert_eq!(run.as_text(), None);
        let null = RunJson::from_stored_text("null".into()).expect("decodes");
        assert_eq!(null, Value::Null);
    }

    #[test]
    fn malformed_text_is_a_serialization_error() {
        let err = RunJson::from_stored_text(r#"{"run_id": "r1""#.into()).expect_err("malformed");
        assert_eq!(err.kind(), crate::ErrorKind::Serialization);
        assert!(err.message().contains("run's JSON"), "{}", err.message());
    }

    #[test]
    fn context_runs_are_the_same_for_text_and_value() {
        for dict in [
            json!({"run_id": "a"}),
            json!({"run_id": "a", "parent_run_id": "p"}),
            json!({"run_id": "a", "parent_run_id": ""}),
            json!({"run_id": "a", "parent_run_id": null}),
            json!({"run_id": "a", "status": "PAUSED"}),
            json!({"run_id": "a", "status": "COMPLETED"}),
            json!({"run_id": "a", "status": 3}),
        ] {
            let text = RunJson::from_stored_text(dict.to_string()).expect("valid JSON");
            assert_eq!(
                text.is_context_run(),
                RunRecord::is_context_run(&dict),
                "{dict}"
            );
        }
    }

    #[test]
    fn fields_reads_named_keys_only() {
        #[derive(Deserialize)]
        struct Model {
            model: Option<String>,
        }
        let run = RunJson::from_stored_text(r#"{"model": "gpt-4o", "x": [1, {"y": 2}]}"#.into())
            .expect("valid JSON");
        let model: Model = run.fields().expect("reads");
        assert_eq!(model.model.as_deref(), Some("gpt-4o"));
        assert_eq!(run.run_id(), None);
        let run = RunJson::from(json!({"run_id": "r1"}));
        assert_eq!(run.run_id().as_deref(), Some("r1"));
    }
}
