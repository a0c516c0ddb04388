//! Runs: one `{prefix}:runs:{run_id}` record per run (agno's run row), listed in agno's
//! `{prefix}:runs:by_session:{session_id}` sorted set (score `run_index`) and in our
//! creation-time indexes (all, per owner). The store is the document engine's; writing a run
//! is its `write_run` hook, served here: `run_index` is assigned inside the same atomic write
//! that stores the run, guarded on the session's highest index, so runs agno writes to the
//! set are counted.

use agno_storage_core::{
    now_epoch_seconds, Error, ErrorKind, Result, RunRecord, RunType, SchemaVersion,
    SchemaVersionStore, TableType,
};
use agno_storage_doc::{updated_run, DocBackend, Fields};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::cas::{Cas, Outcome};
use crate::docs::{score, KvDocs, Server, TableLayout, DEFAULT_LAYOUT};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "runs";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    // As agno's `build_single_run_row` lays a run out.
    order: |_| {
        &[
            "run_id",
            "session_id",
            "run_type",
            "agent_id",
            "team_id",
            "workflow_id",
            "user_id",
            "parent_run_id",
            "status",
            "run_index",
            "run_data",
            "created_at",
            "updated_at",
        ]
    },
    key_field: "run_id",
    score: |f| score(f, "created_at"),
    group_field: "session_id",
    by_owner: |s, session| session.map(|id| s.by_session(id)),
    group_score: Some(|f| score(f, "run_index")),
    all: Some(|s| s.idx(TABLE, "created:all")),
    secondary: Some(("user_id", |s, u| s.idx(TABLE, &format!("created:user:{u}")))),
    normalize,
    ..DEFAULT_LAYOUT
};

/// A run an older writer stored without its type has the one its data implies; without a
/// creation time, its data's; without a session, none.
fn normalize(_: &str, f: &mut Fields) {
    if !f.get("run_type").is_some_and(Value::is_string) {
        let inferred = RunType::infer(f.get("run_data").unwrap_or(&Value::Null));
        f.insert("run_type".into(), inferred.as_str().into());
    }
    if !f.get("created_at").is_some_and(Value::is_i64) {
        let created = f
            .get("run_data")
            .and_then(|d| d.get("created_at"))
            .and_then(Value::as_i64)
            .unwrap_or_default();
        f.insert("created_at".into(), Value::from(created));
    }
    if !f.get("session_id").is_some_and(Value::is_string) {
        f.insert("session_id".into(), Value::from(""));
    }
}

/// The fields of a stored run that does not decode whole (a lone surrogate escape somewhere
/// in `run_data`): each top-level field that parses, and `run_data` as its stored text, so
/// the engine names the run unreadable and session reads pass the text on.
pub(crate) fn unreadable_fields(raw: &str) -> Option<Fields> {
    let parts: std::collections::HashMap<String, Box<RawValue>> = serde_json::from_str(raw).ok()?;
    let data = parts.get("run_data")?.get().to_owned();
    let mut fields: Fields = parts
        .iter()
        .filter(|(k, _)| k.as_str() != "run_data")
        .filter_map(|(k, v)| Some((k.clone(), serde_json::from_str(v.get()).ok()?)))
        .collect();
    fields.insert("run_data".into(), Value::String(data));
    Some(fields)
}

impl KvStore {
    /// Whether the sessions table is stamped 3.0.0 or later: then every legacy run has a row.
    pub(crate) async fn sessions_migrated(&self) -> Result<bool> {
        let stamp = self
            .get_schema_version(TableType::Sessions.default_name())
            .await?;
        Ok(stamp.is_some_and(|v| v >= SchemaVersion::LATEST))
    }
}

impl<S: Server> KvDocs<S> {
    /// [`DocBackend::write_run`]: reads the session (its owner) and the run, then writes the
    /// run guarded on the session still existing and, for a new run without an index, on the
    /// session set's highest index, which the new index is one past.
    pub(crate) async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let store = self.store();
        let key = store.key(TABLE, &run.run_id);
        let session_key = store.key(crate::sessions::TABLE, &run.session_id);
        let by_session = store.by_session(&run.session_id);
        store
            .retry("upsert_run", || async {
                // The owner is read first; the write is then guarded on the session still
                // existing (a session's owner changes only by deleting it).
                let owner = match store.get(&session_key).await? {
                    Some(raw) => {
                        let fields = self.stored(crate::sessions::TABLE, &run.session_id, raw)?;
                        Some(fields.str("user_id").map(str::to_owned))
                    }
                    None => None,
                };
                run.check_session(owner.as_ref().map(Option::as_deref))?;
                let current = store.get(&key).await?;
                let mut cas = Cas::on(&key)
                    .expect(current.as_deref())
                    .guard_exists(&session_key);
                let (next, old) = match &current {
                    Some(raw) => {
                        let stored = self.stored(TABLE, &run.run_id, raw.clone())?;
                        let old_index = stored.fields.get("run_index").and_then(Value::as_i64);
                        let mut next =
                            updated_run(stored.decode("a run")?, &run, now_epoch_seconds())?;
                        next.run_index = old_index.or(run.run_index);
                        (next, Some(stored.fields))
                    }
                    None => {
                        let mut next = run.clone();
                        next.updated_at = Some(now_epoch_seconds());
                        if next.run_index.is_none() {
                            let top: Vec<(String, f64)> = store
                                .query(
                                    redis::cmd("ZRANGE")
                                        .arg(&by_session)
                                        .arg(-1)
                                        .arg(-1)
                                        .arg("WITHSCORES"),
                                )
                                .await?;
                            let max = top.first().map(|(_, s)| *s);
                            next.run_index = Some(max.map_or(0, |m| m as i64 + 1));
                            cas = cas.guard_zmax(&by_session, max);
                        }
                        (next, None)
                    }
                };
                let fields = self.to_fields(&next, "a run")?;
                let old_entries = old
                    .as_ref()
                    .map(|f| LAYOUT.entries(store, &run.run_id, f))
                    .unwrap_or_default();
                let cas = cas
                    .set(self.body(TABLE, &fields, old.map(Value::Object).as_ref()))
                    .reindex(&old_entries, &LAYOUT.entries(store, &run.run_id, &fields));
                match store.cas(&cas).await? {
                    Outcome::Applied => Ok(Some(next)),
                    Outcome::Guard(0) => Err(run.missing_session()),
                    _ => Ok(None),
                }
            })
            .await
    }
}

/// A legacy row the migration copies, written only when its `run_id` is not stored yet.
pub(crate) async fn insert_if_absent(store: &KvStore, row: &RunRecord) -> Result<bool> {
    let key = store.key(TABLE, &row.run_id);
    let fields = match serde_json::to_value(row) {
        Ok(Value::Object(fields)) => fields,
        _ => {
            return Err(Error::new(
                ErrorKind::Serialization,
                format!("cannot encode run {}", row.run_id),
            ))
        }
    };
    let body = agno_storage_doc::layout::shape(
        fields.clone(),
        (LAYOUT.order)(&fields),
        agno_storage_doc::layout::Nulls::Keep,
        None,
    );
    let cas = Cas::on(&key)
        .expect(None)
        .set(crate::codec::encode(&body))
        .reindex(&[], &LAYOUT.entries(store, &row.run_id, &fields));
    match store.cas(&cas).await? {
        Outcome::Applied => Ok(true),
        Outcome::Changed => Ok(false),
        Outcome::Guard(_) => Err(Error::new(
            ErrorKind::Unexpected,
            "insert_runs_if_absent: unexpected guard failure",
        )),
    }
}
