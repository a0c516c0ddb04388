//! The job queue (`agno_jobs`, document id = [`DocBackend::doc_id`] of `id`; agno's
//! `FirestoreDb` and `SurrealDb` have none).
//!
//! A claim ([`DocBackend::claim_next_job`]) is a compare-and-set on the job's version that sets `running`, the holder and
//! `attempt + 1` (the fencing token); every later transition re-checks
//! `(status = running, locked_by, attempt)` in its own compare-and-set, so a stale worker
//! gets `LeaseLost`. An idempotency key is a guard document created in the same commit as
//! the job; a resubmission finds the guard and returns the original job.

use agno_storage_core::job::{
    check_completions, check_finish_status, check_settle_status, lease_lost, sort_oldest_first,
    undecodable_job_error, SessionOrder,
};
use agno_storage_core::{
    async_trait, visible_to, ContinueOutcome, Continued, EnqueueOutcome, EnqueueRejection, Error,
    ErrorKind, Job, JobCompletion, JobQuery, JobStatus, JobStore, JobWakeups, Page, Result,
    SortOrder, Unreadable,
};

use std::collections::HashMap;

use serde_json::json;

use crate::backend::given;
use crate::{backoff, object, opt, Commit, DocBackend, Docs, Pre, Stored, Table, CAS_ATTEMPTS};

impl<B: DocBackend> Docs<B> {
    async fn job_doc(&self, id: &str) -> Result<Option<(Stored<B>, Job)>> {
        self.keyed(Table::Jobs, id, "a job", |j: &Job| &j.id).await
    }

    /// The jobs matching `eq`, and the documents among them that do not decode (a claim
    /// that meets one fails it).
    async fn jobs_where(
        &self,
        eq: &[(&str, serde_json::Value)],
    ) -> Result<(Vec<(Stored<B>, Job)>, Vec<Stored<B>>)> {
        let (mut jobs, mut undecodable) = (Vec::new(), Vec::new());
        for d in self.query(self.collection(Table::Jobs), eq).await? {
            match d.decode::<Job>("a job") {
                Ok(job) => jobs.push((d, job)),
                Err(_) => undecodable.push(d),
            }
        }
        Ok((jobs, undecodable))
    }

    /// Deletes the guard of job session `session_id` once no ticket of it is live, so
    /// guards do not outlive their tickets. The guard is read before the tickets and
    /// deleted only if unchanged since, so a ticket enqueued meanwhile keeps it; a guard
    /// created again later starts with a new `nonce`, so no writer that read the old one can
    /// commit against the new one.
    async fn drop_idle_session_guard(&self, session_id: &str) -> Result<()> {
        let meta = self.collection(Table::Meta);
        let id = self.job_session_guard(session_id);
        let Some(guard) = self.get(meta, &id).await? else {
            return Ok(());
        };
        let live = self.session_jobs(session_id).await?;
        if live.iter().all(|j| j.status.is_terminal()) {
            // A conflict means a ticket came: the guard stays.
            let delete = self.delete(meta, &id, guard.unchanged());
            self.commit("cleanup jobs", vec![delete]).await?;
        }
        Ok(())
    }

    /// The job that holds idempotency key `key` of `user_id`. A guard whose job is gone or
    /// belongs to another owner (left by a writer that does not keep guards) is removed.
    async fn guarded_job(&self, user_id: Option<&str>, key: &str) -> Result<Option<Job>> {
        if !B::JOB_KEY_GUARDS {
            let (held, _) = self
                .jobs_where(&[
                    ("idempotency_key", opt(Some(key))),
                    ("user_id", opt(user_id)),
                ])
                .await?;
            return Ok(held.into_iter().map(|(_, j)| j).next());
        }
        let meta = self.collection(Table::Meta);
        let guard = self.job_key_guard(user_id, key);
        let Some(stored) = self.get(meta, &guard.id).await? else {
            return Ok(None);
        };
        let holder = match stored.str(guard.holder) {
            Some(id) => self.job_doc(id).await?.map(|(_, j)| j),
            None => None,
        };
        match holder {
            Some(job) if job.user_id.as_deref() == user_id => Ok(Some(job)),
            _ => {
                let orphan = self.delete(meta, &guard.id, stored.unchanged());
                self.commit("free an orphaned idempotency key", vec![orphan])
                    .await?;
                Ok(None)
            }
        }
    }

