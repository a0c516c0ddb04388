//! Run dicts as a session read hands them over: JSON, parsed only when asked.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::legacy::decode_legacy_json;
use crate::run::RunRecord;
use crate::run_view::{RunView, SharedRunView};

/// One run dict of [`crate::Session::runs`].
///
/// A store that keeps runs as JSON text (SQL) hands each one over as the stored text, not
/// parsed and not yet checked, so reading a long session neither builds a tree per run nor
/// scans its text; other stores hand over the parsed value. Either way
/// [`RunJson::to_value`] gives the dict, [`RunJson::fields`] reads a few keys without
/// building the rest, [`RunJson::json_text`] gives checked JSON text, and equality compares
/// the dicts (not the text). [`RunJson::shared_value`] parses a run once for it and every
/// copy of it, so a session read again from a store's cache of recent reads hands over runs
/// parsed already. Malformed stored JSON surfaces from those calls as a
/// [`crate::ErrorKind::Serialization`] error, for that run alone. With serde, a run
/// serializes as the dict it holds and deserializes from any dict.
#[derive(Clone)]
pub struct RunJson(Repr);

#[derive(Clone)]
enum Repr {
    Parsed(Arc<Value>),
    /// Stored text of an object, not yet checked; shared, so copies of a run (a store's
    /// cache of recent reads) do not copy its text, and share its parse.
    Text(Arc<Stored>),
}

/// A run's stored text and, once [`RunJson::shared_value`] parsed it, its dict; once
/// [`RunJson::shared_view`] read it, its view.
struct Stored {
    /// Shared with the run's view, which borrows from it.
    text: Arc<String>,
    parsed: OnceLock<Arc<Value>>,
    view: OnceLock<SharedRunView>,
}

impl RunJson {
    /// A run dict as a store keeps it in a JSON text column. An object is kept as text,
    /// unchecked (see [`RunJson`]); anything else is decoded now, as agno 2.x may have
    /// written it (a double-encoded string is unwrapped, JSON `null` becomes `null`), and
    /// is a [`crate::ErrorKind::Serialization`] error when malformed.
    pub fn from_stored_text(text: String) -> Result<Self> {
        if text.trim_start().starts_with('{') {
            return Ok(RunJson(Repr::Text(Arc::new(Stored {
                text: Arc::new(text),
                parsed: OnceLock::new(),
                view: OnceLock::new(),
            }))));
        }
        Ok(RunJson::from(
            decode_legacy_json(Some(&text))?.unwrap_or(Value::Null),
        ))
    }

    /// The dict, parsed now when it is held as text.
    pub fn to_value(&self) -> Result<Value> {
        self.as_value().map(Cow::into_owned)
    }

