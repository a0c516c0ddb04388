//! Daily metrics, one row per `(user_id, date, aggregation_period)`.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Duration, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::Result;
use crate::pagination::{Pagination, Sort, SortOrder};
use crate::session::{Session, SessionQuery, SessionStore, SessionType};

/// The owner value stored for the shared bucket (sessions without a user).
pub const SHARED_BUCKET: &str = "";

/// The token counters of `token_metrics`, in agno's key order.
pub const TOKEN_FIELDS: &[&str] = &[
    "input_tokens",
    "output_tokens",
    "total_tokens",
    "audio_total_tokens",
    "audio_input_tokens",
    "audio_output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
];

fn daily() -> String {
    "daily".to_owned()
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn empty_array() -> Value {
    Value::Array(Vec::new())
}

/// One metrics row (`agno_metrics`). `user_id = None` is the shared bucket, stored as `""`.
/// A row missing a counter (older agno releases) reads it as zero.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsRecord {
    /// Primary key (uuid4).
    pub id: String,
    /// Owner; `None` for the shared bucket.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The UTC day.
    pub date: NaiveDate,
    /// Always `daily` today.
    #[serde(default = "daily")]
    pub aggregation_period: String,
    /// Agent runs that day.
    #[serde(default)]
    pub agent_runs_count: i64,
    /// Team runs (including member runs) that day.
    #[serde(default)]
    pub team_runs_count: i64,
    /// Workflow runs that day.
    #[serde(default)]
    pub workflow_runs_count: i64,
    /// Agent sessions created that day.
    #[serde(default)]
    pub agent_sessions_count: i64,
    /// Team sessions created that day.
    #[serde(default)]
    pub team_sessions_count: i64,
    /// Workflow sessions created that day.
    #[serde(default)]
    pub workflow_sessions_count: i64,
    /// 1 for a user's row, 0 for the shared bucket.
    #[serde(default)]
    pub users_count: i64,
    /// Summed token counters ([`TOKEN_FIELDS`]).
    #[serde(default = "empty_object")]
    pub token_metrics: Value,
    /// `[{"model_id", "model_provider", "count"}]`.
    #[serde(default = "empty_array")]
    pub model_metrics: Value,
    /// True once the day is over.
    #[serde(default)]
    pub completed: bool,
    /// Creation time, epoch seconds (kept across recomputations).
    #[serde(default)]
    pub created_at: i64,
    /// Last recomputation, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl MetricsRecord {
    /// The owner as stored: the user id, or `""` for the shared bucket.
    pub fn stored_user_id(&self) -> &str {
        self.user_id.as_deref().unwrap_or(SHARED_BUCKET)
    }

    /// Maps a stored owner back: `""` becomes `None`.
    pub fn user_from_stored(stored: Option<String>) -> Option<String> {
        stored.filter(|u| !u.is_empty())
    }
}

/// Filters of [`MetricsStore::get_metrics`].
#[derive(Debug, Clone, Default)]
pub struct MetricsQuery {
    /// `date >= starting_date`.
    pub starting_date: Option<NaiveDate>,
    /// `date <= ending_date`.
    pub ending_date: Option<NaiveDate>,
    /// `None`: every bucket; `Some("")`: the shared bucket; `Some(u)`: only `u`'s rows.
    pub user_id: Option<String>,
}

/// Metrics rows and the newest `updated_at` of the owner's rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricsPage {
    /// Rows ordered by `date`, then owner.
    pub rows: Vec<MetricsRecord>,
    /// Newest `updated_at` among the owner's rows (all dates).
    pub latest_updated_at: Option<i64>,
}

/// Daily metrics.
#[async_trait]
pub trait MetricsStore: Send + Sync {
    /// Inserts or replaces rows, unique on `(user_id, date, aggregation_period)`: an existing
    /// row keeps its `id` and `created_at`. Returns the stored rows.
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>>;

    /// Rows matching `query`; the shared bucket comes back with `user_id = None`.
    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage>;

    /// Deletes every row of `user_id` (never the shared bucket's) and returns how many.
    async fn delete_user_metrics(&self, user_id: &str) -> Result<u64>;
}

