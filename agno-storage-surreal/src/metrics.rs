//! Daily metrics (`agno_metrics`): agno 3.1.10's record ids `{date}|{user_id}`, `date` a
//! `datetime` at 00:00Z; `user_id` `""` marks the shared bucket.

use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use serde_json::Value;

use crate::doc::{
    backoff, contended, from_fields, opt, to_fields, Commit, Pre, Stored, CAS_ATTEMPTS,
};
use crate::SurrealDb;

/// agno's record id: `{date}|{user_id}`, `""` for the shared bucket (`db/surrealdb/metrics.py`).
fn metrics_doc_id(record: &MetricsRecord) -> String {
    format!("{}|{}", record.date, record.stored_user_id())
}

fn decode_metrics(stored: &Stored) -> Result<MetricsRecord> {
    let mut record: MetricsRecord = from_fields(stored.fields.clone(), "a metrics record")?;
    record.user_id = MetricsRecord::user_from_stored(record.user_id);
    Ok(record)
}

#[async_trait]
impl MetricsStore for SurrealDb {
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
                    Commit::Done => {
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
        let owned: Vec<MetricsRecord> = self
            .query(&self.inner.names.metrics, &eq)
            .await?
            .iter()
            .map(decode_metrics)
            .collect::<Result<Vec<_>>>()?
            .into_iter()
            .filter(|r| {
                query
                    .user_id
                    .as_deref()
                    .is_none_or(|u| r.stored_user_id() == u)
            })
            .collect();
        let latest = owned.iter().filter_map(|r| r.updated_at).max();
        let mut rows: Vec<MetricsRecord> = owned
            .into_iter()
            .filter(|r| {
                query.starting_date.is_none_or(|d| r.date >= d)
                    && query.ending_date.is_none_or(|d| r.date <= d)
            })
            .collect();
        rows.sort_by(|a, b| (a.date, a.stored_user_id()).cmp(&(b.date, b.stored_user_id())));
        let latest_updated_at = if rows.is_empty() { None } else { latest };
        Ok(MetricsPage {
            rows,
            latest_updated_at,
        })
    }
}
