//! The durable job queue, in agno 3.1.10 `RedisDb`'s layout (spec §3.4) so agno workers
//! and ours share one queue: tickets `{prefix}:jobs:job:{id}` (ASCII JSON), idempotency
//! keys `{prefix}:jobs:idem:u{len}:{user}:{key}`, and the `queued` (`available_at`),
//! `running` (`locked_at`) and `all` (`created_at`) sorted sets, which both sides keep in
//! step with every transition. Ours on top, per owner and per session by creation time:
//! fields that never change after enqueue, so agno's transitions cannot make them stale
//! (tickets agno enqueued join them through `KvDb::rebuild_indexes`).
//!
//! Every transition is one compare-and-set of the ticket with its index moves, so a claim
//! has one winner, and every write after a claim is fenced on
//! `(status = running, locked_by, attempt)`. Lease times come from the server's `TIME`,
//! one clock for every worker.
//!
//! Durability is Redis's: with the default RDB snapshots an accepted job can be lost in a
//! crash; run Redis with `appendonly yes` and `appendfsync always` (or `everysec`, losing
//! at most a second) for a durable queue. A SQL store's job queue stays the record of
//! truth where losing an accepted job is not acceptable.

use agno_storage_core::job::{check_finish_status, lease_lost};
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, EnqueueOutcome, EnqueueRejection, Error, ErrorKind,
    Job, JobQuery, JobStatus, JobStore, Page, Result, SortOrder,
};
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode_ascii, int, object, opt_int, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "jobs";
const PAGE: usize = 64;

fn status(s: &str) -> Result<JobStatus> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
        Error::new(
            ErrorKind::Serialization,
            format!("unknown job status {s:?}"),
        )
    })
}

pub(crate) fn decode(key: &str, raw: &str) -> Result<Job> {
    let map = decode_object(key, raw)?;
    let required = |f: &str| crate::codec::required(&map, f, key);
    Ok(Job {
        id: required("id")?,
        component_type: text(&map, "component_type").unwrap_or_default(),
        job_type: text(&map, "job_type").unwrap_or_else(|| "run".into()),
        deployment_id: text(&map, "deployment_id"),
        component_id: text(&map, "component_id").unwrap_or_default(),
        session_id: text(&map, "session_id").unwrap_or_default(),
        user_id: text(&map, "user_id"),
        payload: map.get("payload").cloned().unwrap_or(Value::Null),
        status: status(&required("status")?)?,
        attempt: int(&map, "attempt").unwrap_or_default(),
        max_attempts: int(&map, "max_attempts").unwrap_or(1),
        idempotency_key: text(&map, "idempotency_key"),
        available_at: int(&map, "available_at").unwrap_or_default(),
        locked_by: text(&map, "locked_by"),
        locked_at: int(&map, "locked_at"),
        error: text(&map, "error"),
        created_at: int(&map, "created_at").unwrap_or_default(),
        updated_at: int(&map, "updated_at"),
        completed_at: int(&map, "completed_at"),
    })
}

/// The ticket as `QueuedJob.to_dict()` lays it out, `json.dumps`-encoded (ASCII).
pub(crate) fn encode_job(j: &Job) -> String {
    encode_ascii(&object([
        ("id", Value::String(j.id.clone())),
        ("component_type", Value::String(j.component_type.clone())),
        ("component_id", Value::String(j.component_id.clone())),
        ("session_id", Value::String(j.session_id.clone())),
        ("job_type", Value::String(j.job_type.clone())),
        ("deployment_id", opt_str(&j.deployment_id)),
        ("user_id", opt_str(&j.user_id)),
        ("payload", j.payload.clone()),
        ("status", Value::String(j.status.as_str().into())),
        ("attempt", Value::from(j.attempt)),
        ("max_attempts", Value::from(j.max_attempts)),
        ("idempotency_key", opt_str(&j.idempotency_key)),
        ("available_at", Value::from(j.available_at)),
        ("locked_by", opt_str(&j.locked_by)),
        ("locked_at", opt_int(j.locked_at)),
        ("error", opt_str(&j.error)),
        ("created_at", Value::from(j.created_at)),
        ("updated_at", opt_int(j.updated_at)),
        ("completed_at", opt_int(j.completed_at)),
    ]))
}

