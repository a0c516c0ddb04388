//! `schedules list`: the schedules table, as an operator sees it.

use std::fmt::Write as _;

use agno_storage_core::Pagination;
use serde_json::json;

use crate::jobs::to_json;
use crate::target::{self, BackendUrl};
use crate::Error;

/// `schedules list`: one page of schedules, newest first, optionally one owner's or only
/// enabled ones; `json` prints `{"total", "page", "limit", "schedules"}` with each schedule
/// in agno's encoding.
pub async fn list(
    url: &BackendUrl,
    user_id: Option<&str>,
    enabled: Option<bool>,
    (limit, page): (u64, u64),
    json: bool,
) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let found = db
        .schedules()?
        .get_schedules(enabled, user_id, Pagination::page(limit, page))
        .await?;
    if json {
        return to_json(&json!({
            "total": found.total,
            "page": page,
            "limit": limit,
            "schedules": found.items,
        }));
    }
    let mut out = format!(
        "{} of {} schedule(s) in {url}, newest first (page {page}):\n",
        found.items.len(),
        found.total
    );
    for s in &found.items {
        let state = match (&s.enabled, &s.disabled_reason) {
            (true, _) => "enabled".to_owned(),
            (false, Some(reason)) => format!("disabled ({reason})"),
            (false, None) => "disabled".to_owned(),
        };
        let next = s
            .next_run_at
            .map_or_else(|| "-".to_owned(), crate::timestamp);
        let _ = writeln!(
            out,
            "  {}  {:?} {} {}  next {next}  {state}  {} {}  user {}",
            s.id,
            s.name,
            s.cron_expr,
            s.timezone,
            s.method,
            s.endpoint,
            s.user_id.as_deref().unwrap_or("-"),
        );
    }
    Ok(out)
}
