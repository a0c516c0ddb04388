//! Daily metrics (`agno_metrics`): one document per `(date, owner, period)` under the
//! backend's [`DocBackend::metrics_id`]; `user_id` `""` marks the shared bucket.

use agno_storage_core::metrics::visible_metrics;
use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use serde_json::Value;

use crate::backend::given;
use crate::{backoff, opt, Commit, DocBackend, Docs, Pre, Stored, Table, CAS_ATTEMPTS};

fn decode_metrics<B: DocBackend>(stored: &Stored<B>) -> Result<MetricsRecord> {
    let mut record: MetricsRecord = stored.decode("a metrics record")?;
    record.user_id = MetricsRecord::user_from_stored(record.user_id);
    Ok(record)
}

#[async_trait]
impl<B: DocBackend> MetricsStore for Docs<B> {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let coll = self.collection(Table::Metrics);
        let mut stored = Vec::with_capacity(records.len());
        for record in records {
            let mut done = None;
            for attempt in 0..CAS_ATTEMPTS {
                // Again after a conflict: a concurrent writer may have created the row.
                let id = self.metrics_id(&record).await?;
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
                let mut fields = self.to_fields(&next, "a metrics record")?;
                fields.insert(
                    "user_id".into(),
                    Value::String(next.stored_user_id().to_owned()),
                );
                match self
                    .commit("upsert metrics", vec![self.put(coll, &id, &fields, pre)])
                    .await?
                {
                    Commit::Done => {
                        done = Some(next);
                        break;
                    }
                    Commit::Conflict => backoff(attempt).await,
                }
            }
            stored.push(done.ok_or_else(|| self.contended("upsert metrics"))?);
        }
        Ok(stored)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let eq = given(&[("user_id", query.user_id.as_deref())]);
        let mut candidates = Vec::new();
        for stored in self.query(self.collection(Table::Metrics), &eq).await? {
            let legacy = self.is_legacy_metric(&stored.fields);
            candidates.push((decode_metrics(&stored)?, legacy));
        }
        Ok(visible_metrics(candidates, &query))
    }

    async fn delete_user_metrics(&self, user_id: &str) -> Result<u64> {
        let coll = self.collection(Table::Metrics);
        let mut deleted = 0;
        for stored in self.query(coll, &[("user_id", opt(Some(user_id)))]).await? {
            let write = self.delete(coll, &stored.id, stored.unchanged());
            if let Commit::Done = self.commit("delete user metrics", vec![write]).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
