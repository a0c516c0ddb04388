//! Tables as Python's `json.dump(rows, f, indent=2)` writes them (agno's file format).
//!
//! Scalars and keys come from [`agno_storage_core::json::to_python_json`] (ASCII escapes,
//! Python float repr); this module adds the `indent=2` layout: one item per line, `","`
//! between items, `": "` after keys, and `[]` / `{}` for empty containers.

use agno_storage_core::json::to_python_json;
use serde_json::Value;

/// A table file's text: `rows` as `json.dump(rows, indent=2)` renders them.
pub(crate) fn rows_to_python_json(rows: &[Value]) -> String {
    let mut out = String::new();
    write_array(&mut out, rows, 0);
    out
}

fn newline(out: &mut String, level: usize) {
    out.push('\n');
    out.extend(std::iter::repeat_n(' ', level * 2));
}

fn write_array(out: &mut String, items: &[Value], level: usize) {
    if items.is_empty() {
        out.push_str("[]");
        return;
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        newline(out, level + 1);
        write_value(out, item, level + 1);
    }
    newline(out, level);
    out.push(']');
}

fn write_value(out: &mut String, value: &Value, level: usize) {
    match value {
        Value::Array(items) => write_array(out, items, level),
        Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(out, level + 1);
                out.push_str(&to_python_json(&Value::String(key.clone())));
                out.push_str(": ");
                write_value(out, item, level + 1);
            }
            newline(out, level);
            out.push('}');
        }
        scalar => out.push_str(&to_python_json(scalar)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_indent_2() {
        // python3 -c 'import json; print(json.dumps([{"a": [1, {}], "b": {"c": "ü"}, "d": []}, 2.0], indent=2))'
        let rows = [json!({"a": [1, {}], "b": {"c": "ü"}, "d": []}), json!(2.0)];
        assert_eq!(
            rows_to_python_json(&rows),
            "[\n  {\n    \"a\": [\n      1,\n      {}\n    ],\n    \"b\": {\n      \"c\": \"\\u00fc\"\n    },\n    \"d\": []\n  },\n  2.0\n]"
        );
        assert_eq!(rows_to_python_json(&[]), "[]");
    }
}
