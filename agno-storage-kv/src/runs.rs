//! Runs: one `{prefix}:runs:{run_id}` record per run (agno's run row), listed in agno's
//! `{prefix}:runs:by_session:{session_id}` sorted set (score `run_index`) and in our
//! creation-time indexes (all, per owner). `run_index` is assigned inside the same atomic
//! write that stores the run, guarded on the session's highest index.

use std::collections::{BTreeSet, HashSet};

use agno_storage_core::legacy::{legacy_runs_list, SessionRun};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Error,
    ErrorKind, Page, Result, RunJson, RunQuery, RunRecord, RunStore, RunType, SchemaVersion,
    SchemaVersionStore, TableType, Unreadable,
};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, json, object, opt_int, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "runs";

/// The `user_id` of a stored session.
fn session_owner(key: &str, raw: &str) -> Result<Option<String>> {
    Ok(text(&decode_object(key, raw)?, "user_id"))
}

/// The top-level fields of a stored run, each as its JSON text: readable when the run does
/// not decode whole (a lone surrogate escape somewhere in `run_data`).
fn raw_fields(raw: &str) -> Option<std::collections::HashMap<String, Box<RawValue>>> {
    serde_json::from_str(raw).ok()
}

/// The `user_id` of a stored run that may not decode whole, read without its other fields.
fn owner_of(raw: &str) -> Option<String> {
    serde_json::from_str(raw_fields(raw)?.get("user_id")?.get()).ok()
}

/// A stored run as a session read merges it. One that does not decode whole is handed over
/// with its `run_data` as the stored text (see [`RunJson`]), so it does not fail the read.
fn session_run(key: &str, raw: &str) -> Result<SessionRun> {
    let error = match decode(key, raw) {
        Ok(run) => return Ok(SessionRun::from(run)),
        Err(e) => e,
    };
    let Some(fields) = raw_fields(raw) else {
        return Err(error);
    };
    let (Some(run_id), Some(data)) = (
        fields
            .get("run_id")
            .and_then(|v| serde_json::from_str(v.get()).ok()),
        fields.get("run_data"),
    ) else {
        return Err(error);
    };
    let number = |name: &str| fields.get(name).and_then(|v| v.get().parse().ok());
    Ok(SessionRun {
        run_id,
        run_index: number("run_index"),
        created_at: number("created_at").unwrap_or_default(),
        run: RunJson::from_stored_text(data.get().to_owned())?,
    })
}

pub(crate) fn decode(key: &str, raw: &str) -> Result<RunRecord> {
    let map = decode_object(key, raw)?;
    let run_data = json(&map, "run_data").unwrap_or(Value::Null);
    let run_id = text(&map, "run_id")
        .or_else(|| key.rsplit_once(":runs:").map(|(_, id)| id.to_owned()))
        .unwrap_or_default();
    let run_type = match text(&map, "run_type").as_deref() {
        Some("agent") => RunType::Agent,
        Some("team") => RunType::Team,
        Some("workflow") => RunType::Workflow,
        _ => RunType::infer(&run_data),
    };
    Ok(RunRecord {
        run_id,
        session_id: text(&map, "session_id").unwrap_or_default(),
        run_type,
        run_index: int(&map, "run_index"),
        user_id: text(&map, "user_id"),
        agent_id: text(&map, "agent_id"),
        team_id: text(&map, "team_id"),
        workflow_id: text(&map, "workflow_id"),
        parent_run_id: text(&map, "parent_run_id"),
        status: text(&map, "status"),
        created_at: int(&map, "created_at")
            .or_else(|| run_data.get("created_at").and_then(Value::as_i64))
            .unwrap_or_default(),
        updated_at: int(&map, "updated_at"),
        run_data,
    })
}

/// The record as agno's `build_single_run_row` lays it out.
pub(crate) fn encode_run(r: &RunRecord) -> String {
    encode(&object([
        ("run_id", Value::String(r.run_id.clone())),
        ("session_id", Value::String(r.session_id.clone())),
        ("run_type", Value::String(r.run_type.as_str().into())),
        ("agent_id", opt_str(&r.agent_id)),
        ("team_id", opt_str(&r.team_id)),
        ("workflow_id", opt_str(&r.workflow_id)),
        ("user_id", opt_str(&r.user_id)),
        ("parent_run_id", opt_str(&r.parent_run_id)),
        ("status", opt_str(&r.status)),
        ("run_index", opt_int(r.run_index)),
        ("run_data", r.run_data.clone()),
        ("created_at", Value::from(r.created_at)),
        ("updated_at", opt_int(r.updated_at)),
    ]))
}

