//! JSON text exactly as Python's `json.dumps` writes it (agno's encoding).
//!
//! Default separators `", "` and `": "`, `ensure_ascii=True` (non-ASCII as `\uXXXX`, with
//! surrogate pairs), keys in insertion order. Stores that compare or search JSON as text
//! (SQLite `LIKE` filters, JSON files, Redis values) stay byte-compatible with agno.

use serde_json::Value;

/// The `json.dumps` options agno's stores use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PythonJson {
    /// `ensure_ascii`: non-ASCII as `\uXXXX` escapes (agno's SQL and file stores) or raw
    /// (agno's Redis store).
    pub ensure_ascii: bool,
    /// `indent`: one item per line, indented by this many spaces (agno's JSON files use 2).
    pub indent: Option<usize>,
}

impl Default for PythonJson {
    /// `json.dumps` defaults: `ensure_ascii=True`, no indent.
    fn default() -> Self {
        PythonJson {
            ensure_ascii: true,
            indent: None,
        }
    }
}

/// `value` as Python's `json.dumps(value)` renders it.
pub fn to_python_json(value: &Value) -> String {
    to_python_json_with(value, PythonJson::default())
}

/// `value` as Python's `json.dumps(value, ensure_ascii=…, indent=…)` renders it.
pub fn to_python_json_with(value: &Value, options: PythonJson) -> String {
    let mut out = String::new();
    write_value(&mut out, value, options, 0);
    out
}

/// A list of values as Python renders the list (`json.dump(rows, f, …)`), without first
/// building a `Value::Array` of them.
pub fn list_to_python_json_with(items: &[Value], options: PythonJson) -> String {
    let mut out = String::new();
    write_list(&mut out, items, options, 0);
    out
}

fn write_list(out: &mut String, items: &[Value], options: PythonJson, level: usize) {
    if items.is_empty() {
        out.push_str("[]");
        return;
    }
    out.push('[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push_str(if options.indent.is_some() { "," } else { ", " });
        }
        newline(out, options, level + 1);
        write_value(out, item, options, level + 1);
    }
    newline(out, options, level);
    out.push(']');
}

fn newline(out: &mut String, options: PythonJson, level: usize) {
    if let Some(indent) = options.indent {
        out.push('\n');
        out.extend(std::iter::repeat_n(' ', indent * level));
    }
}

fn write_value(out: &mut String, value: &Value, options: PythonJson, level: usize) {
    let item_separator = if options.indent.is_some() { "," } else { ", " };
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s, options.ensure_ascii),
        Value::Array(items) => write_list(out, items, options, level),
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, options, level + 1);
                write_string(out, k, options.ensure_ascii);
                out.push_str(": ");
                write_value(out, v, options, level + 1);
            }
            newline(out, options, level);
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

/// Whether any of the eight bytes of `word` may need an escape: below `0x20`, `"`, `\\`, or
/// (with `ensure_ascii`) `0x7f` and above. Never false for such a word; may be true for a
/// word without one (the caller then checks byte by byte).
fn may_need_escape(word: u64, ensure_ascii: bool) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A byte below n (n <= 128) leaves its high bit set in (x - n) & !x.
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGH != 0;
    let control = below(word, 0x20);
    let quote = below(word ^ (ONES * u64::from(b'"')), 1);
    let backslash = below(word ^ (ONES * u64::from(b'\\')), 1);
    // A byte above 0x7e has its high bit set after adding 1 (a carry only adds false hits).
    let non_ascii = ensure_ascii && (word.wrapping_add(ONES) | word) & HIGH != 0;
    control || quote || backslash || non_ascii
}

fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    // Copy runs of bytes that need no escape in one go; escape the rest one char at a time.
    // A byte that needs no escape is printable ASCII other than `"` and `\`, or (without
    // `ensure_ascii`) DEL and any byte of a multi-byte UTF-8 sequence, as Python's `json`.
    let bytes = s.as_bytes();
    let mut plain_from = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Eight plain bytes at a time; a word holding any other byte goes byte by byte.
        if let Some(word) = bytes
            .get(i..i + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
        {
            if !may_need_escape(u64::from_le_bytes(word), ensure_ascii) {
                i += 8;
                continue;
            }
        }
        let b = bytes[i];
        let plain = match b {
            b'"' | b'\\' => false,
            0x20..=0x7e => true,
            0x7f.. => !ensure_ascii,
            _ => false,
        };
        if plain {
            i += 1;
            continue;
        }
        out.push_str(&s[plain_from..i]);
        // `i` is a char boundary: every byte before it was ASCII or a whole UTF-8 sequence.
        let c = s[i..].chars().next().unwrap_or('\u{fffd}');
        i += c.len_utf8();
        plain_from = i;
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
                    use std::fmt::Write as _;
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
        }
    }
    out.push_str(&s[plain_from..]);
    out.push('"');
}

