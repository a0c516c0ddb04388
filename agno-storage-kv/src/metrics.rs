//! Daily metrics: `{prefix}:metrics:{date}_{user}_{period}` records as agno 3.1.10 keys
//! them (`""` for the shared bucket), indexed by day (all, per owner bucket).
//!
//! agno 2.x wrote one whole-day record per day: Redis under `{date}_{period}` without a
//! `user_id`, Valkey under `{date}__{period}` with `user_id: ""` and a user count, the very
//! key of agno 3's shared bucket. Writing the shared bucket moves such a record to
//! `{date}_{period}` first (no 3.x key has that form), so it is never overwritten.

use agno_storage_core::metrics::{is_legacy_metric_json, visible_metrics, SHARED_BUCKET};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use chrono::NaiveDate;
use serde_json::{Map, Value};

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, object, opt_int, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "metrics";

fn day_number(date: NaiveDate) -> f64 {
    date.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp() / 86_400)
        .unwrap_or_default() as f64
}

/// The record id agno 3.1.10 gives a row: `{date}_{user}_{period}`.
pub(crate) fn record_id(r: &MetricsRecord) -> String {
    format!(
        "{}_{}_{}",
        r.date.format("%Y-%m-%d"),
        r.stored_user_id(),
        r.aggregation_period
    )
}

pub(crate) fn decode(key: &str, raw: &str) -> Result<(MetricsRecord, bool)> {
    let map = decode_object(key, raw)?;
    let legacy = is_legacy_metric_json(&map);
    let date_text = text(&map, "date").unwrap_or_default();
    let date = date_text
        .get(..10)
        .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Serialization,
                format!("{key}: date {date_text:?} is not a day"),
            )
        })?;
    let count = |f: &str| int(&map, f).unwrap_or_default();
    let record = MetricsRecord {
        id: text(&map, "id")
            .or_else(|| key.rsplit_once(":metrics:").map(|(_, id)| id.to_owned()))
            .unwrap_or_default(),
        user_id: MetricsRecord::user_from_stored(text(&map, "user_id")),
        date,
        aggregation_period: text(&map, "aggregation_period").unwrap_or_else(|| "daily".into()),
        agent_runs_count: count("agent_runs_count"),
        team_runs_count: count("team_runs_count"),
        workflow_runs_count: count("workflow_runs_count"),
        agent_sessions_count: count("agent_sessions_count"),
        team_sessions_count: count("team_sessions_count"),
        workflow_sessions_count: count("workflow_sessions_count"),
        users_count: count("users_count"),
        token_metrics: map
            .get("token_metrics")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new())),
        model_metrics: map
            .get("model_metrics")
            .cloned()
            .unwrap_or_else(|| Value::Array(Vec::new())),
        completed: map
            .get("completed")
            .and_then(Value::as_bool)
            .unwrap_or_default(),
        created_at: count("created_at"),
        updated_at: int(&map, "updated_at"),
    };
    Ok((record, legacy))
}

/// The record as agno's `calculate_date_metrics` lays it out.
pub(crate) fn encode_metrics(r: &MetricsRecord) -> String {
    encode(&object([
        ("id", Value::String(r.id.clone())),
        ("date", Value::String(r.date.format("%Y-%m-%d").to_string())),
        ("completed", Value::Bool(r.completed)),
        ("token_metrics", r.token_metrics.clone()),
        ("model_metrics", r.model_metrics.clone()),
        ("created_at", Value::from(r.created_at)),
        ("updated_at", opt_int(r.updated_at)),
        (
            "aggregation_period",
            Value::String(r.aggregation_period.clone()),
        ),
        ("user_id", Value::String(r.stored_user_id().to_owned())),
        ("users_count", Value::from(r.users_count)),
        ("agent_sessions_count", Value::from(r.agent_sessions_count)),
        ("team_sessions_count", Value::from(r.team_sessions_count)),
        (
            "workflow_sessions_count",
            Value::from(r.workflow_sessions_count),
        ),
        ("agent_runs_count", Value::from(r.agent_runs_count)),
        ("team_runs_count", Value::from(r.team_runs_count)),
        ("workflow_runs_count", Value::from(r.workflow_runs_count)),
    ]))
}

