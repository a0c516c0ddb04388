//! The durable job queue (`agno_jobs`; agno's `DynamoDb` has none). Items are
//! `QueuedJob.to_dict()` in DynamoDB encoding.
//!
//! Enqueue writes the job and its idempotency item (`(user_id, key)` in the meta table) in
//! one transaction; claims, heartbeats and settlements are compare-and-sets on the item,
//! fenced by `(locked_by, attempt, status)`.

use agno_storage_core::job::{check_finish_status, lease_lost};
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, EnqueueOutcome, EnqueueRejection, ErrorKind, Job,
    JobQuery, JobStatus, JobStore, Page, Result,
};

use crate::codec::{err, record, record_item, s, sv, Item};
use crate::db::{contention, Cond, Table, TxOutcome, MAX_ATTEMPTS};
use crate::DynamoDb;

fn decode(item: &Item) -> Result<Job> {
    record(item, &["payload"], "a job")
}

fn encode(job: &Job) -> Result<Item> {
    record_item(job, "a job")
}

impl DynamoDb {
    /// The meta key of an idempotency item: the owner length-prefixed, as agno's Redis
    /// queue keys it.
    fn idem_key(&self, user_id: Option<&str>, key: &str) -> String {
        let user = user_id.unwrap_or("");
        format!(
            "job_idem#{}#u{}:{user}:{key}",
            self.inner.names.jobs,
            user.len()
        )
    }

    /// A fenced read-modify-write of a running job held by `worker_id` at `attempt`.
    async fn fenced(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        change: impl Fn(&mut Job, i64) + Send + Sync,
    ) -> Result<Job> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Jobs, id).await? else {
                return Err(lease_lost(id, worker_id, attempt));
            };
            let mut job = decode(&old)?;
            if !job.is_held_by(worker_id, attempt) {
                return Err(lease_lost(id, worker_id, attempt));
            }
            change(&mut job, now_epoch_seconds());
            if self.cas(Table::Jobs, Some(&old), encode(&job)?).await? {
                return Ok(job);
            }
        }
        Err(contention("settle job"))
    }

    async fn all_jobs(&self) -> Result<Vec<(Job, Item)>> {
        self.scan(Table::Jobs)
            .await?
            .into_iter()
            .map(|i| decode(&i).map(|j| (j, i)))
            .collect()
    }
}

