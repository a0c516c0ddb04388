//! Sessions (`agno_sessions`), runs (`agno_runs`) and the pre-v3 `runs` attribute.
//!
//! A session item is `session.to_dict(include_runs=False)` in agno's encoding; a legacy
//! `runs` attribute (2.x: `S` holding the JSON list) is carried forward untouched on every
//! write, as agno does, and merged into reads. Every read-modify-write is a compare-and-set
//! on the whole item; `run_index` comes from a per-session counter item in the meta table.
//! Reads scoped to one session (its runs, `get_runs(session_id)`, the delete cascade) Query
//! agno's `session_id-created_at-index` instead of scanning the runs table.

use agno_storage_core::json::to_python_json;
use agno_storage_core::legacy::{
    decode_legacy_runs, last_context_runs, legacy_runs_list, merge_runs, InsertedRuns,
    LegacyRunsStore, LegacySessionRuns, SessionRun,
};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Error,
    ErrorKind, Page, Result, RunJson, RunQuery, RunRecord, RunStore, Session, SessionQuery,
    SessionRead, SessionStore, Unreadable,
};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde_json::Value;

use crate::codec::{self, from_item, from_json, n, nv, record_item, s, sv, Item};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

const LEGACY: &str = "runs";
/// The object fields of a session item (stored as `S` JSON).
pub(crate) const SESSION_JSON: &[&str] = &[
    "session_data",
    "agent_data",
    "team_data",
    "workflow_data",
    "metadata",
    "summary",
    LEGACY,
];

/// A session item as the session and its legacy `runs` blob (decoded when it is JSON).
pub(crate) fn decode_session(item: &Item) -> Result<(Session, Option<Value>)> {
    let mut map = from_item(item, SESSION_JSON);
    let legacy = map.remove(LEGACY).filter(|v| !v.is_null());
    Ok((from_json(map, "a session")?, legacy))
}

/// A run item as a record. `run_data` is JSON text agno writes with Python's `json`; text
/// this code cannot decode (e.g. a lone surrogate) is a `Serialization` error for this run,
/// never a string in its place.
fn decode_run(item: &Item) -> Result<RunRecord> {
    let mut map = from_item(item, &[]);
    if let Some(AttributeValue::S(text)) = item.get("run_data") {
        let data = agno_storage_core::json::from_str::<Value>(text).map_err(|e| {
            let id = s(item, "run_id").unwrap_or_default();
            Error::serialization(format_args!("run {id}'s run_data"), e)
                .with_backend(codec::BACKEND)
        })?;
        map.insert("run_data".to_owned(), data);
    }
    from_json(map, "a run")
}

/// A run item as a session read merges it: `run_data` handed over as its stored text,
/// unparsed (see [`RunJson`]), so a run this code cannot decode does not fail the read.
fn session_run(item: &Item) -> Result<SessionRun> {
    match (item.get("run_data"), s(item, "run_id")) {
        (Some(AttributeValue::S(text)), Some(run_id)) => Ok(SessionRun {
            run_id: run_id.to_owned(),
            run_index: n(item, "run_index"),
            created_at: n(item, "created_at").unwrap_or_default(),
            run: RunJson::from_stored_text(text.clone())?,
        }),
        _ => decode_run(item).map(SessionRun::from),
    }
}

/// The meta item holding the next free `run_index` of `session_id` in the runs table `runs`
/// (attribute `next`, a number).
fn counter_key(runs: &str, session_id: &str) -> String {
    format!("run_index#{runs}#{session_id}")
}

impl DynamoDb {
    /// Every run item of `session_id`, through agno's `session_id-created_at-index` (a
    /// Query: the cost is the session's runs, not the table's).
    async fn session_run_items(&self, session_id: &str) -> Result<Vec<Item>> {
        self.query_index(Table::Runs, "session_id", session_id)
            .await
    }

    async fn session_runs(&self, session_id: &str) -> Result<Vec<SessionRun>> {
        self.session_run_items(session_id)
            .await?
            .iter()
            .map(session_run)
            .collect()
    }

    async fn with_runs(
        &self,
        mut session: Session,
        legacy: Option<&Value>,
        runs_limit: Option<usize>,
    ) -> Result<Session> {
        let merged = merge_runs(legacy, self.session_runs(&session.session_id).await?);
        session.runs = Some(match runs_limit {
            Some(n) => last_context_runs(merged, n),
            None => merged,
        });
        Ok(session)
    }