impl KvStore {
    fn metrics_all(&self) -> String {
        self.idx(TABLE, "date:all")
    }

    fn metrics_of(&self, stored_user: &str) -> String {
        self.idx(TABLE, &format!("date:user:{stored_user}"))
    }

    /// The index entries of a metrics record (legacy whole-day records: the day only).
    pub(crate) fn metrics_entries(&self, id: &str, r: &MetricsRecord, legacy: bool) -> Vec<Entry> {
        let day = day_number(r.date);
        let mut entries = vec![Entry::z(self.metrics_all(), id, day)];
        if !legacy {
            entries.push(Entry::z(self.metrics_of(r.stored_user_id()), id, day));
        }
        entries
    }

    /// Moves a whole-day agno 2.x Valkey record off the shared bucket's key (see the module
    /// docs). Returns whether a record moved.
    pub(crate) async fn move_legacy_metric(&self, id: &str) -> Result<bool> {
        let key = self.key(TABLE, id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(false);
        };
        let (record, legacy) = decode(&key, &raw)?;
        let shared_id = format!(
            "{}_{}_{}",
            record.date.format("%Y-%m-%d"),
            SHARED_BUCKET,
            record.aggregation_period
        );
        if !legacy || id != shared_id {
            return Ok(false);
        }
        let target_id = format!(
            "{}_{}",
            record.date.format("%Y-%m-%d"),
            record.aggregation_period
        );
        let target = self.key(TABLE, &target_id);
        let cas = Cas::on(&target)
            .expect(None)
            .set(raw.clone())
            .guard_value(&key, Some(&raw))
            .del_key(&key)
            .reindex(
                &self.metrics_entries(id, &record, true),
                &self.metrics_entries(&target_id, &record, true),
            );
        match self.cas(&cas).await? {
            Outcome::Applied => Ok(true),
            Outcome::Guard(_) => Ok(false),
            Outcome::Changed => Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "{key} holds a pre-3.0 whole-day metrics record and {target} is taken too; \
                     move or delete one of them, then recompute the metrics"
                ),
            )
            .with_backend(self.server)),
        }
    }
}

#[async_trait]
impl MetricsStore for KvStore {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        let mut stored = Vec::with_capacity(records.len());
        for record in records {
            let id = record_id(&record);
            let key = self.key(TABLE, &id);
            let written = self
                .retry("upsert_metrics", || async {
                    let current = self.get(&key).await?;
                    let mut next = record.clone();
                    next.id = id.clone();
                    let mut old_entries = Vec::new();
                    if let Some(raw) = &current {
                        let (old, legacy) = decode(&key, raw)?;
                        if legacy && self.move_legacy_metric(&id).await? {
                            // A pre-3.0 whole-day record sat on the shared bucket's key.
                            return Ok(None);
                        }
                        if legacy {
                            old_entries = self.metrics_entries(&id, &old, true);
                        } else {
                            next.id = old.id.clone();
                            next.created_at = old.created_at;
                            old_entries = self.metrics_entries(&id, &old, false);
                        }
                    }
                    let cas = Cas::on(&key)
                        .expect(current.as_deref())
                        .set(encode_metrics(&next))
                        .reindex(&old_entries, &self.metrics_entries(&id, &next, false));
                    Ok((self.cas(&cas).await? == Outcome::Applied).then_some(next))
                })
                .await?;
            stored.push(written);
        }
        Ok(stored)
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        let index = match &query.user_id {
            Some(u) => self.metrics_of(u),
            None => self.metrics_all(),
        };
        let mut candidates = Vec::new();
        for (id, raw) in self.load_index(TABLE, &index, "-inf", "+inf").await? {
            candidates.push(decode(&self.key(TABLE, &id), &raw)?);
        }
        Ok(visible_metrics(candidates, &query))
    }
}
