//! Sessions: `{prefix}:sessions:{session_id}` JSON records in agno 3.1.10's field order,
//! with any legacy `runs` field carried forward, and sorted-set indexes by creation time
//! (all, per owner, per component) so listings page in O(log n + page).

use std::collections::BTreeSet;

use agno_storage_core::legacy::{last_context_runs, merge_runs, SessionRun};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, validate_sort, visible_to, writable_by,
    Error, Page, Result, Session, SessionQuery, SessionRead, SessionStore, SessionType, SortOrder,
};
use serde_json::{Map, Value};

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, json, object, opt_int, opt_json, opt_str, text};
use crate::store::{bound, KvStore};

pub(crate) const TABLE: &str = "sessions";

/// A session record as stored: the session and its legacy runs blob (the `runs` field
/// agno 2.x wrote; `None` when absent or `null`).
pub(crate) struct Stored {
    pub(crate) session: Session,
    pub(crate) legacy: Option<Value>,
}

pub(crate) fn decode(key: &str, raw: &str) -> Result<Stored> {
    let map = decode_object(key, raw)?;
    from_map(key, &map)
}

pub(crate) fn from_map(key: &str, map: &Map<String, Value>) -> Result<Stored> {
    let session_id = text(map, "session_id")
        .or_else(|| key.rsplit_once(":sessions:").map(|(_, id)| id.to_owned()))
        .unwrap_or_default();
    let session_type = match text(map, "session_type") {
        Some(t) => SessionType::parse(&t).map_err(|e| {
            Error::new(
                agno_storage_core::ErrorKind::Serialization,
                format!("{key}: {}", e.message()),
            )
        })?,
        None if text(map, "team_id").is_some() => SessionType::Team,
        None if text(map, "workflow_id").is_some() && text(map, "agent_id").is_none() => {
            SessionType::Workflow
        }
        None => SessionType::Agent,
    };
    let session = Session {
        session_id,
        session_type,
        agent_id: text(map, "agent_id"),
        team_id: text(map, "team_id"),
        workflow_id: text(map, "workflow_id"),
        user_id: text(map, "user_id"),
        session_data: json(map, "session_data"),
        agent_data: json(map, "agent_data"),
        team_data: json(map, "team_data"),
        workflow_data: json(map, "workflow_data"),
        metadata: json(map, "metadata"),
        summary: json(map, "summary"),
        runs: None,
        created_at: int(map, "created_at").unwrap_or_default(),
        updated_at: int(map, "updated_at"),
    };
    Ok(Stored {
        session,
        legacy: json(map, "runs"),
    })
}

/// The record as agno 3.1.10's `RedisDb.upsert_session` lays it out for the session's
/// type, then the legacy `runs` field when one is carried forward.
pub(crate) fn encode_session(s: &Session, legacy: Option<&Value>) -> String {
    let f = |v: &Option<String>| opt_str(v);
    let mut record = match s.session_type {
        SessionType::Agent => object([
            ("session_id", Value::String(s.session_id.clone())),
            ("session_type", Value::String("agent".into())),
            ("agent_id", f(&s.agent_id)),
            ("team_id", f(&s.team_id)),
            ("workflow_id", f(&s.workflow_id)),
            ("user_id", f(&s.user_id)),
            ("agent_data", opt_json(&s.agent_data)),
            ("team_data", opt_json(&s.team_data)),
            ("workflow_data", opt_json(&s.workflow_data)),
            ("session_data", opt_json(&s.session_data)),
            ("summary", opt_json(&s.summary)),
            ("metadata", opt_json(&s.metadata)),
            ("created_at", Value::from(s.created_at)),
            ("updated_at", opt_int(s.updated_at)),
        ]),
        SessionType::Team => object([
            ("session_id", Value::String(s.session_id.clone())),
            ("session_type", Value::String("team".into())),
            ("agent_id", f(&s.agent_id)),
            ("team_id", f(&s.team_id)),
            ("workflow_id", f(&s.workflow_id)),
            ("user_id", f(&s.user_id)),
            ("team_data", opt_json(&s.team_data)),
            ("agent_data", opt_json(&s.agent_data)),
            ("workflow_data", opt_json(&s.workflow_data)),
            ("session_data", opt_json(&s.session_data)),
            ("summary", opt_json(&s.summary)),
            ("metadata", opt_json(&s.metadata)),
            ("created_at", Value::from(s.created_at)),
            ("updated_at", opt_int(s.updated_at)),
        ]),
        SessionType::Workflow => object([
            ("session_id", Value::String(s.session_id.clone())),
            ("session_type", Value::String("workflow".into())),
            ("workflow_id", f(&s.workflow_id)),
            ("user_id", f(&s.user_id)),
            ("workflow_data", opt_json(&s.workflow_data)),
            ("session_data", opt_json(&s.session_data)),
            ("metadata", opt_json(&s.metadata)),
            ("created_at", Value::from(s.created_at)),
            ("updated_at", opt_int(s.updated_at)),
            ("agent_id", f(&s.agent_id)),
            ("team_id", f(&s.team_id)),
            ("agent_data", opt_json(&s.agent_data)),
            ("team_data", opt_json(&s.team_data)),
            ("summary", opt_json(&s.summary)),
        ]),
    };
    if let (Some(blob), Value::Object(map)) = (legacy, &mut record) {
        map.insert("runs".into(), blob.clone());
    }
    encode(&record)
}

