//! The durable job queue behind `background=True` runs.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, ErrorKind, Result};
use crate::pagination::{Page, Pagination};

/// A job's state. Claimed jobs are `running`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    /// Waiting to be claimed.
    Queued,
    /// Claimed by a worker holding a lease.
    Running,
    /// Finished successfully.
    Completed,
    /// Finished with an error and no retries left.
    Failed,
    /// Cancelled before it finished.
    Cancelled,
    /// Waiting for human input.
    Paused,
}

impl JobStatus {
    /// Every state, in agno's order (`JOB_STATUSES`).
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Queued,
        JobStatus::Running,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Cancelled,
        JobStatus::Paused,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Queued => "queued",
            JobStatus::Running => "running",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Cancelled => "cancelled",
            JobStatus::Paused => "paused",
        }
    }

    /// Completed, failed or cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled
        )
    }
}

/// A job (`agno_jobs`). `attempt` is the fencing token: a worker acts only on the attempt it
/// claimed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    /// Primary key (the run id).
    pub id: String,
    /// `agent`, `team` or `workflow`.
    pub component_type: String,
    /// `run`.
    pub job_type: String,
    /// Claim affinity: only workers of this deployment claim it.
    #[serde(default)]
    pub deployment_id: Option<String>,
    /// The component to run.
    pub component_id: String,
    /// The session of the run.
    pub session_id: String,
    /// Owner.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Serialized run parameters.
    pub payload: Value,
    /// State.
    pub status: JobStatus,
    /// Claims so far (the fencing generation).
    pub attempt: i64,
    /// Claims allowed.
    pub max_attempts: i64,
    /// Deduplicates submissions per user.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    /// Not claimable before this time, epoch seconds.
    pub available_at: i64,
    /// Worker holding the lease.
    #[serde(default)]
    pub locked_by: Option<String>,
    /// Last heartbeat, epoch seconds.
    #[serde(default)]
    pub locked_at: Option<i64>,
    /// Error text of the last attempt.
    #[serde(default)]
    pub error: Option<String>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
    /// When it reached a terminal state, epoch seconds.
    #[serde(default)]
    pub completed_at: Option<i64>,
}

impl Job {
    /// A queued run job, available now, with one attempt.
    pub fn new(
        id: impl Into<String>,
        component_type: &str,
        component_id: impl Into<String>,
        session_id: impl Into<String>,
        payload: Value,
    ) -> Self {
        let now = crate::now_epoch_seconds();
        Job {
            id: id.into(),
            component_type: component_type.into(),
            job_type: "run".into(),
            deployment_id: None,
            component_id: component_id.into(),
            session_id: session_id.into(),
            user_id: None,
            payload,
            status: JobStatus::Queued,
            attempt: 0,
            max_attempts: 1,
            idempotency_key: None,
            available_at: now,
            locked_by: None,
            locked_at: None,
            error: None,
            created_at: now,
            updated_at: Some(now),
            completed_at: None,
        }
    }
}