    /// A job owned by `user_id` (any when `None`) changed by `change` at the backend's
    /// clock, written with compare-and-set when `change` says it changed it: the job as it
    /// is after, and whether it was written; `None` when it is absent or not the user's.
    async fn transition(
        &self,
        operation: &'static str,
        id: &str,
        user_id: Option<&str>,
        change: impl Fn(&mut Job, i64) -> bool,
    ) -> Result<Option<(Job, bool)>> {
        for round in 0..CAS_ATTEMPTS {
            let Some((stored, mut job)) = self
                .job_doc(id)
                .await?
                .filter(|(_, j)| visible_to(j.user_id.as_deref(), user_id))
            else {
                return Ok(None);
            };
            if !change(&mut job, self.0.now().await?) {
                return Ok(Some((job, false)));
            }
            let write = self.rewrite(Table::Jobs, &stored, &job, "a job")?;
            match self.commit(operation, vec![write]).await? {
                Commit::Done => return Ok(Some((job, true))),
                Commit::Conflict => backoff(round).await,
            }
        }
        Err(self.contended(operation))
    }

    /// The write of one completion of [`JobStore::complete_jobs`] over its job's document
    /// as the batch read it: the job finished if `worker_id` holds it at the completion's
    /// attempt, written only if unchanged since.
    fn finish_write(
        &self,
        worker_id: &str,
        c: &JobCompletion,
        stored: Option<Stored<B>>,
        now: i64,
    ) -> Result<B::Write> {
        let Some(stored) = stored else {
            return Err(lease_lost(&c.id, worker_id, c.attempt));
        };
        let mut job: Job = stored.decode("a job")?;
        if job.id != c.id || !job.is_held_by(worker_id, c.attempt) {
            return Err(lease_lost(&c.id, worker_id, c.attempt));
        }
        job.finish(c.status, c.error.clone(), now);
        self.rewrite(Table::Jobs, &stored, &job, "a job")
    }

    /// Gives a serialized `job` the next place of its session (read after the session's
    /// guard, which the commit must then include: [`SessionGuards::write`]); nothing for a
    /// free ticket.
    async fn sequence(&self, job: &mut Job) -> Result<SessionGuards<B>> {
        let mut guards = SessionGuards::default();
        if job.is_serialized() {
            guards.read(&self.0, job).await?;
            let session = self.0.session_jobs(&job.session_id).await?;
            job.set_session_seq(job.next_session_seq(&session));
        }
        Ok(guards)
    }

    /// One job's heartbeat by compare-and-set, read afresh each round: whether `worker_id`
    /// still holds it.
    async fn heartbeat_job(&self, worker_id: &str, id: &str) -> Result<bool> {
        for round in 0..CAS_ATTEMPTS {
            let Some((stored, mut job)) = self
                .job_doc(id)
                .await?
                .filter(|(_, j)| j.is_locked_by(worker_id))
            else {
                return Ok(false);
            };
            job.locked_at = Some(self.0.now().await?);
            let write = self.rewrite(Table::Jobs, &stored, &job, "a job")?;
            match self.commit("heartbeat jobs", vec![write]).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(round).await,
            }
        }
        Ok(false)
    }

    /// [`Docs::transition`]: whether it wrote.
    async fn changed(
        &self,
        operation: &'static str,
        id: &str,
        user_id: Option<&str>,
        change: impl Fn(&mut Job, i64) -> bool,
    ) -> Result<bool> {
        Ok(self
            .transition(operation, id, user_id, change)
            .await?
            .is_some_and(|(_, written)| written))
    }

    /// A fenced transition: `change` runs on the job held by `(worker_id, attempt)`;
    /// `LeaseLost` when it is not.
    async fn fenced(
        &self,
        operation: &'static str,
        id: &str,
        worker_id: &str,
        attempt: i64,
        change: impl Fn(&mut Job, i64),
    ) -> Result<Job> {
        let after = self
            .transition(operation, id, None, |job, now| {
                let held = job.is_held_by(worker_id, attempt);
                if held {
                    change(job, now);
                }
                held
            })
            .await?;
        match after {
            Some((job, true)) => Ok(job),
            _ => Err(lease_lost(id, worker_id, attempt)),
        }
    }
}