impl KvStore {
    pub(crate) fn runs_all(&self) -> String {
        self.idx(TABLE, "created:all")
    }

    pub(crate) fn runs_of_user(&self, user: &str) -> String {
        self.idx(TABLE, &format!("created:user:{user}"))
    }

    /// The index entries of a run: agno's per-session set, then ours.
    pub(crate) fn run_entries(&self, r: &RunRecord) -> Vec<Entry> {
        let created = r.created_at as f64;
        let mut entries = vec![
            Entry::z(
                self.by_session(&r.session_id),
                &r.run_id,
                r.run_index.unwrap_or(0) as f64,
            ),
            Entry::z(self.runs_all(), &r.run_id, created),
        ];
        if let Some(u) = &r.user_id {
            entries.push(Entry::z(self.runs_of_user(u), &r.run_id, created));
        }
        entries
    }

    /// The stored runs of each session, in one pipelined index read and one `MGET`.
    pub(crate) async fn runs_of_sessions(
        &self,
        session_ids: &[&str],
    ) -> Result<Vec<Vec<SessionRun>>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for sid in session_ids {
            pipe.cmd("ZRANGE").arg(self.by_session(sid)).arg(0).arg(-1);
        }
        let ids: Vec<Vec<String>> = self.pipe(&pipe).await?;
        let keys: Vec<String> = ids.iter().flatten().map(|r| self.key(TABLE, r)).collect();
        let mut values = self.mget(&keys).await?.into_iter();
        let mut keys = keys.into_iter();
        let mut out = Vec::with_capacity(ids.len());
        for run_ids in ids {
            let mut runs = Vec::with_capacity(run_ids.len());
            for _ in run_ids {
                if let (Some(key), Some(Some(raw))) = (keys.next(), values.next()) {
                    runs.push(session_run(&key, &raw)?);
                }
            }
            out.push(runs);
        }
        Ok(out)
    }

    /// Removes `run_ids` from a session's legacy runs blob (when the caller may see the
    /// session), so the read-time merge cannot bring deleted runs back.
    pub(crate) async fn scrub_legacy_blob(
        &self,
        session_id: &str,
        run_ids: &HashSet<&str>,
        user_id: Option<&str>,
    ) -> Result<()> {
        let key = self.key(crate::sessions::TABLE, session_id);
        self.retry("delete_runs (legacy blob)", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(()));
            };
            let mut map = decode_object(&key, &raw)?;
            let owner = text(&map, "user_id");
            let Some(blob) = map.get("runs").filter(|b| !b.is_null()) else {
                return Ok(Some(()));
            };
            if !visible_to(owner.as_deref(), user_id) {
                return Ok(Some(()));
            }
            let list = legacy_runs_list(Some(blob));
            let kept: Vec<Value> = list
                .iter()
                .filter(|r| {
                    r.get("run_id")
                        .and_then(Value::as_str)
                        .is_none_or(|id| !run_ids.contains(id))
                })
                .cloned()
                .collect();
            if kept.len() == list.len() {
                return Ok(Some(()));
            }
            map.insert("runs".into(), Value::Array(kept));
            let cas = Cas::on(&key)
                .expect(Some(&raw))
                .set(encode(&Value::Object(map)));
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(()))
        })
        .await
    }

    /// Whether the sessions table is stamped 3.0.0 or later: then every legacy run has a row.
    async fn sessions_migrated(&self) -> Result<bool> {
        let stamp = self
            .get_schema_version(TableType::Sessions.default_name())
            .await?;
        Ok(stamp.is_some_and(|v| v >= SchemaVersion::LATEST))
    }
}

