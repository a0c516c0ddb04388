//! Sessions (`agno_sessions`): one document per session, document id =
//! [`DocBackend::doc_id`] of `session_id`; found by [`DocBackend::find`] on `session_id`.
//! Deleting one is [`DocBackend::delete_session`] (by default [`delete_session_cas`]).
//!
//! A pre-v3 `runs` field (agno 2.x) stays on the document until the migration's cleanup;
//! reads merge it with the runs collection.

use agno_storage_core::legacy::{last_context_runs, merge_runs};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Page, Result,
    Session, SessionQuery, SessionRead, SessionStore, SessionType, ACTIVE_RUN_STATUSES,
};
use serde_json::Value;

use crate::backend::given;
use crate::{
    backoff, opt, run_counter_id, Commit, DocBackend, Docs, Fields, Pre, Stored, Table,
    CAS_ATTEMPTS,
};

/// The session field in which agno 2.x kept a session's runs (`runs`).
pub const LEGACY_RUNS: &str = "runs";

impl<B: DocBackend> Docs<B> {
    /// A stored session and its legacy runs blob.
    pub fn decode_session(&self, stored: &Stored<B>) -> Result<(Session, Option<Value>)> {
        let mut fields = stored.fields.clone();
        let legacy = fields.remove(LEGACY_RUNS).filter(|v| !v.is_null());
        let session: Session = self.decode_fields(fields, "a session")?;
        Ok((session, legacy))
    }

    /// A session document as agno 3.1.10 writes it: only the id and data fields of its type.
    fn encode_session(&self, session: &Session) -> Result<Fields> {
        let mut fields = self.to_fields(session, "a session")?;
        let other: &[&str] = match session.session_type {
            SessionType::Agent => &["team_id", "team_data", "workflow_id", "workflow_data"],
            SessionType::Team => &["agent_id", "agent_data", "workflow_id", "workflow_data"],
            SessionType::Workflow => &["agent_id", "agent_data", "team_id", "team_data"],
        };
        for key in other {
            fields.remove(*key);
        }
        Ok(fields)
    }

    /// The document of session `session_id`.
    pub async fn find_session(&self, session_id: &str) -> Result<Option<Stored<B>>> {
        self.find(self.collection(Table::Sessions), "session_id", session_id)
            .await
    }