impl KvStore {
    fn job_key(&self, id: &str) -> String {
        self.key(TABLE, &format!("job:{id}"))
    }

    /// agno's collision-free `(user, key)` encoding: the user is length-prefixed.
    fn idem_key(&self, user_id: Option<&str>, key: &str) -> String {
        let user = user_id.unwrap_or_default();
        self.key(TABLE, &format!("idem:u{}:{user}:{key}", user.len()))
    }

    fn jobs_set(&self, name: &str) -> String {
        self.key(TABLE, name)
    }

    fn jobs_idx(&self, rest: &str) -> String {
        self.idx(TABLE, rest)
    }

    pub(crate) fn job_entries(&self, j: &Job) -> Vec<Entry> {
        let created = j.created_at as f64;
        let mut entries = vec![
            Entry::z(self.jobs_set("all"), &j.id, created),
            Entry::z(
                self.jobs_idx(&format!("session:{}", j.session_id)),
                &j.id,
                created,
            ),
        ];
        if let Some(u) = &j.user_id {
            entries.push(Entry::z(
                self.jobs_idx(&format!("user:{u}")),
                &j.id,
                created,
            ));
        }
        match j.status {
            JobStatus::Queued => entries.push(Entry::z(
                self.jobs_set("queued"),
                &j.id,
                j.available_at as f64,
            )),
            JobStatus::Running => entries.push(Entry::z(
                self.jobs_set("running"),
                &j.id,
                j.locked_at.unwrap_or_default() as f64,
            )),
            _ => {}
        }
        entries
    }

    async fn read_job(&self, id: &str) -> Result<Option<(String, Job)>> {
        let key = self.job_key(id);
        match self.get(&key).await? {
            Some(raw) => {
                let job = decode(&key, &raw)?;
                Ok(Some((raw, job)))
            }
            None => Ok(None),
        }
    }

    /// Writes `next` over `current` (read as `raw`) with its index moves.
    async fn replace_job(&self, raw: &str, current: &Job, next: &Job) -> Result<bool> {
        let cas = Cas::on(&self.job_key(&current.id))
            .expect(Some(raw))
            .set(encode_job(next))
            .reindex(&self.job_entries(current), &self.job_entries(next));
        Ok(self.cas(&cas).await? == Outcome::Applied)
    }

    /// Applies `change` to a job `worker_id` holds at `attempt`; `LeaseLost` otherwise.
    async fn fenced(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        change: impl Fn(&mut Job, i64),
    ) -> Result<Job> {
        let now = self.server_now().await?;
        self.retry("job transition", || async {
            let Some((raw, job)) = self.read_job(id).await? else {
                return Err(lease_lost(id, worker_id, attempt));
            };
            if !job.is_held_by(worker_id, attempt) {
                return Err(lease_lost(id, worker_id, attempt));
            }
            let mut next = job.clone();
            change(&mut next, now);
            Ok(self.replace_job(&raw, &job, &next).await?.then_some(next))
        })
        .await
    }

