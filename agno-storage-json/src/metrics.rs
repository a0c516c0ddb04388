//! Daily metrics (`agno_metrics.json`), one row per `(user_id, date, aggregation_period)`
//! with `""` for the shared bucket, as agno 3's `calculate_date_metrics` lays them out.
//! Rows agno 2.x wrote (no `user_id`, a whole day's traffic) are left in place and, as agno
//! does, dropped from unscoped reads once per-user rows cover their day.

use agno_storage_core::metrics::{
    is_legacy_metric_json, visible_metrics, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore,
};
use agno_storage_core::{async_trait, Result};
use serde_json::Value;

use crate::doc::{fields, from_row, put, shape, text, Doc, Nulls};
use crate::files::{Step, Table};
use crate::store::JsonStore;

const METRICS_KEYS: &[&str] = &[
    "id",
    "date",
    "completed",
    "token_metrics",
    "model_metrics",
    "created_at",
    "updated_at",
    "aggregation_period",
    "user_id",
    "users_count",
    "agent_sessions_count",
    "team_sessions_count",
    "workflow_sessions_count",
    "agent_runs_count",
    "team_runs_count",
    "workflow_runs_count",
];

impl Doc for MetricsRecord {
    const TABLE: Table = Table::Metrics;
    const KEY: &'static str = "id";

    fn decode(row: &Value) -> Result<Self> {
        let mut record: MetricsRecord = from_row(Table::Metrics, Self::KEY, row)?;
        record.user_id = MetricsRecord::user_from_stored(record.user_id);
        Ok(record)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        let mut f = fields(self)?;
        f.insert("user_id".into(), Value::from(self.stored_user_id()));
        Ok(shape(f, METRICS_KEYS, Nulls::Keep, existing))
    }
}

#[async_trait]
impl MetricsStore for JsonStore {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        self.files
            .modify(Table::Metrics, |rows| {
                let mut stored = Vec::with_capacity(records.len());
                for record in &records {
                    let mut record = record.clone();
                    let date = record.date.to_string();
                    let index = rows.iter().position(|r| {
                        text(r, "user_id") == Some(record.stored_user_id())
                            && text(r, "date") == Some(date.as_str())
                            && text(r, "aggregation_period")
                                == Some(record.aggregation_period.as_str())
                    });
                    if let Some(i) = index {
                        let existing = MetricsRecord::decode(&rows[i])?;
                        record.id = existing.id;
                        record.created_at = existing.created_at;
                    }
                    put(rows, index, &record)?;
                    stored.push(record);
                }
                Ok(Step::Write(stored))
            })
            .await
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let rows = self.files.load(Table::Metrics).await?;
        let mut candidates = Vec::with_capacity(rows.len());
        for row in &rows {
            let legacy = row.as_object().is_some_and(is_legacy_metric_json);
            candidates.push((MetricsRecord::decode(row)?, legacy));
        }
        Ok(visible_metrics(candidates, &query))
    }
}