    /// The document of session `session_id` if `user_id` may delete it: every session for
    /// an unscoped caller, only their own for a user ([`visible_to`]).
    pub async fn deletable_session(
        &self,
        session_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Stored<B>>> {
        let Some(stored) = self.find_session(session_id).await? else {
            return Ok(None);
        };
        let (s, _) = self.decode_session(&stored)?;
        Ok(visible_to(s.user_id.as_deref(), user_id).then_some(stored))
    }

    /// The writes that delete session `session_id`, stored as `stored` (under `pre`), and
    /// its run-index counter; its runs are the caller's to delete, in the same commit where
    /// the backend has one.
    pub fn session_deletes(
        &self,
        session_id: &str,
        stored: &Stored<B>,
        pre: Pre<B>,
    ) -> Vec<B::Write> {
        vec![
            self.delete(self.collection(Table::Sessions), &stored.id, pre),
            self.delete(
                self.collection(Table::Meta),
                &run_counter_id(session_id),
                Pre::Any,
            ),
        ]
    }

    /// `session` with its runs merged from the runs collection and the legacy blob.
    async fn with_runs(
        &self,
        mut session: Session,
        legacy: Option<&Value>,
        runs_limit: Option<usize>,
    ) -> Result<Session> {
        let runs = self.session_runs(&session.session_id).await?;
        let merged = merge_runs(legacy, runs);
        session.runs = Some(match runs_limit {
            Some(n) => last_context_runs(merged, n),
            None => merged,
        });
        Ok(session)
    }

    async fn write_session(&self, session: &Session) -> Result<(Session, Option<Value>)> {
        let now = now_epoch_seconds();
        for attempt in 0..CAS_ATTEMPTS {
            let existing = self.find_session(&session.session_id).await?;
            let mut next = session.clone();
            next.runs = None;
            let (doc, pre, legacy, mut fields) = match &existing {
                Some(stored) => {
                    let (current, legacy) = self.decode_session(stored)?;
                    if !writable_by(current.user_id.as_deref(), session.user_id.as_deref()) {
                        return Err(owned_by_another_user("session", &session.session_id));
                    }
                    next.created_at = current.created_at;
                    next.session_type = current.session_type;
                    next.updated_at = Some(now);
                    // As agno's merge writes: fields we do not write (the legacy `runs`)
                    // stay.
                    (
                        stored.id.clone(),
                        stored.unchanged(),
                        legacy,
                        stored.fields.clone(),
                    )
                }
                None => {
                    next.updated_at = Some(next.created_at);
                    (
                        self.doc_id(&session.session_id),
                        Pre::Absent,
                        None,
                        Fields::new(),
                    )
                }
            };
            fields.extend(self.encode_session(&next)?);
            let write = self.put(self.collection(Table::Sessions), &doc, &fields, pre);
            match self.commit("upsert session", vec![write]).await? {
                Commit::Done => return Ok((next, legacy)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert session"))
    }
}

#[async_trait]
impl<B: DocBackend> SessionStore for Docs<B> {
    async fn upsert_session(&self, session: Session) -> Result<Session> {
        let (stored, legacy) = self.write_session(&session).await?;
        self.with_runs(stored, legacy.as_ref(), None).await
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let Some(stored) = self.find_session(session_id).await? else {
            return Ok(None);
        };
        let (s, legacy) = self.decode_session(&stored)?;
        if !visible_to(s.user_id.as_deref(), read.user_id.as_deref())
            || read.session_type.is_some_and(|t| t != s.session_type)
        {
            return Ok(None);
        }
        Ok(Some(
            self.with_runs(s, legacy.as_ref(), read.runs_limit).await?,
        ))
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        query.pagination.validate()?;
        if let Some((docs, total)) = self.0.session_page(&query).await? {
            let mut items = Vec::with_capacity(docs.len());
            for d in &docs {
                let (mut s, legacy) = self.decode_session(d)?;
                if query.include_runs {
                    let runs = self.session_runs(&s.session_id).await?;
                    s.runs = Some(merge_runs(legacy.as_ref(), runs));
                }
                items.push(s);
            }
            return Ok(Page::new(items, total));
        }
        let eq = given(&[("user_id", query.user_id.as_deref())]);
        let docs = self.query(self.collection(Table::Sessions), &eq).await?;
        let matches = query.matcher();
        let mut rows: Vec<(Session, Option<Value>)> = Vec::new();
        for d in &docs {
            let (s, legacy) = self.decode_session(d)?;
            if matches(&s) {
                rows.push((s, legacy));
            }
        }
        let sessions: Vec<Session> = rows.iter().map(|(s, _)| s.clone()).collect();
        let mut page = query.page(sessions)?;
        if query.include_runs {
            for s in &mut page.items {
                let legacy = rows
                    .iter()
                    .find(|(r, _)| r.session_id == s.session_id)
                    .and_then(|(_, l)| l.clone());
                let runs = self.session_runs(&s.session_id).await?;
                s.runs = Some(merge_runs(legacy.as_ref(), runs));
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
        for attempt in 0..CAS_ATTEMPTS {
            let Some(stored) = self.find_session(session_id).await? else {
                return Ok(None);
            };
            let (mut s, legacy) = self.decode_session(&stored)?;
            if !visible_to(s.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            s.set_session_name(session_name);
            s.updated_at = Some(now_epoch_seconds());
            let mut fields = stored.fields.clone();
            fields.extend(self.encode_session(&s)?);
            let write = self.rewrite_fields(Table::Sessions, &stored, &fields);
            match self.commit("rename session", vec![write]).await? {
                Commit::Done => return Ok(Some(self.with_runs(s, legacy.as_ref(), None).await?)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("rename session"))
    }

    async fn reassign_session_owner(
        &self,
        session_id: &str,
        previous_user_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        for attempt in 0..CAS_ATTEMPTS {
            let Some(stored) = self.find_session(session_id).await? else {
                return Ok(false);
            };
            if stored.fields.get("user_id").and_then(Value::as_str) != Some(previous_user_id) {
                return Ok(false);
            }
            let in_flight = self.session_run_docs(session_id).await?.iter().any(|run| {
                run.fields
                    .get("status")
                    .and_then(Value::as_str)
                    .is_some_and(|s| ACTIVE_RUN_STATUSES.contains(&s))
            });
            if in_flight {
                return Ok(false);
            }
            let mut fields = stored.fields.clone();
            fields.insert("user_id".into(), opt(user_id));
            let write = self.rewrite_fields(Table::Sessions, &stored, &fields);
            match self.commit("reassign session owner", vec![write]).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("reassign session owner"))
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in session_ids {
            if self.delete_session(id, user_id).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

/// [`DocBackend::delete_session`] in one commit: the session as read (a concurrent write to
/// it conflicts and the delete is retried), its run-index counter and its runs (by
/// [`DocBackend::delete_session_runs`] when the backend has one write for them).
pub async fn delete_session_cas<B: DocBackend>(
    db: &B,
    session_id: &str,
    user_id: Option<&str>,
) -> Result<bool> {
    let docs = Docs::of(db);
    let runs = db.collection(Table::Runs);
    for attempt in 0..CAS_ATTEMPTS {
        let Some(stored) = docs.deletable_session(session_id, user_id).await? else {
            return Ok(false);
        };
        let mut writes = docs.session_deletes(session_id, &stored, stored.unchanged());
        match db.delete_session_runs(session_id) {
            Some(write) => writes.push(write),
            None => {
                for run in db
                    .query(runs, &[("session_id", opt(Some(session_id)))])
                    .await?
                {
                    writes.push(db.delete(runs, &run.id, run.unchanged()));
                }
            }
        }
        match db.commit("delete sessions", writes).await? {
            Commit::Done => return Ok(true),
            Commit::Conflict => backoff(attempt).await,
        }
    }
    Err(db.contended("delete sessions"))
}