/// agno's `is_legacy_metric`: a row written before per-user buckets (agno 2.x), recognised
/// by its stored fields: no `user_id` field at all, or the unowned sentinel (null or `""`)
/// with users counted. `stored_user_id` is `None` when the field is absent.
pub fn is_legacy_metric(stored_user_id: Option<Option<&str>>, users_count: i64) -> bool {
    match stored_user_id {
        None => true,
        Some(owner) => owner.is_none_or(str::is_empty) && users_count != 0,
    }
}

/// [`is_legacy_metric`] of a row as stored in a JSON document.
pub fn is_legacy_metric_json(row: &Map<String, Value>) -> bool {
    let users_count = match row.get("users_count") {
        Some(Value::Bool(b)) => i64::from(*b),
        Some(v) => v.as_i64().unwrap_or(0),
        None => 0,
    };
    is_legacy_metric(row.get("user_id").map(|u| u.as_str()), users_count)
}

/// A metrics read, as agno 3 answers it, from the candidate rows with their legacy flag (see
/// [`is_legacy_metric`]): legacy rows are dropped on scoped reads (`user_id` set) and, on
/// unscoped reads, wherever a per-user row covers the same `(date, aggregation_period)`
/// (agno's `drop_legacy_metrics`). `rows` are those in the date range, sorted by date, then
/// owner; `latest_updated_at` is the newest among the visible rows of every date (`None`
/// when `rows` is empty).
pub fn visible_metrics(rows: Vec<(MetricsRecord, bool)>, query: &MetricsQuery) -> MetricsPage {
    let covered: std::collections::HashSet<(NaiveDate, String)> = rows
        .iter()
        .filter(|(_, legacy)| !legacy)
        .map(|(r, _)| (r.date, r.aggregation_period.clone()))
        .collect();
    let visible: Vec<MetricsRecord> = rows
        .into_iter()
        .filter(|(r, legacy)| match &query.user_id {
            Some(u) => !legacy && r.stored_user_id() == u,
            None => !legacy || !covered.contains(&(r.date, r.aggregation_period.clone())),
        })
        .map(|(r, _)| r)
        .collect();
    let latest_updated_at = visible.iter().filter_map(|r| r.updated_at).max();
    let mut rows: Vec<MetricsRecord> = visible
        .into_iter()
        .filter(|r| {
            query.starting_date.is_none_or(|d| r.date >= d)
                && query.ending_date.is_none_or(|d| r.date <= d)
        })
        .collect();
    rows.sort_by(|a, b| (a.date, a.stored_user_id()).cmp(&(b.date, b.stored_user_id())));
    MetricsPage {
        latest_updated_at: if rows.is_empty() {
            None
        } else {
            latest_updated_at
        },
        rows,
    }
}

fn add_i64(map: &mut Map<String, Value>, key: &str, by: i64) {
    let current = map.get(key).and_then(Value::as_i64).unwrap_or(0);
    map.insert(key.to_owned(), json!(current.saturating_add(by)));
}

/// The keys of a run dict that daily metrics count.
#[derive(serde::Deserialize)]
struct ModelFields {
    model: Option<Value>,
    model_provider: Option<Value>,
}

