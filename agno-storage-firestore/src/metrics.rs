//! Daily metrics (`agno_metrics`): agno 3.1.10's document ids, `{date}_shared_daily` for
//! the shared bucket and `{date}_{sha256(user_id)}_daily` per user; `user_id` `""` marks
//! the shared bucket.

use agno_storage_core::metrics::{is_legacy_metric_json, visible_metrics};
use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::doc::{
    backoff, contended, from_fields, opt, to_fields, Commit, Pre, Stored, CAS_ATTEMPTS,
};
use crate::FirestoreDb;

fn metrics_doc_id(record: &MetricsRecord) -> String {
    let owner = match record.user_id.as_deref().filter(|u| !u.is_empty()) {
        Some(u) => hex::encode(Sha256::digest(u.as_bytes())),
        None => "shared".to_owned(),
    };
    format!("{}_{owner}_{}", record.date, record.aggregation_period)
}

fn decode_metrics(stored: &Stored) -> Result<MetricsRecord> {
    let mut record: MetricsRecord = from_fields(stored.fields.clone(), "a metrics record")?;
    record.user_id = MetricsRecord::user_from_stored(record.user_id);
    Ok(record)
}

#[async_trait]
impl MetricsStore for FirestoreDb {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let coll = &self.inner.names.metrics;
        let mut stored = Vec::with_capacity(records.len());
        for record in records {
            let id = metrics_doc_id(&record);
            let mut done = None;
            for attempt in 0..CAS_ATTEMPTS {
                let mut next = record.clone();
                let pre = match self.get(coll, &id).await? {
                    Some(existing) => {
                        let current = decode_metrics(&existing)?;
                        next.id = current.id;
                        next.created_at = current.created_at;
                        existing.unchanged()
                    }
                    None => Pre::Absent,
                };
                let mut fields = to_fields(&next, "a metrics record")?;
                fields.insert(
                    "user_id".into(),
                    Value::String(next.stored_user_id().to_owned()),
                );
                match self
                    .commit("upsert metrics", vec![self.put(coll, &id, &fields, pre)])
                    .await?
                {
                    Commit::Done(_) => {
                        done = Some(next);
                        break;
                    }
                    Commit::Conflict => backoff(attempt).await,
                }
            }
            stored.push(done.ok_or_else(|| contended("upsert metrics"))?);
        }
        Ok(stored)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let mut eq = Vec::new();
        if let Some(u) = &query.user_id {
            eq.push(("user_id", opt(Some(u))));
        }
        let mut candidates = Vec::new();
        for stored in self.query(&self.inner.names.metrics, &eq).await? {
            let legacy = is_legacy_metric_json(&stored.fields);
            candidates.push((decode_metrics(&stored)?, legacy));
        }
        Ok(visible_metrics(candidates, &query))
    }
}