    /// Claims the first claimable job listed in `set` with a score up to `max`.
    async fn claim_from(
        &self,
        set: &str,
        max: i64,
        claimable: impl Fn(&Job) -> bool,
        claim: impl Fn(&Job) -> Job,
    ) -> Result<Option<Job>> {
        let mut offset = 0;
        let mut contended_rounds = 0;
        loop {
            let ids: Vec<String> = self
                .query(
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(set)
                        .arg("-inf")
                        .arg(max)
                        .arg("LIMIT")
                        .arg(offset)
                        .arg(PAGE),
                )
                .await?;
            if ids.is_empty() {
                return Ok(None);
            }
            let keys: Vec<String> = ids.iter().map(|id| self.job_key(id)).collect();
            let mut candidates = Vec::new();
            for (key, raw) in keys.iter().zip(self.mget(&keys).await?) {
                let Some(raw) = raw else { continue };
                let job = decode(key, &raw)?;
                if claimable(&job) {
                    candidates.push((raw, job));
                }
            }
            candidates.sort_by(|(_, a), (_, b)| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            let mut contended = false;
            for (raw, job) in candidates {
                let next = claim(&job);
                if self.replace_job(&raw, &job, &next).await? {
                    return Ok(Some(next));
                }
                contended = true;
            }
            if contended {
                // Others claimed what this page offered: look again from the start.
                contended_rounds += 1;
                if contended_rounds > 100 {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        "claim_job: every claimable job was taken by others while trying; poll again",
                    )
                    .with_backend(self.server));
                }
                offset = 0;
            } else {
                offset += ids.len();
            }
        }
    }
}