/// Aggregates the sessions created on `date` (UTC) into one row per owner (the shared bucket
/// for unowned sessions), as agno 3's `calculate_date_metrics`. Each session's `runs` must be
/// attached. `today` decides `completed`.
pub fn aggregate_daily_metrics(
    date: NaiveDate,
    sessions: &[Session],
    today: NaiveDate,
    now: i64,
) -> Vec<MetricsRecord> {
    let mut by_owner: BTreeMap<String, Vec<&Session>> = BTreeMap::new();
    for session in sessions {
        if day_of(session.created_at) == Some(date) {
            by_owner
                .entry(session.user_id.clone().unwrap_or_default())
                .or_default()
                .push(session);
        }
    }
    by_owner
        .into_iter()
        .map(|(owner, sessions)| {
            let mut counts = [0i64; 6];
            let mut tokens = Map::new();
            for field in TOKEN_FIELDS {
                tokens.insert((*field).to_owned(), json!(0));
            }
            let mut models: BTreeMap<(String, String), i64> = BTreeMap::new();
            for session in sessions {
                let slot = match session.session_type {
                    SessionType::Agent => 0,
                    SessionType::Team => 1,
                    SessionType::Workflow => 2,
                };
                counts[slot + 3] += 1;
                let runs = session.runs.as_deref().unwrap_or_default();
                counts[slot] += runs.len() as i64;
                for run in runs {
                    let Ok(ModelFields {
                        model,
                        model_provider,
                    }) = run.fields::<ModelFields>()
                    else {
                        continue;
                    };
                    if let Some(model) = model
                        .as_ref()
                        .and_then(Value::as_str)
                        .filter(|m| !m.is_empty())
                    {
                        let provider = model_provider
                            .as_ref()
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        *models
                            .entry((model.to_owned(), provider.to_owned()))
                            .or_default() += 1;
                    }
                }
                let session_metrics = session
                    .session_data
                    .as_ref()
                    .and_then(|d| d.get("session_metrics"));
                if let Some(Value::Object(m)) = session_metrics {
                    for field in TOKEN_FIELDS {
                        if let Some(v) = m.get(*field).and_then(Value::as_i64) {
                            add_i64(&mut tokens, field, v);
                        }
                    }
                }
            }
            let model_metrics: Vec<Value> = models
                .into_iter()
                .map(|((model_id, model_provider), count)| {
                    json!({"model_id": model_id, "model_provider": model_provider, "count": count})
                })
                .collect();
            MetricsRecord {
                id: uuid::Uuid::new_v4().to_string(),
                users_count: i64::from(!owner.is_empty()),
                user_id: MetricsRecord::user_from_stored(Some(owner)),
                date,
                aggregation_period: "daily".into(),
                agent_runs_count: counts[0],
                team_runs_count: counts[1],
                workflow_runs_count: counts[2],
                agent_sessions_count: counts[3],
                team_sessions_count: counts[4],
                workflow_sessions_count: counts[5],
                token_metrics: Value::Object(tokens),
                model_metrics: Value::Array(model_metrics),
                completed: date < today,
                created_at: now,
                updated_at: Some(now),
            }
        })
        .collect()
}

/// The UTC day of an epoch-seconds timestamp.
pub fn day_of(epoch_seconds: i64) -> Option<NaiveDate> {
    DateTime::<Utc>::from_timestamp(epoch_seconds, 0).map(|t| t.date_naive())
}

fn midnight(date: NaiveDate) -> i64 {
    date.and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp())
        .unwrap_or_default()
}

