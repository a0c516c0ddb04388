//! Pre-v3 runs: the `runs` field agno 2.x kept inside each session document.

use agno_storage_core::legacy::{
    decode_legacy_runs, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{async_trait, Result, RunRecord};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};

use crate::doc::{db_err, to_json};
use crate::runs::encode_run;
use crate::MongoDb;

/// Sessions whose `runs` field is present and not null.
fn with_legacy_runs() -> Document {
    doc! {"runs": {"$exists": true, "$ne": Bson::Null}}
}

#[async_trait]
impl LegacyRunsStore for MongoDb {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        let mut filter = with_legacy_runs();
        if let Some(a) = after {
            filter.insert("session_id", doc! {"$gt": a});
        }
        let docs: Vec<Document> = self
            .coll(&self.inner.names.sessions)
            .find(filter)
            .projection(doc! {"session_id": 1, "user_id": 1, "runs": 1})
            .sort(doc! {"session_id": 1})
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .await
            .map_err(db_err("read legacy runs"))?
            .try_collect()
            .await
            .map_err(db_err("read legacy runs"))?;
        Ok(docs
            .into_iter()
            .filter_map(|mut d| {
                let session_id = match d.remove("session_id") {
                    Some(Bson::String(s)) => s,
                    _ => return None,
                };
                let user_id = match d.remove("user_id") {
                    Some(Bson::String(s)) => Some(s),
                    _ => None,
                };
                Some(LegacySessionRuns {
                    session_id,
                    user_id,
                    runs: d.remove("runs").map(to_json).unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        if rows.is_empty() {
            return Ok(InsertedRuns::default());
        }
        // `$setOnInsert` upserts: a run already stored (newer than its legacy copy) is kept
        // as it is, unlike agno 3.1.10's `replace_one`, which reverts it.
        let coll = self.coll(&self.inner.names.runs);
        let mut inserted = 0u64;
        for row in &rows {
            let result = coll
                .update_one(
                    doc! {"run_id": &row.run_id},
                    doc! {"$setOnInsert": encode_run(row)?},
                )
                .upsert(true)
                .await;
            match result {
                Ok(r) if r.upserted_id.is_some() => inserted += 1,
                Ok(_) => {}
                // Two copies raced on one run_id: the other one won, which is fine.
                Err(e) if crate::doc::is_duplicate_key(&e) => {}
                Err(e) => return Err(db_err("copy legacy runs")(e)),
            }
        }
        let ids: Vec<&str> = rows.iter().map(|r| r.run_id.as_str()).collect();
        let present = self
            .coll(&self.inner.names.runs)
            .count_documents(doc! {"run_id": {"$in": ids}})
            .await
            .map_err(db_err("copy legacy runs"))?;
        Ok(InsertedRuns { inserted, present })
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let mut cursor = self
            .coll(&self.inner.names.sessions)
            .find(with_legacy_runs())
            .projection(doc! {"runs": 1})
            .await
            .map_err(db_err("count legacy runs"))?;
        let mut pending = 0;
        while let Some(mut d) = cursor
            .try_next()
            .await
            .map_err(db_err("count legacy runs"))?
        {
            let blob = d.remove("runs").map(to_json);
            if decode_legacy_runs(blob.as_ref()).map_or(true, |runs| !runs.is_empty()) {
                pending += 1;
            }
        }
        Ok(pending)
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        Ok(self
            .coll(&self.inner.names.sessions)
            .update_many(
                doc! {"runs": {"$exists": true}},
                doc! {"$unset": {"runs": ""}},
            )
            .await
            .map_err(db_err("drop legacy runs"))?
            .modified_count)
    }
}