impl Job {
    /// Whether a claimer of `deployment_id` may take the job at `now`: available, of no or
    /// that deployment, and queued, or running on a lease older than `lock_grace_seconds`
    /// with attempts left.
    pub fn is_claimable(
        &self,
        now: i64,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> bool {
        self.available_at <= now
            && (self.deployment_id.is_none() || self.deployment_id.as_deref() == deployment_id)
            && (self.status == JobStatus::Queued
                || (self.status == JobStatus::Running
                    && self
                        .locked_at
                        .is_some_and(|t| t <= now - lock_grace_seconds)
                    && self.attempt < self.max_attempts))
    }

    /// Takes the lease for `worker_id`: running, locked now, next attempt (the new fencing token).
    pub fn take_lease(&mut self, worker_id: &str, now: i64) {
        self.status = JobStatus::Running;
        self.locked_by = Some(worker_id.to_owned());
        self.locked_at = Some(now);
        self.attempt += 1;
        self.updated_at = Some(now);
    }

    /// The fence: `worker_id` holds the running lease of `attempt`.
    pub fn is_held_by(&self, worker_id: &str, attempt: i64) -> bool {
        self.is_locked_by(worker_id) && self.attempt == attempt
    }

    /// Whether the job runs under `worker_id`'s lease, at whatever attempt: what a heartbeat
    /// renews.
    pub fn is_locked_by(&self, worker_id: &str) -> bool {
        self.status == JobStatus::Running && self.locked_by.as_deref() == Some(worker_id)
    }

    /// Ends the held attempt in `status` (check it with [`check_finish_status`] first),
    /// releasing the lease; terminal states record `completed_at`.
    pub fn finish(&mut self, status: JobStatus, error: Option<String>, now: i64) {
        self.status = status;
        self.error = error;
        self.locked_by = None;
        self.locked_at = None;
        self.updated_at = Some(now);
        self.completed_at = status.is_terminal().then_some(now);
    }

    /// Hands back a held job that never started: queued again, available as before, the
    /// claim undone (`attempt` back to what it was, lease cleared), so it costs no attempt.
    pub fn release(&mut self, now: i64) {
        self.status = JobStatus::Queued;
        self.attempt = (self.attempt - 1).max(0);
        self.locked_by = None;
        self.locked_at = None;
        self.updated_at = Some(now);
    }

    /// Cancels a job nothing runs (queued or paused); false for any other state.
    pub fn cancel_waiting(&mut self, now: i64) -> bool {
        if !matches!(self.status, JobStatus::Queued | JobStatus::Paused) {
            return false;
        }
        self.status = JobStatus::Cancelled;
        self.completed_at = Some(now);
        self.updated_at = Some(now);
        true
    }

    /// Cancels a running job from outside its worker: cancelled, lease cleared, finished
    /// now; false for any other state. Its holder's next heartbeat renews nothing, and
    /// its result is refused (`LeaseLost`).
    pub fn cancel_running(&mut self, now: i64) -> bool {
        if self.status != JobStatus::Running {
            return false;
        }
        self.finish(JobStatus::Cancelled, self.error.clone(), now);
        true
    }

    /// agno's operator requeue: a failed or cancelled job is queued again, available now,
    /// with exactly one more attempt (`max_attempts = attempt + 1`); false for any other
    /// state.
    pub fn requeue(&mut self, now: i64) -> bool {
        if !matches!(self.status, JobStatus::Failed | JobStatus::Cancelled) {
            return false;
        }
        self.status = JobStatus::Queued;
        self.max_attempts = self.attempt + 1;
        self.available_at = now;
        self.locked_by = None;
        self.locked_at = None;
        self.completed_at = None;
        self.updated_at = Some(now);
        true
    }

    /// Ends a paused job in `status` (completed, cancelled or failed; see
    /// [`check_settle_status`]); false unless it is paused.
    pub fn settle_paused(&mut self, status: JobStatus, error: Option<String>, now: i64) -> bool {
        if self.status != JobStatus::Paused {
            return false;
        }
        self.finish(status, error, now);
        true
    }

    /// agno's continue of a paused job with `continue_payload` (an object; anything else
    /// is taken as `{}`): a paused job is queued again, available now, with one more
    /// attempt (`max_attempts = attempt + 1`) and `payload.continue` replaced wholesale; a
    /// queued or running one is left for the caller to attach to; a finished one is a
    /// conflict.
    pub fn continue_paused(&mut self, continue_payload: &Value, now: i64) -> ContinueOutcome {
        match self.status {
            JobStatus::Queued | JobStatus::Running => return ContinueOutcome::Attach,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled => {
                return ContinueOutcome::Conflict
            }
            JobStatus::Paused => {}
        }
        let inputs = match continue_payload {
            Value::Object(_) => continue_payload.clone(),
            _ => Value::Object(Default::default()),
        };
        if !self.payload.is_object() {
            self.payload = Value::Object(Default::default());
        }
        if let Value::Object(payload) = &mut self.payload {
            payload.insert("continue".into(), inputs);
        }
        self.status = JobStatus::Queued;
        self.max_attempts = self.attempt + 1;
        self.available_at = now;
        self.locked_by = None;
        self.locked_at = None;
        self.completed_at = None;
        self.updated_at = Some(now);
        ContinueOutcome::Queued
    }

    /// Whether a sweeper may take the job at `now`: running on a lease older than
    /// `lock_grace_seconds` with no attempt left (so no claim will ever take it).
    pub fn is_sweepable(&self, now: i64, lock_grace_seconds: i64) -> bool {
        self.status == JobStatus::Running
            && self
                .locked_at
                .is_some_and(|t| t <= now - lock_grace_seconds)
            && self.attempt >= self.max_attempts
    }

    /// A sweeper takes the lease of a sweepable job, at the same attempt.
    pub fn take_sweep(&mut self, worker_id: &str, now: i64) {
        self.locked_by = Some(worker_id.to_owned());
        self.locked_at = Some(now);
        self.updated_at = Some(now);
    }

    /// Ends the held attempt as a failure: queued again after `retry_delay_seconds` while
    /// attempts remain, else failed.
    pub fn retry_or_fail(&mut self, error: Option<String>, retry_delay_seconds: i64, now: i64) {
        self.error = error;
        self.locked_by = None;
        self.locked_at = None;
        self.updated_at = Some(now);
        if self.attempt < self.max_attempts {
            self.status = JobStatus::Queued;
            self.available_at = now + retry_delay_seconds.max(0);
        } else {
            self.status = JobStatus::Failed;
            self.completed_at = Some(now);
        }
    }
}

/// Per-session ordering, agno 3.1.10's `job_queue/session.py`: a ticket whose payload says
/// `serialize_session: true` takes `payload.session_seq` at enqueue (one after every live
/// serialized ticket of its session), and runs only when no other serialized ticket of its
/// session is running or paused and no queued one comes before it in `(session_seq, id)`.
impl Job {
    /// Whether the ticket is serialized in its session (`payload.serialize_session` is
    /// `true`, not merely truthy).
    pub fn is_serialized(&self) -> bool {
        self.payload.get("serialize_session") == Some(&Value::Bool(true))
    }

