//! Runs: one `{prefix}:runs:{run_id}` record per run (agno's run row), listed in agno's
//! `{prefix}:runs:by_session:{session_id}` sorted set (score `run_index`) and in our
//! creation-time indexes (all, per owner). The store is the document engine's; writing a run
//! is its `write_run` hook, served here: `run_index` is assigned inside the same atomic write
//! that stores the run, from the session's highest index, so runs agno writes to the set
//! are counted. A new run is appended in one round trip: one commit checks the session's
//! owner and the run's absence, assigns the index and writes the run and its index entries;
//! when a check fails (the run exists, the session is missing or another user's) the write
//! is decided by reading first, as before.

use agno_storage_core::{
    now_epoch_seconds, Error, ErrorKind, Result, RunRecord, RunType, SchemaVersion,
    SchemaVersionStore, TableType,
};
use agno_storage_doc::layout::RUN_ROW;
use agno_storage_doc::{backoff, updated_run, Commit, DocBackend, Fields, Pre, CAS_ATTEMPTS};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::docs::{score, Expect, KvDocs, KvWrite, Server, TableLayout, DEFAULT_LAYOUT};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "runs";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| RUN_ROW,
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
    /// [`DocBackend::write_run`]: first tries [`KvDocs::append_new_run`] (one round trip);
    /// when one of its checks fails, reads the session (its owner) and the run, then writes
    /// the run in a commit that checks the session still exists and, for a new run without
    /// an index, that the session set's highest index is the one read (the new index is one
    /// past it).
    pub(crate) async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        if let Some(appended) = self.append_new_run(&run).await? {
            return Ok(appended);
        }
        let store = self.store();
        let session_key = store.key(crate::sessions::TABLE, &run.session_id);
        let by_session = store.by_session(&run.session_id);
        for attempt in 0..CAS_ATTEMPTS {
            // The owner is read first; the write is then checked on the session still
            // existing (a session's owner changes only by deleting it).
            let owner = self
                .get(crate::sessions::TABLE, &run.session_id)
                .await?
                .map(|session| session.str("user_id").map(str::to_owned));
            run.check_session(owner.as_ref().map(Option::as_deref))?;
            let now = now_epoch_seconds();
            let mut writes = vec![KvWrite(
                Ok(store.check(session_key.clone(), Expect::Exists)),
            )];
            let (next, pre) = match self.get(TABLE, &run.run_id).await? {
                Some(stored) => {
                    let mut next = updated_run(stored.decode("a run")?, &run, now)?;
                    next.run_index = next.run_index.or(run.run_index);
                    (next, stored.unchanged())
                }
                None => {
                    let mut next = run.clone();
                    next.updated_at = Some(now);
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
                        writes.push(KvWrite(Ok(
                            store.check(by_session.clone(), Expect::Zmax(max))
                        )));
                    }
                    (next, Pre::Absent)
                }
            };
            writes.push(self.put(TABLE, &run.run_id, &self.to_fields(&next, "a run")?, pre));
            match self.commit("upsert run", writes).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert run"))
    }

    /// [`KvDocs::upsert_run`] of a run not stored yet, in one commit (one round trip) that
    /// checks the session exists and is writable by the run's user and the run is absent,
    /// and assigns the run's index when it has none. `None` when a check failed or the run
    /// cannot be written that way: nothing was written, and the caller decides by reading.
    async fn append_new_run(&self, run: &RunRecord) -> Result<Option<RunRecord>> {
        let store = self.store();
        let mut next = run.clone();
        next.updated_at = Some(now_epoch_seconds());
        let session = store.check(
            store.key(crate::sessions::TABLE, &run.session_id),
            Expect::WritableBy(run.user_id.clone()),
        );
        let plan = |next: &RunRecord| -> Result<_> {
            store.plan(
                TABLE,
                &run.run_id,
                Expect::Absent,
                Some(&self.to_fields(next, "a run")?),
            )
        };
        let writes = if next.run_index.is_some() {
            vec![session, plan(&next)?]
        } else {
            let by_session = store.by_session(&run.session_id);
            next.run_index = Some(1);
            let one = plan(&next)?;
            next.run_index = Some(0);
            let Some(write) = plan(&next)?.assigning_index(&one, &by_session) else {
                return Ok(None);
            };
            vec![session, store.check(by_session, Expect::NextIndex), write]
        };
        Ok(match store.commit_assigning(writes).await? {
            (Commit::Done, assigned) => {
                next.run_index = assigned.or(next.run_index);
                Some(next)
            }
            (Commit::Conflict, _) => None,
        })
    }
}

/// A legacy row the migration copies, written only when its `run_id` is not stored yet.
pub(crate) async fn insert_if_absent(store: &KvStore, row: &RunRecord) -> Result<bool> {
    let fields = match serde_json::to_value(row) {
        Ok(Value::Object(fields)) => fields,
        _ => {
            return Err(Error::new(
                ErrorKind::Serialization,
                format!("cannot encode run {}", row.run_id),
            ))
        }
    };
    let write = store.plan(TABLE, &row.run_id, Expect::Absent, Some(&fields))?;
    Ok(store.commit(vec![write]).await? == Commit::Done)
}