    /// The next free `run_index` of a session, from its counter item in the meta table:
    /// one conditional `SET next = next + 1` (atomic, so concurrent appends never share an
    /// index and never retry), whatever the size of the runs table.
    ///
    /// Only a missing counter is seeded, once, from the highest index among the session's
    /// runs (a Query on `session_id-created_at-index`); racing seeders write it with
    /// `attribute_not_exists`, so one seed wins. Indexes written by this crate without the
    /// counter (explicit `run_index`, the v3 migration) raise an existing counter (see
    /// [`DynamoDb::raise_run_counter`]); runs another writer (agno itself) adds to a session
    /// whose counter exists do not move it. agno numbers runs by their position in the
    /// session, so such a mix may share an index; reads order equal indexes by `created_at`.
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let pk = counter_key(&self.inner.names.runs, session_id);
        for _ in 0..MAX_ATTEMPTS {
            if let Some(next) = self.take_run_index(&pk).await? {
                return Ok(next);
            }
            let seed = self
                .session_run_items(session_id)
                .await?
                .iter()
                .filter_map(|item| n(item, "run_index"))
                .max()
                .map_or(0, |m| m + 1);
            let mut item = Item::new();
            item.insert("pk".into(), sv(&pk));
            item.insert("next".into(), nv(seed));
            // A concurrent seeder may have won; either way the counter exists now.
            self.put(Table::Meta, item, Some(Cond::absent("pk")))
                .await?;
        }
        Err(contention("allocate run_index"))
    }

    /// Takes the counter's `next` and advances it by one; `None` when there is no counter.
    async fn take_run_index(&self, pk: &str) -> Result<Option<i64>> {
        let name = self.ensure(Table::Meta).await?;
        let out = self
            .inner
            .client
            .update_item()
            .table_name(name)
            .key("pk", sv(pk))
            .update_expression("SET #next = #next + :one")
            .condition_expression("attribute_exists(#next)")
            .expression_attribute_names("#next", "next")
            .expression_attribute_values(":one", nv(1))
            .return_values(ReturnValue::UpdatedOld)
            .send()
            .await;
        match out {
            Ok(out) => {
                let taken = out.attributes.as_ref().and_then(|a| n(a, "next"));
                taken.map(Some).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Serialization,
                        format!("run_index counter {pk} holds no numeric `next`"),
                    )
                    .with_backend(crate::codec::BACKEND)
                })
            }
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(None),
            Err(e) => Err(crate::db::sdk_err("allocate run_index")(e)),
        }
    }

    /// Moves the counter of `session_id` to at least `next` when the counter exists (a
    /// missing one is seeded from the stored runs on the next append, which sees these).
    /// One conditional update: for indexes this crate writes without taking them from the
    /// counter, so later appends go past them.
    async fn raise_run_counter(&self, session_id: &str, next: i64) -> Result<()> {
        let name = self.ensure(Table::Meta).await?;
        let out = self
            .inner
            .client
            .update_item()
            .table_name(name)
            .key("pk", sv(&counter_key(&self.inner.names.runs, session_id)))
            .update_expression("SET #next = :at_least")
            .condition_expression("attribute_exists(#next) AND #next < :at_least")
            .expression_attribute_names("#next", "next")
            .expression_attribute_values(":at_least", nv(next))
            .send()
            .await;
        match out {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ConditionalCheckFailedException") => Ok(()),
            Err(e) => Err(crate::db::sdk_err("raise run_index counter")(e)),
        }
    }
}

