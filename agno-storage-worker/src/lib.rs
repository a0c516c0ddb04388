//! A worker runtime for agno-storage's durable job queue, on any [`JobStore`].
//!
//! A [`Worker`] claims jobs in batches up to its free slots, runs each on its own task
//! through your [`Handler`], and writes the results back:
//!
//! - **Bounded concurrency**: at most `concurrency` handlers run at once (agno's default
//!   32); a batch claim ([`JobStore::claim_jobs`]) asks for the free slots, plus an
//!   optional [`WorkerBuilder::prefetch`] of jobs claimed ahead.
//! - **Heartbeats on their own task**, every `max(1 s, lock_grace / 3)`, whatever the
//!   handlers are doing (agno moved its heartbeats to a thread after starved loops got live
//!   jobs swept and run twice). A job whose lease is found lost (another worker reclaimed
//!   it, or it was finished elsewhere) has its [`JobContext::cancelled`] token fired.
//! - **Batched completions**: finished jobs are written by one [`JobStore::complete_jobs`]
//!   per batch, each fenced on its own; failures go through
//!   [`JobStore::retry_or_fail_job`] with agno's full-jitter backoff.
//! - **Wake-ups without busy polling**: a worker with free slots sleeps until a handler
//!   finishes, [`Worker::wake`] is called (say, by the code that enqueues), or the poll
//!   interval passes (with ±20% jitter, so replicas do not poll in step).
//! - **Cleanup**: terminal jobs older than the retention are deleted about hourly, as
//!   agno's worker does; abandoned jobs with no attempt left are swept to `failed`.
//! - **Store outages**: a failing claim backs off (doubling from the poll interval, at most
//!   30 s) and the worker resumes by itself when the store answers.
//! - **Live runs** (optional): handlers publish events ([`JobContext::publish`]) to a
//!   [`RunEvents`] stream ([`WorkerBuilder::events`]), each attempt fenced by its number,
//!   and shared cancellation flags ([`WorkerBuilder::cancellations`]) stop a flagged job
//!   within [`CANCEL_POLL`]. On Redis both are agno's layout (`agno_storage_redis_events::Coordination`);
//!   [`LocalRunEvents`] serves one process.
//! - **Graceful shutdown**: [`Worker::shutdown`] stops claiming, hands back the jobs it
//!   claimed ahead, lets running handlers finish within a deadline, cancels the rest, and
//!   writes every result it has.
//!
//! A [`Scheduler`] fires the due schedules of the schedules table as jobs of type
//! [`scheduler::SCHEDULE_JOB_TYPE`], which a worker's handler performs (see [`scheduler`]).
//!
//! ```no_run
//! # async fn demo(db: agno_storage_core::AgnoDb) -> agno_storage_core::Result<()> {
//! use agno_storage_worker::{Outcome, Worker};
//!
//! let worker = Worker::builder(db.job_store()?)
//!     .concurrency(8)
//!     .handler(|job: agno_storage_core::Job, _ctx| async move {
//!         println!("running {}", job.id);
//!         Outcome::Completed
//!     })
//!     .start()?;
//! // ... later
//! let stats = worker.shutdown(std::time::Duration::from_secs(30)).await;
//! println!("{stats:?}");
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod events;
mod runtime;
pub mod scheduler;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::run_events::{RunCancellations, RunEvents};
use agno_storage_core::{async_trait, Error, Job, JobStore, Result};
use serde_json::Value;
pub use tokio_util::sync::CancellationToken;

pub use events::LocalRunEvents;
pub use runtime::{Worker, WorkerStats, CANCEL_POLL, SWEPT_ERROR};
pub use scheduler::{Scheduler, SchedulerStats};

/// How a handler ended a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Finished successfully (`completed`).
    Completed,
    /// Waiting for human input (`paused`); continued later through the store.
    Paused,
    /// Stopped on request (`cancelled`).
    Cancelled,
    /// Failed: queued again after a jittered delay while attempts remain, else `failed`.
    Failed(String),
}

/// What a handler gets beside its job.
#[derive(Clone)]
pub struct JobContext {
    worker_id: Arc<str>,
    cancelled: CancellationToken,
    run_id: String,
    attempt: i64,
    events: Option<Arc<dyn RunEvents>>,
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("worker_id", &self.worker_id)
            .field("run_id", &self.run_id)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// Publishes `event` (a JSON object whose `event` field is its type, as agno's run
    /// events) on the worker's event stream ([`WorkerBuilder::events`]) under the job's id,
    /// fenced by its attempt: its index, or `None` when no stream is configured or a newer
    /// attempt of the job has begun (this one is stale and should stop).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `event` is not an object; the stream's own error when it is
    /// unreachable (a transport fault: the job goes on).
    pub async fn publish(&self, event: Value) -> Result<Option<i64>> {
        match &self.events {
            Some(events) => {
                events
                    .add_event(&self.run_id, &event, Some(self.attempt))
                    .await
            }
            None => Ok(None),
        }
    }