    /// `payload.session_seq`, read as agno's `int(… or 0)` reads it (0 when absent).
    pub fn session_seq(&self) -> i64 {
        match self.payload.get("session_seq") {
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f.trunc() as i64))
                .unwrap_or(0),
            Some(Value::Bool(b)) => i64::from(*b),
            Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
            _ => 0,
        }
    }

    /// Queued, running or paused: a ticket that still has its place in its session.
    pub fn is_live(&self) -> bool {
        matches!(
            self.status,
            JobStatus::Queued | JobStatus::Running | JobStatus::Paused
        )
    }

    /// The sequence of a serialized ticket entering its session (at enqueue or requeue):
    /// one after every live serialized ticket of the session among `others` (agno's
    /// `next_session_seq`).
    pub fn next_session_seq<'a>(&self, others: impl IntoIterator<Item = &'a Job>) -> i64 {
        others
            .into_iter()
            .filter(|o| {
                o.id != self.id
                    && o.session_id == self.session_id
                    && o.is_serialized()
                    && o.is_live()
            })
            .map(Job::session_seq)
            .max()
            .unwrap_or(0)
            + 1
    }

    /// Sets `payload.session_seq` (agno's `with_session_seq`); a payload that is not a JSON
    /// object (so not serialized) is left as it is.
    pub fn set_session_seq(&mut self, seq: i64) {
        if let Value::Object(payload) = &mut self.payload {
            payload.insert("session_seq".into(), Value::from(seq));
        }
    }

    /// The ticket this one waits behind in its session among `others` (agno's
    /// `session_blocker`): a running or paused serialized ticket of the session, else, for
    /// a queued ticket, the earliest queued one before it in `(session_seq, id)`. `None`
    /// when it may run, and always for a ticket that is not serialized.
    pub fn session_blocker<'a>(
        &self,
        others: impl IntoIterator<Item = &'a Job>,
    ) -> Option<&'a Job> {
        if !self.is_serialized() {
            return None;
        }
        let order = (self.session_seq(), self.id.as_str());
        let mut earliest: Option<&Job> = None;
        for other in others {
            if other.id == self.id || other.session_id != self.session_id || !other.is_serialized()
            {
                continue;
            }
            if matches!(other.status, JobStatus::Running | JobStatus::Paused) {
                return Some(other);
            }
            let key = (other.session_seq(), other.id.as_str());
            if self.status == JobStatus::Queued
                && other.status == JobStatus::Queued
                && key < order
                && earliest.is_none_or(|e| key < (e.session_seq(), e.id.as_str()))
            {
                earliest = Some(other);
            }
        }
        earliest
    }
}

/// Per-session ordering over one claim's candidates: whether a ticket may run now
/// ([`Job::session_blocker`]), each session's tickets read once.
#[derive(Debug, Default)]
pub struct SessionOrder {
    sessions: std::collections::HashMap<String, Vec<Job>>,
}