    /// The dict, borrowed when it is already parsed.
    pub fn as_value(&self) -> Result<Cow<'_, Value>> {
        match &self.0 {
            Repr::Parsed(value) => Ok(Cow::Borrowed(value)),
            Repr::Text(stored) => match stored.parsed.get() {
                Some(value) => Ok(Cow::Borrowed(value)),
                None => parse(&stored.text).map(Cow::Owned),
            },
        }
    }

    /// The dict, consumed.
    pub fn into_value(self) -> Result<Value> {
        match self.0 {
            Repr::Parsed(value) => Ok(Arc::unwrap_or_clone(value)),
            Repr::Text(stored) => match stored.parsed.get() {
                Some(value) => Ok(value.as_ref().clone()),
                None => parse(&stored.text),
            },
        }
    }

    /// The dict, parsed at most once for this run and every copy of it, then shared: a
    /// store's cache of recent reads hands out copies of its runs, so a session read again
    /// gives runs parsed already, at the cost of a pointer each. The parsed tree lives as
    /// long as a copy does, the cache's included. Malformed text is an error on every call.
    pub fn shared_value(&self) -> Result<Arc<Value>> {
        match &self.0 {
            Repr::Parsed(value) => Ok(value.clone()),
            Repr::Text(stored) => {
                if let Some(value) = stored.parsed.get() {
                    return Ok(value.clone());
                }
                let value = Arc::new(parse(&stored.text)?);
                Ok(stored.parsed.get_or_init(|| value).clone())
            }
        }
    }

    /// The dict as JSON text, checked to be well-formed: the stored text as it is when the
    /// run was handed over unparsed (ready to be written into a JSON response), else the
    /// value encoded now.
    pub fn json_text(&self) -> Result<Cow<'_, str>> {
        match &self.0 {
            Repr::Parsed(value) => serde_json::to_string(value.as_ref())
                .map(Cow::Owned)
                .map_err(|e| Error::serialization("a run's JSON", e)),
            Repr::Text(stored) => {
                if stored.parsed.get().is_none() {
                    crate::json::from_str::<serde::de::IgnoredAny>(&stored.text)
                        .map_err(|e| Error::serialization("a run's JSON", e))?;
                }
                Ok(Cow::Borrowed(&stored.text))
            }
        }
    }

    /// Whether both runs hold the same stored text, so that either may stand for the other
    /// with what was read of it (its parse, its view). Runs held as values never do.
    pub fn same_stored_text(&self, other: &RunJson) -> bool {
        match (&self.0, &other.0) {
            (Repr::Text(a), Repr::Text(b)) => Arc::ptr_eq(a, b) || a.text == b.text,
            _ => false,
        }
    }

    /// Bytes of stored JSON text this run holds (0 when it holds a parsed value).
    pub fn stored_text_len(&self) -> usize {
        self.stored_text().map_or(0, str::len)
    }

    /// The stored text, unchecked, when the run was handed over unparsed.
    fn stored_text(&self) -> Option<&str> {
        match &self.0 {
            Repr::Parsed(_) => None,
            Repr::Text(stored) => Some(&stored.text),
        }
    }

    /// Reads the dict into `T`, skipping the keys `T` does not name, without building a
    /// tree of the rest when the dict is held as text. `T` may borrow text from the run
    /// (`&str`, or `Cow<str>` read the way [`RunView`]'s fields are).
    pub fn fields<'a, T: Deserialize<'a>>(&'a self) -> Result<T> {
        match &self.0 {
            Repr::Parsed(value) => crate::json::from_borrowed_value(value),
            Repr::Text(stored) => crate::json::from_str(&stored.text),
        }
        .map_err(|e| Error::serialization("a run's fields", e))
    }

    /// The fields applications read ([`RunView`]), borrowed from this run: far cheaper
    /// than [`RunJson::to_value`] for a run held as text, since only those fields are built.
    pub fn view(&self) -> Result<RunView<'_>> {
        self.fields()
    }

    /// [`RunJson::view`], kept with the run: for a run held as text, read at most once for
    /// it and every copy of it, then shared (as [`RunJson::shared_value`] shares a parse),
    /// so a session read again from a store's cache of recent reads (SQL) gives views read
    /// already; for a run held as a value, read from the value on each call (no parse).
    /// The view keeps the run's text or value alive. Malformed text is an error on every
    /// call.
    pub fn shared_view(&self) -> Result<SharedRunView> {
        match &self.0 {
            Repr::Parsed(value) => SharedRunView::of(value.clone()),
            Repr::Text(stored) => {
                if let Some(view) = stored.view.get() {
                    return Ok(view.clone());
                }
                let view = SharedRunView::of(stored.text.clone())?;
                Ok(stored.view.get_or_init(|| view).clone())
            }
        }
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

/// Parses a run's stored text.
/// Text past which [`values_of`] parses on more than one core: below it, starting the
/// threads costs more than they save.
const PARALLEL_TEXT_BYTES: usize = 1 << 20;

/// `parse` of every run of `runs`, in order ([`RunJson::to_value`] or
/// [`RunJson::shared_value`]). When their stored text passes 1 MiB they are parsed on every
/// core the machine has, in contiguous chunks.
pub(crate) fn values_of<'a, T: Send>(
    runs: &'a [RunJson],
    parse: fn(&'a RunJson) -> Result<T>,
) -> Result<Vec<T>> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text: usize = runs.iter().map(RunJson::stored_text_len).sum();
    if threads < 2 || text < PARALLEL_TEXT_BYTES {
        return runs.iter().map(parse).collect();
    }
    let chunk = runs.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = runs
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(parse).collect::<Result<Vec<_>>>()))
            .collect();
        let mut values = Vec::with_capacity(runs.len());
        for part in parts {
            let parsed = part.join().map_err(|_| {
                Error::new(
                    crate::ErrorKind::Unexpected,
                    "a thread parsing runs panicked",
                )
            })??;
            values.extend(parsed);
        }
        Ok(values)
    })
}