#[async_trait]
impl JobStore for KvStore {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        job.status = JobStatus::Queued;
        job.attempt = 0;
        let job_key = self.job_key(&job.id);
        let idem = job
            .idempotency_key
            .as_deref()
            .map(|k| self.idem_key(job.user_id.as_deref(), k));
        let queued = self.jobs_set("queued");
        self.retry("enqueue_job", || async {
            let mut holder = None;
            if let Some(idem) = &idem {
                holder = self.get(idem).await?;
                if let Some(original_id) = &holder {
                    if let Some((_, original)) = self.read_job(original_id).await? {
                        if original.user_id == job.user_id {
                            return Ok(Some(EnqueueOutcome {
                                rejection: Some(EnqueueRejection::Duplicate),
                                job: Some(original),
                            }));
                        }
                    }
                    // A key whose job is gone (or another tenant's): taken over below.
                }
            }
            if max_depth > 0 {
                let depth: u64 = self.query(redis::cmd("ZCARD").arg(&queued)).await?;
                if depth >= max_depth {
                    return Ok(Some(EnqueueOutcome {
                        rejection: Some(EnqueueRejection::QueueFull),
                        job: None,
                    }));
                }
            }
            if self.get(&job_key).await?.is_some() {
                return Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("job {} already exists; job ids are never reused", job.id),
                ));
            }
            let mut cas = Cas::on(&job_key).expect(None).set(encode_job(&job));
            if let Some(idem) = &idem {
                cas = cas
                    .guard_value(idem, holder.as_deref())
                    .set_key(idem, &job.id);
            }
            if max_depth > 0 {
                cas = cas.guard_zcard_below(&queued, max_depth);
            }
            let cas = cas.reindex(&[], &self.job_entries(&job));
            Ok(
                (self.cas(&cas).await? == Outcome::Applied).then(|| EnqueueOutcome {
                    rejection: None,
                    job: Some(job.clone()),
                }),
            )
        })
        .await
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        let now = self.server_now().await?;
        let affinity =
            |j: &Job| j.deployment_id.is_none() || j.deployment_id.as_deref() == deployment_id;
        let claim = |j: &Job| {
            let mut next = j.clone();
            next.take_lease(worker_id, now);
            next
        };
        let queued = self
            .claim_from(
                &self.jobs_set("queued"),
                now,
                |j| j.status == JobStatus::Queued && j.available_at <= now && affinity(j),
                claim,
            )
            .await?;
        if queued.is_some() {
            return Ok(queued);
        }
        let stale = now - lock_grace_seconds;
        self.claim_from(
            &self.jobs_set("running"),
            stale,
            |j| {
                j.status == JobStatus::Running
                    && j.available_at <= now
                    && j.locked_at.is_some_and(|t| t <= stale)
                    && j.attempt < j.max_attempts
                    && affinity(j)
            },
            claim,
        )
        .await
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        let now = self.server_now().await?;
        let mut held = 0;
        for id in ids {
            let beat = self
                .retry("heartbeat_jobs", || async {
                    let Some((raw, job)) = self.read_job(id).await? else {
                        return Ok(Some(false));
                    };
                    if !job.is_locked_by(worker_id) {
                        return Ok(Some(false));
                    }
                    let mut next = job.clone();
                    next.locked_at = Some(now);
                    Ok(self.replace_job(&raw, &job, &next).await?.then_some(true))
                })
                .await?;
            if beat {
                held += 1;
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
        let now = self.server_now().await?;
        self.retry("cancel_job", || async {
            let Some((raw, job)) = self.read_job(id).await? else {
                return Ok(Some(false));
            };
            if !visible_to(job.user_id.as_deref(), user_id)
                || !matches!(job.status, JobStatus::Queued | JobStatus::Paused)
            {
                return Ok(Some(false));
            }
            let mut next = job.clone();
            next.status = JobStatus::Cancelled;
            next.completed_at = Some(now);
            next.updated_at = Some(now);
            Ok(self.replace_job(&raw, &job, &next).await?.then_some(true))
        })
        .await
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        Ok(self
            .read_job(id)
            .await?
            .map(|(_, j)| j)
            .filter(|j| visible_to(j.user_id.as_deref(), user_id)))
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        // The narrowest set that holds every match: a session's or an owner's tickets, the
        // queued or running set (both writers maintain them), else every ticket.
        let base = match (&query.session_id, &query.user_id, query.status) {
            (Some(s), _, _) => self.jobs_idx(&format!("session:{s}")),
            (None, Some(u), _) => self.jobs_idx(&format!("user:{u}")),
            (None, None, Some(JobStatus::Queued)) => self.jobs_set("queued"),
            (None, None, Some(JobStatus::Running)) => self.jobs_set("running"),
            (None, None, _) => self.jobs_set("all"),
        };
        let exact =
            query.status.is_none() && (query.session_id.is_none() || query.user_id.is_none());
        if exact {
            let (items, total) = self
                .page_by(
                    &base,
                    |id| self.job_key(id),
                    ("-inf", "+inf"),
                    SortOrder::Desc,
                    &query.pagination,
                    |id, raw| {
                        let j = decode(&self.job_key(id), raw)?;
                        Ok(query.matches(&j).then_some(j))
                    },
                )
                .await?;
            return Ok(Page::new(items, total));
        }
        let ids = self.members(&base, "-inf", "+inf").await?;
        let mut rows = Vec::new();
        for (id, raw) in self.load_with(&base, ids, |id| self.job_key(id)).await? {
            rows.push(decode(&self.job_key(&id), &raw)?);
        }
        rows.retain(|j| query.matches(j));
        query.page(rows)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        let cutoff = now_epoch_seconds() - older_than_seconds;
        // A job finished by the cutoff was created by then: `all` up to the cutoff holds
        // every candidate, whichever side finished it.
        let all = self.jobs_set("all");
        let ids = self.members(&all, "-inf", &cutoff.to_string()).await?;
        let mut removed = 0;
        for id in ids {
            let gone = self
                .retry("cleanup_jobs", || async {
                    let Some((raw, job)) = self.read_job(&id).await? else {
                        self.query::<i64>(redis::cmd("ZREM").arg(&all).arg(&id))
                            .await?;
                        return Ok(Some(false));
                    };
                    if !(job.status.is_terminal() && job.completed_at.is_some_and(|t| t <= cutoff))
                    {
                        return Ok(Some(false));
                    }
                    let mut cas = Cas::on(&self.job_key(&id))
                        .expect(Some(&raw))
                        .delete()
                        .reindex(&self.job_entries(&job), &[]);
                    if let Some(k) = &job.idempotency_key {
                        cas = cas.del_key(&self.idem_key(job.user_id.as_deref(), k));
                    }
                    Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
                })
                .await?;
            if gone {
                removed += 1;
            }
        }
        Ok(removed)
    }
}
