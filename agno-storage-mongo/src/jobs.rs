//! The durable job queue (`agno_jobs`; agno's `MongoDb` has none).
//!
//! A claim reads the oldest claimable jobs, skips serialized tickets whose session holds
//! them back (agno's `session_blocker`), and takes the first with a `findOneAndUpdate` on
//! its id and the claimable filter that bumps `attempt` (the fencing token); every later
//! transition is a compare-and-set on `(id, status = running, locked_by, attempt)`.
//! Idempotency keys are unique per user through a partial unique index.

use agno_storage_core::job::{
    check_finish_status, check_settle_status, continue_paused_job, lease_lost,
    undecodable_job_error, SessionOrder,
};
use agno_storage_core::lease::now_epoch_millis;
use agno_storage_core::{
    async_trait, now_epoch_seconds, Continued, EnqueueOutcome, EnqueueRejection, Error, ErrorKind,
    Job, JobQuery, JobStatus, JobStore, Page, Result,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, is_duplicate_key, opt, scope, to_doc};

/// How long a job session's sequence lock holds without its holder (it is held for two
/// round trips).
const SESSION_LOCK_LEASE_MS: i64 = 10_000;
/// How long an enqueue waits for a session's sequence lock.
const SESSION_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(20);
use crate::MongoDb;

fn decode(d: Document) -> Result<Job> {
    from_doc(d, "a job")
}

/// The `$set` of [`Job::finish`]: `status` and `error`, the lease released, finished now
/// when `status` is terminal.
fn finished(status: JobStatus, error: Option<&str>, now: i64) -> Document {
    let completed_at = if status.is_terminal() {
        Bson::Int64(now)
    } else {
        Bson::Null
    };
    doc! {"$set": {
        "status": status.as_str(),
        "error": opt(error),
        "locked_by": Bson::Null,
        "locked_at": Bson::Null,
        "updated_at": now,
        "completed_at": completed_at,
    }}
}

fn fence(id: &str, worker_id: &str, attempt: i64) -> Document {
    doc! {"id": id, "status": JobStatus::Running.as_str(), "locked_by": worker_id, "attempt": attempt}
}

/// Candidates read per claim round.
const CLAIM_PAGE: i64 = 16;

impl MongoDb {
    /// One job's `update_one` under `filter`: whether it changed a job.
    async fn update_job(
        &self,
        operation: &'static str,
        filter: Document,
        update: impl Into<mongodb::options::UpdateModifications> + Send,
    ) -> Result<bool> {
        Ok(self
            .coll(&self.inner.names.jobs)
            .update_one(filter, update)
            .await
            .map_err(db_err(operation))?
            .modified_count
            > 0)
    }