/// The deepest nesting of arrays and objects a stored JSON value may have, on every
/// backend: the depth Python's `json` module reads and writes with its default recursion
/// limit (1,000). A write nested deeper is refused before anything is written
/// ([`check_depth`]); a stored value up to this depth is read on any thread, whatever its
/// stack size (parsing grows the stack on the heap), so nothing acknowledged is unreadable.
/// A backend whose native documents hold less declares its own, lower limit
/// ([`crate::Capabilities::max_json_depth`]).
pub const MAX_DEPTH: usize = 1000;

/// The nesting depth of `value`: 0 for a scalar, 1 for `[]`, `{}` or `[1]`, and so on.
/// Counted without recursion, so any value can be measured.
pub fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 0usize)];
    while let Some((value, level)) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items.iter().map(|v| (v, level + 1))),
            Value::Object(map) => pending.extend(map.values().map(|v| (v, level + 1))),
            _ => continue,
        }
        deepest = deepest.max(level + 1);
    }
    deepest
}

/// `InvalidInput` unless `value` is nested at most `max` levels ([`MAX_DEPTH`] when the
/// backend declares nothing lower). `field` names the value in the message.
pub fn check_depth(field: &str, value: &Value, max: usize) -> crate::Result<()> {
    let found = depth(value);
    if found <= max {
        return Ok(());
    }
    Err(crate::Error::invalid_input(format!(
        "{field} is nested {found} levels deep; this backend stores JSON nested at most {max} \
         levels (agno's Python `json` reads about {MAX_DEPTH}); nothing was written. Flatten \
         the value, or store the deep part as a JSON string."
    )))
}

/// A copy of `value` made without recursion. `Value::clone` recurses once per level, and
/// with ordered maps a value nested [`MAX_DEPTH`] levels overflows a 2 MiB stack in a debug
/// build; stores copy user JSON with this instead.
pub fn clone_deep(value: &Value) -> Value {
    /// A container being copied: the rest of its children, and what is copied so far.
    enum Open<'a> {
        Array(std::slice::Iter<'a, Value>, Vec<Value>),
        Object(
            serde_json::map::Iter<'a>,
            serde_json::Map<String, Value>,
            String,
        ),
    }
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut next = value;
    loop {
        let mut done = match next {
            Value::Array(items) => {
                open.push(Open::Array(items.iter(), Vec::with_capacity(items.len())));
                None
            }
            Value::Object(map) => {
                let copy = serde_json::Map::with_capacity(map.len());
                open.push(Open::Object(map.iter(), copy, String::new()));
                None
            }
            scalar => Some(scalar.clone()),
        };
        // Hand finished values to their parents until a container has a child left.
        loop {
            let Some(top) = open.last_mut() else {
                return done.unwrap_or(Value::Null);
            };
            if let Some(value) = done.take() {
                match top {
                    Open::Array(_, items) => items.push(value),
                    Open::Object(_, map, key) => {
                        map.insert(std::mem::take(key), value);
                    }
                }
            }
            let child = match top {
                Open::Array(rest, _) => rest.next(),
                Open::Object(rest, _, key) => rest.next().map(|(k, v)| {
                    key.clone_from(k);
                    v
                }),
            };
            if let Some(child) = child {
                next = child;
                break;
            }
            done = open.pop().map(|finished| match finished {
                Open::Array(_, items) => Value::Array(items),
                Open::Object(_, map, _) => Value::Object(map),
            });
        }
    }
}

