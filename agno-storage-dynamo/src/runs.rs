//! Runs (`agno_runs`) as this crate writes them under the document engine's sessions and
//! runs: `run_index` from a per-session counter item in the meta table advanced by one
//! atomic `UpdateItem` (the engine's [`agno_storage_doc::DocBackend::write_run`] hook), the
//! legacy-run copy and the session delete cascade (hooks too), and agno 2.x's `runs`
//! attribute paged natively. Reads scoped to one session Query agno's
//! `session_id-created_at-index` instead of scanning the runs table.

use agno_storage_core::legacy::{InsertedRuns, LegacySessionRuns};
use agno_storage_core::{now_epoch_seconds, Error, ErrorKind, Result, RunRecord};
use aws_sdk_dynamodb::error::ProvideErrorMetadata;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use serde_json::Value;

use crate::codec::{self, from_item, from_json, n, nv, record_item, s, sv, Item};
use agno_storage_doc::{backoff, updated_run, DocBackend, CAS_ATTEMPTS, LEGACY_RUNS};

use crate::db::{Cond, Table};
use crate::DynamoDb;

/// The object fields of a session item (stored as `S` JSON).
pub(crate) const SESSION_JSON: &[&str] = &[
    "session_data",
    "agent_data",
    "team_data",
    "workflow_data",
    "metadata",
    "summary",
    LEGACY_RUNS,
];

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
        // A retry follows a seed, not a lost race: no pause.
        for _ in 0..CAS_ATTEMPTS {
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
        Err(self.contended("allocate run_index"))
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

    /// `upsert_run`: the session checked, then a compare-and-set on the run item; a new
    /// run without an index takes the counter's next, a given index raises the counter.
    pub(crate) async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        let session = self.get(Table::Sessions, &run.session_id).await?;
        run.check_session(session.as_ref().map(|item| s(item, "user_id")))?;
        let id = run.run_id.clone();
        for attempt in 0..CAS_ATTEMPTS {
            if attempt > 0 {
                backoff(attempt).await;
            }
            let now = now_epoch_seconds();
            let old = self.get(Table::Runs, &id).await?;
            let next = match &old {
                Some(item) => {
                    let mut stored = updated_run(decode_run(item)?, &run, now)?;
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
            let unchanged = Cond::unchanged(Table::Runs, old.as_ref(), &item);
            if self.put(Table::Runs, item, Some(unchanged)).await? {
                return Ok(next);
            }
        }
        Err(self.contended("upsert run"))
    }

    /// Deletes session `session_id` when `user_id` may delete it, then the runs of the
    /// session it deleted (agno also deletes other users' runs); whether it was deleted.
    pub(crate) async fn delete_session_and_runs(
        &self,
        session_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
        if !self.delete(Table::Sessions, session_id, cond).await? {
            return Ok(false);
        }
        for run in self.session_run_items(session_id).await? {
            if let Some(run_id) = s(&run, "run_id") {
                self.delete(Table::Runs, run_id, None).await?;
            }
        }
        Ok(true)
    }

    /// Pages through the sessions table with `ExclusiveStartKey`, so each page reads only
    /// its own stretch of the table (never the whole table per page). The order is the
    /// table's scan order (DynamoDB orders by the hash of `session_id`, not by `session_id`);
    /// `after`, the last `session_id` of the previous page, resumes right behind it, so the
    /// cursor contract (every session once, a short page is the last) holds.
    pub(crate) async fn legacy_page(
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
            let (items, next) = self.scan_page(Table::Sessions, &[], start.take()).await?;
            for item in &items {
                let Some(raw) = item.get(LEGACY_RUNS) else {
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

    /// The legacy-run copy: the sessions' counters raised first, then each run written
    /// create-only.
    pub(crate) async fn copy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        // Raise the sessions' counters first, so an append racing the copy cannot take an
        // index a copied run is about to hold.
        for (session_id, next) in agno_storage_doc::next_indexes_after(&rows) {
            self.raise_run_counter(session_id, next).await?;
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
}