impl SessionOrder {
    /// Whether `job` may run: it is not serialized, or nothing in its session holds it
    /// back. `read` gives a session's jobs (at least its live serialized tickets) the first
    /// time one is asked about.
    pub async fn allows<F, Fut>(&mut self, job: &Job, read: F) -> Result<bool>
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<Job>>>,
    {
        if !job.is_serialized() {
            return Ok(true);
        }
        if !self.sessions.contains_key(&job.session_id) {
            let tickets = read(job.session_id.clone()).await?;
            self.sessions.insert(job.session_id.clone(), tickets);
        }
        Ok(self
            .sessions
            .get(&job.session_id)
            .is_none_or(|tickets| job.session_blocker(tickets).is_none()))
    }
}

/// Calls `claim` until it has `limit` jobs or none is left: a batch claim for stores that
/// claim one job at a time ([`JobStore::claim_jobs`]' default). Jobs claimed are always
/// returned: an error after the first claim ends the batch early instead.
pub async fn claim_one_by_one<F, Fut>(limit: usize, mut claim: F) -> Result<Vec<Job>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Job>>>,
{
    let mut claimed = Vec::new();
    while claimed.len() < limit {
        match claim().await {
            Ok(Some(job)) => claimed.push(job),
            Ok(None) => break,
            Err(e) if claimed.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    Ok(claimed)
}

/// `InvalidInput` unless `status` is one a held job may finish in (terminal or paused).
pub fn check_finish_status(status: JobStatus) -> Result<()> {
    if status.is_terminal() || status == JobStatus::Paused {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "complete_job: status must be completed, failed, cancelled or paused, not {}",
            status.as_str()
        )))
    }
}

/// `InvalidInput` unless `status` is one a paused job may be settled in (completed,
/// cancelled, failed), as agno's `settle_paused_job` allows.
pub fn check_settle_status(status: JobStatus) -> Result<()> {
    if status.is_terminal() {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "settle_paused_job: status must be completed, cancelled or failed, not {}",
            status.as_str()
        )))
    }
}

/// agno's `queue_stats`: jobs per state (states with none left out) and the age of the
/// oldest queued job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Jobs per state.
    pub counts: std::collections::BTreeMap<String, u64>,
    /// Seconds since the oldest queued job was created; `None` when none is queued.
    pub oldest_queued_age_seconds: Option<i64>,
}

/// The error for a transition whose fence failed: the worker no longer holds the lease.
pub fn lease_lost(id: &str, worker_id: &str, attempt: i64) -> Error {
    Error::new(
        ErrorKind::LeaseLost,
        format!(
            "job {id} is no longer held by {worker_id} at attempt {attempt} (it was reclaimed, finished or cancelled); \
             the result was not recorded"
        ),
    )
    .set_temporary(false)
}

/// The `error` a claim or a sweep records on a stored job it cannot decode (a payload
/// that is not JSON, a field of the wrong type) when it fails that job so that it does not
/// block the queue: every backend fails such a job in place, `failed` with this text, and
/// returns the others.
pub fn undecodable_job_error(id: &str, e: &Error) -> String {
    format!(
        "job {id} could not be decoded ({}); it was failed so that it does not block the queue: \
         fix or delete the stored job, then requeue it",
        e.message()
    )
}

/// Why a submission was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnqueueRejection {
    /// The queue holds `max_depth` queued jobs.
    QueueFull,
    /// The idempotency key was already used by this user; the original job is returned.
    Duplicate,
}

/// What [`JobStore::continue_job`] did (agno's `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContinueOutcome {
    /// The paused job is queued again with the continue's inputs.
    Queued,
    /// The job is already queued or running: attach to it; these inputs are discarded.
    Attach,
    /// The job is finished or absent.
    Conflict,
}

impl ContinueOutcome {
    /// agno's name: `queued`, `attach` or `conflict`.
    pub fn as_str(self) -> &'static str {
        match self {
            ContinueOutcome::Queued => "queued",
            ContinueOutcome::Attach => "attach",
            ContinueOutcome::Conflict => "conflict",
        }
    }
}

/// Result of [`JobStore::continue_job`].
#[derive(Debug, Clone, PartialEq)]
pub struct Continued {
    /// What happened.
    pub outcome: ContinueOutcome,
    /// The job as it is now (`None` when absent).
    pub job: Option<Job>,
}