#[async_trait]
impl RunStore for KvStore {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let key = self.key(TABLE, &run.run_id);
        let session_key = self.key(crate::sessions::TABLE, &run.session_id);
        let by_session = self.by_session(&run.session_id);
        self.retry("upsert_run", || async {
            // The owner is read first; the write is then guarded on the session still existing
            // (a session's owner changes only by deleting it).
            let session = self.get(&session_key).await?;
            let owner = session
                .as_deref()
                .map(|raw| session_owner(&session_key, raw))
                .transpose()?;
            run.check_session(owner.as_ref().map(Option::as_deref))?;
            let current = self.get(&key).await?;
            let now = now_epoch_seconds();
            let mut cas = Cas::on(&key)
                .expect(current.as_deref())
                .guard_exists(&session_key);
            let (next, old_entries) = match &current {
                Some(raw) => {
                    let old = decode(&key, raw)?;
                    if !writable_by(old.user_id.as_deref(), run.user_id.as_deref()) {
                        return Err(owned_by_another_user("run", &run.run_id));
                    }
                    let mut next = old.clone();
                    next.status = run.status.clone();
                    next.run_data = run.run_data.clone();
                    if run.user_id.is_some() {
                        next.user_id = run.user_id.clone();
                    }
                    next.parent_run_id = run.parent_run_id.clone();
                    next.updated_at = Some(now);
                    next.run_index = old.run_index.or(run.run_index);
                    let entries = self.run_entries(&old);
                    (next, entries)
                }
                None => {
                    let mut next = run.clone();
                    next.updated_at = Some(now);
                    if next.run_index.is_none() {
                        let top: Vec<(String, f64)> = self
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
                    (next, Vec::new())
                }
            };
            let cas = cas
                .set(encode_run(&next))
                .reindex(&old_entries, &self.run_entries(&next));
            match self.cas(&cas).await? {
                Outcome::Applied => Ok(Some(next)),
                Outcome::Guard(0) => Err(run.missing_session()),
                _ => Ok(None),
            }
        })
        .await
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let key = self.key(TABLE, run_id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let run = decode(&key, &raw)?;
        Ok(visible_to(run.user_id.as_deref(), user_id).then_some(run))
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, RunRecord::SORTABLE)?;
        let base = match (&query.session_id, &query.user_id) {
            (Some(s), _) => self.by_session(s),
            (None, Some(u)) => self.runs_of_user(u),
            (None, None) => self.runs_all(),
        };
        let (mut rows, mut unreadable) = (Vec::new(), Vec::new());
        for (id, raw) in self.load_index(TABLE, &base, "-inf", "+inf").await? {
            match decode(&self.key(TABLE, &id), &raw) {
                Ok(r) if query.matches(&r) => rows.push(r),
                Ok(_) => {}
                // A record this code cannot decode is named, not fatal to the list, to a
                // caller who may see it (its owner as far as it can be read, or unscoped).
                Err(e) if visible_to(owner_of(&raw).as_deref(), query.user_id.as_deref()) => {
                    unreadable.push(Unreadable {
                        id,
                        error: e.to_string(),
                    })
                }
                Err(_) => {}
            }
        }
        let mut page = query.page(rows)?;
        page.unreadable = unreadable;
        Ok(page)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        enum Found {
            Missing,
            NotVisible,
            Deleted(String),
        }
        let mut deleted = 0;
        let mut sessions = BTreeSet::new();
        let mut unknown = false;
        for id in run_ids {
            let key = self.key(TABLE, id);
            let found = self
                .retry("delete_runs", || async {
                    let Some(raw) = self.get(&key).await? else {
                        return Ok(Some(Found::Missing));
                    };
                    let run = decode(&key, &raw)?;
                    if !visible_to(run.user_id.as_deref(), user_id) {
                        return Ok(Some(Found::NotVisible));
                    }
                    let cas = Cas::on(&key)
                        .expect(Some(&raw))
                        .delete()
                        .reindex(&self.run_entries(&run), &[]);
                    Ok((self.cas(&cas).await? == Outcome::Applied)
                        .then_some(Found::Deleted(run.session_id)))
                })
                .await?;
            match found {
                Found::Missing => unknown = true,
                Found::Deleted(session_id) => {
                    deleted += 1;
                    sessions.insert(session_id);
                }
                Found::NotVisible => {}
            }
        }
        // Before the v3 migration a run may live only in a legacy blob: find those blobs.
        // After it, every legacy run has a row, so the rows' sessions are the only blobs.
        if unknown && !self.sessions_migrated().await? {
            for (id, raw) in self.scan_records(crate::sessions::TABLE).await? {
                let map = decode_object(&self.key(crate::sessions::TABLE, &id), &raw)?;
                if map.get("runs").is_some_and(|b| !b.is_null()) {
                    sessions.insert(id);
                }
            }
        }
        let scrub: HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        for session_id in sessions {
            self.scrub_legacy_blob(&session_id, &scrub, user_id).await?;
        }
        Ok(deleted)
    }
}

/// A legacy row the migration copies, written only when its `run_id` is not stored yet.
pub(crate) async fn insert_if_absent(store: &KvStore, row: &RunRecord) -> Result<bool> {
    let key = store.key(TABLE, &row.run_id);
    let cas = Cas::on(&key)
        .expect(None)
        .set(encode_run(row))
        .reindex(&[], &store.run_entries(row));
    match store.cas(&cas).await? {
        Outcome::Applied => Ok(true),
        Outcome::Changed => Ok(false),
        Outcome::Guard(_) => Err(Error::new(
            ErrorKind::Unexpected,
            "insert_runs_if_absent: unexpected guard failure",
        )),
    }
}
