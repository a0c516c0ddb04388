//! `jobs stats|list|cancel|requeue`: the durable job queue, as an operator sees it.

use std::fmt::Write as _;

use agno_storage_core::{AgnoDb, Job, JobQuery, JobStatus, Pagination};
use serde_json::{json, Value};

use crate::target::{self, BackendUrl};
use crate::Error;

/// Which jobs `jobs list` prints.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only jobs in this state (`queued`, `running`, `completed`, `failed`, `cancelled`,
    /// `paused`).
    pub status: Option<String>,
    /// Only this session's jobs.
    pub session_id: Option<String>,
    /// Only this owner's jobs.
    pub user_id: Option<String>,
    /// Jobs per page.
    pub limit: u64,
    /// 1-based page.
    pub page: u64,
}

/// `jobs stats`: jobs per state and the age of the oldest queued one (agno's
/// `queue_stats`; `json` prints that object).
pub async fn stats(url: &BackendUrl, json: bool) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let stats = db.jobs()?.queue_stats().await?;
    if json {
        return to_json(&json!({
            "counts": stats.counts,
            "oldest_queued_age_seconds": stats.oldest_queued_age_seconds,
        }));
    }
    let mut out = format!("Jobs in {url} ({}):\n", db.backend());
    if stats.counts.is_empty() {
        out.push_str("  none\n");
    }
    for status in JobStatus::ALL {
        let Some(n) = stats.counts.get(status.as_str()) else {
            continue;
        };
        let _ = write!(out, "  {:9}  {n}", status.as_str());
        if let (JobStatus::Queued, Some(age)) = (status, stats.oldest_queued_age_seconds) {
            let _ = write!(out, "  (oldest queued {age} s ago)");
        }
        out.push('\n');
    }
    Ok(out)
}

/// `jobs list`: one page of jobs, newest first; `json` prints `{"total", "page", "limit",
/// "jobs"}` with each job as agno's `QueuedJob.to_dict()`.
pub async fn list(url: &BackendUrl, filter: ListFilter, json: bool) -> Result<String, Error> {
    let status = filter.status.as_deref().map(parse_status).transpose()?;
    let db = target::open_existing(url).await?;
    let page = db
        .jobs()?
        .list_jobs(JobQuery {
            status,
            session_id: filter.session_id,
            user_id: filter.user_id,
            pagination: Pagination::page(filter.limit, filter.page),
        })
        .await?;
    if json {
        return to_json(&json!({
            "total": page.total,
            "page": filter.page,
            "limit": filter.limit,
            "jobs": page.items,
        }));
    }
    let mut out = format!(
        "{} of {} job(s) in {url}, newest first (page {}):\n",
        page.items.len(),
        page.total,
        filter.page
    );
    for job in &page.items {
        out.push_str(&job_line(job));
    }
    Ok(out)
}

/// `jobs cancel`: cancels a queued or paused job (a running one is cancelled through its
/// run, as agno does); an error names the job's state when it is not cancelled.
pub async fn cancel(
    url: &BackendUrl,
    id: &str,
    user_id: Option<&str>,
    json: bool,
) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let done = db.jobs()?.cancel_job(id, user_id).await?;
    outcome(&db, id, user_id, done, "cancelled", json, |status| {
        format!("only a queued or paused job is cancelled here; this one is {status}")
    })
    .await
}

/// `jobs requeue`: gives a failed or cancelled job one more attempt (agno's operator
/// requeue); an error names the job's state when it is not requeued.
pub async fn requeue(
    url: &BackendUrl,
    id: &str,
    user_id: Option<&str>,
    json: bool,
) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let done = db.jobs()?.requeue_job(id, user_id).await?;
    outcome(&db, id, user_id, done, "requeued", json, |status| {
        format!("only a failed or cancelled job is requeued; this one is {status}")
    })
    .await
}

/// The report of `cancel` or `requeue`: the job as it is now, or why nothing changed.
async fn outcome(
    db: &AgnoDb,
    id: &str,
    user_id: Option<&str>,
    done: bool,
    verb: &str,
    json: bool,
    refused: impl Fn(&str) -> String,
) -> Result<String, Error> {
    let job = db.jobs()?.get_job(id, user_id).await?;
    match (done, job) {
        (true, Some(job)) if json => to_json(&json!(job)),
        (true, Some(job)) => Ok(format!("{verb} job {id}:\n{}", job_line(&job))),
        // Changed, then gone (cleaned up) before it was read back.
        (true, None) => Ok(format!("{verb} job {id}\n")),
        (false, None) => Err(Error::new(match user_id {
            Some(user) => format!("no job {id} owned by {user}"),
            None => format!("no job {id}"),
        })),
        (false, Some(job)) => Err(Error::new(format!(
            "job {id} was not {verb}: {}",
            refused(job.status.as_str())
        ))),
    }
}

fn parse_status(s: &str) -> Result<JobStatus, Error> {
    JobStatus::ALL
        .into_iter()
        .find(|status| status.as_str() == s)
        .ok_or_else(|| {
            let names: Vec<&str> = JobStatus::ALL.iter().map(|s| s.as_str()).collect();
            Error::new(format!(
                "unknown job status {s:?}: use one of {}",
                names.join(", ")
            ))
        })
}

fn job_line(job: &Job) -> String {
    let mut line = format!(
        "  {}  {:9}  attempt {}/{}  session {}  user {}  created {}",
        job.id,
        job.status.as_str(),
        job.attempt,
        job.max_attempts,
        job.session_id,
        job.user_id.as_deref().unwrap_or("-"),
        crate::timestamp(job.created_at),
    );
    if let Some(worker) = &job.locked_by {
        let _ = write!(line, "  held by {worker}");
    }
    if let Some(error) = &job.error {
        let _ = write!(line, "  error: {}", error.replace('\n', " "));
    }
    line.push('\n');
    line
}

/// Pretty JSON and a newline.
pub fn to_json(value: &Value) -> Result<String, Error> {
    serde_json::to_string_pretty(value)
        .map(|text| text + "\n")
        .map_err(|e| Error::new(format!("cannot encode the report as JSON: {e}")))
}