#[async_trait]
impl<B: DocBackend> JobStore for Docs<B> {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        job.status = JobStatus::Queued;
        job.attempt = 0;
        for attempt in 0..CAS_ATTEMPTS {
            if let Some(key) = &job.idempotency_key {
                if let Some(original) = self.guarded_job(job.user_id.as_deref(), key).await? {
                    return Ok(EnqueueOutcome {
                        rejection: Some(EnqueueRejection::Duplicate),
                        job: Some(original),
                    });
                }
            }
            if max_depth > 0 {
                let queued = self.0.count_queued_jobs().await?;
                if queued >= max_depth {
                    return Ok(EnqueueOutcome {
                        rejection: Some(EnqueueRejection::QueueFull),
                        job: None,
                    });
                }
            }
            let guards = self.sequence(&mut job).await?;
            let mut writes = vec![self.put(
                self.collection(Table::Jobs),
                &self.doc_id(&job.id),
                &self.to_fields(&job, "a job")?,
                Pre::Absent,
            )];
            writes.extend(guards.write(&self.0, &job));
            if let Some(key) = job.idempotency_key.as_ref().filter(|_| B::JOB_KEY_GUARDS) {
                let guard = self.job_key_guard(job.user_id.as_deref(), key);
                let mut fields = object(json!({
                    "kind": "job_key",
                    "user_id": job.user_id,
                    "idempotency_key": key,
                }));
                fields.insert(guard.holder.into(), job.id.clone().into());
                writes.push(self.put(
                    self.collection(Table::Meta),
                    &guard.id,
                    &fields,
                    Pre::Absent,
                ));
            }
            match self.commit("enqueue job", writes).await? {
                Commit::Done => {
                    self.0.wake_workers().await;
                    return Ok(EnqueueOutcome {
                        rejection: None,
                        job: Some(job),
                    });
                }
                Commit::Conflict => {
                    let key_taken = match &job.idempotency_key {
                        Some(key) if B::JOB_KEY_GUARDS => self
                            .get(
                                self.collection(Table::Meta),
                                &self.job_key_guard(job.user_id.as_deref(), key).id,
                            )
                            .await?
                            .is_some(),
                        Some(key) => self
                            .guarded_job(job.user_id.as_deref(), key)
                            .await?
                            .is_some(),
                        None => false,
                    };
                    if !key_taken && self.job_doc(&job.id).await?.is_some() {
                        return Err(Error::new(
                            ErrorKind::AlreadyExists,
                            format!("job {} already exists; job ids are never reused", job.id),
                        ));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(self.contended("enqueue job"))
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        self.claim_next_job(worker_id, lock_grace_seconds, deployment_id)
            .await
    }

    async fn claim_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let mut claimed = self
            .claim_next_jobs(worker_id, lock_grace_seconds, deployment_id, limit)
            .await?;
        sort_oldest_first(&mut claimed);
        Ok(claimed)
    }

    /// All the jobs read in one [`DocBackend::get_each`] and the server's clock read once;
    /// then all written in one [`DocBackend::commit_each`], each its own compare-and-set (a
    /// conflict goes through `complete_job`).
    async fn complete_jobs(
        &self,
        worker_id: &str,
        completions: Vec<JobCompletion>,
    ) -> Result<Vec<Result<()>>> {
        check_completions(&completions)?;
        let ids: Vec<String> = completions.iter().map(|c| self.doc_id(&c.id)).collect();
        let docs = self.get_each(self.collection(Table::Jobs), &ids).await?;
        let now = self.0.now().await?;
        // Every completion's write goes in one `commit_each`; one refused before it (not
        // held) keeps its error, one that conflicted is decided afresh by `complete_job`.
        let mut results: Vec<Option<Result<()>>> = Vec::with_capacity(completions.len());
        let mut commits = Vec::with_capacity(completions.len());
        for (c, stored) in completions.iter().zip(docs) {
            match self.finish_write(worker_id, c, stored, now) {
                Ok(write) => {
                    commits.push(vec![write]);
                    results.push(None);
                }
                Err(e) => results.push(Some(Err(e))),
            }
        }
        let mut outcomes = self.commit_each("complete job", commits).await?.into_iter();
        let mut done = Vec::with_capacity(completions.len());
        for (c, result) in completions.into_iter().zip(results) {
            done.push(match result {
                Some(refused) => refused,
                None => match outcomes.next() {
                    Some(Ok(Commit::Done)) => Ok(()),
                    Some(Err(e)) => Err(e),
                    Some(Ok(Commit::Conflict)) | None => self
                        .complete_job(&c.id, worker_id, c.attempt, c.status, c.error)
                        .await
                        .map(drop),
                },
            });
        }
        Ok(done)
    }

    /// All the jobs read in one [`DocBackend::get_each`] and the clock read once; every
    /// lease still held moved on in one [`DocBackend::commit_each`]; one that conflicted
    /// is read and tried again alone.
    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        let doc_ids: Vec<String> = ids.iter().map(|id| self.doc_id(id)).collect();
        let docs = self
            .get_each(self.collection(Table::Jobs), &doc_ids)
            .await?;
        let now = self.0.now().await?;
        let (mut beating, mut commits) = (Vec::new(), Vec::new());
        for (id, stored) in ids.iter().zip(docs) {
            let Some(stored) = stored else { continue };
            let mut job: Job = stored.decode("a job")?;
            if job.id != *id || !job.is_locked_by(worker_id) {
                continue;
            }
            job.locked_at = Some(now);
            commits.push(vec![self.rewrite(Table::Jobs, &stored, &job, "a job")?]);
            beating.push(id);
        }
        let mut held = 0;
        let outcomes = self.commit_each("heartbeat jobs", commits).await?;
        for (id, outcome) in beating.into_iter().zip(outcomes) {
            held += match outcome? {
                Commit::Done => 1,
                Commit::Conflict => u64::from(self.heartbeat_job(worker_id, id).await?),
            };
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
        self.fenced("complete job", id, worker_id, attempt, |job, now| {
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
        self.fenced("retry job", id, worker_id, attempt, |job, now| {
            job.retry_or_fail(error.clone(), retry_delay_seconds, now);
        })
        .await
    }

    async fn release_job(&self, id: &str, worker_id: &str, attempt: i64) -> Result<Job> {
        let released = self
            .fenced("release job", id, worker_id, attempt, |job, now| {
                job.release(now)
            })
            .await?;
        self.0.wake_workers().await;
        Ok(released)
    }

    async fn job_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        self.0.job_wakeups().await
    }

    /// Over [`DocBackend::session_jobs`], the tickets claims order by (on Redis/Valkey,
    /// agno's session set: tickets agno wrote count too).
    async fn session_blocker(&self, id: &str) -> Result<Option<String>> {
        let Some((_, job)) = self
            .job_doc(id)
            .await?
            .filter(|(_, j)| j.status == JobStatus::Queued && j.is_serialized())
        else {
            return Ok(None);
        };
        let session = self.0.session_jobs(&job.session_id).await?;
        Ok(job.session_blocker(&session).map(|b| b.id.clone()))
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.changed("cancel job", id, user_id, |job, now| {
            job.cancel_waiting(now)
        })
        .await
    }

    async fn count_queued_jobs(&self) -> Result<u64> {
        self.0.count_queued_jobs().await
    }

    async fn cancel_running_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.changed("cancel running job", id, user_id, |job, now| {
            job.cancel_running(now)
        })
        .await
    }

    async fn requeue_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        for round in 0..CAS_ATTEMPTS {
            let Some((stored, mut job)) = self
                .job_doc(id)
                .await?
                .filter(|(_, j)| visible_to(j.user_id.as_deref(), user_id))
            else {
                return Ok(false);
            };
            if !job.requeue(self.0.now().await?) {
                return Ok(false);
            }
            // A requeued serialized ticket rejoins its session behind every live one.
            let guards = self.sequence(&mut job).await?;
            let mut writes = vec![self.rewrite(Table::Jobs, &stored, &job, "a job")?];
            writes.extend(guards.write(&self.0, &job));
            match self.commit("requeue job", writes).await? {
                Commit::Done => {
                    self.0.wake_workers().await;
                    return Ok(true);
                }
                Commit::Conflict => backoff(round).await,
            }
        }
        Err(self.contended("requeue job"))
    }

    async fn settle_paused_job(
        &self,
        id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        check_settle_status(status)?;
        self.changed("settle paused job", id, None, |job, now| {
            job.settle_paused(status, error.clone(), now)
        })
        .await
    }

    async fn continue_job(
        &self,
        id: &str,
        user_id: Option<&str>,
        continue_payload: serde_json::Value,
    ) -> Result<Continued> {
        let after = self
            .transition("continue job", id, user_id, |job, now| {
                job.continue_paused(&continue_payload, now) == ContinueOutcome::Queued
            })
            .await?;
        if let Some((_, true)) = &after {
            self.0.wake_workers().await;
        }
        let outcome = match &after {
            None => ContinueOutcome::Conflict,
            Some((_, true)) => ContinueOutcome::Queued,
            // Left as it was: the rule says why (attach or conflict).
            Some((job, false)) => job.clone().continue_paused(&continue_payload, 0),
        };
        Ok(Continued {
            outcome,
            job: after.map(|(job, _)| job),
        })
    }

    async fn acquire_sweep(
        &self,
        id: &str,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<bool> {
        self.changed("acquire sweep", id, None, |job, now| {
            let sweepable = job.is_sweepable(now, lock_grace_seconds);
            if sweepable {
                job.take_sweep(worker_id, now);
            }
            sweepable
        })
        .await
    }

    async fn settle_swept_job(
        &self,
        id: &str,
        worker_id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        check_finish_status(status)?;
        self.changed("settle swept job", id, None, |job, now| {
            let held = job.is_locked_by(worker_id);
            if held {
                job.finish(status, error.clone(), now);
            }
            held
        })
        .await
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        Ok(self
            .job_doc(id)
            .await?
            .map(|(_, j)| j)
            .filter(|j| visible_to(j.user_id.as_deref(), user_id)))
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        let (session_id, user_id) = (query.session_id.as_deref(), query.user_id.as_deref());
        if query.status.is_none() && (session_id.is_none() || user_id.is_none()) {
            let eq = given(&[("session_id", session_id), ("user_id", user_id)]);
            let coll = self.collection(Table::Jobs);
            let page = self
                .query_page(coll, &eq, "created_at", SortOrder::Desc, &query.pagination)
                .await?;
            if let Some((docs, total)) = page {
                let items = docs
                    .iter()
                    .map(|d| d.decode("a job"))
                    .collect::<Result<Vec<Job>>>()?;
                return Ok(Page::new(items, total));
            }
        }
        let eq = given(&[
            ("status", query.status.map(JobStatus::as_str)),
            ("session_id", session_id),
            ("user_id", user_id),
        ]);
        let (jobs, undecodable) = self.jobs_where(&eq).await?;
        let rows: Vec<Job> = jobs
            .into_iter()
            .map(|(_, j)| j)
            .filter(|j| query.matches(j))
            .collect();
        let mut page = query.page(rows)?;
        // Named, not fatal to the list, to a caller who may see them.
        page.unreadable = undecodable
            .iter()
            .filter(|d| visible_to(d.str("user_id"), query.user_id.as_deref()))
            .map(|d| Unreadable {
                id: d.str("id").unwrap_or(&d.id).to_owned(),
                error: d
                    .decode::<Job>("a job")
                    .err()
                    .map_or_else(String::new, |e| e.to_string()),
            })
            .collect();
        Ok(page)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        let cutoff = self.0.now().await? - older_than_seconds;
        let doomed = self
            .jobs_where(&[])
            .await?
            .0
            .into_iter()
            .filter(|(_, job)| {
                job.status.is_terminal() && job.completed_at.is_some_and(|t| t <= cutoff)
            });
        self.remove_jobs(doomed, "cleanup jobs").await
    }

    async fn delete_user_jobs(&self, user_id: &str) -> Result<u64> {
        let (decoded, undecodable) = self.jobs_where(&[("user_id", opt(Some(user_id)))]).await?;
        let mut removed = self.remove_jobs(decoded, "delete user jobs").await?;
        // Stored under the user but not decodable: deleted as they are.
        let coll = self.collection(Table::Jobs);
        for stored in undecodable {
            let write = self.delete(coll, &stored.id, stored.unchanged());
            if let Commit::Done = self.commit("delete user jobs", vec![write]).await? {
                removed += 1;
            }
        }
        Ok(removed)
    }
}

impl<B: DocBackend> Docs<B> {
    /// Deletes `jobs` (each only if unchanged since it was read) with their idempotency-key
    /// guards, then the guards of the sessions whose last tickets went; how many went.
    async fn remove_jobs(
        &self,
        jobs: impl IntoIterator<Item = (Stored<B>, Job)>,
        operation: &'static str,
    ) -> Result<u64> {
        let mut removed = 0;
        let mut sessions = std::collections::BTreeSet::new();
        for (stored, job) in jobs {
            if B::JOB_SESSION_GUARDS && job.is_serialized() {
                sessions.insert(job.session_id.clone());
            }
            let mut writes =
                vec![self.delete(self.collection(Table::Jobs), &stored.id, stored.unchanged())];
            if let Some(key) = job.idempotency_key.as_ref().filter(|_| B::JOB_KEY_GUARDS) {
                writes.push(self.delete(
                    self.collection(Table::Meta),
                    &self.job_key_guard(job.user_id.as_deref(), key).id,
                    Pre::Any,
                ));
            }
            if let Commit::Done = self.commit(operation, writes).await? {
                removed += 1;
            }
        }
        for session_id in sessions {
            self.drop_idle_session_guard(&session_id).await?;
        }
        Ok(removed)
    }
}

/// The session guards ([`DocBackend::JOB_SESSION_GUARDS`]) one write or one claim round
/// read: each read before anything reads its session's tickets, and moved on, conditioned
/// on the version read, in the commit that sequences or claims a ticket of it.
pub(crate) struct SessionGuards<B: DocBackend> {
    read: HashMap<String, Option<Stored<B>>>,
}

impl<B: DocBackend> Default for SessionGuards<B> {
    fn default() -> Self {
        SessionGuards {
            read: HashMap::new(),
        }
    }
}

impl<B: DocBackend> SessionGuards<B> {
    /// Reads the guard of `job`'s session if `job` is serialized and it was not read yet;
    /// call it before the session's tickets are read.
    pub(crate) async fn read(&mut self, db: &B, job: &Job) -> Result<()> {
        if !B::JOB_SESSION_GUARDS || !job.is_serialized() || self.read.contains_key(&job.session_id)
        {
            return Ok(());
        }
        let guard = db
            .get(
                db.collection(Table::Meta),
                &db.job_session_guard(&job.session_id),
            )
            .await?;
        self.read.insert(job.session_id.clone(), guard);
        Ok(())
    }

    /// The write that moves `job`'s session guard on from the version read (none for a
    /// ticket that is not serialized).
    pub(crate) fn write(&self, db: &B, job: &Job) -> Option<B::Write> {
        if !B::JOB_SESSION_GUARDS || !job.is_serialized() {
            return None;
        }
        let read = self.read.get(&job.session_id);
        debug_assert!(read.is_some(), "SessionGuards::read comes first");
        // A new guard takes a new nonce (see `drop_idle_session_guard`).
        let (pre, writes, nonce) = match read.and_then(Option::as_ref) {
            Some(stored) => (
                stored.unchanged(),
                stored
                    .fields
                    .get("writes")
                    .and_then(|w| w.as_i64())
                    .unwrap_or(0),
                stored.fields.get("nonce").cloned(),
            ),
            None => (Pre::Absent, 0, None),
        };
        let nonce = nonce.unwrap_or_else(|| json!(uuid::Uuid::new_v4().simple().to_string()));
        let fields = object(json!({
            "kind": "job_session",
            "session_id": job.session_id,
            "nonce": nonce,
            "writes": writes + 1,
        }));
        Some(db.put(
            db.collection(Table::Meta),
            &db.job_session_guard(&job.session_id),
            &fields,
            pre,
        ))
    }
}

/// One pass of a claim over candidate tickets, oldest first: the session order and the
/// session guards it has read, so a ticket claimed in the pass still holds back the later
/// tickets of its session. Every claim loop (the engine's and a backend's native one)
/// builds its claims here.
pub struct ClaimPass<B: DocBackend> {
    sessions: SessionOrder,
    guards: SessionGuards<B>,
}

impl<B: DocBackend> Default for ClaimPass<B> {
    fn default() -> Self {
        ClaimPass {
            sessions: SessionOrder::default(),
            guards: SessionGuards::default(),
        }
    }
}

impl<B: DocBackend> ClaimPass<B> {
    /// The writes that claim `job`, stored as `stored`, for `worker_id` at `now`: the
    /// ticket with its lease taken (on `job` too), conditioned on `stored`'s version, and
    /// its session's guard moved on. `None` when an earlier ticket of its session holds it
    /// back.
    pub async fn claim(
        &mut self,
        db: &B,
        stored: &Stored<B>,
        job: &mut Job,
        worker_id: &str,
        now: i64,
    ) -> Result<Option<Vec<B::Write>>> {
        self.guards.read(db, job).await?;
        if !self
            .sessions
            .allows(job, |sid| async move { db.session_jobs(&sid).await })
            .await?
        {
            return Ok(None);
        }
        job.take_lease(worker_id, now);
        let mut writes = vec![Docs::of(db).rewrite(Table::Jobs, stored, job, "a job")?];
        writes.extend(self.guards.write(db, job));
        Ok(Some(writes))
    }
}

/// Decodes a job document a claim met. One that does not decode (a field missing or of
/// the wrong type) is failed in place, if unchanged since it was read, with
/// [`undecodable_job_error`], and `None` is returned: one bad document must not make every
/// claim fail.
pub async fn decode_or_fail_job<B: DocBackend>(
    db: &B,
    stored: &Stored<B>,
    now: i64,
) -> Result<Option<Job>> {
    let e = match stored.decode::<Job>("a job") {
        Ok(job) => return Ok(Some(job)),
        Err(e) => e,
    };
    let id = stored.str("id").unwrap_or(&stored.id).to_owned();
    let mut fields = stored.fields.clone();
    let failed = json!({
        "status": JobStatus::Failed.as_str(),
        "error": undecodable_job_error(&id, &e),
        "locked_by": null,
        "locked_at": null,
        "updated_at": now,
        "completed_at": now,
    });
    fields.extend(object(failed));
    let write = Docs::of(db).rewrite_fields(Table::Jobs, stored, &fields);
    // A conflict means another writer changed it since: theirs stands.
    db.commit("fail undecodable job", vec![write]).await?;
    Ok(None)
}

/// Claims the oldest claimable job: reads every queued and running job, then tries them
/// oldest first, each by a compare-and-set that takes a new fencing token.
pub async fn claim_oldest_job<B: DocBackend>(
    db: &B,
    worker_id: &str,
    lock_grace_seconds: i64,
    deployment_id: Option<&str>,
) -> Result<Option<Job>> {
    for round in 0..CAS_ATTEMPTS {
        let now = db.now().await?;
        let mut candidates = Vec::new();
        for status in [JobStatus::Queued, JobStatus::Running] {
            let eq = [("status", opt(Some(status.as_str())))];
            for d in db.query(db.collection(Table::Jobs), &eq).await? {
                let Some(j) = decode_or_fail_job(db, &d, now).await? else {
                    continue;
                };
                if j.is_claimable(now, lock_grace_seconds, deployment_id) {
                    candidates.push((d, j));
                }
            }
        }
        candidates.sort_by(|a, b| (a.1.created_at, &a.1.id).cmp(&(b.1.created_at, &b.1.id)));
        let mut pass = ClaimPass::default();
        let mut lost_race = false;
        for (stored, mut job) in candidates {
            let Some(writes) = pass.claim(db, &stored, &mut job, worker_id, now).await? else {
                continue;
            };
            match db.commit("claim job", writes).await? {
                Commit::Done => return Ok(Some(job)),
                Commit::Conflict => lost_race = true,
            }
        }
        if !lost_race {
            // None claimable, or every one waits behind another ticket of its session.
            return Ok(None);
        }
        backoff(round).await;
    }
    Err(db.contended("claim job"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::InMemoryDb;

    /// A stored job with a field of the wrong type is failed, naming it, by the claim that
    /// meets it; the claim returns the next job and later claims are not blocked.
    #[tokio::test]
    async fn an_undecodable_job_is_failed_by_the_claim() {
        let db = InMemoryDb::new();
        let jobs = db.agno_db().job_store().unwrap();
        let mut bad = Job::new("a-bad", "agent", "agent-1", "s1", json!({}));
        bad.created_at -= 10;
        let good = Job::new("b-good", "agent", "agent-1", "s2", json!({}));
        for outcome in jobs.enqueue_jobs(vec![bad, good], 0).await.unwrap() {
            outcome.unwrap();
        }
        let coll = db.collection(Table::Jobs);
        let stored = db.get(coll, &db.doc_id("a-bad")).await.unwrap().unwrap();
        let mut fields = stored.fields.clone();
        fields.insert("attempt".into(), json!("not a number"));
        let write = db.put(coll, &stored.id, &fields, stored.unchanged());
        db.commit("corrupt", vec![write]).await.unwrap();

        let claimed = jobs.claim_job("w1", 60, None).await.unwrap().unwrap();
        assert_eq!(claimed.id, "b-good");
        let failed = db.get(coll, &db.doc_id("a-bad")).await.unwrap().unwrap();
        assert_eq!(failed.str("status"), Some("failed"));
        let error = failed.str("error").unwrap();
        assert!(
            error.starts_with("job a-bad could not be decoded (") && error.contains("expected i64"),
            "{error}"
        );
        assert!(jobs.claim_job("w2", 60, None).await.unwrap().is_none());
    }

    /// A job document that does not decode is named by `list_jobs` (and skipped by the
    /// sweep that reads through it), not fatal to either.
    #[tokio::test]
    async fn lists_and_sweeps_name_an_undecodable_job() {
        let db = InMemoryDb::new();
        let jobs = db.agno_db().job_store().unwrap();
        let coll = db.collection(Table::Jobs);
        // Both running under a worker that died long ago, with no attempt left.
        for (id, attempt) in [("a-bad", json!("not a number")), ("b-good", json!(1))] {
            let job = Job::new(id, "agent", "agent-1", id, json!({}));
            jobs.enqueue_job(job, 0).await.unwrap();
            let stored = db.get(coll, &db.doc_id(id)).await.unwrap().unwrap();
            let mut fields = stored.fields.clone();
            fields.extend(object(json!({
                "status": "running", "locked_by": "gone", "locked_at": 1, "attempt": attempt,
            })));
            let write = db.put(coll, &stored.id, &fields, stored.unchanged());
            db.commit("abandon", vec![write]).await.unwrap();
        }

        let page = jobs.list_jobs(JobQuery::default()).await.unwrap();
        let ids: Vec<&str> = page.items.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["b-good"]);
        assert_eq!(page.unreadable.len(), 1);
        assert_eq!(page.unreadable[0].id, "a-bad");
        assert!(
            page.unreadable[0].error.contains("expected i64"),
            "{page:?}"
        );
        let swept = jobs.sweep_exhausted_jobs(60, 10).await.unwrap();
        let ids: Vec<&str> = swept.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["b-good"]);
    }

    /// The cleanup that removes a session's last finished tickets removes its guard too;
    /// a session with a live ticket keeps it, and a guard made again takes a new nonce.
    #[tokio::test]
    async fn cleanup_drops_the_guards_of_idle_sessions() {
        let db = InMemoryDb::new();
        let jobs = db.agno_db().job_store().unwrap();
        let guard = |session: &str| {
            let db = db.clone();
            let id = db.job_session_guard(session);
            async move { db.get(db.collection(Table::Meta), &id).await.unwrap() }
        };
        let ticket = |id: &str, session: &str| {
            Job::new(
                id,
                "agent",
                "agent-1",
                session,
                json!({"serialize_session": true}),
            )
        };
        for (id, session) in [("t1", "idle"), ("t2", "busy"), ("t3", "busy")] {
            jobs.enqueue_job(ticket(id, session), 0).await.unwrap();
        }
        let first_nonce = guard("idle").await.unwrap().fields["nonce"].clone();
        for _ in 0..2 {
            let job = jobs.claim_job("w", 60, None).await.unwrap().unwrap();
            jobs.complete_job(&job.id, "w", job.attempt, JobStatus::Completed, None)
                .await
                .unwrap();
        }
        assert_eq!(jobs.cleanup_jobs(0).await.unwrap(), 2);
        assert!(
            guard("idle").await.is_none(),
            "the idle session's guard is gone"
        );
        assert!(guard("busy").await.is_some(), "t3 is still queued");
        jobs.enqueue_job(ticket("t4", "idle"), 0).await.unwrap();
        let again = guard("idle").await.unwrap();
        assert_ne!(again.fields["nonce"], first_nonce);
        assert_eq!(
            jobs.get_job("t4", None).await.unwrap().unwrap().payload["session_seq"],
            json!(1)
        );
    }
}
