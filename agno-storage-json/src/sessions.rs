//! Sessions (`agno_sessions.json`): `session.to_dict(include_runs=False)` plus
//! `session_type`, keyed by `session_id`. A legacy `runs` blob on a row is carried forward
//! on every write and merged with the runs file on every read.

use std::collections::{HashMap, HashSet};

use agno_storage_core::legacy::{last_context_runs, merge_runs, SessionRun};
use agno_storage_core::session::{Session, SessionQuery, SessionRead, SessionStore, SessionType};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by,
    Page, Result, RunJson, RunRecord,
};
use serde_json::Value;

use crate::doc::{fields, find, from_row, position, put, shape, text, Doc, Nulls};
use crate::files::{undecodable, undecodable_field, undecodable_raw_field, Step, Table};
use crate::store::JsonStore;

const AGENT_KEYS: &[&str] = &[
    "session_id",
    "agent_id",
    "team_id",
    "user_id",
    "workflow_id",
    "session_data",
    "metadata",
    "agent_data",
    "summary",
    "created_at",
    "updated_at",
    "session_type",
];
const TEAM_KEYS: &[&str] = &[
    "session_id",
    "team_id",
    "user_id",
    "workflow_id",
    "team_data",
    "session_data",
    "metadata",
    "summary",
    "created_at",
    "updated_at",
    "session_type",
];
const WORKFLOW_KEYS: &[&str] = &[
    "session_id",
    "user_id",
    "workflow_id",
    "workflow_name",
    "session_data",
    "workflow_data",
    "metadata",
    "created_at",
    "updated_at",
    "session_type",
];

impl Doc for Session {
    const TABLE: Table = Table::Sessions;
    const KEY: &'static str = "session_id";

