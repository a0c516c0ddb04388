//! Pre-v3 data: decoding agno 2.x JSON and merging legacy runs blobs with the runs store.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{Error, Result};
use crate::run::{RunRecord, RunType};
use crate::run_json::RunJson;

/// Decodes a JSON cell as agno 2.x may have written it: parses `text`, and when the result
/// is itself a JSON string (the 2.x SQLite double encoding), parses that too.
///
/// A value that is a string but not JSON stays a JSON string. SQL NULL (`None`) and JSON
/// `null` both decode to `None`.
pub fn decode_legacy_json(text: Option<&str>) -> Result<Option<Value>> {
    let Some(text) = text else { return Ok(None) };
    let first = crate::json::parse_value(text.as_bytes())
        .map_err(|e| Error::serialization("a JSON column", e))?;
    Ok(unwrap_double_encoded(first))
}

/// The value inside a possibly double-encoded JSON value; JSON `null` becomes `None`.
pub fn unwrap_double_encoded(value: Value) -> Option<Value> {
    match value {
        Value::Null => None,
        Value::String(inner) => match crate::json::parse_value(inner.as_bytes()) {
            Ok(Value::Null) => None,
            Ok(decoded @ (Value::Object(_) | Value::Array(_))) => Some(decoded),
            _ => Some(Value::String(inner)),
        },
        other => Some(other),
    }
}

