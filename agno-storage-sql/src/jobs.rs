//! The durable job queue (`agno_jobs`): atomic claims, leases, fencing, idempotency keys.

use agno_storage_core::job::{
    check_completions, check_finish_status, check_settle_status, continue_paused_job, lease_lost,
    sort_oldest_first, undecodable_job_error,
};
use agno_storage_core::{
    async_trait, now_epoch_seconds, Continued, EnqueueOutcome, EnqueueRejection, Error, ErrorKind,
    Job, JobCompletion, JobQuery, JobStatus, JobStore, JobWakeups, Page, QueueStats, Result,
};
use serde_json::Value;

use crate::dialect::{Claim, SessionLock};
use crate::exec::Statement;
use crate::schema::Table;
use crate::store::{in_list, limit_offset, SqlStore, Where};
use crate::value::{Row, SqlValue};

fn status(s: &str) -> Result<JobStatus> {
    serde_json::from_value(Value::String(s.to_owned())).map_err(|_| {
        Error::new(
            ErrorKind::Serialization,
            format!("unknown job status {s:?}"),
        )
    })
}

fn job_from_row(row: &Row) -> Result<Job> {
    Ok(Job {
        id: row.str("id")?,
        component_type: row.str("component_type")?,
        job_type: row.str("job_type")?,
        deployment_id: row.opt_str("deployment_id")?,
        component_id: row.str("component_id")?,
        session_id: row.str("session_id")?,
        user_id: row.opt_str("user_id")?,
        payload: row.json("payload")?.unwrap_or(Value::Null),
        status: status(&row.str("status")?)?,
        attempt: row.i64("attempt")?,
        max_attempts: row.i64("max_attempts")?,
        idempotency_key: row.opt_str("idempotency_key")?,
        available_at: row.i64("available_at")?,
        locked_by: row.opt_str("locked_by")?,
        locked_at: row.opt_i64("locked_at")?,
        error: row.opt_str("error")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
        completed_at: row.opt_i64("completed_at")?,
    })
}

const FENCE: &str = "id = ? AND locked_by = ? AND attempt = ? AND status = 'running'";

fn fence_params(id: &str, worker_id: &str, attempt: i64) -> [SqlValue; 3] {
    [
        SqlValue::text(id),
        SqlValue::text(worker_id),
        SqlValue::int(attempt),
    ]
}

impl SqlStore {
    async fn job_by_key(&self, key: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        let mut w = Where::default();
        w.eq("idempotency_key", Some(key));
        match user_id {
            Some(u) => w.eq("user_id", Some(u)),
            None => w.push("user_id IS NULL", []),
        }
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Jobs), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(job_from_row)
            .transpose()
    }
}

/// The PostgreSQL channel our job writes notify idle workers on; the payload names the
/// jobs table (`schema.table`).
pub(crate) const WAKE_CHANNEL: &str = "agno_jobs";

/// The states in which a serialized ticket holds its place in its session.
const LIVE: &str = "('queued', 'running', 'paused')";

impl SqlStore {
    /// agno's `session_claim_condition` on candidate `c`: not serialized, or no serialized
    /// ticket of its session running or paused, and (for a queued one) none queued before
    /// it in `(session_seq, id)`.
    fn session_claim_condition(&self) -> String {
        let d = self.dialect;
        let serialized =
            |t: &str| d.json_field_is_true(&format!("{t}.payload"), "serialize_session");
        let seq = |t: &str| d.json_field_int(&format!("{t}.payload"), "session_seq");
        let (seq_c, seq_p) = (seq("c"), seq("p"));
        format!(
            "(NOT {} OR NOT EXISTS (SELECT 1 FROM {} p WHERE p.id <> c.id AND p.session_id = c.session_id \
             AND {} AND (p.status IN ('running', 'paused') OR (c.status = 'queued' AND p.status = 'queued' \
             AND ({seq_p} < {seq_c} OR ({seq_p} = {seq_c} AND {}))))))",
            serialized("c"),
            self.t(Table::Jobs),
            serialized("p"),
            d.id_before("p.id", "c.id"),
        )
    }

