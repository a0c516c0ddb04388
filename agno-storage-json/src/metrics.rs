//! Daily metrics (`agno_metrics.json`), one row per `(user_id, date, aggregation_period)`
//! with `""` for the shared bucket, as agno 3's `calculate_date_metrics` lays them out.
//! Rows agno 2.x wrote (no `user_id`, a whole day's traffic) are left in place and, as agno
//! does, dropped from unscoped reads once per-user rows cover their day.

use std::collections::HashSet;

use agno_storage_core::metrics::{MetricsPage, MetricsQuery, MetricsRecord, MetricsStore};
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
        let mut record: MetricsRecord = from_row(Table::Metrics, Self::KEY, row.clone())?;
        record.user_id = MetricsRecord::user_from_stored(record.user_id);
        Ok(record)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        let mut f = fields(self)?;
        f.insert("user_id".into(), Value::from(self.stored_user_id()));
        Ok(shape(f, METRICS_KEYS, Nulls::Keep, existing))
    }
}

/// Whether a row predates per-user buckets (agno's `is_legacy_metric`).
fn is_legacy(row: &Value) -> bool {
    match row.get("user_id") {
        None => true,
        Some(owner) => {
            owner.as_str().is_none_or(str::is_empty)
                && row.get("users_count").and_then(Value::as_i64).unwrap_or(0) > 0
        }
    }
}

/// The `(date, period)` bucket of a row.
fn bucket(row: &Value) -> (Option<&str>, &str) {
    (
        text(row, "date"),
        text(row, "aggregation_period").unwrap_or("daily"),
    )
}

/// agno's `drop_legacy_metrics`: a legacy row goes where per-user rows cover its bucket.
fn drop_legacy(rows: Vec<Value>) -> Vec<Value> {
    let covered: HashSet<(Option<&str>, &str)> =
        rows.iter().filter(|r| !is_legacy(r)).map(bucket).collect();
    let keep: Vec<bool> = rows
        .iter()
        .map(|r| !is_legacy(r) || !covered.contains(&bucket(r)))
        .collect();
    rows.into_iter()
        .zip(keep)
        .filter_map(|(r, k)| k.then_some(r))
        .collect()
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
        let mut rows = self.files.load(Table::Metrics).await?;
        if query.user_id.is_none() {
            rows = drop_legacy(rows);
        }
        let owned: Vec<&Value> = rows
            .iter()
            .filter(|r| {
                query
                    .user_id
                    .as_deref()
                    .is_none_or(|u| text(r, "user_id") == Some(u))
            })
            .collect();
        let mut selected = Vec::new();
        for row in &owned {
            let record = MetricsRecord::decode(row)?;
            if query.starting_date.is_none_or(|d| record.date >= d)
                && query.ending_date.is_none_or(|d| record.date <= d)
            {
                selected.push(record);
            }
        }
        selected.sort_by(|a, b| (a.date, a.stored_user_id()).cmp(&(b.date, b.stored_user_id())));
        let latest_updated_at = if selected.is_empty() {
            None
        } else {
            owned
                .iter()
                .filter_map(|r| r.get("updated_at").and_then(Value::as_i64))
                .max()
        };
        Ok(MetricsPage {
            rows: selected,
            latest_updated_at,
        })
    }
}
