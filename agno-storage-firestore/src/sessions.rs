//! Sessions (`agno_sessions`): one document per session, document id = `session_id`
//! (agno uses auto ids; documents it wrote that way are still found by `session_id`).
//!
//! A pre-v3 `runs` field (agno 2.x) stays on the document until the migration's cleanup;
//! reads merge it with the runs collection.

use agno_storage_core::legacy::{last_context_runs, merge_runs};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, sort_records, visible_to, writable_by,
    Page, Result, Session, SessionQuery, SessionRead, SessionStore, SessionType,
};
use serde_json::Value;

use crate::doc::{backoff, doc_id, opt, to_fields, Commit, Fields, Pre, Stored, CAS_ATTEMPTS};
use crate::runs::run_counter_id;
use crate::FirestoreDb;
use agno_storage_doc::DocBackend;

/// The legacy `runs` field.
pub(crate) const LEGACY_RUNS: &str = "runs";

/// A stored session and its legacy runs blob.
pub(crate) fn decode_session(stored: &Stored) -> Result<(Session, Option<Value>)> {
    let mut fields = stored.fields.clone();
    let legacy = fields.remove(LEGACY_RUNS).filter(|v| !v.is_null());
    let session: Session = crate::doc::from_fields(fields, "a session")?;
    Ok((session, legacy))
}

/// A session document as agno 3.1.10 writes it: only the id and data fields of its type.
fn encode_session(session: &Session) -> Result<Fields> {
    let mut fields = to_fields(session, "a session")?;
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

impl FirestoreDb {
    pub(crate) async fn find_session(&self, session_id: &str) -> Result<Option<Stored>> {
        self.find(&self.inner.names.sessions, "session_id", session_id)
            .await
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
                    let (current, legacy) = decode_session(stored)?;
                    if !writable_by(current.user_id.as_deref(), session.user_id.as_deref()) {
                        return Err(owned_by_another_user("session", &session.session_id));
                    }
                    next.created_at = current.created_at;
                    next.session_type = current.session_type;
                    next.updated_at = Some(now);
                    // agno's `set(merge=True)`: fields we do not write (the legacy `runs`)
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
                        doc_id(&session.session_id),
                        Pre::Absent,
                        None,
                        Fields::new(),
                    )
                }
            };
            fields.extend(encode_session(&next)?);
            let write = self.put(&self.inner.names.sessions, &doc, &fields, pre);
            match self.commit("upsert session", vec![write]).await? {
                Commit::Done => return Ok((next, legacy)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert session"))
    }
}

#[async_trait]
impl SessionStore for FirestoreDb {
    async fn upsert_session(&self, session: Session) -> Result<Session> {
        let (stored, legacy) = self.write_session(&session).await?;
        self.with_runs(stored, legacy.as_ref(), None).await
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let Some(stored) = self.find_session(session_id).await? else {
            return Ok(None);
        };
        let (s, legacy) = decode_session(&stored)?;
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
        let mut eq = Vec::new();
        if let Some(u) = &query.user_id {
            eq.push(("user_id", opt(Some(u))));
        }
        let docs = self.query(&self.inner.names.sessions, &eq).await?;
        let name = query.session_name.as_ref().map(|n| n.to_lowercase());
        let mut rows: Vec<(Session, Option<Value>)> = Vec::new();
        for d in &docs {
            let (s, legacy) = decode_session(d)?;
            let keep = query.session_type.is_none_or(|t| t == s.session_type)
                && visible_to(s.user_id.as_deref(), query.user_id.as_deref())
                && query
                    .component_id
                    .as_deref()
                    .is_none_or(|c| match query.session_type {
                        Some(_) => s.component_id() == Some(c),
                        None => [&s.agent_id, &s.team_id, &s.workflow_id]
                            .iter()
                            .any(|id| id.as_deref() == Some(c)),
                    })
                && name.as_deref().is_none_or(|n| {
                    s.session_name()
                        .is_some_and(|sn| sn.to_lowercase().contains(n))
                })
                && query.start_timestamp.is_none_or(|t| s.created_at >= t)
                && query.end_timestamp.is_none_or(|t| s.created_at <= t);
            if keep {
                rows.push((s, legacy));
            }
        }
        let mut sessions: Vec<Session> = rows.iter().map(|(s, _)| s.clone()).collect();
        sort_records(&mut sessions, &query.sort, Session::SORTABLE)?;
        let mut page = Page::paginate(sessions, &query.pagination)?;
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
            let (mut s, legacy) = decode_session(&stored)?;
            if !visible_to(s.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            s.set_session_name(session_name);
            s.updated_at = Some(now_epoch_seconds());
            let mut fields = stored.fields.clone();
            fields.extend(encode_session(&s)?);
            let write = self.put(
                &self.inner.names.sessions,
                &stored.id,
                &fields,
                stored.unchanged(),
            );
            match self.commit("rename session", vec![write]).await? {
                Commit::Done => return Ok(Some(self.with_runs(s, legacy.as_ref(), None).await?)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("rename session"))
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in session_ids {
            let Some(stored) = self.find_session(id).await? else {
                continue;
            };
            let (s, _) = decode_session(&stored)?;
            if !visible_to(s.user_id.as_deref(), user_id) {
                continue;
            }
            let mut writes = vec![
                self.delete(&self.inner.names.sessions, &stored.id, Pre::Any),
                self.delete(&self.inner.names.meta, &run_counter_id(id), Pre::Any),
            ];
            for run in self
                .query(&self.inner.names.runs, &[("session_id", opt(Some(id)))])
                .await?
            {
                writes.push(self.delete(&self.inner.names.runs, &run.id, Pre::Any));
            }
            self.commit_all("delete sessions", writes).await?;
            deleted += 1;
        }
        Ok(deleted)
    }
}