    fn decode(row: &Value) -> Result<Self> {
        let mut row = agno_storage_core::json::clone_deep(row);
        if let Some(map) = row.as_object_mut() {
            // The legacy blob is not the record's `runs` (those are merged on read).
            map.remove("runs");
            // agno keeps an explicit `created_at: null`; fall back to `updated_at`, then 0.
            if map.get("created_at").is_none_or(Value::is_null) {
                let fallback = map.get("updated_at").cloned().filter(Value::is_i64);
                map.insert("created_at".into(), fallback.unwrap_or(Value::from(0)));
            }
        }
        from_row(Table::Sessions, Self::KEY, &row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        let mut record = self.clone();
        record.runs = None;
        let order = match self.session_type {
            SessionType::Agent => AGENT_KEYS,
            SessionType::Team => TEAM_KEYS,
            SessionType::Workflow => WORKFLOW_KEYS,
        };
        Ok(shape(fields(&record)?, order, Nulls::Keep, existing))
    }
}

/// The legacy runs blob of a session row (`runs`), if any.
pub(crate) fn legacy_blob(row: &Value) -> Option<&Value> {
    row.get("runs")
}

/// Run rows grouped by session, from the runs file. A row this crate cannot decode is
/// handed over as its stored `run_data` text (see [`RunJson`]), so it does not fail the read.
fn runs_by_session(
    rows: &[Value],
    wanted: &HashSet<&str>,
) -> Result<HashMap<String, Vec<SessionRun>>> {
    let mut grouped: HashMap<String, Vec<SessionRun>> = HashMap::new();
    for row in rows {
        let run = if undecodable(row).is_some() {
            let field = |key| undecodable_field(row, key);
            let number = |key| undecodable_raw_field(row, key).and_then(|n| n.parse().ok());
            let (Some(sid), Some(run_id), Some(data)) = (
                field("session_id"),
                field("run_id"),
                undecodable_raw_field(row, "run_data"),
            ) else {
                continue;
            };
            if !wanted.contains(sid.as_str()) {
                continue;
            }
            let run = SessionRun {
                run_id,
                run_index: number("run_index"),
                created_at: number("created_at").unwrap_or_default(),
                run: RunJson::from_stored_text(data)?,
            };
            (sid, run)
        } else {
            let Some(sid) = text(row, "session_id").filter(|s| wanted.contains(s)) else {
                continue;
            };
            (sid.to_owned(), SessionRun::from(RunRecord::decode(row)?))
        };
        grouped.entry(run.0).or_default().push(run.1);
    }
    Ok(grouped)
}

impl JsonStore {
    /// `session` with its runs merged from the runs file and `legacy`.
    pub(crate) async fn attach_runs(
        &self,
        mut session: Session,
        legacy: Option<&Value>,
        runs_limit: Option<usize>,
    ) -> Result<Session> {
        let rows = self.files.load(Table::Runs).await?;
        let wanted = HashSet::from([session.session_id.as_str()]);
        let runs = runs_by_session(&rows, &wanted)?
            .remove(&session.session_id)
            .unwrap_or_default();
        let merged = merge_runs(legacy, runs);
        session.runs = Some(match runs_limit {
            Some(n) => last_context_runs(merged, n),
            None => merged,
        });
        Ok(session)
    }
}

#[async_trait]
impl SessionStore for JsonStore {
    async fn upsert_session(&self, mut session: Session) -> Result<Session> {
        session.runs = None;
        let now = now_epoch_seconds();
        let (stored, legacy) = self
            .files
            .modify(Table::Sessions, |rows| {
                let mut s = session.clone();
                let found = find::<Session>(rows, &s.session_id)?;
                match &found {
                    Some((_, existing)) => {
                        if !writable_by(existing.user_id.as_deref(), s.user_id.as_deref()) {
                            return Err(owned_by_another_user("session", &s.session_id));
                        }
                        s.created_at = existing.created_at;
                        s.session_type = existing.session_type;
                        s.updated_at = Some(now);
                    }
                    None => s.updated_at = Some(s.created_at),
                }
                let index = found.map(|(i, _)| i);
                put(rows, index, &s)?;
                let legacy = index.and_then(|i| legacy_blob(&rows[i]).cloned());
                Ok(Step::Write((s, legacy)))
            })
            .await?;
        self.attach_runs(stored, legacy.as_ref(), None).await
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let rows = self.files.load(Table::Sessions).await?;
        let Some((index, s)) = find::<Session>(&rows, session_id)? else {
            return Ok(None);
        };
        if !visible_to(s.user_id.as_deref(), read.user_id.as_deref())
            || read.session_type.is_some_and(|t| t != s.session_type)
        {
            return Ok(None);
        }
        let legacy = legacy_blob(&rows[index]);
        Ok(Some(self.attach_runs(s, legacy, read.runs_limit).await?))
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        query.pagination.validate()?;
        let rows = self.files.load(Table::Sessions).await?;
        let matches = query.matcher();
        let mut legacy: HashMap<String, &Value> = HashMap::new();
        let mut sessions = Vec::new();
        for row in &rows {
            let s = Session::decode(row)?;
            if matches(&s) {
                if let Some(blob) = legacy_blob(row) {
                    legacy.entry(s.session_id.clone()).or_insert(blob);
                }
                sessions.push(s);
            }
        }
        let mut page = query.page(sessions)?;
        if query.include_runs && !page.items.is_empty() {
            let run_rows = self.files.load(Table::Runs).await?;
            let wanted: HashSet<&str> = page.items.iter().map(|s| s.session_id.as_str()).collect();
            let mut grouped = runs_by_session(&run_rows, &wanted)?;
            for s in &mut page.items {
                let runs = grouped.remove(&s.session_id).unwrap_or_default();
                s.runs = Some(merge_runs(legacy.get(&s.session_id).copied(), runs));
            }
        }
        Ok(page)
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        let now = now_epoch_seconds();
        let renamed = self
            .files
            .modify(Table::Sessions, |rows| {
                let Some((index, mut s)) = find::<Session>(rows, session_id)? else {
                    return Ok(Step::Keep(None));
                };
                if !visible_to(s.user_id.as_deref(), user_id) {
                    return Ok(Step::Keep(None));
                }
                s.set_session_name(session_name);
                s.updated_at = Some(now);
                put(rows, Some(index), &s)?;
                Ok(Step::Write(Some((s, legacy_blob(&rows[index]).cloned()))))
            })
            .await?;
        match renamed {
            Some((s, legacy)) => Ok(Some(self.attach_runs(s, legacy.as_ref(), None).await?)),
            None => Ok(None),
        }
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let wanted: HashSet<&str> = session_ids.iter().map(String::as_str).collect();
        let doomed = self
            .files
            .modify(Table::Sessions, |rows| {
                let mut doomed: HashSet<String> = HashSet::new();
                let mut kept = Vec::with_capacity(rows.len());
                for row in rows.drain(..) {
                    let id = text(&row, "session_id").filter(|id| wanted.contains(id));
                    match id {
                        Some(id) if visible_to(text(&row, "user_id"), user_id) => {
                            doomed.insert(id.to_owned());
                        }
                        _ => kept.push(row),
                    }
                }
                *rows = kept;
                Ok(if doomed.is_empty() {
                    Step::Keep(doomed)
                } else {
                    Step::Write(doomed)
                })
            })
            .await?;
        if !doomed.is_empty() {
            self.files
                .modify(Table::Runs, |rows| {
                    let before = rows.len();
                    rows.retain(|r| text(r, "session_id").is_none_or(|s| !doomed.contains(s)));
                    Ok(if rows.len() == before {
                        Step::Keep(())
                    } else {
                        Step::Write(())
                    })
                })
                .await?;
        }
        Ok(doomed.len() as u64)
    }
}

/// The owner of session `session_id` in `rows`: `None` when there is no such session.
pub(crate) fn session_owner<'a>(rows: &'a [Value], session_id: &str) -> Option<Option<&'a str>> {
    position(rows, "session_id", session_id)
        .map(|at| rows[at].get("user_id").and_then(Value::as_str))
}
