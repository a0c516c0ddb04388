//! Property tests of the legacy (agno 2.x) decoders and the runs merge: arbitrary and
//! malformed input never panics, decoding is faithful, and the merge keeps every run once.

use std::collections::{HashMap, HashSet};

use agno_storage_core::legacy::{
    decode_legacy_json, decode_legacy_runs, legacy_run_rows, merge_runs,
};
use agno_storage_core::RunRecord;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Any JSON value, a few levels deep, with awkward strings (NUL, quotes, unicode).
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        "(?s).{0,24}".prop_map(Value::String),
        Just(Value::String("\0\"'{[".into())),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,8}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// A legacy blob entry: usually a run with an id from a small alphabet (so duplicates
/// happen), sometimes a run without an id or a value that is not an object.
fn blob_entry() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => ("r[0-7]", "[a-z]{0,6}").prop_map(|(id, text)| json!({"run_id": id, "content": text, "agent_id": "a"})),
        1 => "[a-z]{0,6}".prop_map(|text| json!({"content": text})),
        1 => Just(json!({"run_id": ""})),
        1 => any_json(),
    ]
}

fn store_run(session: &str, id: &str, index: i64) -> RunRecord {
    let mut run = RunRecord::from_run_data(
        session,
        None,
        json!({"run_id": id, "content": "store", "agent_id": "a"}),
    )
    .expect("a run dict with an id");
    run.run_index = Some(index);
    run
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Arbitrary text never panics the JSON-cell decoder.
    #[test]
    fn decode_legacy_json_never_panics(text in "(?s).{0,64}") {
        let _ = decode_legacy_json(Some(&text));
    }

    /// An object or array decodes to itself whether stored once or double-encoded (2.x
    /// SQLite), and JSON `null` is absent either way.
    #[test]
    fn double_encoding_is_transparent(value in any_json()) {
        let once = serde_json::to_string(&value).unwrap();
        let twice = serde_json::to_string(&Value::String(once.clone())).unwrap();
        let decoded_once = decode_legacy_json(Some(&once)).unwrap();
        let decoded_twice = decode_legacy_json(Some(&twice)).unwrap();
        match &value {
            Value::Null => {
                prop_assert_eq!(decoded_once, None);
                prop_assert_eq!(decoded_twice, None);
            }
            Value::Object(_) | Value::Array(_) => {
                prop_assert_eq!(decoded_once.as_ref(), Some(&value));
                prop_assert_eq!(decoded_twice.as_ref(), Some(&value));
            }
            _ => prop_assert_eq!(decoded_once.as_ref(), Some(&value)),
        }
    }

    /// The strict runs decoder accepts exactly arrays (plain or encoded) and null, and says
    /// what it found otherwise.
    #[test]
    fn strict_runs_decoder_accepts_only_arrays(value in any_json()) {
        let direct = decode_legacy_runs(Some(&value));
        let encoded = Value::String(serde_json::to_string(&value).unwrap());
        let via_string = decode_legacy_runs(Some(&encoded));
        match &value {
            Value::Array(items) => {
                prop_assert_eq!(direct.as_ref(), Ok(items));
                prop_assert_eq!(via_string.as_ref(), Ok(items));
            }
            Value::Null => {
                prop_assert_eq!(direct, Ok(Vec::new()));
                prop_assert_eq!(via_string, Ok(Vec::new()));
            }
            Value::String(_) => {}
            _ => {
                let err = direct.unwrap_err();
                prop_assert!(err.contains("not a JSON array"), "{}", err);
                prop_assert!(via_string.is_err());
            }
        }
    }

    /// Arbitrary (often invalid) blob text never panics the strict decoder.
    #[test]
    fn strict_runs_decoder_never_panics(text in "(?s).{0,64}") {
        let _ = decode_legacy_runs(Some(&Value::String(text)));
    }

    /// The merge keeps every store run once, each legacy run id at most once, lets the
    /// store copy win, and drops entries that are not runs.
    #[test]
    fn merge_keeps_every_run_once(
        blob in prop::collection::vec(blob_entry(), 0..12),
        store_ids in prop::collection::hash_set("r[0-9]", 0..6),
    ) {
        let store: Vec<RunRecord> = store_ids
            .iter()
            .enumerate()
            .map(|(i, id)| store_run("s", id, i as i64))
            .collect();
        let merged = merge_runs(Some(&Value::Array(blob.clone())), store);
        let mut seen = HashMap::new();
        for run in &merged {
            let run = run.to_value().unwrap();
            let id = run.get("run_id").and_then(Value::as_str).unwrap_or_default();
            prop_assert!(!id.is_empty(), "an entry without a run_id survived: {}", run);
            *seen.entry(id.to_owned()).or_insert(0) += 1;
            if store_ids.contains(id) {
                prop_assert_eq!(run.get("content"), Some(&json!("store")));
            }
        }
        prop_assert!(seen.values().all(|&n| n == 1), "a run appears twice: {:?}", seen);
        let legacy_ids: HashSet<String> = blob
            .iter()
            .filter(|e| e.is_object())
            .filter_map(|e| e.get("run_id").and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let expected: HashSet<String> = legacy_ids.union(&store_ids).cloned().collect();
        prop_assert_eq!(seen.keys().cloned().collect::<HashSet<_>>(), expected);
    }

    /// The migration's rows: one per distinct run id (first occurrence), indexed by blob
    /// position, owned by the session's user.
    #[test]
    fn migration_rows_are_unique_and_positioned(blob in prop::collection::vec(blob_entry(), 0..12)) {
        let rows = legacy_run_rows("s", Some("u"), Some(&Value::Array(blob.clone()))).unwrap();
        let mut ids = HashSet::new();
        for row in &rows {
            prop_assert!(ids.insert(row.run_id.clone()), "duplicate row {}", row.run_id);
            let index = row.run_index.unwrap() as usize;
            prop_assert_eq!(&blob[index], &row.run_data);
            prop_assert!(blob[..index]
                .iter()
                .all(|e| e.get("run_id").and_then(Value::as_str) != Some(&row.run_id)));
            prop_assert_eq!(row.user_id.as_deref(), Some("u"));
        }
    }
}

/// Malformed legacy rows as they turn up in real databases: each is an error or an empty
/// list, never a panic, and never a partial list that loses runs silently.
#[test]
fn malformed_legacy_corpus() {
    let huge = "x".repeat(1 << 20);
    let corpus: Vec<(&str, Value)> = vec![
        (
            "truncated JSON",
            Value::String(r#"[{"run_id": "r1", "content": "#.into()),
        ),
        (
            "NUL bytes",
            Value::String("[{\"run_id\": \"r\0\"}]\0".into()),
        ),
        ("wrong type: number", json!(42)),
        ("wrong type: object", json!({"run_id": "r1"})),
        ("wrong type: bool", json!(true)),
        ("huge string", Value::String(huge.clone())),
        (
            "triple encoded",
            Value::String(serde_json::to_string(&Value::String("[]".into())).unwrap()),
        ),
    ];
    for (what, blob) in &corpus {
        match decode_legacy_runs(Some(blob)) {
            Err(e) => assert!(!e.is_empty(), "{what}: empty error"),
            Ok(runs) => assert!(
                runs.is_empty() || *what == "triple encoded",
                "{what}: {runs:?}"
            ),
        }
        assert!(legacy_run_rows("s", None, Some(blob)).is_err() || *what == "triple encoded");
        // The lenient reader of `session.runs` ignores what it cannot parse.
        let merged = merge_runs(Some(blob), vec![store_run("s", "kept", 0)]);
        assert_eq!(merged.len(), 1, "{what}: the store run survives");
    }
    // Duplicate run ids: the first occurrence wins, once.
    let dup = json!([{"run_id": "r1", "n": 1}, {"run_id": "r1", "n": 2}]);
    let rows = legacy_run_rows("s", None, Some(&dup)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].run_data["n"], 1);
    // A huge run survives intact.
    let big = json!([{"run_id": "big", "content": huge}]);
    let rows = legacy_run_rows("s", None, Some(&big)).unwrap();
    assert_eq!(
        rows[0].run_data["content"].as_str().map(str::len),
        Some(1 << 20)
    );
    // A JSON cell that is not JSON is a typed error, not a panic.
    assert!(decode_legacy_json(Some("{\"a\": ")).is_err());
    assert!(decode_legacy_json(Some("\0")).is_err());
}