#[async_trait]
impl JobStore for DynamoDb {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        job.status = JobStatus::Queued;
        job.attempt = 0;
        for _ in 0..MAX_ATTEMPTS {
            let idem = job
                .idempotency_key
                .as_deref()
                .map(|k| self.idem_key(job.user_id.as_deref(), k));
            if let Some(key) = &idem {
                if let Some(claim) = self.get(Table::Meta, key).await? {
                    let holder = s(&claim, "id").unwrap_or_default().to_owned();
                    if let Some(item) = self.get(Table::Jobs, &holder).await? {
                        let original = decode(&item)?;
                        if original.user_id == job.user_id {
                            return Ok(EnqueueOutcome {
                                rejection: Some(EnqueueRejection::Duplicate),
                                job: Some(original),
                            });
                        }
                    }
                    // An orphaned or foreign claim: take it over.
                    self.delete(
                        Table::Meta,
                        key,
                        Some(Cond::default().eq("id", sv(&holder))),
                    )
                    .await?;
                    continue;
                }
            }
            if max_depth > 0 {
                let queued = self
                    .all_jobs()
                    .await?
                    .iter()
                    .filter(|(j, _)| j.status == JobStatus::Queued)
                    .count() as u64;
                if queued >= max_depth {
                    return Ok(EnqueueOutcome {
                        rejection: Some(EnqueueRejection::QueueFull),
                        job: None,
                    });
                }
            }
            let mut items = vec![
                self.tx_put(Table::Jobs, encode(&job)?, Some(Cond::absent("id")))
                    .await?,
            ];
            if let Some(key) = &idem {
                let mut claim = Item::new();
                claim.insert("pk".into(), sv(key));
                claim.insert("id".into(), sv(&job.id));
                items.push(
                    self.tx_put(Table::Meta, claim, Some(Cond::absent("pk")))
                        .await?,
                );
            }
            match self.transact(items).await? {
                TxOutcome::Applied => {
                    return Ok(EnqueueOutcome {
                        rejection: None,
                        job: Some(job),
                    })
                }
                TxOutcome::Cancelled(failed) => {
                    if failed.first().copied().unwrap_or(false) {
                        return Err(err(
                            ErrorKind::AlreadyExists,
                            format!("job {} already exists; job ids are never reused", job.id),
                        ));
                    }
                }
            }
        }
        Err(contention("enqueue_job"))
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        for _ in 0..MAX_ATTEMPTS {
            let now = now_epoch_seconds();
            let mut candidates: Vec<(Job, Item)> = self
                .all_jobs()
                .await?
                .into_iter()
                .filter(|(j, _)| j.is_claimable(now, lock_grace_seconds, deployment_id))
                .collect();
            if candidates.is_empty() {
                return Ok(None);
            }
            candidates.sort_by(|a, b| (a.0.created_at, &a.0.id).cmp(&(b.0.created_at, &b.0.id)));
            for (mut job, old) in candidates {
                job.take_lease(worker_id, now);
                if self.cas(Table::Jobs, Some(&old), encode(&job)?).await? {
                    return Ok(Some(job));
                }
            }
        }
        Err(contention("claim_job"))
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        let mut held = 0;
        for id in ids {
            for _ in 0..MAX_ATTEMPTS {
                let Some(old) = self.get(Table::Jobs, id).await? else {
                    break;
                };
                let mut job = decode(&old)?;
                if !job.is_locked_by(worker_id) {
                    break;
                }
                job.locked_at = Some(now_epoch_seconds());
                if self.cas(Table::Jobs, Some(&old), encode(&job)?).await? {
                    held += 1;
                    break;
                }
            }
        }
        Ok(held)
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
        self.fenced(id, worker_id, attempt, |job, now| {
            job.finish(status, error.clone(), now);
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
        self.fenced(id, worker_id, attempt, |job, now| {
            job.retry_or_fail(error.clone(), retry_delay_seconds, now);
        })
        .await
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Jobs, id).await? else {
                return Ok(false);
            };
            let mut job = decode(&old)?;
            if !visible_to(job.user_id.as_deref(), user_id)
                || !matches!(job.status, JobStatus::Queued | JobStatus::Paused)
            {
                return Ok(false);
            }
            let now = now_epoch_seconds();
            job.status = JobStatus::Cancelled;
            job.completed_at = Some(now);
            job.updated_at = Some(now);
            if self.cas(Table::Jobs, Some(&old), encode(&job)?).await? {
                return Ok(true);
            }
        }
        Err(contention("cancel_job"))
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        match self.get(Table::Jobs, id).await? {
            Some(item) => {
                let j = decode(&item)?;
                Ok(visible_to(j.user_id.as_deref(), user_id).then_some(j))
            }
            None => Ok(None),
        }
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        let rows: Vec<Job> = self
            .all_jobs()
            .await?
            .into_iter()
            .map(|(j, _)| j)
            .filter(|j| query.matches(j))
            .collect();
        query.page(rows)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        let cutoff = now_epoch_seconds() - older_than_seconds;
        let mut removed = 0;
        for (job, item) in self.all_jobs().await? {
            if !(job.status.is_terminal() && job.completed_at.is_some_and(|t| t <= cutoff)) {
                continue;
            }
            let cond = Cond::unchanged(Table::Jobs, Some(&item), &item);
            if self.delete(Table::Jobs, &job.id, Some(cond)).await? {
                removed += 1;
                if let Some(key) = &job.idempotency_key {
                    let idem = self.idem_key(job.user_id.as_deref(), key);
                    self.delete(
                        Table::Meta,
                        &idem,
                        Some(Cond::default().eq("id", sv(&job.id))),
                    )
                    .await?;
                }
            }
        }
        Ok(removed)
    }
}
