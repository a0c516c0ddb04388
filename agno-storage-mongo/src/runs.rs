//! Runs (`agno_runs`): one document per run, agno's `build_single_run_row` shape.
//!
//! A run appended without a `run_index` gets one past the session's highest, found without
//! any query whose cost grows with the session and claimed by the insert itself:
//! - **Where to look.** Each handle remembers each session's next index from its last
//!   append ([`RunHints`]); a handle that has not appended to the session reads the
//!   session's counter document in the meta collection, which appends move forward every
//!   [`RUN_COUNTER_EVERY`] indexes.
//! - **What is free.** One indexed read on `(session_id, run_index)` returns the highest
//!   index at or above the hint minus one, so indexes other writers stored since (agno
//!   passes its own) count; the full sorted read runs only when nothing is found there
//!   (runs deleted, or a session deleted and created again).
//! - **The claim.** The run is inserted with `_id: {session_id, run_index}`: the `_id`
//!   index is unique, so two of our writers can never store the same index; the one that
//!   loses looks again past it. agno's documents keep their ObjectIds and never collide.
//!
//! So an append is the owner read, the look-up and the insert: one write, as agno's.

use std::collections::HashMap;
use std::sync::Mutex;

use agno_storage_core::legacy::legacy_runs_list;
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, Page, Result,
    RunQuery, RunRecord, RunStore,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;
use serde_json::Value;

use crate::doc::{db_err, from_doc, is_duplicate_key, opt, to_bson, to_doc, writable_filter};
use crate::MongoDb;

pub(crate) fn decode_run(d: Document) -> Result<RunRecord> {
    from_doc(d, "a run")
}

/// The document of a run row, in agno's field order.
pub(crate) fn encode_run(run: &RunRecord) -> Result<Document> {
    to_doc(run, "a run")
}

/// A session's counter document moves to one past every index that is a multiple of this
/// (and whenever it is missing or further behind), so a handle new to the session looks
/// through at most about this many runs.
pub(crate) const RUN_COUNTER_EVERY: i64 = 16;

/// How many times an append looks for a free index before giving up with `Conflict`.
const CLAIM_ATTEMPTS: usize = 16;

/// Sessions a handle keeps hints for; past it the hints are dropped and read again.
const RUN_HINTS_MAX: usize = 10_000;

/// Each session's next `run_index` as this handle last saw it: where the next append
/// starts looking. A hint is never trusted, only checked (see the module docs).
#[derive(Default)]
pub(crate) struct RunHints(Mutex<HashMap<String, i64>>);

impl RunHints {
    fn get(&self, session_id: &str) -> Option<i64> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .copied()
    }

    fn set(&self, session_id: &str, next: i64) {
        let mut hints = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if hints.len() >= RUN_HINTS_MAX && !hints.contains_key(session_id) {
            hints.clear();
        }
        hints.insert(session_id.to_owned(), next);
    }
}

/// Where an append starts looking for a free index, and what the counter held when it was
/// read (`None` when the hint came from this handle).
struct Hint {
    next: i64,
    counter: Option<Option<i64>>,
}

impl MongoDb {
    /// Inserts new run `run` (no `run_index` given) at the next free index of its session,
    /// claimed by the insert ([`claim_id`]); sets `run.run_index`. False, with the index
    /// unset, when a run `run.run_id` exists already.
    async fn append_run(&self, run: &mut RunRecord) -> Result<bool> {
        let session_id = run.session_id.clone();
        let hint = self.run_hint(&session_id).await?;
        let mut from = hint.next;
        // Past an index found claimed: the hint may be ahead of the session, this is not.
        let mut floor = 0;
        for _ in 0..CLAIM_ATTEMPTS {
            let index = self.free_run_index(&session_id, from).await?.max(floor);
            run.run_index = Some(index);
            let mut row = doc! {"_id": claim_id(&session_id, index)};
            row.extend(encode_run(run)?);
            match self.coll(&self.inner.names.runs).insert_one(row).await {
                Ok(_) => {
                    self.inner.run_hints.set(&session_id, index + 1);
                    self.move_run_counter(&session_id, index, &hint).await;
                    return Ok(true);
                }
                Err(e) if is_duplicate_key(&e) => {
                    if self.run_exists(&run.run_id).await? {
                        run.run_index = None;
                        return Ok(false);
                    }
                    // Another of our writers claimed this index first: look past it.
                    from = index + 1;
                    floor = index + 1;
                }
                Err(e) => return Err(db_err("upsert run")(e)),
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!("could not take the next run_index of session {session_id}: other writers kept taking it; retry the write"),
        ))
    }