/// Drops `value` without recursion: a value nested deeper than the stack allows can be
/// refused without its drop overflowing the stack.
pub fn drop_deep(value: Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(map) => pending.extend(map.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

/// Deserializes `T` from JSON text nested up to any depth without overflowing the stack
/// (serde_json alone stops at 128 levels; this grows the stack on the heap instead).
pub fn from_str<'a, T: serde::Deserialize<'a>>(text: &'a str) -> serde_json::Result<T> {
    from_slice(text.as_bytes())
}

/// [`from_str`] over bytes.
pub fn from_slice<'a, T: serde::Deserialize<'a>>(text: &'a [u8]) -> serde_json::Result<T> {
    let mut de = serde_json::Deserializer::from_slice(text);
    de.disable_recursion_limit();
    let value = T::deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Deserializes `T` from a [`Value`] nested up to any depth without overflowing the stack
/// (`serde_json::from_value` recurses once per level on the caller's stack).
pub fn from_value<T: serde::de::DeserializeOwned>(value: Value) -> serde_json::Result<T> {
    T::deserialize(serde_stacker::Deserializer::new(value))
}

/// [`from_value`] from a borrowed value, without copying it: `T` may borrow its strings.
pub fn from_borrowed_value<'a, T: serde::Deserialize<'a>>(
    value: &'a Value,
) -> serde_json::Result<T> {
    T::deserialize(serde_stacker::Deserializer::new(value))
}

/// [`from_value`] from a borrowed JSON object (a document's fields), without copying it.
pub fn from_fields<T: serde::de::DeserializeOwned>(
    fields: &serde_json::Map<String, Value>,
) -> serde_json::Result<T> {
    T::deserialize(serde_stacker::Deserializer::new(fields))
}

/// [`from_value`] from a borrowed value, without copying it.
pub fn from_ref<T: serde::de::DeserializeOwned>(value: &Value) -> serde_json::Result<T> {
    T::deserialize(serde_stacker::Deserializer::new(value))
}

/// Parses JSON text into a [`Value`], as `serde_json::from_slice` does, but nested up to
/// [`MAX_DEPTH`] levels on any stack (deeper text is an error, not a crash), and builds
/// each object with its final capacity: serde_json's own visitor grows every map from
/// empty, reallocating and rehashing it on the way, which was the largest single cost of
/// reading many runs.
pub fn parse_value(text: &[u8]) -> serde_json::Result<Value> {
    parse_value_within(text, MAX_DEPTH)
}

/// [`parse_value`] with another nesting limit: `max_depth` levels (a list of stored values,
/// such as a legacy runs blob, holds one level more than each value).
pub fn parse_value_within(text: &[u8], max_depth: usize) -> serde_json::Result<Value> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_slice(text);
    de.disable_recursion_limit();
    let seed = ValueSeed {
        depth: 0,
        max: max_depth,
    };
    let value = seed.deserialize(serde_stacker::Deserializer::new(&mut de))?;
    de.end()?;
    Ok(value)
}

/// Builds a [`Value`] at nesting level `depth`, refusing levels past `max` (see
/// [`parse_value`]).
#[derive(Clone, Copy)]
struct ValueSeed {
    depth: usize,
    max: usize,
}

impl ValueSeed {
    /// The seed of a nested value, or an error past the limit.
    fn nested<E: serde::de::Error>(self) -> Result<ValueSeed, E> {
        if self.depth >= self.max {
            return Err(E::custom(format_args!(
                "JSON nested deeper than {} levels",
                self.max
            )));
        }
        Ok(ValueSeed {
            depth: self.depth + 1,
            ..self
        })
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for ValueSeed {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ValueSeed {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let seed = self.nested()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(seed)? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let seed = self.nested()?;
        let mut entries: Vec<(String, Value)> = Vec::with_capacity(16);
        while let Some(key) = map.next_key::<String>()? {
            entries.push((key, map.next_value_seed(seed)?));
        }
        // Collecting sizes the map once; a repeated key keeps its first position and its
        // last value, as serde_json's own map does.
        Ok(Value::Object(entries.into_iter().collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!("{}{}", "[".repeat(levels), "]".repeat(levels))
    }

    #[test]
    fn max_depth_reads_round_trips_on_a_2_mib_stack_and_deeper_is_an_error() {
        let worker = std::thread::Builder::new().stack_size(2 << 20).spawn(|| {
            let text = nested(MAX_DEPTH);
            let value = parse_value(text.as_bytes()).expect("MAX_DEPTH levels parse");
            assert_eq!(depth(&value), MAX_DEPTH);
            assert_eq!(to_python_json(&value), text);
            assert_eq!(
                serde_json::to_string(&clone_deep(&value)).expect("encodes"),
                text
            );
            let object = r#"{"a": 1, "b": [true, null, {"c": "d", "e": []}], "f": {}}"#;
            let object = parse_value(object.as_bytes()).expect("parses");
            assert_eq!(clone_deep(&object), object);
            assert_eq!(clone_deep(&Value::from(3)), Value::from(3));
            let err = parse_value(nested(MAX_DEPTH + 1).as_bytes()).expect_err("too deep");
            assert!(err.to_string().contains("deeper than 1000"), "{err}");
            from_str::<serde::de::IgnoredAny>(&nested(100_000)).expect("skipped at any depth");
        });
        worker.expect("spawns").join().expect("no stack overflow");
    }

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

    #[test]
    fn escapes_like_python_in_both_modes() {
        // python3 -c 'import json; s="a\x7f\u00e9\U0001F600\"\\\n\x01\x1f~ "; print(json.dumps(s)); print(json.dumps(s, ensure_ascii=False))'
        let s = json!("a\u{7f}\u{e9}\u{1F600}\"\\\n\u{1}\u{1f}~ ");
        assert_eq!(
            to_python_json(&s),
            r#""a\u007f\u00e9\ud83d\ude00\"\\\n\u0001\u001f~ ""#
        );
        let options = PythonJson {
            ensure_ascii: false,
            indent: None,
        };
        assert_eq!(
            to_python_json_with(&s, options),
            "\"a\u{7f}\u{e9}\u{1F600}\\\"\\\\\\n\\u0001\\u001f~ \""
        );
    }

    #[test]
    fn matches_python_indent_2() {
        // python3 -c 'import json; print(json.dumps([{"a": [1, {}], "b": {"c": "ü"}, "d": []}, 2.0], indent=2))'
        let rows = json!([{"a": [1, {}], "b": {"c": "ü"}, "d": []}, 2.0]);
        let options = PythonJson {
            ensure_ascii: true,
            indent: Some(2),
        };
        assert_eq!(
            to_python_json_with(&rows, options),
            "[\n  {\n    \"a\": [\n      1,\n      {}\n    ],\n    \"b\": {\n      \"c\": \"\\u00fc\"\n    },\n    \"d\": []\n  },\n  2.0\n]"
        );
        assert_eq!(to_python_json_with(&json!([]), options), "[]");
    }

    #[test]
    fn matches_python_without_ascii_escapes() {
        let options = PythonJson {
            ensure_ascii: false,
            indent: None,
        };
        let v = json!({"a": "tä🍵\n\"q\"\u{7f}\u{1}", "b": [1, 2.5, null]});
        assert_eq!(
            to_python_json_with(&v, options),
            "{\"a\": \"tä🍵\\n\\\"q\\\"\u{7f}\\u0001\", \"b\": [1, 2.5, null]}"
        );
        assert_eq!(
            to_python_json_with(&json!("\\u00e4"), options),
            "\"\\\\u00e4\""
        );
    }

    #[test]
    fn parse_value_matches_serde_json() {
        let texts = [
            r#"{"run_id": "r1", "n": -3, "big": 18446744073709551615, "f": 1.5e-7, "x": 3.0,
                "nested": {"a": [1, {"b": null}, [], {}], "t": true, "e": "\u00e9\ud83c\udf75\n"},
                "dup": 1, "later": 2, "dup": 3}"#,
            "[]",
            "null",
            r#""text""#,
            "12345678901234567890123",
        ];
        for text in texts {
            let ours = parse_value(text.as_bytes()).unwrap();
            let theirs: Value = serde_json::from_str(text).unwrap();
            assert_eq!(ours, theirs, "{text}");
            // Same key order too (a repeated key keeps its first place).
            assert_eq!(ours.to_string(), theirs.to_string(), "{text}");
        }
        for bad in ["{\"a\": 1} x", "{\"a\": }", "", "[1, 2"] {
            assert!(parse_value(bad.as_bytes()).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
    }

    /// The word-at-a-time scan escapes exactly what the byte-at-a-time one does, whatever the
    /// escape's offset in the word: without `ensure_ascii` agno's text is serde_json's, and
    /// with it every non-ASCII char is a `\\u` escape.
    #[test]
    fn escapes_at_every_offset_of_a_word() {
        let specials = [
            "\"", "\\", "\n", "\u{1}", "\u{1f}", "\u{7f}", "é", "🍵", "~", " ", "é\u{1}", "🍵\"",
            "\u{7f}\\", "ÿ\n",
        ];
        for special in specials {
            for offset in 0..17 {
                let s = format!("{}{special}{}", "x".repeat(offset), "y".repeat(20 - offset));
                let mut plain = String::new();
                write_string(&mut plain, &s, false);
                assert_eq!(plain, serde_json::to_string(&s).unwrap(), "{s:?}");
                let mut ascii = String::new();
                write_string(&mut ascii, &s, true);
                let expected: String = serde_json::to_string(&s)
                    .unwrap()
                    .chars()
                    .flat_map(|c| match c {
                        '\u{7f}'.. => c
                            .encode_utf16(&mut [0; 2])
                            .iter()
                            .map(|u| format!("\\u{u:04x}"))
                            .collect::<Vec<_>>(),
                        c => vec![c.to_string()],
                    })
                    .collect();
                assert_eq!(ascii, expected, "{s:?}");
            }
        }
    }
}
