//! The job queue (`agno_jobs.json`; agno's JSON stores have none). Every transition is one
//! compare-and-swap of the file, so a claim has one winner and a fenced transition by a
//! worker that lost its lease is refused with `LeaseLost`.

use agno_storage_core::job::{check_finish_status, lease_lost};
use agno_storage_core::job::{
    EnqueueOutcome, EnqueueRejection, Job, JobQuery, JobStatus, JobStore,
};
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, Page, Result,
};
use serde_json::Value;

use crate::doc::{decode_all, fields, find, from_row, position, put, shape_serde, Doc};
use crate::files::{Step, Table};
use crate::store::JsonStore;

impl Doc for Job {
    const TABLE: Table = Table::Jobs;
    const KEY: &'static str = "id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Jobs, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape_serde(fields(self)?, existing))
    }
}

/// The job `id` if `worker_id` still holds it at `attempt`, with its row index.
fn fenced(rows: &[Value], id: &str, worker_id: &str, attempt: i64) -> Result<(usize, Job)> {
    find::<Job>(rows, id)?
        .filter(|(_, j)| j.is_held_by(worker_id, attempt))
        .ok_or_else(|| lease_lost(id, worker_id, attempt))
}

#[async_trait]
impl JobStore for JsonStore {
    async fn enqueue_job(&self, job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        self.files
            .modify(Table::Jobs, |rows| {
                let mut job = job.clone();
                job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
                let jobs = decode_all::<Job>(rows)?;
                if let Some(key) = &job.idempotency_key {
                    if let Some(original) = jobs.iter().find(|j| {
                        j.idempotency_key.as_ref() == Some(key) && j.user_id == job.user_id
                    }) {
                        return Ok(Step::Keep(EnqueueOutcome {
                            rejection: Some(EnqueueRejection::Duplicate),
                            job: Some(original.clone()),
                        }));
                    }
                }
                let queued = jobs
                    .iter()
                    .filter(|j| j.status == JobStatus::Queued)
                    .count() as u64;
                if max_depth > 0 && queued >= max_depth {
                    return Ok(Step::Keep(EnqueueOutcome {
                        rejection: Some(EnqueueRejection::QueueFull),
                        job: None,
                    }));
                }
                if jobs.iter().any(|j| j.id == job.id) {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("job {} already exists; job ids are never reused", job.id),
                    ));
                }
                job.status = JobStatus::Queued;
                job.attempt = 0;
                put(rows, None, &job)?;
                Ok(Step::Write(EnqueueOutcome {
                    rejection: None,
                    job: Some(job),
                }))
            })
            .await
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        self.files
            .modify(Table::Jobs, |rows| {
                let now = now_epoch_seconds();
                let candidate = decode_all::<Job>(rows)?
                    .into_iter()
                    .filter(|j| j.is_claimable(now, lock_grace_seconds, deployment_id))
                    .min_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
                let Some(mut job) = candidate else {
                    return Ok(Step::Keep(None));
                };
                job.take_lease(worker_id, now);
                put(rows, position(rows, Job::KEY, &job.id), &job)?;
                Ok(Step::Write(Some(job)))
            })
            .await
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        self.files
            .modify(Table::Jobs, |rows| {
                let now = now_epoch_seconds();
                let mut held = 0;
                for id in ids {
                    let Some((index, mut job)) = find::<Job>(rows, id)? else {
                        continue;
                    };
                    if job.is_locked_by(worker_id) {
                        job.locked_at = Some(now);
                        put(rows, Some(index), &job)?;
                        held += 1;
                    }
                }
                Ok(if held > 0 {
                    Step::Write(held)
                } else {
                    Step::Keep(0)
                })
            })
            .await
    }

    async fn complete_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<Job> {
        check_finish_status(status)?;
        self.files
            .modify(Table::Jobs, |rows| {
                let now = now_epoch_seconds();
                let (index, mut job) = fenced(rows, id, worker_id, attempt)?;
                job.finish(status, error.clone(), now);
                put(rows, Some(index), &job)?;
                Ok(Step::Write(job))
            })
            .await
    }

    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job> {
        self.files
            .modify(Table::Jobs, |rows| {
                let now = now_epoch_seconds();
                let (index, mut job) = fenced(rows, id, worker_id, attempt)?;
                job.retry_or_fail(error.clone(), retry_delay_seconds, now);
                put(rows, Some(index), &job)?;
                Ok(Step::Write(job))
            })
            .await
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.files
            .modify(Table::Jobs, |rows| {
                let now = now_epoch_seconds();
                let Some((index, mut job)) = find::<Job>(rows, id)? else {
                    return Ok(Step::Keep(false));
                };
                if !visible_to(job.user_id.as_deref(), user_id)
                    || !matches!(job.status, JobStatus::Queued | JobStatus::Paused)
                {
                    return Ok(Step::Keep(false));
                }
                job.status = JobStatus::Cancelled;
                job.completed_at = Some(now);
                job.updated_at = Some(now);
                put(rows, Some(index), &job)?;
                Ok(Step::Write(true))
            })
            .await
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        Ok(self
            .get::<Job>(id)
            .await?
            .filter(|j| visible_to(j.user_id.as_deref(), user_id)))
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        let rows: Vec<Job> = self
            .all::<Job>()
            .await?
            .into_iter()
            .filter(|j| query.matches(j))
            .collect();
        query.page(rows)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        self.files
            .modify(Table::Jobs, |rows| {
                let cutoff = now_epoch_seconds() - older_than_seconds;
                let before = rows.len();
                let mut kept = Vec::with_capacity(before);
                for row in rows.drain(..) {
                    let job = Job::decode(&row)?;
                    if !(job.status.is_terminal() && job.completed_at.is_some_and(|t| t <= cutoff))
                    {
                        kept.push(row);
                    }
                }
                *rows = kept;
                let deleted = (before - rows.len()) as u64;
                Ok(if deleted == 0 {
                    Step::Keep(0)
                } else {
                    Step::Write(deleted)
                })
            })
            .await
    }
}