#[async_trait]
impl SessionStore for DynamoDb {
    async fn upsert_session(&self, mut session: Session) -> Result<Session> {
        session.runs = None;
        let id = session.session_id.clone();
        for _ in 0..MAX_ATTEMPTS {
            let old = self.get(Table::Sessions, &id).await?;
            let mut next = session.clone();
            let mut legacy = None;
            match &old {
                Some(item) => {
                    let (stored, blob) = decode_session(item)?;
                    if !writable_by(stored.user_id.as_deref(), next.user_id.as_deref()) {
                        return Err(owned_by_another_user("session", &id));
                    }
                    next.created_at = stored.created_at;
                    next.session_type = stored.session_type;
                    next.updated_at = Some(now_epoch_seconds());
                    legacy = blob;
                }
                None => next.updated_at = Some(next.created_at),
            }
            let mut item = record_item(&next, "a session")?;
            if let Some(raw) = old.as_ref().and_then(|o| o.get(LEGACY)) {
                item.insert(LEGACY.into(), raw.clone());
            }
            if self.cas(Table::Sessions, old.as_ref(), item).await? {
                return self.with_runs(next, legacy.as_ref(), None).await;
            }
        }
        Err(contention("upsert_session"))
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        let Some(item) = self.get(Table::Sessions, session_id).await? else {
            return Ok(None);
        };
        let (s, legacy) = decode_session(&item)?;
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
        let matches = query.matcher();
        let mut rows = Vec::new();
        for item in self.scan(Table::Sessions).await? {
            let (s, legacy) = decode_session(&item)?;
            if matches(&s) {
                rows.push((s, legacy));
            }
        }
        let sessions: Vec<Session> = rows.iter().map(|(s, _)| s.clone()).collect();
        let mut page = query.page(sessions)?;
        if query.include_runs {
            let mut with = Vec::with_capacity(page.items.len());
            for s in page.items {
                let legacy = rows
                    .iter()
                    .find(|(r, _)| r.session_id == s.session_id)
                    .and_then(|(_, l)| l.clone());
                with.push(self.with_runs(s, legacy.as_ref(), None).await?);
            }
            page.items = with;
        }
        Ok(page)
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Sessions, session_id).await? else {
                return Ok(None);
            };
            let (mut s, legacy) = decode_session(&old)?;
            if !visible_to(s.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            s.set_session_name(session_name);
            s.updated_at = Some(now_epoch_seconds());
            let mut item = record_item(&s, "a session")?;
            if let Some(raw) = old.get(LEGACY) {
                item.insert(LEGACY.into(), raw.clone());
            }
            if self.cas(Table::Sessions, Some(&old), item).await? {
                return Ok(Some(self.with_runs(s, legacy.as_ref(), None).await?));
            }
        }
        Err(contention("rename_session"))
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in session_ids {
            let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
            if !self.delete(Table::Sessions, id, cond).await? {
                continue;
            }
            deleted += 1;
            // Only the runs of sessions this call deleted (agno also deletes other users').
            for run in self.session_run_items(id).await? {
                if let Some(run_id) = s(&run, "run_id") {
                    self.delete(Table::Runs, run_id, None).await?;
                }
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl RunStore for DynamoDb {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        let session = self.get(Table::Sessions, &run.session_id).await?;
        run.check_session(session.as_ref().map(|item| s(item, "user_id")))?;
        let id = run.run_id.clone();
        for _ in 0..MAX_ATTEMPTS {
            let now = now_epoch_seconds();
            let old = self.get(Table::Runs, &id).await?;
            let next = match &old {
                Some(item) => {
                    let mut stored = decode_run(item)?;
                    if !writable_by(stored.user_id.as_deref(), run.user_id.as_deref()) {
                        return Err(owned_by_another_user("run", &id));
                    }
                    stored.status = run.status.clone();
                    stored.run_data = run.run_data.clone();
                    if run.user_id.is_some() {
                        stored.user_id = run.user_id.clone();
                    }
                    stored.parent_run_id = run.parent_run_id.clone();
                    stored.updated_at = Some(now);
                    if let (None, Some(given)) = (stored.run_index, run.run_index) {
                        self.raise_run_counter(&stored.session_id, given + 1)
                            .await?;
                        stored.run_index = Some(given);
                    }
                    stored
                }
                None => {
                    let mut fresh = run.clone();
                    match fresh.run_index {
                        Some(given) => self.raise_run_counter(&run.session_id, given + 1).await?,
                        None => fresh.run_index = Some(self.next_run_index(&run.session_id).await?),
                    }
                    fresh.updated_at = Some(now);
                    fresh
                }
            };
            let item = record_item(&next, "a run")?;
            if self.cas(Table::Runs, old.as_ref(), item).await? {
                return Ok(next);
            }
        }
        Err(contention("upsert_run"))
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        match self.get(Table::Runs, run_id).await? {
            Some(item) => {
                let r = decode_run(&item)?;
                Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
            }
            None => Ok(None),
        }
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        let items = match &query.session_id {
            Some(sid) => self.session_run_items(sid).await?,
            None => self.scan(Table::Runs).await?,
        };
        let mut rows = Vec::new();
        let mut unreadable = Vec::new();
        for item in &items {
            match decode_run(item) {
                Ok(r) if query.matches(&r) => rows.push(r),
                Ok(_) => {}
                // Named only to a caller who may see the run (its owner, or unscoped).
                Err(e) if visible_to(s(item, "user_id"), query.user_id.as_deref()) => unreadable
                    .push(Unreadable {
                        id: s(item, "run_id").unwrap_or_default().to_owned(),
                        error: e.to_string(),
                    }),
                Err(_) => {}
            }
        }
        let mut page = query.page(rows)?;
        page.unreadable = unreadable;
        Ok(page)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in run_ids {
            let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
            if self.delete(Table::Runs, id, cond).await? {
                deleted += 1;
            }
        }
        // Scrub legacy blobs of sessions the caller may see, so a merge cannot resurrect them.
        for item in self.scan(Table::Sessions).await? {
            if !item.contains_key(LEGACY) {
                continue;
            }
            let (session, legacy) = decode_session(&item)?;
            if !visible_to(session.user_id.as_deref(), user_id) {
                continue;
            }
            let list = legacy_runs_list(legacy.as_ref());
            let kept: Vec<Value> = list
                .iter()
                .filter(|r| {
                    r.get("run_id")
                        .and_then(Value::as_str)
                        .is_none_or(|id| !run_ids.iter().any(|d| d == id))
                })
                .cloned()
                .collect();
            if kept.len() != list.len() {
                let mut next = item.clone();
                next.insert(
                    LEGACY.into(),
                    AttributeValue::S(to_python_json(&Value::Array(kept))),
                );
                // A concurrent writer wins; the scrub is retried by the next delete.
                self.cas(Table::Sessions, Some(&item), next).await?;
            }
        }
        Ok(deleted)
    }
}

#[async_trait]
impl LegacyRunsStore for DynamoDb {
    /// Pages through the sessions table with `ExclusiveStartKey`, so each page reads only
    /// its own stretch of the table (never the whole table per page). The order is the
    /// table's scan order (DynamoDB orders by the hash of `session_id`, not by `session_id`);
    /// `after`, the last `session_id` of the previous page, resumes right behind it, so the
    /// cursor contract (every session once, a short page is the last) holds.
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        let mut rows = Vec::new();
        if limit == 0 {
            return Ok(rows);
        }
        let mut start = after.map(|a| Item::from([("session_id".to_owned(), sv(a))]));
        loop {
            let (items, next) = self.scan_page(Table::Sessions, start.take()).await?;
            for item in &items {
                let Some(raw) = item.get(LEGACY) else {
                    continue;
                };
                if matches!(raw, AttributeValue::Null(_)) {
                    continue;
                }
                let Some(session_id) = s(item, "session_id") else {
                    continue;
                };
                rows.push(LegacySessionRuns {
                    session_id: session_id.to_owned(),
                    user_id: s(item, "user_id").map(str::to_owned),
                    runs: codec::value(raw),
                });
                if rows.len() == limit {
                    return Ok(rows);
                }
            }
            match next {
                Some(k) => start = Some(k),
                None => return Ok(rows),
            }
        }
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        // Raise the sessions' counters first, so an append racing the copy cannot take an
        // index a copied run is about to hold.
        let mut highest: Vec<(&str, i64)> = Vec::new();
        for row in &rows {
            let Some(index) = row.run_index else { continue };
            match highest.iter_mut().find(|(sid, _)| *sid == row.session_id) {
                Some((_, top)) => *top = (*top).max(index),
                None => highest.push((&row.session_id, index)),
            }
        }
        for (session_id, top) in highest {
            self.raise_run_counter(session_id, top + 1).await?;
        }
        let mut outcome = InsertedRuns::default();
        for row in rows {
            let item = record_item(&row, "a run")?;
            if self
                .put(Table::Runs, item, Some(Cond::absent("run_id")))
                .await?
            {
                outcome.inserted += 1;
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let mut pending = 0;
        for item in self.scan(Table::Sessions).await? {
            let Some(raw) = item.get(LEGACY) else {
                continue;
            };
            let blob = codec::value(raw);
            if decode_legacy_runs(Some(&blob)).map_or(true, |runs| !runs.is_empty()) {
                pending += 1;
            }
        }
        Ok(pending)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        let mut changed = 0;
        for item in self.scan(Table::Sessions).await? {
            if !item.contains_key(LEGACY) {
                continue;
            }
            let Some(id) = s(&item, "session_id").map(str::to_owned) else {
                continue;
            };
            let out = self
                .inner
                .client
                .update_item()
                .table_name(self.name(Table::Sessions))
                .key("session_id", sv(&id))
                .update_expression("REMOVE #runs")
                .condition_expression("attribute_exists(session_id)")
                .expression_attribute_names("#runs", LEGACY)
                .send()
                .await;
            match out {
                Ok(_) => changed += 1,
                Err(e) if e.code() == Some("ConditionalCheckFailedException") => {}
                Err(e) => return Err(crate::db::sdk_err("remove legacy runs")(e)),
            }
        }
        Ok(changed)
    }
}