/// agno's `continue_job` for a backend that can write a job back only while it is still
/// paused: reads job `id` (through `get_job`, scoped to `user_id`), applies
/// [`Job::continue_paused`] at `now()` and, when that queues it, `write_if_paused` stores it
/// (false when the job was no longer paused, and it is read again).
pub async fn continue_paused_job<G, W>(
    id: &str,
    continue_payload: &Value,
    now: impl Fn() -> i64,
    get_job: impl Fn() -> G,
    write_if_paused: impl Fn(Job) -> W,
) -> Result<Continued>
where
    G: std::future::Future<Output = Result<Option<Job>>>,
    W: std::future::Future<Output = Result<bool>>,
{
    for _ in 0..8 {
        let Some(mut job) = get_job().await? else {
            return Ok(Continued {
                outcome: ContinueOutcome::Conflict,
                job: None,
            });
        };
        let outcome = job.continue_paused(continue_payload, now());
        if outcome != ContinueOutcome::Queued || write_if_paused(job.clone()).await? {
            return Ok(Continued {
                outcome,
                job: Some(job),
            });
        }
    }
    Err(Error::new(
        ErrorKind::Conflict,
        format!("continue_job: job {id} kept changing while continuing it; retry"),
    )
    .set_temporary(true))
}

/// Result of [`JobStore::enqueue_job`].
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueueOutcome {
    /// `None` when accepted.
    pub rejection: Option<EnqueueRejection>,
    /// The stored job (the original one for a duplicate).
    pub job: Option<Job>,
}

/// One held job to finish in [`JobStore::complete_jobs`]: the fence (`id`, `attempt`; the
/// worker is the call's) and the state to end it in, as [`JobStore::complete_job`] takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct JobCompletion {
    /// The job.
    pub id: String,
    /// The attempt the worker claimed (the fencing token).
    pub attempt: i64,
    /// Completed, failed, cancelled or paused.
    pub status: JobStatus,
    /// Error text of the attempt.
    pub error: Option<String>,
}

impl JobCompletion {
    /// Finishing `job` (as claimed) in `status` with `error`.
    pub fn of(job: &Job, status: JobStatus, error: Option<String>) -> Self {
        JobCompletion {
            id: job.id.clone(),
            attempt: job.attempt,
            status,
            error,
        }
    }
}

/// `InvalidInput` unless every completion finishes in an allowed state
/// ([`check_finish_status`]) and names a job once: what [`JobStore::complete_jobs`] checks
/// before it writes anything.
pub fn check_completions(completions: &[JobCompletion]) -> Result<()> {
    let mut seen = std::collections::HashSet::with_capacity(completions.len());
    for c in completions {
        check_finish_status(c.status)?;
        if !seen.insert(c.id.as_str()) {
            return Err(Error::invalid_input(format!(
                "complete_jobs: job {} is listed twice; finish each job once per call",
                c.id
            )));
        }
    }
    Ok(())
}

/// Sorts claimed jobs oldest first (`created_at, id`), the order claims take them in.
pub fn sort_oldest_first(jobs: &mut [Job]) {
    jobs.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
}

/// Filters of [`JobStore::list_jobs`] (newest first).
#[derive(Debug, Clone, Default)]
pub struct JobQuery {
    /// Only jobs in this state.
    pub status: Option<JobStatus>,
    /// Only jobs of this session.
    pub session_id: Option<String>,
    /// Only this owner's jobs.
    pub user_id: Option<String>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
}

impl JobQuery {
    /// Whether `job` passes the filters (status, session, owner).
    pub fn matches(&self, job: &Job) -> bool {
        self.status.is_none_or(|s| s == job.status)
            && self
                .session_id
                .as_deref()
                .is_none_or(|s| s == job.session_id)
            && crate::visible_to(job.user_id.as_deref(), self.user_id.as_deref())
    }
}

/// Sorts jobs newest first (`created_at DESC, id DESC`), the order of `list_jobs`.
pub fn sort_newest_first(jobs: &mut [Job]) {
    jobs.sort_by(|a, b| (b.created_at, &b.id).cmp(&(a.created_at, &a.id)));
}

impl JobQuery {
    /// Sorts `jobs` (already filtered by [`JobQuery::matches`]) with [`sort_newest_first`],
    /// then cuts out the page; `total` counts every job.
    pub fn page(&self, mut jobs: Vec<Job>) -> Result<Page<Job>> {
        sort_newest_first(&mut jobs);
        Page::paginate(jobs, &self.pagination)
    }
}

