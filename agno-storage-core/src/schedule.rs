//! Schedules (cron-triggered endpoint calls) and their runs.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::pagination::{Page, Pagination};

/// The columns [`ScheduleUpdate::provenance`] may write (agno's
/// `stamp_schedule_provenance` allow-list; `disabled_reason` is not among them).
pub const SCHEDULE_STAMP_COLUMNS: &[&str] = SCHEDULE_PROVENANCE_COLUMNS.split_at(7).0;

/// The columns `update_schedule` may write (agno's `SCHEDULE_MUTABLE_COLUMNS`), sorted.
pub const SCHEDULE_MUTABLE_COLUMNS: &[&str] = &[
    "cron_expr",
    "description",
    "disabled_reason",
    "enabled",
    "endpoint",
    "max_retries",
    "method",
    "name",
    "next_run_at",
    "payload",
    "retry_delay_seconds",
    "timeout_seconds",
    "timezone",
];

/// The eight provenance columns agno 3 added to schedules.
pub const SCHEDULE_PROVENANCE_COLUMNS: &[&str] = &[
    "managed_by",
    "target_type",
    "target_id",
    "created_by_run_id",
    "created_by_session_id",
    "updated_by_run_id",
    "updated_by_session_id",
    "disabled_reason",
];

/// A schedule (`agno_schedules`), unique on `(user_id, name)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Primary key.
    pub id: String,
    /// Name, unique per owner.
    pub name: String,
    /// Description.
    #[serde(default)]
    pub description: Option<String>,
    /// HTTP method of the call.
    pub method: String,
    /// Endpoint called, e.g. `/agents/a1/runs`.
    pub endpoint: String,
    /// Request body.
    #[serde(default)]
    pub payload: Option<Value>,
    /// Cron expression; `""` for a one-shot schedule.
    pub cron_expr: String,
    /// IANA time zone of the cron expression.
    pub timezone: String,
    /// Call timeout.
    pub timeout_seconds: i64,
    /// Retries after a failure.
    pub max_retries: i64,
    /// Delay between retries.
    pub retry_delay_seconds: i64,
    /// Disabled schedules never fire.
    pub enabled: bool,
    /// Next due time, epoch seconds.
    #[serde(default)]
    pub next_run_at: Option<i64>,
    /// Worker holding the claim.
    #[serde(default)]
    pub locked_by: Option<String>,
    /// When the claim was taken, epoch seconds.
    #[serde(default)]
    pub locked_at: Option<i64>,
    /// Owner; `None` for system schedules.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Who manages it (`studio`, `company`, …).
    #[serde(default)]
    pub managed_by: Option<String>,
    /// Kind of target (`agent`, `team`, `workflow`).
    #[serde(default)]
    pub target_type: Option<String>,
    /// Target component id.
    #[serde(default)]
    pub target_id: Option<String>,
    /// Run that created it.
    #[serde(default)]
    pub created_by_run_id: Option<String>,
    /// Session that created it.
    #[serde(default)]
    pub created_by_session_id: Option<String>,
    /// Run that last updated it.
    #[serde(default)]
    pub updated_by_run_id: Option<String>,
    /// Session that last updated it.
    #[serde(default)]
    pub updated_by_session_id: Option<String>,
    /// Why it was disabled.
    #[serde(default)]
    pub disabled_reason: Option<String>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

/// Sorts schedules or schedule runs newest first by `key` (`(created_at, id)` descending,
/// the order of `get_schedules` and `get_schedule_runs`), then cuts out the page; `total`
/// counts every row.
pub fn page_newest_first<T>(
    mut rows: Vec<T>,
    key: impl Fn(&T) -> (i64, &str),
    pagination: &Pagination,
) -> Result<Page<T>> {
    rows.sort_by(|a, b| key(b).cmp(&key(a)));
    Page::paginate(rows, pagination)
}