    /// Where to start looking for `session_id`'s next index: this handle's hint, else the
    /// session's counter document (0 when there is none).
    async fn run_hint(&self, session_id: &str) -> Result<Hint> {
        if let Some(next) = self.inner.run_hints.get(session_id) {
            return Ok(Hint {
                next,
                counter: None,
            });
        }
        let counter = self
            .coll(&self.inner.names.meta)
            .find_one(doc! {"_id": counter_id(session_id)})
            .await
            .map_err(db_err("next run index"))?
            .and_then(|d| d.get("next").and_then(as_i64));
        Ok(Hint {
            next: counter.unwrap_or(0),
            counter: Some(counter),
        })
    }

    /// The lowest index of `session_id` past every stored one, looking from `from`: the
    /// highest index at or above `from - 1` plus one (an indexed read that stops at the
    /// first document), or, when there is none and `from` is past 0 (runs deleted since the
    /// hint), one past the highest stored.
    async fn free_run_index(&self, session_id: &str, from: i64) -> Result<i64> {
        let mut filter = doc! {"session_id": session_id};
        if from > 0 {
            filter.insert("run_index", doc! {"$gte": from - 1});
        } else {
            filter.insert("run_index", doc! {"$type": "number"});
        }
        let highest = self
            .coll(&self.inner.names.runs)
            .find_one(filter)
            .sort(doc! {"run_index": -1})
            .projection(doc! {"_id": 0, "run_index": 1})
            .await
            .map_err(db_err("next run index"))?
            .and_then(|d| d.get("run_index").and_then(as_i64));
        match highest {
            Some(highest) => Ok(highest + 1),
            None if from > 0 => Box::pin(self.free_run_index(session_id, 0)).await,
            None => Ok(0),
        }
    }

    /// Raises `session_id`'s counter to `index + 1` when `index` is a multiple of
    /// [`RUN_COUNTER_EVERY`] or the counter read for this append was missing or further
    /// behind. The counter only tells handles new to the session where to start looking;
    /// a failure to raise it costs them a longer look, never a wrong index, so it is not
    /// the append's failure.
    async fn move_run_counter(&self, session_id: &str, index: i64, hint: &Hint) {
        let behind = match hint.counter {
            Some(None) => true,
            Some(Some(next)) => index >= next + RUN_COUNTER_EVERY,
            None => false,
        };
        if index % RUN_COUNTER_EVERY != 0 && !behind {
            return;
        }
        let _ = self
            .coll(&self.inner.names.meta)
            .update_one(
                doc! {"_id": counter_id(session_id)},
                vec![doc! {"$set": {"next": {"$max": [{"$ifNull": ["$next", 0_i64]}, index + 1]}}}],
            )
            .upsert(true)
            .await;
    }

    /// The owner of session `session_id`; `None` when there is no such session.
    async fn session_owner(&self, session_id: &str) -> Result<Option<Option<String>>> {
        let found = self
            .coll(&self.inner.names.sessions)
            .find_one(doc! {"session_id": session_id})
            .projection(doc! {"_id": 0, "user_id": 1})
            .await
            .map_err(db_err("upsert run"))?;
        Ok(found.map(|d| d.get_str("user_id").ok().map(str::to_owned)))
    }

