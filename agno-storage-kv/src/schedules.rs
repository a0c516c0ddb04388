//! Schedules and schedule runs. agno's Redis adapters have neither, so the layout follows
//! theirs: `{prefix}:schedules:{id}` and `{prefix}:schedule_runs:{id}` records in
//! `Schedule.to_dict()` / `ScheduleRun.to_dict()` field order. The stores are the document
//! engine's.
//!
//! Indexes: creation time (all, per owner); `due` (unlocked enabled schedules by
//! `next_run_at`) and `locked` (claimed ones by `locked_at`), so a claim reads only due
//! candidates; one name key per `(owner, name)` holding the schedule id, which makes the
//! name unique inside the same atomic write; runs per schedule by creation time.

use agno_storage_doc::Fields;
use serde_json::Value;

use crate::docs::Entry;
use crate::docs::{score, text, TableLayout, DEFAULT_LAYOUT};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "schedules";
pub(crate) const RUNS_TABLE: &str = "schedule_runs";

pub(crate) const LAYOUT: TableLayout = TableLayout {
    score: |f| score(f, "created_at"),
    by_owner: |s, user| user.map(|u| s.idx(TABLE, &format!("created:user:{u}"))),
    all: Some(|s| s.idx(TABLE, "created:all")),
    extra: due_entries,
    unique_key: Some(|s, f| {
        let name = text(f, "name")?;
        Some(s.schedule_name_key(text(f, "user_id"), name))
    }),
    ..DEFAULT_LAYOUT
};

pub(crate) const RUNS_LAYOUT: TableLayout = TableLayout {
    score: |f| score(f, "created_at"),
    group_field: "schedule_id",
    by_owner: |s, schedule| schedule.map(|id| s.idx(RUNS_TABLE, &format!("by_schedule:{id}"))),
    ..DEFAULT_LAYOUT
};

/// An enabled schedule with a next run is in `due` (unlocked, by `next_run_at`) or in
/// `locked` (by `locked_at`).
fn due_entries(s: &KvStore, id: &str, f: &Fields) -> Vec<Entry> {
    let enabled = f.get("enabled").and_then(Value::as_bool) == Some(true);
    let has_next = f.get("next_run_at").is_some_and(|v| !v.is_null());
    if !enabled || !has_next {
        return Vec::new();
    }
    if f.get("locked_by").is_none_or(Value::is_null) {
        vec![Entry::z(s.schedules_due(), id, score(f, "next_run_at"))]
    } else {
        vec![Entry::z(s.schedules_locked(), id, score(f, "locked_at"))]
    }
}

impl KvStore {
    pub(crate) fn schedules_due(&self) -> String {
        self.idx(TABLE, "due")
    }

    pub(crate) fn schedules_locked(&self) -> String {
        self.idx(TABLE, "locked")
    }

    /// The key making `(user_id, name)` unique: the owner is length-prefixed (`u5:alice:`),
    /// the unowned bucket is `n:`, so no two buckets share a key.
    pub(crate) fn schedule_name_key(&self, user_id: Option<&str>, name: &str) -> String {
        let owner = match user_id {
            Some(u) => format!("u{}:{u}", u.len()),
            None => "n".to_owned(),
        };
        self.idx(TABLE, &format!("name:{owner}:{name}"))
    }
}