    /// The live serialized tickets of session `session_id`.
    async fn session_tickets(&self, session_id: &str) -> Result<Vec<Job>> {
        let live =
            [JobStatus::Queued, JobStatus::Running, JobStatus::Paused].map(JobStatus::as_str);
        Ok(self
            .coll(&self.inner.names.jobs)
            .find(doc! {
                "session_id": session_id,
                "payload.serialize_session": true,
                "status": {"$in": live.to_vec()},
            })
            .await
            .map_err(db_err("read a job session"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("read a job session"))?
            .into_iter()
            // One that does not decode is failed by the claim that meets it.
            .filter_map(|d| decode(d).ok())
            .collect())
    }

    /// Runs `f` holding job session `session_id`'s sequence lock, so two enqueues or
    /// requeues of one session never sequence from one view of it (agno's PostgreSQL
    /// advisory lock, as a lease): a document `{_id: "job_session:<id>", holder, until}` in
    /// the meta collection, inserted (or taken over once its lease passed) and deleted
    /// after. `Conflict` (temporary) when another holder keeps it past the wait.
    async fn under_session_lock<T>(
        &self,
        session_id: &str,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let coll = self.coll(&self.inner.names.meta);
        let id = format!("job_session:{session_id}");
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + SESSION_LOCK_WAIT;
        loop {
            let now = now_epoch_millis();
            let record = doc! {"_id": &id, "holder": &holder, "until": now + SESSION_LOCK_LEASE_MS};
            match coll.insert_one(record.clone()).await {
                Ok(_) => break,
                Err(e) if is_duplicate_key(&e) => {
                    let taken = coll
                        .replace_one(doc! {"_id": &id, "until": {"$lt": now}}, record)
                        .await
                        .map_err(db_err("lock a job session"))?;
                    if taken.matched_count > 0 {
                        break;
                    }
                }
                Err(e) => return Err(db_err("lock a job session")(e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "job session {session_id:?} stayed locked by another enqueue (document _id {id:?} in {}); retry",
                        self.inner.names.meta
                    ),
                )
                .with_backend("mongodb")
                .set_temporary(true));
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        let out = f.await;
        // A failed release leaves the lock to its lease.
        let _ = coll.delete_one(doc! {"_id": &id, "holder": &holder}).await;
        out
    }

    async fn job_by_key(&self, key: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        self.coll(&self.inner.names.jobs)
            .find_one(doc! {"idempotency_key": key, "user_id": opt(user_id)})
            .await
            .map_err(db_err("enqueue job"))?
            .map(decode)
            .transpose()
    }

    async fn fenced_update(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        update: impl Into<mongodb::options::UpdateModifications> + Send,
    ) -> Result<Job> {
        self.coll(&self.inner.names.jobs)
            .find_one_and_update(fence(id, worker_id, attempt), update)
            .return_document(ReturnDocument::After)
            .await
            .map_err(db_err("update job"))?
            .map(decode)
            .transpose()?
            .ok_or_else(|| lease_lost(id, worker_id, attempt))
    }
}

#[async_trait]
impl JobStore for MongoDb {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        let duplicate = |original: Job| EnqueueOutcome {
            rejection: Some(EnqueueRejection::Duplicate),
            job: Some(original),
        };
        if let Some(key) = &job.idempotency_key {
            if let Some(original) = self.job_by_key(key, job.user_id.as_deref()).await? {
                return Ok(duplicate(original));
            }
        }
        let coll = self.coll(&self.inner.names.jobs);
        if max_depth > 0 {
            // Advisory, like agno's Redis queue: concurrent submitters may overshoot by a few.
            let queued = coll
                .count_documents(doc! {"status": JobStatus::Queued.as_str()})
                .await
                .map_err(db_err("enqueue job"))?;
            if queued >= max_depth {
                return Ok(EnqueueOutcome {
                    rejection: Some(EnqueueRejection::QueueFull),
                    job: None,
                });
            }
        }
        job.status = JobStatus::Queued;
        job.attempt = 0;
        let inserted = if job.is_serialized() {
            let session_id = job.session_id.clone();
            self.under_session_lock(&session_id, async {
                let session = self.session_tickets(&job.session_id).await?;
                job.set_session_seq(job.next_session_seq(&session));
                Ok(coll.insert_one(to_doc(&job, "a job")?).await)
            })
            .await?
        } else {
            coll.insert_one(to_doc(&job, "a job")?).await
        };
        match inserted {
            Ok(_) => Ok(EnqueueOutcome {
                rejection: None,
                job: Some(job),
            }),
            Err(e) if is_duplicate_key(&e) => {
                if let Some(key) = &job.idempotency_key {
                    if let Some(original) = self.job_by_key(key, job.user_id.as_deref()).await? {
                        return Ok(duplicate(original));
                    }
                }
                Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("job {} already exists; job ids are never reused", job.id),
                ))
            }
            Err(e) => Err(db_err("enqueue job")(e)),
        }
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        let now = now_epoch_seconds();
        let deployments = match deployment_id {
            Some(d) => doc! {"deployment_id": {"$in": [Bson::Null, d]}},
            None => doc! {"deployment_id": Bson::Null},
        };
        let mut filter = doc! {
            "available_at": {"$lte": now},
            "$or": [
                {"status": JobStatus::Queued.as_str()},
                {
                    "status": JobStatus::Running.as_str(),
                    "locked_at": {"$lte": now - lock_grace_seconds},
                    "$expr": {"$lt": ["$attempt", "$max_attempts"]},
                },
            ],
        };
        filter.extend(deployments);
        let coll = self.coll(&self.inner.names.jobs);
        let claim = doc! {
            "$set": {"status": JobStatus::Running.as_str(), "locked_by": worker_id, "locked_at": now, "updated_at": now},
            "$inc": {"attempt": 1i64},
        };
        for round in 0..64u64 {
            let candidates = coll
                .find(filter.clone())
                .sort(doc! {"created_at": 1, "id": 1})
                .limit(CLAIM_PAGE)
                .await
                .map_err(db_err("claim job"))?
                .try_collect::<Vec<Document>>()
                .await
                .map_err(db_err("claim job"))?;
            let mut sessions = SessionOrder::default();
            let mut lost_race = false;
            for candidate in candidates {
                let (key, id) = (
                    candidate.get("_id").cloned(),
                    candidate.get_str("id").unwrap_or("?").to_owned(),
                );
                let job = match decode(candidate) {
                    Ok(job) => job,
                    Err(e) => {
                        // Failed in place, if still as read, so it blocks no later claim.
                        if let Some(key) = key {
                            let mut this = filter.clone();
                            this.insert("_id", key);
                            let failed = doc! {"$set": {
                                "status": JobStatus::Failed.as_str(),
                                "error": undecodable_job_error(&id, &e),
                                "locked_by": Bson::Null, "locked_at": Bson::Null,
                                "updated_at": now, "completed_at": now,
                            }};
                            coll.update_one(this, failed)
                                .await
                                .map_err(db_err("fail an undecodable job"))?;
                        }
                        continue;
                    }
                };
                let may_run = sessions
                    .allows(&job, |sid| async move { self.session_tickets(&sid).await })
                    .await?;
                if !may_run {
                    continue;
                }
                let mut this = filter.clone();
                this.insert("id", &job.id);
                let claimed = coll
                    .find_one_and_update(this, claim.clone())
                    .return_document(ReturnDocument::After)
                    .await
                    .map_err(db_err("claim job"))?;
                match claimed {
                    Some(d) => return decode(d).map(Some),
                    None => lost_race = true,
                }
            }
            if !lost_race {
                return Ok(None);
            }
            tokio::time::sleep(std::time::Duration::from_millis(round.min(10) * 2)).await;
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "claim job: every claimable job was taken by others while trying; poll again",
        )
        .with_backend("mongodb")
        .set_temporary(true))
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        let result = self
            .coll(&self.inner.names.jobs)
            .update_many(
                doc! {"id": {"$in": ids}, "status": JobStatus::Running.as_str(), "locked_by": worker_id},
                doc! {"$set": {"locked_at": now_epoch_seconds()}},
            )
            .await
            .map_err(db_err("heartbeat jobs"))?;
        Ok(result.matched_count)
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
        let update = finished(status, error.as_deref(), now_epoch_seconds());
        self.fenced_update(id, worker_id, attempt, update).await
    }

    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job> {
        let now = now_epoch_seconds();
        let retry = doc! {"$lt": ["$attempt", "$max_attempts"]};
        // A pipeline update; `$literal` keeps a user-supplied error text from being read as
        // a field path or an operator.
        let update = vec![doc! {"$set": {
            "error": {"$literal": opt(error.as_deref())},
            "locked_by": Bson::Null,
            "locked_at": Bson::Null,
            "updated_at": now,
            "status": {"$cond": [retry.clone(), JobStatus::Queued.as_str(), JobStatus::Failed.as_str()]},
            "available_at": {"$cond": [retry.clone(), now + retry_delay_seconds.max(0), "$available_at"]},
            "completed_at": {"$cond": [retry, "$completed_at", now]},
        }}];
        self.fenced_update(id, worker_id, attempt, update).await
    }

    async fn release_job(&self, id: &str, worker_id: &str, attempt: i64) -> Result<Job> {
        self.fenced_update(
            id,
            worker_id,
            attempt,
            doc! {
                "$set": {
                    "status": JobStatus::Queued.as_str(),
                    "locked_by": Bson::Null,
                    "locked_at": Bson::Null,
                    "updated_at": now_epoch_seconds(),
                },
                "$inc": {"attempt": -1i64},
            },
        )
        .await
    }

    async fn requeue_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let now = now_epoch_seconds();
        let mut filter = doc! {
            "id": id,
            "status": {"$in": [JobStatus::Failed.as_str(), JobStatus::Cancelled.as_str()]},
        };
        scope(&mut filter, user_id);
        let mut set = doc! {
            "status": JobStatus::Queued.as_str(),
            "max_attempts": {"$add": ["$attempt", 1i64]},
            "available_at": now,
            "locked_by": Bson::Null,
            "locked_at": Bson::Null,
            "completed_at": Bson::Null,
            "updated_at": now,
        };
        // A requeued serialized ticket rejoins its session behind every live one.
        let Some(job) = self.get_job(id, user_id).await?.filter(Job::is_serialized) else {
            let update = vec![doc! {"$set": set}];
            return self.update_job("requeue job", filter, update).await;
        };
        self.under_session_lock(&job.session_id, async {
            let session = self.session_tickets(&job.session_id).await?;
            set.insert("payload.session_seq", job.next_session_seq(&session));
            let update = vec![doc! {"$set": set}];
            self.update_job("requeue job", filter, update).await
        })
        .await
    }

    async fn settle_paused_job(
        &self,
        id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        check_settle_status(status)?;
        let filter = doc! {"id": id, "status": JobStatus::Paused.as_str()};
        let update = finished(status, error.as_deref(), now_epoch_seconds());
        self.update_job("settle paused job", filter, update).await
    }

    async fn continue_job(
        &self,
        id: &str,
        user_id: Option<&str>,
        continue_payload: serde_json::Value,
    ) -> Result<Continued> {
        let write_if_paused = |job: Job| async move {
            let written = self
                .coll(&self.inner.names.jobs)
                .replace_one(
                    doc! {"id": id, "status": JobStatus::Paused.as_str()},
                    to_doc(&job, "a job")?,
                )
                .await
                .map_err(db_err("continue job"))?;
            Ok(written.modified_count > 0)
        };
        continue_paused_job(
            id,
            &continue_payload,
            now_epoch_seconds,
            || self.get_job(id, user_id),
            write_if_paused,
        )
        .await
    }

    async fn acquire_sweep(
        &self,
        id: &str,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<bool> {
        let now = now_epoch_seconds();
        self.update_job(
            "acquire sweep",
            doc! {
                "id": id,
                "status": JobStatus::Running.as_str(),
                "locked_at": {"$lte": now - lock_grace_seconds},
                "$expr": {"$gte": ["$attempt", "$max_attempts"]},
            },
            doc! {"$set": {"locked_by": worker_id, "locked_at": now, "updated_at": now}},
        )
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
        let filter = doc! {"id": id, "status": JobStatus::Running.as_str(), "locked_by": worker_id};
        let update = finished(status, error.as_deref(), now_epoch_seconds());
        self.update_job("settle swept job", filter, update).await
    }

    async fn cancel_running_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let now = now_epoch_seconds();
        let mut filter = doc! {"id": id, "status": JobStatus::Running.as_str()};
        scope(&mut filter, user_id);
        self.update_job(
            "cancel running job",
            filter,
            doc! {"$set": {
                "status": JobStatus::Cancelled.as_str(),
                "locked_by": Bson::Null,
                "locked_at": Bson::Null,
                "completed_at": now,
                "updated_at": now,
            }},
        )
        .await
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let now = now_epoch_seconds();
        let mut filter = doc! {
            "id": id,
            "status": {"$in": [JobStatus::Queued.as_str(), JobStatus::Paused.as_str()]},
        };
        scope(&mut filter, user_id);
        self.update_job("cancel job", filter,
                doc! {"$set": {"status": JobStatus::Cancelled.as_str(), "completed_at": now, "updated_at": now}})
            .await
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.jobs)
            .find_one(filter)
            .await
            .map_err(db_err("get job"))?
            .map(decode)
            .transpose()
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        query.pagination.validate()?;
        let mut filter = Document::new();
        if let Some(s) = query.status {
            filter.insert("status", s.as_str());
        }
        if let Some(s) = &query.session_id {
            filter.insert("session_id", s);
        }
        scope(&mut filter, query.user_id.as_deref());
        let rows = self
            .coll(&self.inner.names.jobs)
            .find(filter)
            .sort(doc! {"created_at": -1, "id": -1})
            .await
            .map_err(db_err("list jobs"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("list jobs"))?
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>>>()?;
        Page::paginate(rows, &query.pagination)
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        let cutoff = now_epoch_seconds() - older_than_seconds;
        let terminal = [
            JobStatus::Completed,
            JobStatus::Failed,
            JobStatus::Cancelled,
        ]
        .map(JobStatus::as_str);
        Ok(self
            .coll(&self.inner.names.jobs)
            .delete_many(
                doc! {"status": {"$in": terminal.to_vec()}, "completed_at": {"$lte": cutoff}},
            )
            .await
            .map_err(db_err("cleanup jobs"))?
            .deleted_count)
    }

    async fn delete_user_jobs(&self, user_id: &str) -> Result<u64> {
        Ok(self
            .coll(&self.inner.names.jobs)
            .delete_many(doc! {"user_id": user_id})
            .await
            .map_err(db_err("delete user jobs"))?
            .deleted_count)
    }
}