    /// Whether a run `run_id` is stored, whoever owns it.
    async fn run_exists(&self, run_id: &str) -> Result<bool> {
        Ok(self
            .coll(&self.inner.names.runs)
            .find_one(doc! {"run_id": run_id})
            .projection(doc! {"_id": 1})
            .await
            .map_err(db_err("upsert run"))?
            .is_some())
    }

    /// Updates the mutable fields of an existing run `writer` may write; `None` when no
    /// such run exists.
    async fn update_run(&self, run: &RunRecord, now: i64) -> Result<Option<RunRecord>> {
        let mut filter = doc! {"run_id": &run.run_id};
        filter.extend(writable_filter(run.user_id.as_deref()));
        let mut set = doc! {
            "status": opt(run.status.as_deref()),
            "run_data": to_bson(&run.run_data, "run_data")?,
            "parent_run_id": opt(run.parent_run_id.as_deref()),
            "updated_at": now,
        };
        if let Some(u) = &run.user_id {
            set.insert("user_id", u);
        }
        let updated = self
            .coll(&self.inner.names.runs)
            .find_one_and_update(filter, doc! {"$set": set})
            .return_document(ReturnDocument::After)
            .await
            .map_err(db_err("upsert run"))?;
        let Some(mut updated) = updated.map(decode_run).transpose()? else {
            return Ok(None);
        };
        // A stored run without an index takes the incoming one.
        if let (None, Some(index)) = (updated.run_index, run.run_index) {
            self.coll(&self.inner.names.runs)
                .update_one(
                    doc! {"run_id": &run.run_id, "run_index": Bson::Null},
                    doc! {"$set": {"run_index": index}},
                )
                .await
                .map_err(db_err("upsert run"))?;
            updated.run_index = Some(index);
        }
        Ok(Some(updated))
    }
}

/// The `_id` of a session's run counter in the meta collection.
pub(crate) fn counter_id(session_id: &str) -> String {
    format!("run_index:{session_id}")
}

/// The `_id` of a run whose index this crate assigned: its claim on that index.
pub(crate) fn claim_id(session_id: &str, run_index: i64) -> Document {
    doc! {"session_id": session_id, "run_index": run_index}
}

pub(crate) fn as_i64(b: &Bson) -> Option<i64> {
    match b {
        Bson::Int32(i) => Some(i64::from(*i)),
        Bson::Int64(i) => Some(*i),
        Bson::Double(f) if f.fract() == 0.0 => Some(*f as i64),
        _ => None,
    }
}

