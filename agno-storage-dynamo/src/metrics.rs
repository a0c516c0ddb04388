//! Daily metrics (`agno_metrics`), one item per `(user_id, date, aggregation_period)`; the
//! shared bucket is stored with `user_id: ""`, `date` as `YYYY-MM-DD`, token and model
//! metrics as `S` JSON, as agno writes them. Pre-v3 rows (no `user_id`) are not read.
//!
//! A key is claimed once through a uniqueness item in the meta table, so concurrent
//! writers of one day never create two rows.

use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};

use crate::codec::{record, record_item, s, sv, Item};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

fn decode(item: &Item) -> Result<Option<MetricsRecord>> {
    if s(item, "user_id").is_none() {
        return Ok(None);
    }
    let mut r: MetricsRecord = record(item, &["token_metrics", "model_metrics"], "a metrics row")?;
    r.user_id = MetricsRecord::user_from_stored(r.user_id);
    Ok(Some(r))
}

fn encode(r: &MetricsRecord) -> Result<Item> {
    let mut item = record_item(r, "a metrics row")?;
    item.insert("user_id".into(), sv(r.stored_user_id()));
    Ok(item)
}

impl DynamoDb {
    /// The id of the row holding `record`'s key: an existing row's, or the one claimed now.
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        let pk = format!(
            "metrics#{}#{}#{}#{}",
            self.inner.names.metrics,
            record.stored_user_id(),
            record.date,
            record.aggregation_period
        );
        if let Some(claim) = self.get(Table::Meta, &pk).await? {
            if let Some(id) = s(&claim, "id") {
                return Ok(id.to_owned());
            }
        }
        let existing = self
            .scan(Table::Metrics)
            .await?
            .iter()
            .filter_map(|i| decode(i).ok().flatten())
            .find(|r| {
                r.stored_user_id() == record.stored_user_id()
                    && r.date == record.date
                    && r.aggregation_period == record.aggregation_period
            })
            .map_or_else(|| record.id.clone(), |r| r.id);
        let mut claim = Item::new();
        claim.insert("pk".into(), sv(&pk));
        claim.insert("id".into(), sv(&existing));
        if self
            .put(Table::Meta, claim, Some(Cond::absent("pk")))
            .await?
        {
            return Ok(existing);
        }
        match self.get(Table::Meta, &pk).await? {
            Some(c) => Ok(s(&c, "id").unwrap_or(&existing).to_owned()),
            None => Ok(existing),
        }
    }
}

#[async_trait]
impl MetricsStore for DynamoDb {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let mut stored = Vec::with_capacity(records.len());
        for record in records {
            let id = self.metrics_id(&record).await?;
            let mut done = None;
            for _ in 0..MAX_ATTEMPTS {
                let old = self.get(Table::Metrics, &id).await?;
                let mut next = record.clone();
                next.id = id.clone();
                if let Some(prev) = old.as_ref().and_then(|o| decode(o).ok().flatten()) {
                    next.created_at = prev.created_at;
                }
                if self
                    .cas(Table::Metrics, old.as_ref(), encode(&next)?)
                    .await?
                {
                    done = Some(next);
                    break;
                }
            }
            stored.push(done.ok_or_else(|| contention("upsert_metrics"))?);
        }
        Ok(stored)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let mut all = Vec::new();
        for item in self.scan(Table::Metrics).await? {
            if let Some(r) = decode(&item)? {
                if query
                    .user_id
                    .as_deref()
                    .is_none_or(|u| r.stored_user_id() == u)
                {
                    all.push(r);
                }
            }
        }
        let mut rows: Vec<MetricsRecord> = all
            .iter()
            .filter(|r| {
                query.starting_date.is_none_or(|d| r.date >= d)
                    && query.ending_date.is_none_or(|d| r.date <= d)
            })
            .cloned()
            .collect();
        rows.sort_by(|a, b| (a.date, a.stored_user_id()).cmp(&(b.date, b.stored_user_id())));
        let latest_updated_at = if rows.is_empty() {
            None
        } else {
            all.iter().filter_map(|r| r.updated_at).max()
        };
        Ok(MetricsPage {
            rows,
            latest_updated_at,
        })
    }
}