fn parse(text: &str) -> Result<Value> {
    crate::json::parse_value(text.as_bytes()).map_err(|e| Error::serialization("a run's JSON", e))
}

impl From<Value> for RunJson {
    fn from(value: Value) -> Self {
        RunJson(Repr::Parsed(Arc::new(value)))
    }
}

impl PartialEq for RunJson {
    /// Equal dicts, whatever their text: key order and spacing do not count.
    fn eq(&self, other: &Self) -> bool {
        if let (Some(a), Some(b)) = (self.stored_text(), other.stored_text()) {
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
            Repr::Text(stored) => f.write_str(&stored.text),
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

/// `n` runs `r0`, `r1`, ... of ~1 KB of stored text each: past 1 MiB from 1,050 on, where
/// a session's runs are read on several threads.
#[cfg(test)]
pub(crate) fn padded_runs(n: usize) -> Vec<RunJson> {
    let pad = "x".repeat(1000);
    (0..n)
        .map(|i| {
            RunJson::from_stored_text(
                serde_json::json!({"run_id": format!("r{i}"), "pad": pad}).to_string(),
            )
            .expect("valid JSON")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Past 1 MiB the runs are parsed in chunks on several threads: in order all the same.
    #[test]
    fn many_runs_parse_in_order() {
        let runs = padded_runs(3000);
        let values = values_of(&runs, RunJson::to_value).expect("parsed");
        let ids: Vec<&str> = values.iter().filter_map(|v| v["run_id"].as_str()).collect();
        let expected: Vec<String> = (0..3000).map(|i| format!("r{i}")).collect();
        assert_eq!(ids, expected);
    }

    /// Copies of a run (a store's cache hands them out) share one parse; a malformed run
    /// fails every time and is never kept as parsed.
    #[test]
    fn copies_of_a_run_share_its_parse() {
        let run = RunJson::from_stored_text(r#"{"run_id": "r1", "n": [1, 2]}"#.into())
            .expect("valid JSON");
        let copy = run.clone();
        let first = copy.shared_value().expect("parses");
        assert!(Arc::ptr_eq(&first, &run.shared_value().expect("parsed")));
        assert_eq!(*first, json!({"run_id": "r1", "n": [1, 2]}));
        assert!(matches!(run.as_value(), Ok(Cow::Borrowed(_))));
        assert_eq!(run.to_value().expect("parsed"), *first);
        assert_eq!(
            run.json_text().expect("text"),
            r#"{"run_id": "r1", "n": [1, 2]}"#
        );
        let bad = RunJson::from_stored_text(r#"{"run_id": "#.into()).expect("kept unchecked");
        for _ in 0..2 {
            assert_eq!(
                bad.clone().shared_value().expect_err("malformed").kind(),
                crate::ErrorKind::Serialization
            );
        }
        let value = RunJson::from(json!({"run_id": "v"}));
        assert!(Arc::ptr_eq(
            &value.shared_value().expect("held"),
            &value.clone().shared_value().expect("held")
        ));
    }

    #[test]
    fn stored_text_is_kept_unparsed_and_reads_back_as_the_dict() {
        let run = RunJson::from_stored_text(r#"{"run_id": "r1", "status": "COMPLETED"}"#.into())
            .expect("valid JSON");
        assert_eq!(
            run.json_text().expect("well-formed"),
            r#"{"run_id": "r1", "status": "COMPLETED"}"#
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
        assert_eq!(run.json_text().expect("encodes"), r#"{"run_id":"r1"}"#);
        let null = RunJson::from_stored_text("null".into()).expect("decodes");
        assert_eq!(null, Value::Null);
    }

    #[test]
    fn malformed_text_is_a_serialization_error_when_read() {
        let run = RunJson::from_stored_text(r#"{"run_id": "r1""#.into()).expect("kept unchecked");
        for err in [
            run.to_value().expect_err("malformed"),
            run.json_text().expect_err("malformed"),
            serde_json::to_string(&run)
                .map_err(|e| Error::serialization("a run", e))
                .expect_err("malformed"),
        ] {
            assert_eq!(err.kind(), crate::ErrorKind::Serialization);
            assert!(err.message().contains("run"), "{}", err.message());
        }
        let trailing = RunJson::from_stored_text(r#"{"run_id": "r1"} x"#.into()).expect("kept");
        assert!(trailing.json_text().is_err());
        assert!(RunJson::from_stored_text(r#""{\"run_id\""#.into()).is_err());
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