    /// `json` (an SQL expression) with `session_seq` set to the next sequence of the
    /// session named by the one parameter (agno's `next_session_seq_query`), read in the
    /// statement that writes it.
    fn with_next_session_seq(&self, json: &str) -> String {
        let d = self.dialect;
        let next = format!(
            "(SELECT n FROM (SELECT COALESCE(MAX({}), 0) + 1 AS n FROM {} WHERE session_id = ? AND {} \
             AND status IN {LIVE}) AS next_seq)",
            d.json_field_int("payload", "session_seq"),
            self.t(Table::Jobs),
            d.json_field_is_true("payload", "serialize_session"),
        );
        d.json_with_int(json, "session_seq", &next)
    }

    /// Tells idle workers jobs may be claimable, where the database can (best effort: the
    /// write is done; a worker that misses it polls).
    async fn wake_workers(&self) {
        if let Some((sql, params)) = self.dialect.wake_workers(self) {
            let _ = self.exec.query(&sql, params).await;
        }
    }

    /// Runs `write` after `lock` in one transaction and returns its rows.
    async fn under_lock(&self, lock: Statement, write: Statement) -> Result<Vec<Row>> {
        Ok(self
            .exec
            .transaction(vec![lock, write])
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// `write` in a transaction holding the named `lock` from before it begins until after
    /// it commits; the rows `read` reads after it, none when it wrote nothing.
    #[cfg(feature = "mysql")]
    async fn under_named_lock(
        &self,
        lock: crate::exec::NamedLock,
        write: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        let mut tx = self.exec.begin(Some(lock)).await?;
        let rows = match tx.execute(&write.0, write.1).await? {
            0 => Vec::new(),
            _ => tx.query(&read.0, read.1).await?,
        };
        tx.commit().await?;
        Ok(rows)
    }
}

impl SqlStore {
    /// Decodes running job rows a claim or a sweep selected; a row that does not decode
    /// is failed in place ([`undecodable_job_error`]), if it is still running and matches
    /// `fence` (a condition with its parameters), rather than failing the whole call, so
    /// that one bad row cannot block the queue.
    async fn decode_or_fail(&self, rows: &[Row], fence: (&str, Vec<SqlValue>)) -> Result<Vec<Job>> {
        let mut jobs = Vec::with_capacity(rows.len());
        for row in rows {
            let e = match job_from_row(row) {
                Ok(job) => {
                    jobs.push(job);
                    continue;
                }
                Err(e) => e,
            };
            let id = row.str("id")?;
            let now = now_epoch_seconds();
            let sql = format!(
                "UPDATE {} SET status = 'failed', error = ?, locked_by = NULL, locked_at = NULL, \
                 updated_at = ?, completed_at = ? WHERE id = ? AND status = 'running' AND {}",
                self.t(Table::Jobs),
                fence.0
            );
            let mut params = vec![
                SqlValue::text(undecodable_job_error(&id, &e)),
                SqlValue::int(now),
                SqlValue::int(now),
                SqlValue::text(&id),
            ];
            params.extend(fence.1.iter().cloned());
            self.exec.execute(&sql, params).await?;
        }
        Ok(jobs)
    }
}

#[async_trait]
impl JobStore for SqlStore {
    async fn enqueue_job(&self, mut job: Job, max_depth: u64) -> Result<EnqueueOutcome> {
        self.check(Table::Jobs)?;
        job.idempotency_key = job.idempotency_key.filter(|k| !k.is_empty());
        if let Some(key) = &job.idempotency_key {
            if let Some(original) = self.job_by_key(key, job.user_id.as_deref()).await? {
                return Ok(EnqueueOutcome {
                    rejection: Some(EnqueueRejection::Duplicate),
                    job: Some(original),
                });
            }
        }
        let table = self.t(Table::Jobs);
        if max_depth > 0
            && self
                .count(&format!("FROM {table} WHERE status = 'queued'"), vec![])
                .await?
                >= max_depth
        {
            return Ok(EnqueueOutcome {
                rejection: Some(EnqueueRejection::QueueFull),
                job: None,
            });
        }
        let serialized = job.is_serialized();
        let payload = match serialized {
            true => self.with_next_session_seq("?"),
            false => "?".to_owned(),
        };
        let sql = format!(
            "INSERT INTO {table} (id, component_type, job_type, deployment_id, component_id, session_id, user_id, payload, status, \
             attempt, max_attempts, idempotency_key, available_at, locked_by, locked_at, error, created_at, updated_at, completed_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, {payload}, 'queued', 0, ?, ?, ?, NULL, NULL, NULL, ?, ?, NULL)"
        );
        let mut params = vec![
            SqlValue::text(&job.id),
            SqlValue::text(&job.component_type),
            SqlValue::text(&job.job_type),
            SqlValue::opt_text(job.deployment_id.as_deref()),
            SqlValue::text(&job.component_id),
            SqlValue::text(&job.session_id),
            SqlValue::opt_text(job.user_id.as_deref()),
            SqlValue::json(Some(&job.payload)),
        ];
        if serialized {
            params.push(SqlValue::text(&job.session_id));
        }
        params.extend([
            SqlValue::int(job.max_attempts),
            SqlValue::opt_text(job.idempotency_key.as_deref()),
            SqlValue::int(job.available_at),
            SqlValue::int(job.created_at),
            SqlValue::Int(job.updated_at),
        ]);
        let read = self.select_by(Table::Jobs, "id", &job.id);
        // agno's enqueue sequences a serialized ticket under the session lock.
        let lock = self
            .dialect
            .session_lock(self, &job.session_id)
            .filter(|_| serialized);
        let inserted = match lock {
            Some(SessionLock::Statement(lock)) => {
                let insert = format!("{sql} ON CONFLICT DO NOTHING RETURNING *");
                self.under_lock(lock, (insert, params)).await?
            }
            #[cfg(feature = "mysql")]
            Some(SessionLock::Named(lock)) => {
                match self.under_named_lock(lock, (sql, params), read).await {
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => Vec::new(),
                    other => other?,
                }
            }
            None => {
                self.dialect
                    .insert_if_absent(self, (sql, params), read)
                    .await?
            }
        };
        if let Some(row) = inserted.first() {
            self.wake_workers().await;
            return Ok(EnqueueOutcome {
                rejection: None,
                job: Some(job_from_row(row)?),
            });
        }
        // Lost a race: either the same idempotency key won, or the id is taken.
        if let Some(key) = &job.idempotency_key {
            if let Some(original) = self.job_by_key(key, job.user_id.as_deref()).await? {
                return Ok(EnqueueOutcome {
                    rejection: Some(EnqueueRejection::Duplicate),
                    job: Some(original),
                });
            }
        }
        Err(Error::new(
            ErrorKind::AlreadyExists,
            format!("job {} already exists; job ids are never reused", job.id),
        ))
    }

    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        Ok(self
            .claim_jobs(worker_id, lock_grace_seconds, deployment_id, 1)
            .await?
            .pop())
    }

    async fn claim_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let claimable = "available_at <= ? AND (deployment_id IS NULL OR deployment_id = ?) AND \
             (status = 'queued' OR (status = 'running' AND locked_at <= ? AND attempt < max_attempts))";
        let claim = Claim {
            table: Table::Jobs,
            predicate: (
                claimable,
                vec![
                    SqlValue::int(now),
                    SqlValue::opt_text(deployment_id),
                    SqlValue::int(now - lock_grace_seconds),
                ],
            ),
            order: "created_at ASC, id ASC",
            set: (
                "status = 'running', locked_by = ?, locked_at = ?, attempt = attempt + 1, updated_at = ?",
                vec![
                    SqlValue::text(worker_id),
                    SqlValue::int(now),
                    SqlValue::int(now),
                ],
            ),
            limit,
            candidate_filter: Some(self.session_claim_condition()),
        };
        let rows = self.dialect.claim(self, claim).await?;
        let fence = (
            "locked_by = ? AND locked_at = ?",
            vec![SqlValue::text(worker_id), SqlValue::int(now)],
        );
        let mut jobs = self.decode_or_fail(&rows, fence).await?;
        sort_oldest_first(&mut jobs);
        Ok(jobs)
    }