/// Recomputes daily metrics from sessions and their runs, from the first day not yet
/// complete through `today`, and stores them. Written once against the traits, so every
/// backend computes metrics the same way. Returns the rows written.
pub async fn calculate_metrics(
    sessions: &dyn SessionStore,
    metrics: &dyn MetricsStore,
    today: NaiveDate,
) -> Result<Vec<MetricsRecord>> {
    let existing = metrics.get_metrics(MetricsQuery::default()).await?.rows;
    let latest_completed = existing
        .iter()
        .filter(|r| r.completed)
        .map(|r| r.date)
        .max();
    let earliest_incomplete = existing
        .iter()
        .filter(|r| !r.completed && latest_completed.is_none_or(|c| r.date > c))
        .map(|r| r.date)
        .min();
    let start = match (earliest_incomplete, latest_completed) {
        (Some(d), _) => d,
        (None, Some(c)) => (c + Duration::days(1)).min(today),
        (None, None) => {
            let oldest = sessions
                .get_sessions(SessionQuery {
                    pagination: Pagination::limit(1),
                    sort: Sort::by("created_at", SortOrder::Asc),
                    ..Default::default()
                })
                .await?;
            match oldest.items.first().and_then(|s| day_of(s.created_at)) {
                Some(d) => d.min(today),
                None => return Ok(Vec::new()),
            }
        }
    };
    let in_range = sessions
        .get_sessions(SessionQuery {
            start_timestamp: Some(midnight(start)),
            end_timestamp: Some(midnight(today + Duration::days(1)) - 1),
            include_runs: true,
            ..Default::default()
        })
        .await?
        .items;
    let now = crate::now_epoch_seconds();
    let mut rows = Vec::new();
    let mut day = start;
    while day <= today {
        rows.extend(aggregate_daily_metrics(day, &in_range, today, now));
        day += Duration::days(1);
    }
    if rows.is_empty() {
        return Ok(rows);
    }
    metrics.upsert_metrics(rows).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunJson;

    #[test]
    fn legacy_rows_show_only_where_uncovered() {
        assert!(is_legacy_metric(None, 0));
        assert!(is_legacy_metric(Some(Some("")), 3));
        assert!(is_legacy_metric(Some(None), 1));
        assert!(!is_legacy_metric(Some(Some("")), 0));
        assert!(!is_legacy_metric(Some(Some("alice")), 1));
        let json_row = |v: Value| is_legacy_metric_json(v.as_object().unwrap());
        assert!(json_row(json!({"date": "2026-01-01"})));
        assert!(json_row(json!({"user_id": "", "users_count": true})));
        assert!(!json_row(json!({"user_id": "", "users_count": 0})));

        let day = |d: u32| NaiveDate::from_ymd_opt(2026, 1, d).unwrap();
        let row = |user: Option<&str>, d: u32, updated: i64| MetricsRecord {
            id: format!("{user:?}{d}"),
            user_id: user.map(str::to_owned),
            date: day(d),
            aggregation_period: "daily".into(),
            agent_runs_count: 0,
            team_runs_count: 0,
            workflow_runs_count: 0,
            agent_sessions_count: 0,
            team_sessions_count: 0,
            workflow_sessions_count: 0,
            users_count: 0,
            token_metrics: json!({}),
            model_metrics: json!([]),
            completed: true,
            created_at: updated,
            updated_at: Some(updated),
        };
        let rows = vec![
            (row(None, 1, 10), true), // covered by alice's day 1: dropped
            (row(Some("alice"), 1, 20), false),
            (row(None, 2, 30), true), // uncovered: kept on unscoped reads
        ];
        let all = visible_metrics(rows.clone(), &MetricsQuery::default());
        let days: Vec<_> = all
            .rows
            .iter()
            .map(|r| (r.date, r.user_id.clone()))
            .collect();
        assert_eq!(days, vec![(day(1), Some("alice".into())), (day(2), None)]);
        assert_eq!(all.latest_updated_at, Some(30));
        let shared = visible_metrics(
            rows.clone(),
            &MetricsQuery {
                user_id: Some(String::new()),
                ..Default::default()
            },
        );
        assert!(
            shared.rows.is_empty(),
            "legacy rows never answer a scoped read"
        );
        let ranged = visible_metrics(
            rows,
            &MetricsQuery {
                starting_date: Some(day(2)),
                ..Default::default()
            },
        );
        assert_eq!(ranged.rows.len(), 1);
        assert_eq!(ranged.latest_updated_at, Some(30));
    }

    #[test]
    fn shared_bucket_and_per_user_rows() {
        let date = NaiveDate::from_ymd_opt(2026, 1, 2).unwrap();
        let ts = midnight(date) + 60;
        let mut a = Session::new("s1", SessionType::Agent, "ag").with_user("alice");
        a.created_at = ts;
        a.runs = Some(vec![
            json!({"run_id": "r", "model": "gpt", "model_provider": "openai"}).into(),
        ]);
        a.session_data = Some(json!({"session_metrics": {"input_tokens": 5, "total_tokens": 7}}));
        let mut shared = Session::new("s2", SessionType::Team, "tm");
        shared.created_at = ts;
        shared.runs = Some(vec![
            json!({"run_id": "t"}).into(),
            RunJson::from_stored_text(r#"{"run_id": "m", "parent_run_id": "t"}"#.into()).unwrap(),
        ]);
        let rows = aggregate_daily_metrics(date, &[a, shared], date, ts);
        assert_eq!(rows.len(), 2);
        let shared_row = rows.iter().find(|r| r.user_id.is_none()).unwrap();
        assert_eq!((shared_row.team_runs_count, shared_row.users_count), (2, 0));
        let alice = rows
            .iter()
            .find(|r| r.user_id.as_deref() == Some("alice"))
            .unwrap();
        assert_eq!(alice.token_metrics["input_tokens"], 5);
        assert_eq!(alice.model_metrics[0]["count"], 1);
        assert!(!alice.completed);
    }
}
