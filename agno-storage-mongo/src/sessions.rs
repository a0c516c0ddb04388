//! Sessions (`agno_sessions`): one document per session, shaped as agno 3.1.10 writes it.

use std::collections::HashMap;

use agno_storage_core::legacy::{last_context_runs, merge_runs};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Page, Result, RunRecord, Session,
    SessionQuery, SessionRead, SessionStore, SessionType, ACTIVE_RUN_STATUSES,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;
use serde_json::Value;

use crate::doc::{
    db_err, from_doc, is_duplicate_key, opt, regex_literal, to_bson, to_json, writable_filter,
};
use crate::MongoDb;

/// A stored session: the record and its legacy `runs` field, if any.
pub(crate) struct StoredSession {
    pub(crate) session: Session,
    pub(crate) legacy_runs: Option<Value>,
}

pub(crate) fn decode_session(mut doc: Document) -> Result<StoredSession> {
    let legacy_runs = doc.remove("runs").map(to_json);
    Ok(StoredSession {
        session: from_doc(doc, "a session")?,
        legacy_runs,
    })
}

fn json_field(value: &Option<Value>, what: &str) -> Result<Bson> {
    value.as_ref().map_or(Ok(Bson::Null), |v| to_bson(v, what))
}

/// The fields agno's `upsert_session` writes for this session's type (only its own
/// component id and data), without `created_at`, `session_type` and `updated_at`.
fn session_fields(s: &Session) -> Result<Document> {
    let (id_key, data_key, id, data) = match s.session_type {
        SessionType::Agent => ("agent_id", "agent_data", &s.agent_id, &s.agent_data),
        SessionType::Team => ("team_id", "team_data", &s.team_id, &s.team_data),
        SessionType::Workflow => (
            "workflow_id",
            "workflow_data",
            &s.workflow_id,
            &s.workflow_data,
        ),
    };
    let mut d = doc! {"session_id": &s.session_id};
    d.insert(id_key, opt(id.as_deref()));
    d.insert("user_id", opt(s.user_id.as_deref()));
    d.insert(data_key, json_field(data, "agent/team/workflow data")?);
    d.insert("session_data", json_field(&s.session_data, "session_data")?);
    d.insert("summary", json_field(&s.summary, "summary")?);
    d.insert("metadata", json_field(&s.metadata, "metadata")?);
    Ok(d)
}

impl MongoDb {
    /// Run rows of `session_ids`, grouped by session.
    pub(crate) async fn runs_of(
        &self,
        session_ids: &[String],
    ) -> Result<HashMap<String, Vec<RunRecord>>> {
        let mut by_session: HashMap<String, Vec<RunRecord>> = HashMap::new();
        if session_ids.is_empty() {
            return Ok(by_session);
        }
        let mut cursor = self
            .coll(&self.inner.names.runs)
            .find(doc! {"session_id": {"$in": session_ids}})
            .await
            .map_err(db_err("read runs"))?;
        while let Some(d) = cursor.try_next().await.map_err(db_err("read runs"))? {
            let run: RunRecord = crate::runs::decode_run(d)?;
            by_session
                .entry(run.session_id.clone())
                .or_default()
                .push(run);
        }
        Ok(by_session)
    }

    /// The session with its merged runs (store copies win over the legacy field).
    pub(crate) async fn with_runs(
        &self,
        stored: StoredSession,
        runs_limit: Option<usize>,
    ) -> Result<Session> {
        let id = stored.session.session_id.clone();
        let runs = self
            .runs_of(std::slice::from_ref(&id))
            .await?
            .remove(&id)
            .unwrap_or_default();
        Ok(attach(stored, runs, runs_limit))
    }
}

fn attach(stored: StoredSession, runs: Vec<RunRecord>, runs_limit: Option<usize>) -> Session {
    let mut session = stored.session;
    let merged = merge_runs(stored.legacy_runs.as_ref(), runs);
    session.runs = Some(match runs_limit {
        Some(n) => last_context_runs(merged, n),
        None => merged,
    });
    session
}

