//! Runs (`agno_runs`): one document per run, agno's `build_single_run_row` shape.
//!
//! A run appended without a `run_index` gets one past the session's highest, taken
//! atomically from a per-session counter document (`$inc`), seeded from the runs already
//! stored when it is created; an append costs the same however long the session is.

use agno_storage_core::legacy::legacy_runs_list;
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, Page, Result, RunQuery,
    RunRecord, RunStore,
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

impl MongoDb {
    /// The next free `run_index` of `session_id`, taken atomically.
    ///
    /// One `$inc` of the session's counter, then one point lookup on the
    /// `(session_id, run_index)` index: neither costs more as the session grows. The
    /// counter is seeded from the runs stored when it is created, and again when the
    /// lookup finds the taken index already used by a writer that does not move the
    /// counter (agno passes its own `run_index`), so no index taken here collides with a
    /// stored one.
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let meta = self.coll(&self.inner.names.meta);
        let id = counter_id(session_id);
        for _ in 0..8 {
            let counter = meta
                .find_one_and_update(doc! {"_id": &id}, doc! {"$inc": {"next": 1_i64}})
                .return_document(ReturnDocument::After)
                .await
                .map_err(db_err("next run index"))?;
            let Some(next) = counter.and_then(|d| d.get("next").and_then(as_i64)) else {
                self.seed_run_counter(session_id).await?;
                continue;
            };
            let index = next - 1;
            let used = self
                .coll(&self.inner.names.runs)
                .find_one(doc! {"session_id": session_id, "run_index": index})
                .projection(doc! {"_id": 1})
                .await
                .map_err(db_err("next run index"))?
                .is_some();
            if !used {
                return Ok(index);
            }
            self.seed_run_counter(session_id).await?;
        }
        Err(Error::new(
            agno_storage_core::ErrorKind::Conflict,
            format!("could not take the next run_index of session {session_id}: other writers kept taking it; retry the write"),
        ))
    }

    /// Creates the run counter of `session_id`, or raises it, to one past the highest
    /// `run_index` stored (a sorted read: only when the counter is created or overtaken).
    async fn seed_run_counter(&self, session_id: &str) -> Result<()> {
        let highest = self
            .coll(&self.inner.names.runs)
            .find_one(doc! {"session_id": session_id, "run_index": {"$type": "number"}})
            .sort(doc! {"run_index": -1})
            .projection(doc! {"run_index": 1})
            .await
            .map_err(db_err("next run index"))?
            .and_then(|d| d.get("run_index").and_then(as_i64))
            .unwrap_or(-1);
        let raised = self
            .coll(&self.inner.names.meta)
            .update_one(
                doc! {"_id": counter_id(session_id)},
                vec![
                    doc! {"$set": {"next": {"$max": [{"$ifNull": ["$next", 0_i64]}, highest + 1]}}},
                ],
            )
            .upsert(true)
            .await
            .map_err(db_err("next run index"));
        match raised {
            // Racing creators: the loser's upsert sees a duplicate key; the counter exists.
            Err(e) if e.kind() != agno_storage_core::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
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
        // Two reads at once: reads are cheap next to writes (on SecantusDB ~0.6 ms against
        // ~4 ms), so a new run costs no failed update.
        let (owner, stored) = futures::try_join!(
            self.session_owner(&run.session_id),
            self.run_exists(&run.run_id)
        )?;
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
            if run.run_index.is_none() {
                run.run_index = Some(self.next_run_index(&run.session_id).await?);
            }
            run.updated_at = Some(now);
            match self
                .coll(&self.inner.names.runs)
                .insert_one(encode_run(&run)?)
                .await
            {
                Ok(_) => return Ok(run),
                // A concurrent writer inserted the same run_id first: update it instead.
                Err(e) if is_duplicate_key(&e) => exists = true,
                Err(e) => return Err(db_err("upsert run")(e)),
            }
        }
        Err(Error::new(
            agno_storage_core::ErrorKind::Conflict,
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
