//! Sessions: `{prefix}:sessions:{session_id}` JSON records in agno 3.1.10's field order
//! (per session type), with any legacy `runs` field carried forward, and sorted-set indexes
//! by creation time (all, per owner, per component) so listings page in O(log n + page).
//! The store is the document engine's; listing pages, deletes and the legacy-blob search are
//! its hooks, served here.

use std::collections::BTreeSet;

use agno_storage_core::{validate_sort, visible_to, Result, Session, SessionQuery, SortOrder};
use agno_storage_doc::{
    backoff, Commit, DocBackend, Docs, Fields, Stored, CAS_ATTEMPTS, LEGACY_RUNS,
};
use serde_json::Value;

use crate::docs::{
    score, text, Entry, Expect, KvDocs, KvWrite, Server, TableLayout, DEFAULT_LAYOUT,
};
use crate::store::{bound, KvStore};

pub(crate) const TABLE: &str = "sessions";

/// `RedisDb.upsert_session`'s layouts, per session type.
const AGENT_KEYS: &[&str] = &[
    "session_id",
    "session_type",
    "agent_id",
    "team_id",
    "workflow_id",
    "user_id",
    "agent_data",
    "team_data",
    "workflow_data",
    "session_data",
    "summary",
    "metadata",
    "created_at",
    "updated_at",
];
const TEAM_KEYS: &[&str] = &[
    "session_id",
    "session_type",
    "agent_id",
    "team_id",
    "workflow_id",
    "user_id",
    "team_data",
    "agent_data",
    "workflow_data",
    "session_data",
    "summary",
    "metadata",
    "created_at",
    "updated_at",
];
const WORKFLOW_KEYS: &[&str] = &[
    "session_id",
    "session_type",
    "workflow_id",
    "user_id",
    "workflow_data",
    "session_data",
    "metadata",
    "created_at",
    "updated_at",
    "agent_id",
    "team_id",
    "agent_data",
    "team_data",
    "summary",
];

pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |f| match text(f, "session_type") {
        Some("team") => TEAM_KEYS,
        Some("workflow") => WORKFLOW_KEYS,
        _ => AGENT_KEYS,
    },
    key_field: "session_id",
    score: |f| score(f, "created_at"),
    by_owner: |s, user| user.map(|u| s.sessions_of_user(u)),
    all: Some(|s| s.sessions_all()),
    extra: component_entries,
    normalize,
    ..DEFAULT_LAYOUT
};

/// A session is listed per component (each distinct agent, team and workflow id) and, while
/// it keeps a legacy runs blob, in the lexicographic `legacy` set.
fn component_entries(s: &KvStore, id: &str, f: &Fields) -> Vec<Entry> {
    let created = score(f, "created_at");
    let components: BTreeSet<&str> = ["agent_id", "team_id", "workflow_id"]
        .iter()
        .filter_map(|k| text(f, k))
        .collect();
    let mut entries: Vec<Entry> = components
        .into_iter()
        .map(|c| Entry::z(s.sessions_of_component(c), id, created))
        .collect();
    if f.get(LEGACY_RUNS).is_some_and(|r| !r.is_null()) {
        entries.push(Entry::z(s.sessions_legacy(), id, 0.0));
    }
    entries
}

/// A session an older agno stored without a type has the one its ids imply; without a
/// creation time, 0.
fn normalize(_: &str, f: &mut Fields) {
    if !f.get("session_type").is_some_and(Value::is_string) {
        let inferred = if text(f, "team_id").is_some() {
            "team"
        } else if text(f, "workflow_id").is_some() && text(f, "agent_id").is_none() {
            "workflow"
        } else {
            "agent"
        };
        f.insert("session_type".into(), inferred.into());
    }
    if !f.get("created_at").is_some_and(Value::is_i64) {
        f.insert("created_at".into(), Value::from(0));
    }
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
}