impl KvStore {
    pub(crate) fn sessions_all(&self) -> String {
        self.idx(TABLE, "created:all")
    }

    pub(crate) fn sessions_of_user(&self, user: &str) -> String {
        self.idx(TABLE, &format!("created:user:{user}"))
    }

    pub(crate) fn sessions_of_component(&self, component: &str) -> String {
        self.idx(TABLE, &format!("created:component:{component}"))
    }

    /// Sessions carrying a legacy runs blob, ordered by session id (lexicographic set).
    pub(crate) fn sessions_legacy(&self) -> String {
        self.idx(TABLE, "legacy")
    }

    /// The index entries of a session record.
    pub(crate) fn session_entries(&self, s: &Session, has_legacy: bool) -> Vec<Entry> {
        let id = &s.session_id;
        let score = s.created_at as f64;
        let mut entries = vec![Entry::z(self.sessions_all(), id, score)];
        if let Some(u) = &s.user_id {
            entries.push(Entry::z(self.sessions_of_user(u), id, score));
        }
        let components: BTreeSet<&String> = [&s.agent_id, &s.team_id, &s.workflow_id]
            .into_iter()
            .flatten()
            .collect();
        for c in components {
            entries.push(Entry::z(self.sessions_of_component(c), id, score));
        }
        if has_legacy {
            entries.push(Entry::z(self.sessions_legacy(), id, 0.0));
        }
        entries
    }

    /// The session with its runs (runs store merged with the legacy blob), keeping the last
    /// `runs_limit` context runs when given.
    pub(crate) async fn attach_runs(
        &self,
        stored: Vec<Stored>,
        runs_limit: Option<usize>,
    ) -> Result<Vec<Session>> {
        let ids: Vec<&str> = stored
            .iter()
            .map(|s| s.session.session_id.as_str())
            .collect();
        let runs = self.runs_of_sessions(&ids).await?;
        Ok(stored
            .into_iter()
            .zip(runs)
            .map(|(st, runs)| with_runs(st, runs, runs_limit))
            .collect())
    }

    async fn read_session(&self, session_id: &str) -> Result<Option<(String, Stored)>> {
        let key = self.key(TABLE, session_id);
        match self.get(&key).await? {
            Some(raw) => Ok(Some((raw.clone(), decode(&key, &raw)?))),
            None => Ok(None),
        }
    }

    async fn delete_one_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        let key = self.key(TABLE, session_id);
        let by_session = self.by_session(session_id);
        self.retry("delete_sessions", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(false));
            };
            let stored = decode(&key, &raw)?;
            if !visible_to(stored.session.user_id.as_deref(), user_id) {
                return Ok(Some(false));
            }
            let run_ids: Vec<String> = self
                .query(redis::cmd("ZRANGE").arg(&by_session).arg(0).arg(-1))
                .await?;
            let run_keys: Vec<String> = run_ids.iter().map(|r| self.key("runs", r)).collect();
            let run_values = self.mget(&run_keys).await?;
            let mut cas = Cas::on(&key)
                .expect(Some(&raw))
                .delete()
                .guard_zcard(&by_session, run_ids.len())
                .reindex(
                    &self.session_entries(&stored.session, stored.legacy.is_some()),
                    &[],
                );
            for (run_key, value) in run_keys.iter().zip(run_values) {
                if let Some(run) = value.and_then(|v| crate::runs::decode(run_key, &v).ok()) {
                    cas = cas.reindex(&self.run_entries(&run), &[]);
                }
                cas = cas.del_key(run_key);
            }
            cas = cas.del_key(&by_session);
            Ok(match self.cas(&cas).await? {
                Outcome::Applied => Some(true),
                _ => None,
            })
        })
        .await
    }
}

fn with_runs(stored: Stored, runs: Vec<SessionRun>, runs_limit: Option<usize>) -> Session {
    let mut session = stored.session;
    let merged = merge_runs(stored.legacy.as_ref(), runs);
    session.runs = Some(match runs_limit {
        Some(n) => last_context_runs(merged, n),
        None => merged,
    });
    session
}