#[async_trait]
impl RunStore for MongoDb {
    async fn upsert_run(&self, mut run: RunRecord) -> Result<RunRecord> {
        // With the index given (as agno's callers pass it), a new run is inserted straight
        // after the owner check, and an existing one costs a refused insert in place of the
        // read that would have found it: one read and one write per append, as agno's.
        // Without it, whether the run exists is read first (beside the owner), so an update
        // never takes an index from the counter.
        let (owner, stored) = if run.run_index.is_some() {
            (self.session_owner(&run.session_id).await?, false)
        } else {
            futures::try_join!(
                self.session_owner(&run.session_id),
                self.run_exists(&run.run_id)
            )?
        };
        run.check_session(owner.as_ref().map(Option::as_deref))?;
        let now = now_epoch_seconds();
        let mut exists = stored;
        for _ in 0..3 {
            if exists {
                if let Some(updated) = self.update_run(&run, now).await? {
                    return Ok(updated);
                }
                // Not writable by this writer, or deleted since it was read.
                if self.run_exists(&run.run_id).await? {
                    return Err(owned_by_another_user("run", &run.run_id));
                }
            }
            run.updated_at = Some(now);
            if run.run_index.is_none() {
                if self.append_run(&mut run).await? {
                    return Ok(run);
                }
                // A concurrent writer inserted the same run_id first: update it instead.
                exists = true;
                continue;
            }
            match self
                .coll(&self.inner.names.runs)
                .insert_one(encode_run(&run)?)
                .await
            {
                Ok(_) => return Ok(run),
                // The run exists (or a concurrent writer inserted it first): update it.
                Err(e) if is_duplicate_key(&e) => exists = true,
                Err(e) => return Err(db_err("upsert run")(e)),
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "run {} kept changing under concurrent writers; retry",
                run.run_id
            ),
        ))
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let mut filter = doc! {"run_id": run_id};
        crate::doc::scope(&mut filter, user_id);
        self.coll(&self.inner.names.runs)
            .find_one(filter)
            .await
            .map_err(db_err("get run"))?
            .map(decode_run)
            .transpose()
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.sort, RunRecord::SORTABLE)?;
        let mut filter = Document::new();
        for (key, value) in [
            ("session_id", &query.session_id),
            ("user_id", &query.user_id),
            ("agent_id", &query.agent_id),
            ("team_id", &query.team_id),
            ("workflow_id", &query.workflow_id),
            ("status", &query.status),
        ] {
            if let Some(v) = value {
                filter.insert(key, v);
            }
        }
        let rows = self
            .coll(&self.inner.names.runs)
            .find(filter)
            .await
            .map_err(db_err("get runs"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get runs"))?
            .into_iter()
            .map(decode_run)
            .collect::<Result<Vec<_>>>()?;
        query.page(rows)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut filter = doc! {"run_id": {"$in": run_ids}};
        crate::doc::scope(&mut filter, user_id);
        let deleted = self
            .coll(&self.inner.names.runs)
            .delete_many(filter)
            .await
            .map_err(db_err("delete runs"))?
            .deleted_count;
        self.scrub_legacy_runs(run_ids, user_id).await?;
        Ok(deleted)
    }
}

impl MongoDb {
    /// Removes `run_ids` from the legacy `runs` fields of the sessions `user_id` may see, so
    /// a merge cannot resurrect them: `$pull` on arrays (agno's way), a rewrite for a
    /// field stored as an encoded JSON string.
    async fn scrub_legacy_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<()> {
        let coll = self.coll(&self.inner.names.sessions);
        let mut arrays = doc! {"runs.run_id": {"$in": run_ids}};
        crate::doc::scope(&mut arrays, user_id);
        coll.update_many(
            arrays,
            doc! {"$pull": {"runs": {"run_id": {"$in": run_ids}}}},
        )
        .await
        .map_err(db_err("scrub legacy runs"))?;
        let mut strings = doc! {"runs": {"$type": "string"}};
        crate::doc::scope(&mut strings, user_id);
        let mut cursor = coll
            .find(strings)
            .projection(doc! {"session_id": 1, "runs": 1})
            .await
            .map_err(db_err("scrub legacy runs"))?;
        while let Some(d) = cursor
            .try_next()
            .await
            .map_err(db_err("scrub legacy runs"))?
        {
            let blob = d.get("runs").cloned().map(crate::doc::to_json);
            let list = legacy_runs_list(blob.as_ref());
            let kept: Vec<Value> = list
                .iter()
                .filter(|r| {
                    r.get("run_id")
                        .and_then(Value::as_str)
                        .is_none_or(|id| !run_ids.iter().any(|x| x == id))
                })
                .cloned()
                .collect();
            if kept.len() != list.len() {
                let Some(Bson::String(sid)) = d.get("session_id") else {
                    continue;
                };
                coll.update_one(
                    doc! {"session_id": sid, "runs": d.get("runs").cloned().unwrap_or(Bson::Null)},
                    doc! {"$set": {"runs": to_bson(&Value::Array(kept), "legacy runs")?}},
                )
                .await
                .map_err(db_err("scrub legacy runs"))?;
            }
        }
        Ok(())
    }
}