    /// The id of the worker running the job (its lease holder).
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// Fired when the job should stop: its lease was lost (reclaimed by another worker or
    /// finished elsewhere), or the worker is shutting down past its deadline. A handler
    /// that stops on it returns whatever it likes; a lost lease refuses the result.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancelled
    }
}

/// Runs one job. Implemented for every `Fn(Job, JobContext) -> impl Future<Output = Outcome>`.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs `job` and says how it ended. A panic counts as `Failed`.
    async fn run(&self, job: Job, ctx: JobContext) -> Outcome;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(Job, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send + 'static,
{
    async fn run(&self, job: Job, ctx: JobContext) -> Outcome {
        self(job, ctx).await
    }
}

/// Settings of a [`Worker`]; made by [`Worker::builder`].
pub struct WorkerBuilder {
    store: Arc<dyn JobStore>,
    handler: Option<Arc<dyn Handler>>,
    events: Option<Arc<dyn RunEvents>>,
    cancellations: Option<Arc<dyn RunCancellations>>,
    config: Config,
}

/// What the runtime reads of the builder.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) worker_id: Arc<str>,
    pub(crate) deployment_id: Option<String>,
    pub(crate) concurrency: usize,
    pub(crate) prefetch: usize,
    pub(crate) lock_grace: Duration,
    pub(crate) poll_interval: Duration,
    pub(crate) retry_delay: Duration,
    pub(crate) retention: Duration,
    pub(crate) cleanup_interval: Duration,
    pub(crate) sweep: bool,
}

/// agno's default number of jobs a replica runs at once (`AGNO_BACKGROUND_MAX_CONCURRENCY`).
pub const DEFAULT_CONCURRENCY: usize = 32;
/// agno's default lease: a job whose holder stopped heartbeating is reclaimable after it.
pub const DEFAULT_LOCK_GRACE: Duration = Duration::from_secs(60);
/// agno's default base delay of a retry (`retry_delay_seconds`).
pub const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(30);
/// agno's default retention of finished jobs (`retention_seconds`).
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(86_400);

impl WorkerBuilder {
    pub(crate) fn new(store: Arc<dyn JobStore>) -> Self {
        WorkerBuilder {
            store,
            handler: None,
            events: None,
            cancellations: None,
            config: Config {
                worker_id: format!("worker-{}", uuid::Uuid::new_v4().simple()).into(),
                deployment_id: None,
                concurrency: DEFAULT_CONCURRENCY,
                prefetch: 0,
                lock_grace: DEFAULT_LOCK_GRACE,
                poll_interval: Duration::from_secs(1),
                retry_delay: DEFAULT_RETRY_DELAY,
                retention: DEFAULT_RETENTION,
                cleanup_interval: Duration::from_secs(3_600),
                sweep: true,
            },
        }
    }

    /// The handler that runs every job (required).
    pub fn handler(mut self, handler: impl Handler) -> Self {
        self.handler = Some(Arc::new(handler));
        self
    }