#[async_trait]
impl SessionStore for KvStore {
    async fn upsert_session(&self, mut session: Session) -> Result<Session> {
        session.runs = None;
        let key = self.key(TABLE, &session.session_id);
        let stored = self
            .retry("upsert_session", || async {
                let current = self.get(&key).await?;
                let mut next = session.clone();
                let (legacy, old_entries) = match &current {
                    Some(raw) => {
                        let old = decode(&key, raw)?;
                        if !writable_by(old.session.user_id.as_deref(), next.user_id.as_deref()) {
                            return Err(owned_by_another_user("session", &next.session_id));
                        }
                        next.created_at = old.session.created_at;
                        next.session_type = old.session.session_type;
                        next.updated_at = Some(now_epoch_seconds());
                        let entries = self.session_entries(&old.session, old.legacy.is_some());
                        (old.legacy, entries)
                    }
                    None => {
                        next.updated_at = Some(next.created_at);
                        (None, Vec::new())
                    }
                };
                let new_entries = self.session_entries(&next, legacy.is_some());
                let cas = Cas::on(&key)
                    .expect(current.as_deref())
                    .set(encode_session(&next, legacy.as_ref()))
                    .reindex(&old_entries, &new_entries);
                Ok(match self.cas(&cas).await? {
                    Outcome::Applied => Some(Stored {
                        session: next,
                        legacy,
                    }),
                    _ => None,
                })
            })
            .await?;
        let mut sessions = self.attach_runs(vec![stored], None).await?;
        sessions
            .pop()
            .ok_or_else(|| Error::not_found("the upserted session vanished"))
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let Some((_, stored)) = self.read_session(session_id).await? else {
            return Ok(None);
        };
        let s = &stored.session;
        if !visible_to(s.user_id.as_deref(), read.user_id.as_deref())
            || read.session_type.is_some_and(|t| t != s.session_type)
        {
            return Ok(None);
        }
        Ok(self.attach_runs(vec![stored], read.runs_limit).await?.pop())
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        query.pagination.validate()?;
        validate_sort(&query.sort, Session::SORTABLE)?;
        let (min, max) = (
            bound(query.start_timestamp, "-inf"),
            bound(query.end_timestamp, "+inf"),
        );
        let user_index = query.user_id.as_deref().map(|u| self.sessions_of_user(u));
        let component_index = query
            .component_id
            .as_deref()
            .map(|c| self.sessions_of_component(c));
        let base = match (user_index, component_index) {
            (Some(u), Some(c)) => {
                let (nu, nc): (u64, u64) = self
                    .pipe(redis::pipe().cmd("ZCARD").arg(&u).cmd("ZCARD").arg(&c))
                    .await?;
                if nc < nu {
                    c
                } else {
                    u
                }
            }
            (Some(u), None) => u,
            (None, Some(c)) => c,
            (None, None) => self.sessions_all(),
        };
        let matches = query.matcher();
        let by_index = query.session_type.is_none()
            && query.session_name.is_none()
            && !(query.user_id.is_some() && query.component_id.is_some())
            && query
                .sort
                .sort_by
                .as_deref()
                .is_none_or(|c| c == "created_at");
        let (rows, total) = if by_index {
            let order = match query.sort.sort_by {
                Some(_) => query.sort.sort_order,
                None => SortOrder::Asc,
            };
            self.page_index(
                TABLE,
                &base,
                (&min, &max),
                order,
                &query.pagination,
                |id, raw| {
                    let stored = decode(&self.key(TABLE, id), raw)?;
                    Ok(matches(&stored.session).then_some(stored))
                },
            )
            .await?
        } else {
            let mut matched = Vec::new();
            for (id, raw) in self.load_index(TABLE, &base, &min, &max).await? {
                let stored = decode(&self.key(TABLE, &id), &raw)?;
                if matches(&stored.session) {
                    matched.push(stored);
                }
            }
            let sessions: Vec<Session> = matched.iter().map(|s| s.session.clone()).collect();
            let page = query.page(sessions)?;
            let mut legacy: std::collections::HashMap<String, Option<Value>> = matched
                .into_iter()
                .map(|s| (s.session.session_id, s.legacy))
                .collect();
            let rows = page
                .items
                .into_iter()
                .map(|session| Stored {
                    legacy: legacy.remove(&session.session_id).flatten(),
                    session,
                })
                .collect();
            (rows, page.total)
        };
        let items = if query.include_runs {
            self.attach_runs(rows, None).await?
        } else {
            rows.into_iter().map(|s| s.session).collect()
        };
        Ok(Page::new(items, total))
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        let key = self.key(TABLE, session_id);
        let renamed = self
            .retry("rename_session", || async {
                let Some(raw) = self.get(&key).await? else {
                    return Ok(Some(None));
                };
                let mut map = decode_object(&key, &raw)?;
                let stored = from_map(&key, &map)?;
                if !visible_to(stored.session.user_id.as_deref(), user_id) {
                    return Ok(Some(None));
                }
                // Edit the record in place: every other field, the legacy runs blob
                // included, stays exactly as stored.
                let data = map
                    .entry("session_data")
                    .or_insert_with(|| Value::Object(Map::new()));
                if !data.is_object() {
                    *data = Value::Object(Map::new());
                }
                if let Value::Object(d) = data {
                    d.insert("session_name".into(), Value::String(session_name.into()));
                }
                map.insert("updated_at".into(), Value::from(now_epoch_seconds()));
                let updated = from_map(&key, &map)?;
                let cas = Cas::on(&key)
                    .expect(Some(&raw))
                    .set(encode(&Value::Object(map)));
                Ok(match self.cas(&cas).await? {
                    Outcome::Applied => Some(Some(updated)),
                    _ => None,
                })
            })
            .await?;
        match renamed {
            Some(stored) => Ok(self.attach_runs(vec![stored], None).await?.pop()),
            None => Ok(None),
        }
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in session_ids {
            if self.delete_one_session(id, user_id).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
