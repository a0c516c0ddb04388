//! Daily metrics: `{prefix}:metrics:{date}_{user}_{period}` records as agno 3.1.10 keys
//! them (`""` for the shared bucket), indexed by day (all, per owner bucket). The store is
//! the document engine's.
//!
//! agno 2.x wrote one whole-day record per day: Redis under `{date}_{period}` without a
//! `user_id`, Valkey under `{date}__{period}` with `user_id: ""` and a user count, the very
//! key of agno 3's shared bucket. Writing the shared bucket moves such a record to
//! `{date}_{period}` first (no 3.x key has that form), so it is never overwritten.

use agno_storage_core::metrics::{is_legacy_metric_json, SHARED_BUCKET};
use agno_storage_core::{Error, ErrorKind, MetricsRecord, Result};
use chrono::NaiveDate;

use agno_storage_doc::layout::METRICS_ROW;
use agno_storage_doc::Commit;

use crate::docs::{text, Expect, TableLayout, DEFAULT_LAYOUT};
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

/// As agno's `calculate_date_metrics` lays a record out.
pub(crate) const LAYOUT: TableLayout = TableLayout {
    order: |_| METRICS_ROW,
    score: |f| {
        text(f, "date")
            .and_then(|d| d.get(..10))
            .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
            .map_or(0.0, day_number)
    },
    // Per owner bucket (`""`: the shared one); agno 2.x's whole-day records by day only.
    by_owner: |s, user| user.map(|u| s.idx(TABLE, &format!("date:user:{u}"))),
    owned: |f| !is_legacy_metric_json(f),
    all: Some(|s| s.idx(TABLE, "date:all")),
    score_field: "date",
    ..DEFAULT_LAYOUT
};

impl KvStore {
    /// Moves a whole-day agno 2.x Valkey record off the shared bucket's key (see the module
    /// docs). Returns whether a record moved.
    pub(crate) async fn move_legacy_metric(&self, id: &str) -> Result<bool> {
        let key = self.key(TABLE, id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(false);
        };
        let fields = crate::docs::view(self, TABLE, id, &raw)?;
        let legacy = is_legacy_metric_json(&fields);
        let (Some(date), Some(period)) = (
            text(&fields, "date").and_then(|d| d.get(..10)),
            text(&fields, "aggregation_period"),
        ) else {
            return Ok(false);
        };
        let shared_id = format!("{date}_{SHARED_BUCKET}_{period}");
        if !legacy || id != shared_id {
            return Ok(false);
        }
        let target_id = format!("{date}_{period}");
        let writes = vec![
            self.plan(TABLE, &target_id, Expect::Absent, Some(&fields))?
                .verbatim(raw.clone()),
            self.plan(TABLE, id, Expect::Text(raw), None)?,
        ];
        if self.commit(writes).await? == Commit::Done {
            return Ok(true);
        }
        let target = self.key(TABLE, &target_id);
        if self.get(&target).await?.is_none() {
            // The record changed meanwhile: it is no longer this one to move.
            return Ok(false);
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!(
                "{key} holds a pre-3.0 whole-day metrics record and {target} is taken too; \
                 move or delete one of them, then recompute the metrics"
            ),
        )
        .with_backend(self.server))
    }
}