    /// The lease holder's id (default `worker-{uuid}`); unique per running worker.
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.config.worker_id = id.into().into();
        self
    }

    /// Claim only jobs of no deployment or of this one (agno's claim affinity).
    pub fn deployment_id(mut self, id: impl Into<String>) -> Self {
        self.config.deployment_id = Some(id.into());
        self
    }

    /// Handlers running at once (default [`DEFAULT_CONCURRENCY`]); at least 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.config.concurrency = n;
        self
    }

    /// Jobs claimed ahead of a free slot (default 0), so one claim serves many short jobs
    /// (graphile-worker's local queue). They are leased to this worker while they wait:
    /// other workers cannot take them, their leases are heartbeated, and the ones still
    /// waiting at shutdown are handed back ([`JobStore::release_job`]) at the attempt they
    /// had. Keep it 0 when jobs are long or replicas should share the queue evenly.
    pub fn prefetch(mut self, n: usize) -> Self {
        self.config.prefetch = n;
        self
    }

    /// The lease (default [`DEFAULT_LOCK_GRACE`]): heartbeats every third of it, and
    /// another worker may reclaim a job this long after its last heartbeat. At least 1 s.
    pub fn lock_grace(mut self, grace: Duration) -> Self {
        self.config.lock_grace = grace;
        self
    }

    /// How long an idle worker sleeps between claims when nothing wakes it (default 1 s,
    /// ±20% jitter).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.config.poll_interval = interval;
        self
    }

    /// Base delay of a retry (default [`DEFAULT_RETRY_DELAY`]); attempt `n` waits a random
    /// time up to `min(base * 2^(n-1), base * 10)`, as agno does.
    pub fn retry_delay(mut self, base: Duration) -> Self {
        self.config.retry_delay = base;
        self
    }

    /// Finished jobs older than this are deleted (default [`DEFAULT_RETENTION`]), checked
    /// every `interval` (default an hour).
    pub fn retention(mut self, retention: Duration, interval: Duration) -> Self {
        self.config.retention = retention;
        self.config.cleanup_interval = interval;
        self
    }

    /// Whether this worker fails abandoned jobs (default true): running jobs whose holder
    /// stopped heartbeating more than the lease ago and that have no attempt left, which no
    /// claim takes (agno's default `max_attempts` is 1). Each is settled `failed` with
    /// [`SWEPT_ERROR`], checked every poll interval, as agno's worker does. Turn it off
    /// when agno's AgentOS workers share the queue and should be the ones to sweep (agno
    /// also marks the run row of a swept job, which a store-level worker cannot).
    pub fn sweep_exhausted(mut self, sweep: bool) -> Self {
        self.config.sweep = sweep;
        self
    }

    /// Where handlers' events go ([`JobContext::publish`]) and the runs' statuses are kept
    /// for tails: the Redis stream (`agno_storage_redis_events::Coordination`, agno's layout, tailed
    /// from any replica) or a [`LocalRunEvents`] (this process only). The worker begins
    /// each attempt on it (a retry drops the attempt before it's events, indices go on),
    /// marks the run running, and ends it `COMPLETED`, `PAUSED`, `CANCELLED` or, once no
    /// attempt is left, `ERROR`; a stream fault is counted in the stats and never stops a
    /// job. None by default.
    pub fn events(mut self, events: Arc<dyn RunEvents>) -> Self {
        self.events = Some(events);
        self
    }

    /// Shared cancellation flags (agno's Redis `RedisRunCancellationManager` layout:
    /// `agno_storage_redis_events::Coordination`): every [`CANCEL_POLL`] the worker asks which of
    /// the jobs it holds are flagged and fires their [`JobContext::cancelled`] token, so a
    /// cancel from any replica, ours or agno's, stops a job at once. Without them a job
    /// cancelled through the store ([`JobStore::cancel_running_job`]) stops at the next
    /// heartbeat. A handler that stops on it returns [`Outcome::Cancelled`].
    pub fn cancellations(mut self, flags: Arc<dyn RunCancellations>) -> Self {
        self.cancellations = Some(flags);
        self
    }

    /// Starts the worker on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` naming the setting when no handler was given, the concurrency is 0,
    /// the lease is under a second or the poll interval is zero.
    pub fn start(self) -> Result<Worker> {
        let Some(handler) = self.handler else {
            return Err(Error::invalid_input(
                "Worker::builder(..).handler(..) is required: say what runs each job",
            ));
        };
        let c = &self.config;
        if c.concurrency == 0 {
            return Err(Error::invalid_input(
                "worker concurrency is 0; give at least 1",
            ));
        }
        if c.lock_grace < Duration::from_secs(1) {
            return Err(Error::invalid_input(format!(
                "worker lock_grace is {:?}; leases are counted in whole seconds, give at least 1 s",
                c.lock_grace
            )));
        }
        if c.poll_interval.is_zero() || c.cleanup_interval.is_zero() {
            return Err(Error::invalid_input(
                "worker poll and cleanup intervals must be longer than zero",
            ));
        }
        let live = runtime::Live {
            events: self.events,
            cancellations: self.cancellations,
        };
        Ok(runtime::start(self.store, handler, live, self.config))
    }
}

/// agno's full-jitter backoff: a random delay up to `min(base * 2^(attempt-1), base * 10)`
/// (`os/job_queue.py`), in whole seconds as `retry_or_fail_job` takes it.
pub fn retry_delay_seconds(base: Duration, attempt: i64) -> i64 {
    let base = base.as_secs() as i64;
    let exp = attempt.saturating_sub(1).clamp(0, 30) as u32;
    let cap = base
        .saturating_mul(2i64.saturating_pow(exp))
        .min(base.saturating_mul(10));
    if cap <= 0 {
        0
    } else {
        fastrand::i64(0..=cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_is_capped_full_jitter() {
        let base = Duration::from_secs(30);
        for _ in 0..200 {
            assert!((0..=30).contains(&retry_delay_seconds(base, 1)));
            assert!((0..=120).contains(&retry_delay_seconds(base, 3)));
            assert!((0..=300).contains(&retry_delay_seconds(base, 20)));
        }
        assert_eq!(retry_delay_seconds(Duration::ZERO, 5), 0);
    }
}