/// The runs inside a legacy blob, strictly: the blob must be a JSON array, or a (double-)
/// encoded JSON string of one; absent and JSON `null` are empty. Anything else is an error
/// describing what was found, so a migration can report it instead of dropping it.
pub fn decode_legacy_runs(blob: Option<&Value>) -> std::result::Result<Vec<Value>, String> {
    /// Decodes an encoded blob, taking the parsed array without copying it.
    fn decode_text(text: &str, depth: u8) -> std::result::Result<Vec<Value>, String> {
        // A list of runs, each nested up to the limit.
        match crate::json::parse_value_within(text.as_bytes(), crate::json::MAX_DEPTH + 1) {
            Ok(Value::Array(items)) => Ok(items),
            Ok(Value::String(inner)) if depth < 1 => decode_text(&inner, depth + 1),
            Ok(other) => decode(&other, 2),
            Err(e) => Err(format!("the runs blob is not valid JSON ({e})")),
        }
    }
    fn decode(value: &Value, depth: u8) -> std::result::Result<Vec<Value>, String> {
        match value {
            Value::Null => Ok(Vec::new()),
            Value::Array(items) => Ok(items.clone()),
            Value::String(text) if depth < 2 => decode_text(text, depth),
            other => Err(format!(
                "the runs blob is not a JSON array (found {})",
                json_type(other)
            )),
        }
    }
    blob.map_or(Ok(Vec::new()), |b| decode(b, 0))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The list inside a legacy runs blob, leniently, as agno reads it: anything that is not
/// an array is ignored ("Could not parse legacy runs blob").
pub fn legacy_runs_list(blob: Option<&Value>) -> Vec<Value> {
    decode_legacy_runs(blob).unwrap_or_default()
}

fn run_id_of(run: &Value) -> Option<&str> {
    run.get("run_id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A runs-store run as a session read merges it: its order keys and its dict.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRun {
    /// The run's id.
    pub run_id: String,
    /// Position in the session; missing sorts first.
    pub run_index: Option<i64>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// The run dict.
    pub run: RunJson,
}

impl From<RunRecord> for SessionRun {
    fn from(record: RunRecord) -> Self {
        SessionRun {
            run_id: record.run_id,
            run_index: record.run_index,
            created_at: record.created_at,
            run: RunJson::from(record.run_data),
        }
    }
}

/// `session.runs` as agno 3 rebuilds it: the legacy blob in stored order with each entry
/// replaced by the runs-store copy of the same `run_id` (the store wins), then the
/// store-only runs in store order (`run_index, created_at, run_id`). Blob entries that are
/// not objects or lack a `run_id` are dropped. Returns run dicts.
pub fn merge_runs<R: Into<SessionRun>>(
    legacy_blob: Option<&Value>,
    store_runs: Vec<R>,
) -> Vec<RunJson> {
    let mut store_runs: Vec<SessionRun> = store_runs.into_iter().map(Into::into).collect();
    store_runs.sort_by(|a, b| {
        session_order(a.run_index, a.created_at, &a.run_id).cmp(&session_order(
            b.run_index,
            b.created_at,
            &b.run_id,
        ))
    });
    let legacy = legacy_runs_list(legacy_blob);
    if legacy.is_empty() {
        return store_runs.into_iter().map(|r| r.run).collect();
    }
    let mut merged = Vec::with_capacity(legacy.len() + store_runs.len());
    let mut used = vec![false; store_runs.len()];
    let position: std::collections::HashMap<&str, usize> = store_runs
        .iter()
        .enumerate()
        .rev()
        .map(|(i, r)| (r.run_id.as_str(), i))
        .collect();
    let mut seen_legacy = std::collections::HashSet::new();
    for entry in legacy {
        let Some(run_id) = run_id_of(&entry) else {
            continue;
        };
        if !seen_legacy.insert(run_id.to_owned()) {
            continue;
        }
        match position.get(run_id) {
            Some(&i) => {
                used[i] = true;
                merged.push(store_runs[i].run.clone());
            }
            None => merged.push(RunJson::from(entry)),
        }
    }
    merged.extend(
        store_runs
            .into_iter()
            .zip(used)
            .filter(|(_, used)| !used)
            .map(|(r, _)| r.run),
    );
    merged
}

/// Sorts runs in session order: `run_index` (missing first), then `created_at`, then `run_id`.
pub fn sort_runs_for_session(runs: &mut [RunRecord]) {
    runs.sort_by(|a, b| {
        session_order(a.run_index, a.created_at, &a.run_id).cmp(&session_order(
            b.run_index,
            b.created_at,
            &b.run_id,
        ))
    });
}

/// The key runs are ordered by within a session.
fn session_order(
    run_index: Option<i64>,
    created_at: i64,
    run_id: &str,
) -> (Option<i64>, i64, &str) {
    (run_index, created_at, run_id)
}

/// Keeps the last `limit` context runs (see [`RunRecord::is_context_run`]).
pub fn last_context_runs(runs: Vec<RunJson>, limit: usize) -> Vec<RunJson> {
    let context: Vec<RunJson> = runs.into_iter().filter(RunJson::is_context_run).collect();
    let skip = context.len().saturating_sub(limit);
    context.into_iter().skip(skip).collect()
}

/// The run rows the v3.0.0 migration copies out of one session's legacy blob, as agno's
/// `_build_run_rows`: `run_index` is the position in the blob (entries without a `run_id`
/// still consume an index), the owner is the session's, and `run_type` is agent if
/// `agent_id` is set, team if `team_id` is, else workflow. A duplicate `run_id` inside one
/// blob keeps its first occurrence. A blob that is not an array is an error (see
/// [`decode_legacy_runs`]).
pub fn legacy_run_rows(
    session_id: &str,
    user_id: Option<&str>,
    blob: Option<&Value>,
) -> std::result::Result<Vec<RunRecord>, String> {
    let now = crate::now_epoch_seconds();
    let mut seen = std::collections::HashSet::new();
    let mut rows = Vec::new();
    for (index, run) in decode_legacy_runs(blob)?.into_iter().enumerate() {
        let Some(run_id) = run_id_of(&run).map(str::to_owned) else {
            continue;
        };
        if !seen.insert(run_id.clone()) {
            continue;
        }
        let text = |key: &str| {
            run.get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let run_type = if text("agent_id").is_some() {
            RunType::Agent
        } else if text("team_id").is_some() {
            RunType::Team
        } else {
            RunType::Workflow
        };
        rows.push(RunRecord {
            run_id,
            session_id: session_id.to_owned(),
            run_type,
            run_index: Some(index as i64),
            user_id: user_id.map(str::to_owned),
            agent_id: text("agent_id"),
            team_id: text("team_id"),
            workflow_id: text("workflow_id"),
            parent_run_id: text("parent_run_id"),
            status: text("status"),
            created_at: run.get("created_at").and_then(Value::as_i64).unwrap_or(now),
            updated_at: Some(now),
            run_data: run,
        });
    }
    Ok(rows)
}

/// One session's legacy runs blob, as read by the migration.
#[derive(Debug, Clone, PartialEq)]
pub struct LegacySessionRuns {
    /// The session.
    pub session_id: String,
    /// Its owner.
    pub user_id: Option<String>,
    /// The blob as stored (array or encoded string).
    pub runs: Value,
}

/// What [`LegacyRunsStore::insert_runs_if_absent`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InsertedRuns {
    /// Rows written by this call.
    pub inserted: u64,
    /// Rows whose `run_id` is stored after the call (written now or before).
    pub present: u64,
}

/// Access to pre-v3 runs blobs, implemented by every backend that can hold them. The
/// shared v3.0.0 sessions step and `cleanup_legacy_runs` are written once against it.
#[async_trait]
pub trait LegacyRunsStore: Send + Sync {
    /// Up to `limit` sessions that still carry a blob (it may be empty or JSON `null`), in
    /// a stable order (by `session_id`, or a key-ordered scan such as DynamoDB's), resuming
    /// strictly after the session `after` that ended the previous page, so every session is
    /// seen once. A page shorter than `limit` is the last one. A read error is an error
    /// (never an empty page).
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>>;

    /// Inserts each row whose `run_id` is not stored yet; never overwrites a stored run
    /// (a newer run wins over its legacy copy).
    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns>;

    /// How many sessions still carry a non-empty legacy blob.
    async fn count_legacy_runs(&self) -> Result<u64>;

    /// Removes every legacy blob (column, field or key). Returns how many sessions changed.
    async fn drop_legacy_runs(&self) -> Result<u64>;
}

/// Copies every legacy blob into the runs store, a page of sessions at a time (never the
/// whole table in memory), without overwriting newer runs. Each page's runs go to the store in
/// one [`LegacyRunsStore::insert_runs_if_absent`] call (one transaction where the store has
/// them), so a page costs one commit, not one per session. Returns `(sessions scanned, runs
/// inserted)`.
///
/// A blob that cannot be decoded does not stop the others: every other session is copied,
/// then the call fails naming each undecodable session, so the caller does not stamp. A
/// store that keeps fewer runs than it was given is an error too. A `run_id` found in two
/// sessions is copied once, from the first session (by the page order) that holds it, as
/// when the sessions were copied one at a time.
pub async fn copy_legacy_runs(store: &dyn LegacyRunsStore, page_size: usize) -> Result<(u64, u64)> {
    let mut after: Option<String> = None;
    let (mut sessions, mut inserted) = (0u64, 0u64);
    let mut malformed: Vec<String> = Vec::new();
    loop {
        let page = store.legacy_runs_page(after.as_deref(), page_size).await?;
        let (Some(first), Some(last)) = (page.first(), page.last()) else {
            break;
        };
        let span = format!("{} … {}", first.session_id, last.session_id);
        after = Some(last.session_id.clone());
        let full = page.len() == page_size;
        let mut seen = std::collections::HashSet::new();
        let mut rows = Vec::new();
        for legacy in page {
            sessions += 1;
            match legacy_run_rows(
                &legacy.session_id,
                legacy.user_id.as_deref(),
                Some(&legacy.runs),
            ) {
                Ok(found) => rows.extend(
                    found
                        .into_iter()
                        .filter(|run| seen.insert(run.run_id.clone())),
                ),
                Err(why) => malformed.push(format!("session {}: {why}", legacy.session_id)),
            }
        }
        if !rows.is_empty() {
            let expected = rows.len() as u64;
            let outcome = store.insert_runs_if_absent(rows).await?;
            if outcome.present != expected {
                return Err(Error::new(
                    crate::ErrorKind::Conflict,
                    format!(
                        "copied only {} of the {expected} legacy runs of sessions {span} into the runs table; \
                         nothing was stamped, run the migration again",
                        outcome.present
                    ),
                ));
            }
            inserted += outcome.inserted;
        }
        if !full {
            break;
        }
    }
    if !malformed.is_empty() {
        let shown: Vec<&str> = malformed.iter().take(20).map(String::as_str).collect();
        return Err(Error::new(
            crate::ErrorKind::Serialization,
            format!(
                "{} legacy runs blob(s) could not be decoded and were not copied ({}{}); every other session's runs \
                 were copied. Repair or clear those blobs, then run the migration again",
                malformed.len(),
                shown.join("; "),
                if malformed.len() > shown.len() { "; …" } else { "" }
            ),
        ));
    }
    Ok((sessions, inserted))
}

/// Drops the legacy blobs. Unforced, it refuses while any remain (they are the migration's
/// backup), naming how many; with `force` it removes them. Returns how many sessions changed.
pub async fn cleanup_legacy_runs(
    store: &dyn LegacyRunsStore,
    table: &str,
    force: bool,
) -> Result<u64> {
    if !force {
        let pending = store.count_legacy_runs().await?;
        if pending > 0 {
            return Err(Error::new(
                crate::ErrorKind::Conflict,
                format!(
                    "Refusing to drop {table}.runs: {pending} session(s) still have non-null `runs` content. \
                     Run the migration manager (`agno-storage migrate <URL>`) first, verify the runs table, \
                     then pass force (`agno-storage cleanup-legacy-runs <URL> --force`)."
                ),
            )
            .set_temporary(false));
        }
    }
    store.drop_legacy_runs().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(run_id: &str, index: i64, status: &str) -> RunRecord {
        let mut r = RunRecord::from_run_data(
            "s1",
            None,
            json!({"run_id": run_id, "agent_id": "a", "status": status}),
        )
        .unwrap();
        r.run_index = Some(index);
        r
    }

    #[test]
    fn double_encoded_json_is_decoded_once_more() {
        let cell = serde_json::to_string(&json!("{\"session_name\": \"n1\"}")).unwrap();
        assert_eq!(
            decode_legacy_json(Some(&cell)).unwrap(),
            Some(json!({"session_name": "n1"}))
        );
        assert_eq!(decode_legacy_json(Some("null")).unwrap(), None);
        assert_eq!(
            decode_legacy_json(Some("\"plain\"")).unwrap(),
            Some(json!("plain"))
        );
        assert!(decode_legacy_json(Some("{truncated")).is_err());
    }

    #[test]
    fn store_wins_and_blob_order_first() {
        let blob = json!([{"run_id": "r1", "status": "PAUSED"}, 7, {"no": "id"}, {"run_id": "r2"}]);
        let merged = merge_runs(
            Some(&blob),
            vec![row("r3", 2, "RUNNING"), row("r1", 0, "COMPLETED")],
        );
        let merged: Vec<Value> = merged.iter().map(|r| r.to_value().unwrap()).collect();
        let ids: Vec<_> = merged
            .iter()
            .map(|r| r["run_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["r1", "r2", "r3"]);
        assert_eq!(merged[0]["status"], "COMPLETED");
    }

    #[test]
    fn malformed_blobs_are_errors_when_strict() {
        assert!(decode_legacy_runs(Some(&json!("[{\"run_id\": \"x\", trunc"))).is_err());
        assert!(decode_legacy_runs(Some(&json!({"run_id": "x"}))).is_err());
        assert_eq!(
            decode_legacy_runs(Some(&json!("null"))).unwrap(),
            Vec::<Value>::new()
        );
        assert!(legacy_runs_list(Some(&json!(42))).is_empty());
    }

    #[test]
    fn legacy_rows_keep_positions() {
        let blob = json!("[{\"run_id\": \"a\", \"team_id\": \"t\"}, {}, {\"run_id\": \"b\"}, {\"run_id\": \"a\"}]");
        let rows = legacy_run_rows("s", Some("u"), Some(&blob)).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].run_index, rows[0].run_type),
            (Some(0), RunType::Team)
        );
        assert_eq!(
            (rows[1].run_index, rows[1].run_type),
            (Some(2), RunType::Workflow)
        );
        assert_eq!(rows[1].user_id.as_deref(), Some("u"));
    }
}
