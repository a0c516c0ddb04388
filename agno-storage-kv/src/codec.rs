//! Value encoding: JSON text as agno's Redis adapters write it, and lenient field readers
//! for records written by any agno version.

use agno_storage_core::json::{to_python_json, to_python_json_with, PythonJson};
use agno_storage_core::{Error, ErrorKind, Result};
use serde_json::{Map, Value};

/// `value` as agno's `RedisDb`/`ValkeyDb` `serialize_data` writes it:
/// `json.dumps(value, ensure_ascii=False)`. Python's default separators; only control
/// characters are escaped, everything else (non-ASCII, DEL) is written as is.
pub(crate) fn encode(value: &Value) -> String {
    to_python_json_with(
        value,
        PythonJson {
            ensure_ascii: false,
            indent: None,
        },
    )
}

/// `value` as `json.dumps(value)` with its default `ensure_ascii=True` (agno's job tickets).
pub(crate) fn encode_ascii(value: &Value) -> String {
    to_python_json(value)
}

/// Parses a stored record; anything but a JSON object is a `Serialization` error naming
/// the key.
pub(crate) fn decode_object(key: &str, raw: &str) -> Result<Map<String, Value>> {
    match agno_storage_core::json::from_str::<Value>(raw) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(Error::new(
            ErrorKind::Serialization,
            format!("{key} does not hold a JSON object (found {other:.40})"),
        )),
        Err(e) => Err(Error::serialization(key, e)),
    }
}

/// A string field; `null`, absent and non-strings are `None`.
pub(crate) fn text(map: &Map<String, Value>, field: &str) -> Option<String> {
    map.get(field).and_then(Value::as_str).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_like_python_without_ascii_escapes() {
        let v = json!({"a": "tä🍵\n\"q\"\u{7f}\u{1}", "b": [1, 2.5, null]});
        assert_eq!(
            encode(&v),
            "{\"a\": \"tä🍵\\n\\\"q\\\"\u{7f}\\u0001\", \"b\": [1, 2.5, null]}"
        );
        assert_eq!(encode(&json!("\\u00e4")), "\"\\\\u00e4\"");
        assert_eq!(encode_ascii(&json!({"x": "ü"})), "{\"x\": \"\\u00fc\"}");
    }
}
