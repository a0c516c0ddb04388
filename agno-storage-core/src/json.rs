//! JSON text exactly as Python's `json.dumps` writes it (agno's encoding).
//!
//! Default separators `", "` and `": "`, `ensure_ascii=True` (non-ASCII as `\uXXXX`, with
//! surrogate pairs), keys in insertion order. Stores that compare or search JSON as text
//! (SQLite `LIKE` filters, JSON files, Redis values) stay byte-compatible with agno.

use serde_json::Value;

/// `value` as Python's `json.dumps(value)` renders it.
pub fn to_python_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_string(out, k);
                out.push_str(": ");
                write_value(out, v);
            }
            out.push('}');
        }
    }
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if n.is_f64() {
        match n.as_f64() {
            // Python's repr of a float: integral values keep ".0"; others as the shortest
            // round-trip form, with an exponent of the form `e+XX` / `e-XX`.
            Some(f) if f.is_finite() => {
                let abs = f.abs();
                if abs != 0.0 && !(1e-4..1e16).contains(&abs) {
                    let s = format!("{f:e}");
                    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
                    let exp: i32 = exp.parse().unwrap_or_default();
                    out.push_str(mantissa);
                    out.push_str(&format!(
                        "e{}{:02}",
                        if exp < 0 { '-' } else { '+' },
                        exp.abs()
                    ));
                } else if f.fract() == 0.0 {
                    out.push_str(&format!("{f:.1}"));
                } else {
                    out.push_str(&f.to_string());
                }
            }
            _ => out.push_str("NaN"),
        }
    } else {
        out.push_str(&n.to_string());
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    // Copy runs of plain printable ASCII in one go; escape the rest one char at a time.
    let mut plain_from = 0;
    for (i, c) in s.char_indices() {
        if (' '..='~').contains(&c) && c != '"' && c != '\\' {
            continue;
        }
        out.push_str(&s[plain_from..i]);
        plain_from = i + c.len_utf8();
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
        }
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn matches_python_json_dumps() {
        let v = json!({"b": [1, 2.5, true, null], "a": "tä🍵\n\"q\"", "f": 3.0, "big": 1e20, "small": 1.5e-7});
        assert_eq!(
            to_python_json(&v),
            r#"{"b": [1, 2.5, true, null], "a": "t\u00e4\ud83c\udf75\n\"q\"", "f": 3.0, "big": 1e+20, "small": 1.5e-07}"#
        );
        assert_eq!(to_python_json(&json!("likes tea")), r#""likes tea""#);
        assert_eq!(to_python_json(&json!({})), "{}");
    }
}