/// Every job `query` matches (its pagination ignored), read through `list_jobs` a page at
/// a time: for the trait's defaults.
async fn every_job<S: JobStore + ?Sized>(store: &S, mut query: JobQuery) -> Result<Vec<Job>> {
    const PAGE: u64 = 100;
    let mut jobs = Vec::new();
    for page in 1.. {
        query.pagination = Pagination::page(PAGE, page);
        let items = store.list_jobs(query.clone()).await?.items;
        let last = (items.len() as u64) < PAGE;
        jobs.extend(items);
        if last {
            break;
        }
    }
    Ok(jobs)
}

/// Wake-ups for an idle worker from the store itself ([`JobStore::job_wakeups`]): one
/// whenever jobs may have become claimable (PostgreSQL `LISTEN`/`NOTIFY`). A hint, not a
/// delivery guarantee: a worker still polls, and wakes it may miss (a reconnect, a writer
/// that does not notify, such as agno's) cost it at most a poll interval.
#[async_trait]
pub trait JobWakeups: Send {
    /// Waits for the next wake-up; `None` once the source is gone for good (poll only from
    /// then on).
    async fn next(&mut self) -> Option<()>;
}

/// The durable job queue. Every transition after a claim is fenced on
/// `(id, worker_id, attempt, status = running)`; a stale worker gets `LeaseLost`.
#[async_trait]
pub trait JobStore: Send + Sync {
    /// Submits a job. A used `(idempotency_key, user_id)` returns the original job as
    /// `Duplicate`; `max_depth > 0` caps queued jobs (`QueueFull`); a taken id is
    /// `AlreadyExists`.
    async fn enqueue_job(&self, job: Job, max_depth: u64) -> Result<EnqueueOutcome>;

    /// Atomically claims the oldest available job (queued, or running with a lease older
    /// than `lock_grace_seconds` and attempts left) for `worker_id`, incrementing `attempt`.
    async fn claim_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>>;

    /// Refreshes the leases `worker_id` holds among `ids`; returns how many it still holds.
    async fn heartbeat_jobs(&self, worker_id: &str, ids: &[String]) -> Result<u64>;

    /// Moves a held job to a terminal or paused `status`. `LeaseLost` when the fence fails.
    async fn complete_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<Job>;

    /// Re-queues a held job after `retry_delay_seconds` if attempts remain, else fails it.
    /// `LeaseLost` when the fence fails.
    async fn retry_or_fail_job(
        &self,
        id: &str,
        worker_id: &str,
        attempt: i64,
        error: Option<String>,
        retry_delay_seconds: i64,
    ) -> Result<Job>;

    /// Hands back a held job its worker never started (say, one it claimed ahead and is
    /// shutting down with): queued again with the claim undone ([`Job::release`]), so the
    /// next worker runs it at the same attempt. `LeaseLost` when the fence fails;
    /// `Unsupported` where the backend does not implement it (the default).
    async fn release_job(&self, id: &str, worker_id: &str, attempt: i64) -> Result<Job> {
        let _ = (id, worker_id, attempt);
        Err(Error::new(
            ErrorKind::Unsupported,
            "release_job is not supported by this backend; let the lease run out instead",
        ))
    }