#[async_trait]
impl SessionStore for MongoDb {
    async fn upsert_session(&self, session: Session) -> Result<Session> {
        let now = now_epoch_seconds();
        let mut filter = doc! {"session_id": &session.session_id};
        filter.extend(writable_filter(session.user_id.as_deref()));
        let mut set = session_fields(&session)?;
        set.insert("updated_at", now);
        let update = doc! {
            "$set": set,
            "$setOnInsert": {
                "session_type": session.session_type.as_str(),
                "created_at": session.created_at,
            },
        };
        let result = self
            .coll(&self.inner.names.sessions)
            .find_one_and_update(filter, update)
            .upsert(true)
            .return_document(ReturnDocument::After)
            .await;
        let stored = match result {
            Ok(Some(d)) => d,
            Ok(None) => return Err(owned_by_another_user("session", &session.session_id)),
            // The unique session_id refused the insert: the row exists and is not ours.
            Err(e) if is_duplicate_key(&e) => {
                return Err(owned_by_another_user("session", &session.session_id))
            }
            Err(e) => return Err(db_err("upsert session")(e)),
        };
        self.with_runs(decode_session(stored)?, None).await
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let mut filter = doc! {"session_id": session_id};
        crate::doc::scope(&mut filter, read.user_id.as_deref());
        if let Some(t) = read.session_type {
            filter.insert("session_type", t.as_str());
        }
        let Some(d) = self
            .coll(&self.inner.names.sessions)
            .find_one(filter)
            .await
            .map_err(db_err("get session"))?
        else {
            return Ok(None);
        };
        Ok(Some(
            self.with_runs(decode_session(d)?, read.runs_limit).await?,
        ))
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, Session::SORTABLE)?;
        let mut filter = Document::new();
        if let Some(t) = query.session_type {
            filter.insert("session_type", t.as_str());
        }
        crate::doc::scope(&mut filter, query.user_id.as_deref());
        if let Some(c) = &query.component_id {
            match query.session_type {
                Some(SessionType::Agent) => filter.insert("agent_id", c),
                Some(SessionType::Team) => filter.insert("team_id", c),
                Some(SessionType::Workflow) => filter.insert("workflow_id", c),
                None => filter.insert(
                    "$or",
                    vec![
                        doc! {"agent_id": c},
                        doc! {"team_id": c},
                        doc! {"workflow_id": c},
                    ],
                ),
            };
        }
        if let Some(name) = &query.session_name {
            filter.insert(
                "session_data.session_name",
                doc! {"$regex": regex_literal(name), "$options": "i"},
            );
        }
        let mut created = Document::new();
        if let Some(t) = query.start_timestamp {
            created.insert("$gte", t);
        }
        if let Some(t) = query.end_timestamp {
            created.insert("$lte", t);
        }
        if !created.is_empty() {
            filter.insert("created_at", created);
        }
        let docs: Vec<Document> = self
            .coll(&self.inner.names.sessions)
            .find(filter)
            .await
            .map_err(db_err("get sessions"))?
            .try_collect()
            .await
            .map_err(db_err("get sessions"))?;
        let mut stored = docs
            .into_iter()
            .map(decode_session)
            .collect::<Result<Vec<_>>>()?;
        let sessions: Vec<Session> = stored.iter().map(|s| s.session.clone()).collect();
        let page = query.page(sessions)?;
        if !query.include_runs {
            return Ok(page);
        }
        let ids: Vec<String> = page.items.iter().map(|s| s.session_id.clone()).collect();
        let mut runs = self.runs_of(&ids).await?;
        let mut legacy: HashMap<String, Option<Value>> = stored
            .drain(..)
            .map(|s| (s.session.session_id, s.legacy_runs))
            .collect();
        let items = page
            .items
            .into_iter()
            .map(|session| {
                let id = session.session_id.clone();
                let stored = StoredSession {
                    session,
                    legacy_runs: legacy.remove(&id).flatten(),
                };
                attach(stored, runs.remove(&id).unwrap_or_default(), None)
            })
            .collect();
        Ok(Page::new(items, page.total))
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        let mut filter = doc! {"session_id": session_id};
        crate::doc::scope(&mut filter, user_id);
        let coll = self.coll(&self.inner.names.sessions);
        let now = now_epoch_seconds();
        let renamed = coll
            .find_one_and_update(
                filter.clone(),
                doc! {"$set": {"session_data.session_name": session_name, "updated_at": now}},
            )
            .return_document(ReturnDocument::After)
            .await;
        let d = match renamed {
            Ok(d) => d,
            // `session_data` is not a document (null or a pre-2.x string): replace it, as agno does.
            Err(e)
                if matches!(
                    e.kind.as_ref(),
                    mongodb::error::ErrorKind::Command(_) | mongodb::error::ErrorKind::Write(_)
                ) =>
            {
                let Some(current) = coll
                    .find_one(filter.clone())
                    .await
                    .map_err(db_err("rename session"))?
                else {
                    return Ok(None);
                };
                let mut session = decode_session(current)?.session;
                session.set_session_name(session_name);
                let data = json_field(&session.session_data, "session_data")?;
                coll.find_one_and_update(
                    filter,
                    doc! {"$set": {"session_data": data, "updated_at": now}},
                )
                .return_document(ReturnDocument::After)
                .await
                .map_err(db_err("rename session"))?
            }
            Err(e) => return Err(db_err("rename session")(e)),
        };
        match d {
            Some(d) => Ok(Some(self.with_runs(decode_session(d)?, None).await?)),
            None => Ok(None),
        }
    }

    async fn reassign_session_owner(
        &self,
        session_id: &str,
        previous_user_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        let active = self
            .coll(&self.inner.names.runs)
            .find_one(doc! {"session_id": session_id, "status": {"$in": ACTIVE_RUN_STATUSES}})
            .projection(doc! {"_id": 1})
            .await
            .map_err(db_err("reassign session owner"))?;
        if active.is_some() {
            return Ok(false);
        }
        let changed = self
            .coll(&self.inner.names.sessions)
            .update_one(
                doc! {"session_id": session_id, "user_id": previous_user_id},
                doc! {"$set": {"user_id": opt(user_id)}},
            )
            .await
            .map_err(db_err("reassign session owner"))?;
        Ok(changed.matched_count > 0)
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let coll = self.coll(&self.inner.names.sessions);
        let mut filter = doc! {"session_id": {"$in": session_ids}};
        crate::doc::scope(&mut filter, user_id);
        // Cascade only to the sessions this caller may delete, never to another user's runs.
        let doomed: Vec<String> = coll
            .distinct("session_id", filter)
            .await
            .map_err(db_err("delete sessions"))?
            .into_iter()
            .filter_map(|b| match b {
                Bson::String(s) => Some(s),
                _ => None,
            })
            .collect();
        if doomed.is_empty() {
            return Ok(0);
        }
        let counters: Vec<String> = doomed
            .iter()
            .map(|id| crate::runs::counter_id(id))
            .collect();
        // One transaction: a crash never leaves runs whose session is gone.
        let deleted = self
            .transaction("delete sessions", |db, tx| {
                let (doomed, counters) = (doomed.clone(), counters.clone());
                Box::pin(async move {
                    let names = &db.inner.names;
                    let deleted = db
                        .coll(&names.sessions)
                        .delete_many(doc! {"session_id": {"$in": &doomed}})
                        .session(&mut *tx)
                        .await?
                        .deleted_count;
                    db.coll(&names.runs)
                        .delete_many(doc! {"session_id": {"$in": &doomed}})
                        .session(&mut *tx)
                        .await?;
                    db.coll(&names.meta)
                        .delete_many(doc! {"_id": {"$in": &counters}})
                        .session(&mut *tx)
                        .await?;
                    Ok(deleted)
                })
            })
            .await?;
        Ok(deleted)
    }
}