    async fn complete_jobs(
        &self,
        worker_id: &str,
        completions: Vec<JobCompletion>,
    ) -> Result<Vec<Result<()>>> {
        self.check(Table::Jobs)?;
        check_completions(&completions)?;
        let finished = self
            .dialect
            .finish_jobs(self, worker_id, &completions, now_epoch_seconds())
            .await?;
        Ok(completions
            .iter()
            .map(|c| match finished.contains(&c.id) {
                true => Ok(()),
                false => Err(lease_lost(&c.id, worker_id, c.attempt)),
            })
            .collect())
    }

    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64> {
        self.check(Table::Jobs)?;
        if ids.is_empty() {
            return Ok(0);
        }
        let (list, id_params) = in_list(ids);
        let sql = format!("UPDATE {} SET locked_at = ? WHERE id IN {list} AND locked_by = ? AND status = 'running'", self.t(Table::Jobs));
        let mut params = vec![SqlValue::int(now_epoch_seconds())];
        params.extend(id_params);
        params.push(SqlValue::text(worker_id));
        self.exec.execute(&sql, params).await
    }

    async fn complete_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<Job> {
        self.check(Table::Jobs)?;
        check_finish_status(status)?;
        let now = now_epoch_seconds();
        let sql = format!(
            "UPDATE {} SET status = ?, error = ?, locked_by = NULL, locked_at = NULL, completed_at = ?, updated_at = ? WHERE {FENCE}",
            self.t(Table::Jobs)
        );
        let mut params = vec![
            SqlValue::text(status.as_str()),
            SqlValue::Text(error),
            SqlValue::Int(status.is_terminal().then_some(now)),
            SqlValue::int(now),
        ];
        params.extend(fence_params(id, worker_id, attempt));
        let read = self.select_by(Table::Jobs, "id", id);
        match self.write_returning((sql, params), read).await?.first() {
            Some(row) => job_from_row(row),
            None => Err(lease_lost(id, worker_id, attempt)),
        }
    }

    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let sql = format!(
            "UPDATE {} SET status = CASE WHEN attempt < max_attempts THEN 'queued' ELSE 'failed' END, \
             available_at = CASE WHEN attempt < max_attempts THEN ? ELSE available_at END, \
             completed_at = CASE WHEN attempt < max_attempts THEN NULL ELSE ? END, \
             error = ?, locked_by = NULL, locked_at = NULL, updated_at = ? WHERE {FENCE}",
            self.t(Table::Jobs)
        );
        let mut params = vec![
            SqlValue::int(now + retry_delay_seconds.max(0)),
            SqlValue::int(now),
            SqlValue::Text(error),
            SqlValue::int(now),
        ];
        params.extend(fence_params(id, worker_id, attempt));
        let read = self.select_by(Table::Jobs, "id", id);
        match self.write_returning((sql, params), read).await?.first() {
            Some(row) => job_from_row(row),
            None => Err(lease_lost(id, worker_id, attempt)),
        }
    }

    async fn release_job(&self, id: &str, worker_id: &str, attempt: i64) -> Result<Job> {
        self.check(Table::Jobs)?;
        let sql = format!(
            "UPDATE {} SET status = 'queued', attempt = attempt - 1, locked_by = NULL, locked_at = NULL, updated_at = ? WHERE {FENCE}",
            self.t(Table::Jobs)
        );
        let mut params = vec![SqlValue::int(now_epoch_seconds())];
        params.extend(fence_params(id, worker_id, attempt));
        let read = self.select_by(Table::Jobs, "id", id);
        let released = match self.write_returning((sql, params), read).await?.first() {
            Some(row) => job_from_row(row)?,
            None => return Err(lease_lost(id, worker_id, attempt)),
        };
        self.wake_workers().await;
        Ok(released)
    }

    async fn requeue_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.push("status IN ('failed', 'cancelled')", []);
        w.eq("user_id", user_id);
        let Some(job) = self.get_job(id, user_id).await? else {
            return Ok(false);
        };
        // A requeued serialized ticket rejoins its session behind every live one.
        let (payload, mut params) = match job.is_serialized() {
            true => (
                format!(", payload = {}", self.with_next_session_seq("payload")),
                vec![SqlValue::text(&job.session_id)],
            ),
            false => (String::new(), Vec::new()),
        };
        let sql = format!(
            "UPDATE {} SET status = 'queued', max_attempts = attempt + 1, available_at = ?, locked_by = NULL, \
             locked_at = NULL, completed_at = NULL, updated_at = ?{payload}{}",
            self.t(Table::Jobs),
            w.sql()
        );
        params.splice(0..0, [SqlValue::int(now), SqlValue::int(now)]);
        params.extend(w.params);
        let lock = self
            .dialect
            .session_lock(self, &job.session_id)
            .filter(|_| job.is_serialized());
        let requeued = match lock {
            Some(SessionLock::Statement(lock)) => {
                let update = (format!("{sql} RETURNING id"), params);
                !self.under_lock(lock, update).await?.is_empty()
            }
            #[cfg(feature = "mysql")]
            Some(SessionLock::Named(lock)) => {
                let read = self.select_by(Table::Jobs, "id", id);
                !self
                    .under_named_lock(lock, (sql, params), read)
                    .await?
                    .is_empty()
            }
            None => self.exec.execute(&sql, params).await? > 0,
        };
        if requeued {
            self.wake_workers().await;
        }
        Ok(requeued)
    }

    async fn settle_paused_job(
        &self,
        id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        self.check(Table::Jobs)?;
        check_settle_status(status)?;
        let now = now_epoch_seconds();
        let sql = format!(
            "UPDATE {} SET status = ?, error = ?, locked_by = NULL, locked_at = NULL, completed_at = ?, updated_at = ? \
             WHERE id = ? AND status = 'paused'",
            self.t(Table::Jobs)
        );
        let params = vec![
            SqlValue::text(status.as_str()),
            SqlValue::Text(error),
            SqlValue::int(now),
            SqlValue::int(now),
            SqlValue::text(id),
        ];
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn count_queued_jobs(&self) -> Result<u64> {
        self.check(Table::Jobs)?;
        self.count(
            &format!("FROM {} WHERE status = 'queued'", self.t(Table::Jobs)),
            vec![],
        )
        .await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.check(Table::Jobs)?;
        let table = self.t(Table::Jobs);
        let mut stats = QueueStats::default();
        for row in self
            .exec
            .query(
                &format!("SELECT status, COUNT(*) AS n FROM {table} GROUP BY status"),
                vec![],
            )
            .await?
        {
            stats
                .counts
                .insert(row.str("status")?, row.i64("n")?.max(0) as u64);
        }
        let oldest = self
            .exec
            .query(
                &format!("SELECT MIN(created_at) AS oldest FROM {table} WHERE status = 'queued'"),
                vec![],
            )
            .await?;
        stats.oldest_queued_age_seconds = match oldest.first() {
            Some(row) => row
                .opt_i64("oldest")?
                .map(|t| (now_epoch_seconds() - t).max(0)),
            None => None,
        };
        Ok(stats)
    }

    async fn continue_job(
        &self,
        id: &str,
        user_id: Option<&str>,
        continue_payload: Value,
    ) -> Result<Continued> {
        self.check(Table::Jobs)?;
        let sql = format!(
            "UPDATE {} SET status = 'queued', payload = ?, max_attempts = ?, available_at = ?, locked_by = NULL, \
             locked_at = NULL, completed_at = NULL, updated_at = ? WHERE id = ? AND status = 'paused'",
            self.t(Table::Jobs)
        );
        let write_if_paused = |job: Job| {
            let params = vec![
                SqlValue::json(Some(&job.payload)),
                SqlValue::int(job.max_attempts),
                SqlValue::int(job.available_at),
                SqlValue::Int(job.updated_at),
                SqlValue::text(id),
            ];
            let sql = &sql;
            async move {
                let written = self.exec.execute(sql, params).await? > 0;
                if written {
                    self.wake_workers().await;
                }
                Ok(written)
            }
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

    async fn sweep_exhausted_jobs(
        &self,
        lock_grace_seconds: i64,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.check(Table::Jobs)?;
        let sweepable = "locked_at <= ? AND attempt >= max_attempts";
        let stale = vec![SqlValue::int(now_epoch_seconds() - lock_grace_seconds)];
        let sql = format!(
            "SELECT * FROM {} WHERE status = 'running' AND {sweepable} \
             ORDER BY locked_at ASC, id ASC LIMIT {limit}",
            self.t(Table::Jobs)
        );
        let rows = self.exec.query(&sql, stale.clone()).await?;
        self.decode_or_fail(&rows, (sweepable, stale)).await
    }

    async fn acquire_sweep(
        &self,
        id: &str,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<bool> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let sql = format!(
            "UPDATE {} SET locked_by = ?, locked_at = ?, updated_at = ? \
             WHERE id = ? AND status = 'running' AND locked_at <= ? AND attempt >= max_attempts",
            self.t(Table::Jobs)
        );
        let params = vec![
            SqlValue::text(worker_id),
            SqlValue::int(now),
            SqlValue::int(now),
            SqlValue::text(id),
            SqlValue::int(now - lock_grace_seconds),
        ];
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn settle_swept_job(
        &self,
        id: &str,
        worker_id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        self.check(Table::Jobs)?;
        check_finish_status(status)?;
        let now = now_epoch_seconds();
        let sql = format!(
            "UPDATE {} SET status = ?, error = ?, locked_by = NULL, locked_at = NULL, completed_at = ?, updated_at = ? \
             WHERE id = ? AND status = 'running' AND locked_by = ?",
            self.t(Table::Jobs)
        );
        let params = vec![
            SqlValue::text(status.as_str()),
            SqlValue::Text(error),
            SqlValue::Int(status.is_terminal().then_some(now)),
            SqlValue::int(now),
            SqlValue::text(id),
            SqlValue::text(worker_id),
        ];
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn job_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        if self.dialect.wake_workers(self).is_none() {
            return Ok(None);
        }
        self.exec
            .listen(WAKE_CHANNEL, &self.table_ref(Table::Jobs))
            .await
    }

    async fn session_blocker(&self, id: &str) -> Result<Option<String>> {
        self.check(Table::Jobs)?;
        let Some(job) = self
            .get_job(id, None)
            .await?
            .filter(|j| j.status == JobStatus::Queued && j.is_serialized())
        else {
            return Ok(None);
        };
        // agno's `live_session_jobs_query`.
        let sql = format!(
            "SELECT * FROM {} WHERE session_id = ? AND {} AND status IN {LIVE}",
            self.t(Table::Jobs),
            self.dialect
                .json_field_is_true("payload", "serialize_session"),
        );
        let session = self
            .exec
            .query(&sql, vec![SqlValue::text(&job.session_id)])
            .await?
            .iter()
            .map(job_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok(job.session_blocker(&session).map(|b| b.id.clone()))
    }

    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.push("status IN ('queued', 'paused')", []);
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET status = 'cancelled', completed_at = ?, updated_at = ?{}",
            self.t(Table::Jobs),
            w.sql()
        );
        let mut params = vec![SqlValue::int(now), SqlValue::int(now)];
        params.extend(w.params);
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn cancel_running_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Jobs)?;
        let now = now_epoch_seconds();
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.push("status = 'running'", []);
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET status = 'cancelled', locked_by = NULL, locked_at = NULL, completed_at = ?, updated_at = ?{}",
            self.t(Table::Jobs),
            w.sql()
        );
        let mut params = vec![SqlValue::int(now), SqlValue::int(now)];
        params.extend(w.params);
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>> {
        self.check(Table::Jobs)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Jobs), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(job_from_row)
            .transpose()
    }

    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>> {
        self.check(Table::Jobs)?;
        let paging = limit_offset(&query.pagination)?;
        let mut w = Where::default();
        w.eq("status", query.status.map(JobStatus::as_str));
        w.eq("session_id", query.session_id.as_deref());
        w.eq("user_id", query.user_id.as_deref());
        let from = format!("FROM {}{}", self.t(Table::Jobs), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query(
                &format!("SELECT * {from} ORDER BY created_at DESC, id DESC{paging}"),
                w.params,
            )
            .await?;
        Ok(Page::new(
            rows.iter().map(job_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64> {
        self.check(Table::Jobs)?;
        let sql = format!(
            "DELETE FROM {} WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at IS NOT NULL AND completed_at <= ?",
            self.t(Table::Jobs)
        );
        self.exec
            .execute(
                &sql,
                vec![SqlValue::int(now_epoch_seconds() - older_than_seconds)],
            )
            .await
    }

    async fn delete_user_jobs(&self, user_id: &str) -> Result<u64> {
        self.check(Table::Jobs)?;
        let sql = format!("DELETE FROM {} WHERE user_id = ?", self.t(Table::Jobs));
        self.exec.execute(&sql, vec![SqlValue::text(user_id)]).await
    }
}