    /// Cancels running job `id` owned by `user_id` (any when `None`) from any replica
    /// ([`Job::cancel_running`]): the worker that runs it learns at its next heartbeat
    /// (the lease no longer renews; `agno-storage-worker` then fires the job's
    /// cancellation token) and its result is refused. agno's `cancel_job` leaves running
    /// jobs to the run's own cancellation; this is the store-level path that needs no
    /// shared cancellation flags. False when it is not running, absent or not the user's.
    /// `Unsupported` where the backend does not implement it (the default).
    async fn cancel_running_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let _ = (id, user_id);
        Err(Error::new(
            ErrorKind::Unsupported,
            "cancel_running_job is not supported by this backend",
        ))
    }

    /// agno's operator requeue of a failed or cancelled job owned by `user_id` (any when
    /// `None`): queued again with one more attempt ([`Job::requeue`]). False when it is in
    /// another state, absent or not the user's. `Unsupported` where the backend does not
    /// implement it (the default).
    async fn requeue_job(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let _ = (id, user_id);
        Err(Error::new(
            ErrorKind::Unsupported,
            "requeue_job is not supported by this backend",
        ))
    }

    /// Ends a paused job whose continuation ran outside the queue, in `status` (completed,
    /// cancelled or failed, else `InvalidInput`). False unless it is paused. `Unsupported`
    /// where the backend does not implement it (the default).
    async fn settle_paused_job(
        &self,
        id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        check_settle_status(status)?;
        let _ = (id, error);
        Err(Error::new(
            ErrorKind::Unsupported,
            "settle_paused_job is not supported by this backend",
        ))
    }

    /// Resumes paused job `id` owned by `user_id` (any when `None`) with
    /// `continue_payload` ([`Job::continue_paused`], agno's `continue_job`): `Queued` when
    /// it was paused, `Attach` when it is queued or running, `Conflict` when it is finished
    /// or absent. `Unsupported` where the backend does not implement it (the default).
    async fn continue_job(
        &self,
        id: &str,
        user_id: Option<&str>,
        continue_payload: Value,
    ) -> Result<Continued> {
        let _ = (id, user_id, continue_payload);
        Err(Error::new(
            ErrorKind::Unsupported,
            "continue_job is not supported by this backend",
        ))
    }

    /// Up to `limit` running jobs whose lease is older than `lock_grace_seconds` and that
    /// have no attempt left ([`Job::is_sweepable`]), oldest lease first (agno's
    /// `sweep_exhausted_jobs`): no claim will take them; a sweeper settles each with
    /// [`JobStore::acquire_sweep`] then [`JobStore::settle_swept_job`]. The default reads
    /// the running jobs through `list_jobs`.
    async fn sweep_exhausted_jobs(
        &self,
        lock_grace_seconds: i64,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let now = crate::now_epoch_seconds();
        let running = JobQuery {
            status: Some(JobStatus::Running),
            ..Default::default()
        };
        let mut swept: Vec<Job> = every_job(self, running)
            .await?
            .into_iter()
            .filter(|j| j.is_sweepable(now, lock_grace_seconds))
            .collect();
        swept.sort_by(|a, b| (a.locked_at, &a.id).cmp(&(b.locked_at, &b.id)));
        swept.truncate(limit);
        Ok(swept)
    }

    /// Takes a sweepable job's lease for `worker_id` ([`Job::take_sweep`]; agno's
    /// `acquire_sweep`): false when it is no longer sweepable (a heartbeat came, another
    /// sweeper took it). `Unsupported` where the backend does not implement it (the
    /// default).
    async fn acquire_sweep(
        &self,
        id: &str,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<bool> {
        let _ = (id, worker_id, lock_grace_seconds);
        Err(Error::new(
            ErrorKind::Unsupported,
            "acquire_sweep is not supported by this backend",
        ))
    }

    /// Ends a job `worker_id` swept in `status` (completed, cancelled, paused or failed,
    /// else `InvalidInput`; agno's `settle_swept_job`), releasing its lease: false unless
    /// it is running under `worker_id`. `Unsupported` where the backend does not
    /// implement it (the default).
    async fn settle_swept_job(
        &self,
        id: &str,
        worker_id: &str,
        status: JobStatus,
        error: Option<String>,
    ) -> Result<bool> {
        check_finish_status(status)?;
        let _ = (id, worker_id, error);
        Err(Error::new(
            ErrorKind::Unsupported,
            "settle_swept_job is not supported by this backend",
        ))
    }

    /// A source of [`JobWakeups`] for a worker, where the backend has one (PostgreSQL:
    /// our enqueues and the other transitions that make a job claimable notify
    /// `agno_jobs`); `None` (the default) where a worker can only poll.
    async fn job_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        Ok(None)
    }

    /// How many jobs are queued (agno's `count_queued_jobs`). The default counts through
    /// `list_jobs`.
    async fn count_queued_jobs(&self) -> Result<u64> {
        Ok(self
            .list_jobs(JobQuery {
                status: Some(JobStatus::Queued),
                pagination: Pagination::limit(1),
                ..Default::default()
            })
            .await?
            .total)
    }

    /// Jobs per state and the age of the oldest queued one (agno's `queue_stats`). The
    /// default asks `list_jobs` once per state (plus once for the oldest queued job).
    async fn queue_stats(&self) -> Result<QueueStats> {
        let mut stats = QueueStats::default();
        for status in JobStatus::ALL {
            let page = |page| JobQuery {
                status: Some(status),
                pagination: Pagination::page(1, page),
                ..Default::default()
            };
            let total = self.list_jobs(page(1)).await?.total;
            if total == 0 {
                continue;
            }
            stats.counts.insert(status.as_str().to_owned(), total);
            if status == JobStatus::Queued {
                // Newest first: the last page of one holds the oldest.
                let oldest = self.list_jobs(page(total)).await?.items;
                stats.oldest_queued_age_seconds = oldest
                    .first()
                    .map(|j| (crate::now_epoch_seconds() - j.created_at).max(0));
            }
        }
        Ok(stats)
    }

    /// The id of the ticket a queued serialized job waits behind in its session
    /// ([`Job::session_blocker`]), or `None` when it may run, is not queued, not serialized
    /// or absent (agno's `session_blocker`). The default reads the session's jobs through
    /// `list_jobs`.
    async fn session_blocker(&self, id: &str) -> Result<Option<String>> {
        let Some(job) = self
            .get_job(id, None)
            .await?
            .filter(|j| j.status == JobStatus::Queued && j.is_serialized())
        else {
            return Ok(None);
        };
        let of_session = JobQuery {
            session_id: Some(job.session_id.clone()),
            ..Default::default()
        };
        let session = every_job(self, of_session).await?;
        Ok(job.session_blocker(&session).map(|b| b.id.clone()))
    }

    /// Cancels a queued or paused job owned by `user_id` (any when `None`).
    async fn cancel_job(&self, id: &str, user_id: Option<&str>) -> Result<bool>;

    /// The job, or `None` when absent or not owned by `user_id`.
    async fn get_job(&self, id: &str, user_id: Option<&str>) -> Result<Option<Job>>;

    /// Jobs matching `query`, newest first, with the count before paging.
    async fn list_jobs(&self, query: JobQuery) -> Result<Page<Job>>;

    /// Deletes completed, failed and cancelled jobs finished at least `older_than_seconds` ago.
    async fn cleanup_jobs(&self, older_than_seconds: i64) -> Result<u64>;

    /// Deletes every job `user_id` owns, whatever its status (with what the backend keeps
    /// beside it: idempotency and session guards), and returns how many; never a job of
    /// another owner or an unowned one. A worker running one of them then finds it gone: its
    /// fenced completion records nothing.
    async fn delete_user_jobs(&self, user_id: &str) -> Result<u64>;

    /// Submits jobs as [`JobStore::enqueue_job`] would one after another: one result per
    /// job, in order (a taken id is that job's `AlreadyExists`; the others still go in).
    /// Backends with a multi-row insert override it; the default calls `enqueue_job`.
    async fn enqueue_jobs(
        &self,
        jobs: Vec<Job>,
        max_depth: u64,
    ) -> Result<Vec<Result<EnqueueOutcome>>> {
        let mut outcomes = Vec::with_capacity(jobs.len());
        for job in jobs {
            outcomes.push(self.enqueue_job(job, max_depth).await);
        }
        Ok(outcomes)
    }

    /// Claims up to `limit` available jobs for `worker_id`, returned oldest first, each as
    /// [`JobStore::claim_job`] claims one (a backend that spreads claimers over the oldest
    /// few may take a slightly younger one): its own lease and next attempt (its
    /// fencing token). Fewer (or none) when fewer are available. Jobs it claimed are
    /// always returned: an error after the first claim ends the batch early instead (the
    /// next call meets it again). Backends that claim many rows in one statement override
    /// it; the default calls `claim_job` until it has `limit` or none is left.
    async fn claim_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let mut claimed = claim_one_by_one(limit, || {
            self.claim_job(worker_id, lock_grace_seconds, deployment_id)
        })
        .await?;
        sort_oldest_first(&mut claimed);
        Ok(claimed)
    }

    /// Finishes many held jobs of `worker_id`, each fenced on its own: one result per
    /// completion, in order: `Ok` when it finished as [`JobStore::complete_job`] would
    /// finish it, `LeaseLost` for a stale one (the rest still finish). Nothing is read
    /// back: the caller holds the jobs. `InvalidInput`, with nothing written, when a status is not one a job
    /// may finish in or a job is listed twice ([`check_completions`]). Backends that
    /// finish many rows in one statement override it; the default calls `complete_job`.
    async fn complete_jobs(
        &self,
        worker_id: &str,
        completions: Vec<JobCompletion>,
    ) -> Result<Vec<Result<()>>> {
        check_completions(&completions)?;
        let mut results = Vec::with_capacity(completions.len());
        for c in completions {
            results.push(
                self.complete_job(&c.id, worker_id, c.attempt, c.status, c.error)
                    .await
                    .map(drop),
            );
        }
        Ok(results)
    }
}