impl<S: Server> KvDocs<S> {
    /// [`agno_storage_doc::DocBackend::session_page`]: the owner's or component's index
    /// (the smaller when both are given), within the creation-time bounds; one ranged read
    /// when the query filters on nothing else and orders by creation time, else the range
    /// read, filtered and paged in memory.
    pub(crate) async fn sessions_page(
        &self,
        query: &SessionQuery,
    ) -> Result<Option<(Vec<Stored<Self>>, u64)>> {
        validate_sort(&query.sort, Session::SORTABLE)?;
        let store = self.store();
        let (min, max) = (
            bound(query.start_timestamp, "-inf"),
            bound(query.end_timestamp, "+inf"),
        );
        let user_index = query.user_id.as_deref().map(|u| store.sessions_of_user(u));
        let component_index = query
            .component_id
            .as_deref()
            .map(|c| store.sessions_of_component(c));
        let base = match (user_index, component_index) {
            (Some(u), Some(c)) => {
                let (nu, nc): (u64, u64) = store
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
            (None, None) => store.sessions_all(),
        };
        let matches = query.matcher();
        let key = |id: &str| store.key(TABLE, id);
        let decoded = |stored: &Stored<Self>| Docs::of(self).decode_session(stored);
        let by_index = query.session_type.is_none()
            && query.session_name.is_none()
            && !(query.user_id.is_some() && query.component_id.is_some())
            && query
                .sort
                .sort_by
                .as_deref()
                .is_none_or(|c| c == "created_at");
        if by_index {
            let order = match query.sort.sort_by {
                Some(_) => query.sort.sort_order,
                None => SortOrder::Asc,
            };
            let page = store
                .page_by(
                    &base,
                    key,
                    (&min, &max),
                    order,
                    &query.pagination,
                    |id, raw| {
                        let stored = self.stored(TABLE, id, raw.to_owned())?;
                        let (session, _) = decoded(&stored)?;
                        Ok(matches(&session).then_some(stored))
                    },
                )
                .await?;
            return Ok(Some(page));
        }
        let mut matched = Vec::new();
        let ids = store.members(&base, &min, &max).await?;
        for (id, raw) in store.load_with(&base, ids, key).await? {
            let stored = self.stored(TABLE, &id, raw)?;
            let (session, _) = decoded(&stored)?;
            if matches(&session) {
                matched.push((session, stored));
            }
        }
        let page = query.page(matched.iter().map(|(s, _)| s.clone()).collect())?;
        let mut docs: std::collections::HashMap<String, Stored<Self>> = matched
            .into_iter()
            .map(|(s, stored)| (s.session_id, stored))
            .collect();
        let items = page
            .items
            .iter()
            .filter_map(|s| docs.remove(&s.session_id))
            .collect();
        Ok(Some((items, page.total)))
    }

    /// [`agno_storage_doc::DocBackend::legacy_sessions`]: the `legacy` index, and before the
    /// v3 migration (when agno 2.x's sessions are not indexed yet) a `SCAN`.
    pub(crate) async fn blob_sessions(&self, user_id: Option<&str>) -> Result<Vec<Stored<Self>>> {
        let store = self.store();
        let mut ids: BTreeSet<String> = store
            .query::<Vec<String>>(
                redis::cmd("ZRANGE")
                    .arg(store.sessions_legacy())
                    .arg(0)
                    .arg(-1),
            )
            .await?
            .into_iter()
            .collect();
        let mut found = Vec::new();
        if !store.sessions_migrated().await? {
            for (id, raw) in store.scan_records(TABLE).await? {
                if ids.remove(&id) || raw.contains("\"runs\"") {
                    found.push((id, raw));
                }
            }
        }
        let ids: Vec<String> = ids.into_iter().collect();
        let key = |id: &str| store.key(TABLE, id);
        found.extend(store.load_with(&store.sessions_legacy(), ids, key).await?);
        let mut out = Vec::new();
        for (id, raw) in found {
            let stored = self.stored(TABLE, &id, raw)?;
            if stored.fields.get(LEGACY_RUNS).is_some_and(|b| !b.is_null())
                && visible_to(stored.str("user_id"), user_id)
            {
                out.push(stored);
            }
        }
        Ok(out)
    }

    /// [`agno_storage_doc::DocBackend::delete_session`]: the session, every run in agno's
    /// per-session set and the set itself in one commit that checks the set's size (a run
    /// appended meanwhile retries the delete).
    pub(crate) async fn delete_one_session(
        &self,
        session_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        let store = self.store();
        let by_session = store.by_session(session_id);
        for attempt in 0..CAS_ATTEMPTS {
            let Some(session) = self.get(TABLE, session_id).await? else {
                return Ok(false);
            };
            if !visible_to(session.str("user_id"), user_id) {
                return Ok(false);
            }
            let run_ids: Vec<String> = store
                .query(redis::cmd("ZRANGE").arg(&by_session).arg(0).arg(-1))
                .await?;
            let mut writes = vec![
                self.delete(TABLE, session_id, session.unchanged()),
                KvWrite(Ok(
                    store.check(by_session.clone(), Expect::Zcard(run_ids.len()))
                )),
            ];
            let runs = self.get_each(crate::runs::TABLE, &run_ids).await?;
            for run in runs.into_iter().flatten() {
                writes.push(self.delete(crate::runs::TABLE, &run.id, run.unchanged()));
            }
            writes.push(KvWrite(Ok(store.drop_key(by_session.clone()))));
            match self.commit("delete sessions", writes).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("delete sessions"))
    }
}