impl Schedule {
    /// A new enabled schedule calling `endpoint` on `cron_expr` (UTC), created now.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        endpoint: impl Into<String>,
        cron_expr: impl Into<String>,
    ) -> Self {
        Schedule {
            id: id.into(),
            name: name.into(),
            description: None,
            method: "POST".into(),
            endpoint: endpoint.into(),
            payload: None,
            cron_expr: cron_expr.into(),
            timezone: "UTC".into(),
            timeout_seconds: 3600,
            max_retries: 0,
            retry_delay_seconds: 60,
            enabled: true,
            next_run_at: None,
            locked_by: None,
            locked_at: None,
            user_id: None,
            managed_by: None,
            target_type: None,
            target_id: None,
            created_by_run_id: None,
            created_by_session_id: None,
            updated_by_run_id: None,
            updated_by_session_id: None,
            disabled_reason: None,
            created_at: crate::now_epoch_seconds(),
            updated_at: None,
        }
    }

    /// Releases the claim if `worker_id` holds it (and `locked_at` matches when given):
    /// clears the lock and sets `next_run_at` (cleared for a one-shot schedule, kept when
    /// `None`). Returns false, changing nothing, when the caller does not hold the claim.
    pub fn release(
        &mut self,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
        now: i64,
    ) -> bool {
        if self.locked_by.as_deref() != Some(worker_id)
            || locked_at.is_some_and(|t| self.locked_at != Some(t))
        {
            return false;
        }
        self.locked_by = None;
        self.locked_at = None;
        self.updated_at = Some(now);
        self.next_run_at = if self.cron_expr.is_empty() {
            None
        } else {
            next_run_at.or(self.next_run_at)
        };
        true
    }

    /// Due at `now` for a claimer with `lock_grace_seconds`: enabled, `next_run_at <= now`,
    /// and unlocked or locked longer ago than the grace.
    pub fn is_due(&self, now: i64, lock_grace_seconds: i64) -> bool {
        self.enabled
            && self.next_run_at.is_some_and(|t| t <= now)
            && (self.locked_by.is_none()
                || self
                    .locked_at
                    .is_some_and(|t| t <= now - lock_grace_seconds))
    }
}

/// A validated set of column updates for [`ScheduleStore::update_schedule`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScheduleUpdate {
    columns: Map<String, Value>,
}

fn run_endpoint_target(endpoint: &str) -> Option<(String, String)> {
    let rest = endpoint.strip_prefix('/')?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let mut parts = rest.split('/');
    let (kind, id, runs) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || runs != "runs" || id.is_empty() {
        return None;
    }
    match kind {
        "agents" | "teams" | "workflows" => {
            Some((kind.trim_end_matches('s').to_owned(), id.to_owned()))
        }
        _ => None,
    }
}

