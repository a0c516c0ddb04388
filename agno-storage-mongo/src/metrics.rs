//! Daily metrics (`agno_metrics`), one document per `(user_id, date, aggregation_period)`;
//! the shared bucket is stored with `user_id: ""`.

use agno_storage_core::metrics::{is_legacy_metric, visible_metrics};
use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, to_doc};
use crate::MongoDb;

fn decode(d: Document) -> Result<MetricsRecord> {
    let mut r: MetricsRecord = from_doc(d, "a metrics row")?;
    r.user_id = MetricsRecord::user_from_stored(r.user_id);
    Ok(r)
}

#[async_trait]
impl MetricsStore for MongoDb {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let coll = self.coll(&self.inner.names.metrics);
        let mut stored = Vec::with_capacity(records.len());
        for record in records {
            let mut set = to_doc(&record, "a metrics row")?;
            set.insert("user_id", record.stored_user_id());
            let id = set.remove("id");
            let created_at = set.remove("created_at");
            let filter = doc! {
                "user_id": record.stored_user_id(),
                "date": set.get("date").cloned().unwrap_or_default(),
                "aggregation_period": &record.aggregation_period,
            };
            let d = coll
                .find_one_and_update(
                    filter,
                    doc! {"$set": set, "$setOnInsert": {"id": id, "created_at": created_at}},
                )
                .upsert(true)
                .return_document(ReturnDocument::After)
                .await
                .map_err(db_err("upsert metrics"))?;
            if let Some(d) = d {
                stored.push(decode(d)?);
            }
        }
        Ok(stored)
    }

    async fn delete_user_metrics(&self, user_id: &str) -> Result<u64> {
        Ok(self
            .coll(&self.inner.names.metrics)
            .delete_many(doc! {"user_id": user_id})
            .await
            .map_err(db_err("delete user metrics"))?
            .deleted_count)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let coll = self.coll(&self.inner.names.metrics);
        let mut owner = Document::new();
        if let Some(u) = &query.user_id {
            owner.insert("user_id", u);
        }
        let mut filter = owner.clone();
        let mut date = Document::new();
        if let Some(d) = query.starting_date {
            date.insert("$gte", d.to_string());
        }
        if let Some(d) = query.ending_date {
            date.insert("$lte", d.to_string());
        }
        if !date.is_empty() {
            filter.insert("date", date);
        }
        let mut candidates = Vec::new();
        for d in coll
            .find(filter)
            .await
            .map_err(db_err("get metrics"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get metrics"))?
        {
            let owner = match d.get("user_id") {
                None => None,
                Some(Bson::String(u)) => Some(Some(u.as_str())),
                Some(_) => Some(None),
            };
            let users_count = d
                .get("users_count")
                .and_then(crate::runs::as_i64)
                .unwrap_or(0);
            let legacy = is_legacy_metric(owner, users_count);
            candidates.push((decode(d)?, legacy));
        }
        let rows = visible_metrics(candidates, &query).rows;
        let latest_updated_at = if rows.is_empty() {
            None
        } else {
            coll.find_one(owner)
                .sort(doc! {"updated_at": -1})
                .await
                .map_err(db_err("get metrics"))?
                .and_then(|d| d.get("updated_at").and_then(crate::runs::as_i64))
        };
        Ok(MetricsPage {
            rows,
            latest_updated_at,
        })
    }
}