impl ScheduleUpdate {
    /// Validates `columns` against the allow-list ([`SCHEDULE_MUTABLE_COLUMNS`]).
    ///
    /// `target_type` and `target_id` pass only together with an `endpoint` whose run target
    /// (`/agents|teams|workflows/{id}/runs`) they match exactly. Any other key is an
    /// `InvalidInput` error naming every rejected column. `enabled: true` clears
    /// `disabled_reason` unless the update sets it.
    pub fn new(columns: Map<String, Value>) -> Result<Self> {
        let target = columns
            .get("endpoint")
            .and_then(Value::as_str)
            .map(run_endpoint_target);
        let target_ok = |key: &str, value: &Value| -> bool {
            let Some(target) = &target else { return false };
            let want = target
                .as_ref()
                .map(|(t, id)| if key == "target_type" { t } else { id });
            match (want, value) {
                (Some(w), Value::String(v)) => w == v,
                (None, Value::Null) => true,
                _ => false,
            }
        };
        let mut rejected: Vec<&str> = columns
            .iter()
            .filter(|(k, v)| {
                !SCHEDULE_MUTABLE_COLUMNS.contains(&k.as_str())
                    && !((k.as_str() == "target_type" || k.as_str() == "target_id")
                        && target_ok(k, v))
            })
            .map(|(k, _)| k.as_str())
            .collect();
        let has_type = columns.contains_key("target_type");
        if has_type != columns.contains_key("target_id") {
            rejected.extend(
                ["target_type", "target_id"]
                    .iter()
                    .filter(|k| columns.contains_key(**k)),
            );
        }
        rejected.sort_unstable();
        rejected.dedup();
        if !rejected.is_empty() {
            let quoted = |v: &[&str]| {
                format!(
                    "[{}]",
                    v.iter()
                        .map(|c| format!("'{c}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            };
            return Err(Error::invalid_input(format!(
                "update_schedule cannot modify {}: only {} are mutable; ownership, provenance, trigger and lock state move only through their dedicated APIs",
                quoted(&rejected),
                quoted(SCHEDULE_MUTABLE_COLUMNS)
            )));
        }
        let mut columns = columns;
        if columns.get("enabled") == Some(&Value::Bool(true))
            && !columns.contains_key("disabled_reason")
        {
            columns.insert("disabled_reason".into(), Value::Null);
        }
        Ok(ScheduleUpdate { columns })
    }

    /// A provenance stamp ([`ScheduleStore::stamp_schedule_provenance`]): only the columns
    /// of [`SCHEDULE_STAMP_COLUMNS`], each a string or null; any other key is an
    /// `InvalidInput` error naming every rejected one, as agno's `ValueError`.
    pub fn provenance(columns: Map<String, Value>) -> Result<Self> {
        let mut rejected: Vec<&str> = columns
            .iter()
            .filter(|(k, v)| {
                !SCHEDULE_STAMP_COLUMNS.contains(&k.as_str())
                    || !matches!(v, Value::String(_) | Value::Null)
            })
            .map(|(k, _)| k.as_str())
            .collect();
        if !rejected.is_empty() {
            rejected.sort_unstable();
            return Err(Error::invalid_input(format!(
                "stamp_schedule_provenance cannot write {rejected:?}: it writes only {SCHEDULE_STAMP_COLUMNS:?}, each a string or null"
            )));
        }
        Ok(ScheduleUpdate { columns })
    }

    /// Disables a schedule, recording why ([`ScheduleStore::disable_schedules_for_target`]).
    pub fn disable(reason: Option<&str>) -> Self {
        let mut columns = Map::new();
        columns.insert("enabled".into(), Value::Bool(false));
        columns.insert(
            "disabled_reason".into(),
            reason.map_or(Value::Null, |r| Value::String(r.to_owned())),
        );
        ScheduleUpdate { columns }
    }

    /// The validated columns and their new values.
    pub fn columns(&self) -> &Map<String, Value> {
        &self.columns
    }

    /// The validated columns, consumed.
    pub fn into_columns(self) -> Map<String, Value> {
        self.columns
    }

    /// Applies the update to a record (document stores), setting `updated_at` to `now`.
    pub fn apply_to(&self, schedule: &Schedule, now: i64) -> Result<Schedule> {
        let mut doc =
            serde_json::to_value(schedule).map_err(|e| Error::serialization("a schedule", e))?;
        if let Value::Object(map) = &mut doc {
            for (k, v) in &self.columns {
                map.insert(k.clone(), v.clone());
            }
            map.insert("updated_at".into(), Value::from(now));
        }
        crate::json::from_value(doc).map_err(|e| {
            Error::invalid_input(format!("update_schedule: a column has the wrong type: {e}"))
        })
    }
}

/// A schedule run (`agno_schedule_runs`); `user_id` is its schedule's owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScheduleRun {
    /// Primary key.
    pub id: String,
    /// The schedule that fired.
    pub schedule_id: String,
    /// Attempt number, from 1.
    pub attempt: i64,
    /// When it fired, epoch seconds.
    #[serde(default)]
    pub triggered_at: Option<i64>,
    /// When it finished, epoch seconds.
    #[serde(default)]
    pub completed_at: Option<i64>,
    /// `running`, `success`, `failed`, `paused` or `timeout`.
    pub status: String,
    /// HTTP status of the call.
    #[serde(default)]
    pub status_code: Option<i64>,
    /// Run started by the call.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Session of that run.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Error text.
    #[serde(default)]
    pub error: Option<String>,
    /// Request sent.
    #[serde(default)]
    pub input: Option<Value>,
    /// Response received.
    #[serde(default)]
    pub output: Option<Value>,
    /// Pending requirements of a paused run.
    #[serde(default)]
    pub requirements: Option<Value>,
    /// Owner, copied from the schedule by the store.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
}

/// Schedules and schedule runs. Reads and writes are scoped by `user_id`; polling
/// (`claim_due_schedule`, `release_schedule`) is deliberately unscoped.
#[async_trait]
pub trait ScheduleStore: Send + Sync {
    /// Inserts a schedule; a taken id, or a taken `(user_id, name)`, is `AlreadyExists`.
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule>;

    /// The schedule, or `None` when absent or not owned by `user_id`.
    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>>;

    /// The schedule named `name` in `user_id`'s bucket (`None`: the unowned bucket).
    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>>;

    /// Schedules, newest first (`created_at DESC, id DESC`), optionally only enabled ones.
    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>>;

    /// Applies a validated update; `None` when absent or not owned by `user_id`. Renaming
    /// onto a taken name is `AlreadyExists`.
    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>>;

    /// Deletes the schedule and its runs if owned by `user_id` (any when `None`).
    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool>;

    /// Atomically claims the earliest due schedule of any owner for `worker_id`
    /// (`locked_by`, `locked_at = now`); two concurrent claimers never get the same one.
    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>>;

    /// Releases a claim, only if `worker_id` still holds it (and `locked_at` matches when
    /// given), setting `next_run_at` (cleared for one-shot schedules). False otherwise.
    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool>;

    /// Inserts a run; the store sets `user_id` to the schedule's owner. `NotFound` if the
    /// schedule does not exist.
    async fn create_schedule_run(&self, run: ScheduleRun) -> Result<ScheduleRun>;

    /// Replaces a run's mutable fields (status, completion, outputs) if owned by `user_id`.
    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>>;

    /// The run, or `None` when absent or not owned by `user_id`.
    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>>;

    /// Deletes the runs of `schedule_id` visible to `user_id` (any when `None`) that
    /// completed before `before` (epoch seconds), as agno's `delete_schedule_runs`; runs not
    /// completed are kept. Returns how many went.
    async fn delete_schedule_runs(
        &self,
        schedule_id: &str,
        before: i64,
        user_id: Option<&str>,
    ) -> Result<u64>;

    /// A schedule's runs, newest first.
    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>>;

    /// The latest run of each schedule among `schedule_ids` that has one (visible to
    /// `user_id`, any when `None`), by schedule id: latest by `triggered_at`, then
    /// `created_at`, then `id`, as agno's `get_latest_schedule_runs` (a run not triggered
    /// yet comes last).
    ///
    /// Provided over [`ScheduleStore::get_schedule_runs`] (every run of each schedule is
    /// read); a backend that can pick the latest on the server may override it.
    async fn get_latest_schedule_runs(
        &self,
        schedule_ids: &[String],
        user_id: Option<&str>,
    ) -> Result<std::collections::HashMap<String, ScheduleRun>> {
        let mut latest = std::collections::HashMap::new();
        for id in schedule_ids {
            let runs = self
                .get_schedule_runs(id, user_id, Pagination::default())
                .await?
                .items;
            let newest = runs.into_iter().max_by(|a, b| {
                (a.triggered_at, a.created_at, &a.id).cmp(&(b.triggered_at, b.created_at, &b.id))
            });
            if let Some(run) = newest {
                latest.insert(id.clone(), run);
            }
        }
        Ok(latest)
    }

    /// Writes the provenance columns of `stamp` ([`ScheduleUpdate::provenance`]) on schedule
    /// `id`, whoever owns it, and `updated_at`, as agno's `stamp_schedule_provenance`; false
    /// when there is no such schedule.
    ///
    /// Provided over [`ScheduleStore::update_schedule`].
    async fn stamp_schedule_provenance(&self, id: &str, stamp: ScheduleUpdate) -> Result<bool> {
        Ok(self.update_schedule(id, None, stamp).await?.is_some())
    }

    /// Disables every enabled schedule, of any owner, that targets `target_type`
    /// (`agent`, `team`, `workflow`) `target_id`, by its target columns or by its endpoint
    /// (`/{target_type}s/{target_id}/runs`, with or without the final `/`), recording
    /// `reason` in `disabled_reason`, as agno's `disable_schedules_for_target`; returns how
    /// many.
    ///
    /// Provided over [`ScheduleStore::get_schedules`] (every enabled schedule is read) and
    /// [`ScheduleStore::update_schedule`].
    async fn disable_schedules_for_target(
        &self,
        target_type: &str,
        target_id: &str,
        reason: Option<&str>,
    ) -> Result<u64> {
        let endpoint = format!("/{target_type}s/{target_id}/runs");
        let enabled = self
            .get_schedules(Some(true), None, Pagination::default())
            .await?
            .items;
        let mut disabled = 0;
        for schedule in enabled {
            let by_columns = schedule.target_type.as_deref() == Some(target_type)
                && schedule.target_id.as_deref() == Some(target_id);
            let by_endpoint = schedule.endpoint.trim_end_matches('/') == endpoint;
            if !(by_columns || by_endpoint) {
                continue;
            }
            let update = ScheduleUpdate::disable(reason);
            if self
                .update_schedule(&schedule.id, None, update)
                .await?
                .is_some()
            {
                disabled += 1;
            }
        }
        Ok(disabled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rejects_with_agno_text() {
        let cols = json!({"bogus": 1, "locked_by": "w", "name": "x"});
        let err = ScheduleUpdate::new(cols.as_object().unwrap().clone()).unwrap_err();
        assert_eq!(err.message(), "update_schedule cannot modify ['bogus', 'locked_by']: only ['cron_expr', 'description', 'disabled_reason', 'enabled', 'endpoint', 'max_retries', 'method', 'name', 'next_run_at', 'payload', 'retry_delay_seconds', 'timeout_seconds', 'timezone'] are mutable; ownership, provenance, trigger and lock state move only through their dedicated APIs");
    }

    #[test]
    fn target_follows_endpoint() {
        let ok = json!({"endpoint": "/agents/a1/runs", "target_type": "agent", "target_id": "a1"});
        assert!(ScheduleUpdate::new(ok.as_object().unwrap().clone()).is_ok());
        let bad = json!({"endpoint": "/agents/a1/runs", "target_type": "team", "target_id": "a1"});
        assert!(ScheduleUpdate::new(bad.as_object().unwrap().clone()).is_err());
        let alone = json!({"target_id": "a1"});
        assert!(ScheduleUpdate::new(alone.as_object().unwrap().clone()).is_err());
    }
}
