//! The worker's tasks: the claimer, one task per running job, the completer, the heartbeat
//! and the cleanup.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agno_storage_core::run_events::{RunCancellations, RunEvents, StreamStatus};
use agno_storage_core::{ErrorKind, Job, JobCompletion, JobStatus, JobStore};
use serde_json::Value;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{retry_delay_seconds, Config, Handler, JobContext, Outcome, WorkerBuilder};

/// The most results one completion call writes.
const COMPLETION_BATCH: usize = 500;

/// How long [`Worker::shutdown`] still waits, after cancelling the handlers that outran the
/// deadline, for them to return.
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// What a worker has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Jobs written back as completed.
    pub completed: u64,
    /// Jobs written back as paused.
    pub paused: u64,
    /// Jobs written back as cancelled.
    pub cancelled: u64,
    /// Failed attempts queued again for a retry.
    pub retried: u64,
    /// Jobs failed for good (no attempts left).
    pub failed: u64,
    /// Results refused because the lease was lost (the job was reclaimed or finished
    /// elsewhere).
    pub lease_lost: u64,
    /// Claimed jobs handed back unstarted at shutdown ([`JobStore::release_job`]).
    pub released: u64,
    /// Abandoned jobs with no attempt left that this worker failed
    /// ([`WorkerBuilder::sweep_exhausted`](crate::WorkerBuilder::sweep_exhausted)).
    pub swept: u64,
    /// Store calls that failed (the jobs they concerned stay leased and are reclaimed
    /// after the lease).
    pub errors: u64,
    /// Handlers running now.
    pub running: usize,
    /// The last store error, if any.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    claimed: AtomicU64,
    completed: AtomicU64,
    paused: AtomicU64,
    cancelled: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    lease_lost: AtomicU64,
    released: AtomicU64,
    swept: AtomicU64,
    errors: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A job this worker holds: its fencing token and the cancellation its handler watches.
struct Held {
    attempt: i64,
    cancel: CancellationToken,
}

/// A handler's result, waiting to be written.
struct Finished {
    id: String,
    attempt: i64,
    outcome: Outcome,
}

/// The live coordination a worker may have: an event stream and cancellation flags.
pub(crate) struct Live {
    pub(crate) events: Option<Arc<dyn RunEvents>>,
    pub(crate) cancellations: Option<Arc<dyn RunCancellations>>,
}

struct Shared {
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    events: Option<Arc<dyn RunEvents>>,
    cancellations: Option<Arc<dyn RunCancellations>>,
    config: Config,
    held: Mutex<HashMap<String, Held>>,
    /// Claimed jobs waiting for a slot (at most the prefetch beyond the free slots).
    buffer: Mutex<VecDeque<Job>>,
    slots: Arc<Semaphore>,
    wake: Notify,
    /// Stops claiming.
    stop: CancellationToken,
    /// Parent of every handler's cancellation.
    abort: CancellationToken,
    /// Stops the heartbeat and the cleanup, once every result is written.
    quiet: CancellationToken,
    counters: Counters,
    last_error: Mutex<Option<String>>,
    results: Mutex<Option<mpsc::UnboundedSender<Finished>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn note_error(&self, what: &str, e: &agno_storage_core::Error) {
        bump(&self.counters.errors);
        *lock(&self.last_error) = Some(format!("{what}: {e}"));
    }

    fn grace_seconds(&self) -> i64 {
        self.config.lock_grace.as_secs() as i64
    }
}

/// A running worker; see the crate docs. Dropping it without [`Worker::shutdown`] stops
/// its tasks at once (jobs it held are reclaimed by others after the lease).
pub struct Worker {
    shared: Arc<Shared>,
    claimer: Option<JoinHandle<()>>,
    completer: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
}

impl Worker {
    /// Settings for a worker over `store`.
    pub fn builder(store: Arc<dyn JobStore>) -> WorkerBuilder {
        WorkerBuilder::new(store)
    }

    /// The lease holder's id.
    pub fn worker_id(&self) -> &str {
        &self.shared.config.worker_id
    }

    /// Claims at once if a slot is free: call it after enqueueing, so the job starts
    /// without waiting for the poll interval.
    pub fn wake(&self) {
        self.shared.wake.notify_one();
    }

    /// What the worker has done so far.
    pub fn stats(&self) -> WorkerStats {
        let c = &self.shared.counters;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WorkerStats {
            claimed: load(&c.claimed),
            completed: load(&c.completed),
            paused: load(&c.paused),
            cancelled: load(&c.cancelled),
            retried: load(&c.retried),
            failed: load(&c.failed),
            lease_lost: load(&c.lease_lost),
            released: load(&c.released),
            swept: load(&c.swept),
            errors: load(&c.errors),
            running: self.shared.config.concurrency - self.shared.slots.available_permits(),
            last_error: lock(&self.shared.last_error).clone(),
        }
    }

    /// Stops claiming, hands back the prefetched jobs that never started, lets running
    /// handlers finish within `deadline`, then fires the
    /// cancellation of those still running and waits a few seconds more for them; writes
    /// every result it got and returns the final stats. Jobs whose handlers never returned
    /// stay leased and are reclaimed by other workers after the lease.
    pub async fn shutdown(mut self, deadline: Duration) -> WorkerStats {
        let shared = self.shared.clone();
        shared.stop.cancel();
        if let Some(claimer) = self.claimer.take() {
            let _ = claimer.await;
        }
        release_unstarted(&shared).await;
        let all = shared.config.concurrency as u32;
        let idle = tokio::time::timeout(deadline, shared.slots.acquire_many(all))
            .await
            .is_ok();
        if !idle {
            shared.abort.cancel();
            let _ = tokio::time::timeout(CANCEL_GRACE, shared.slots.acquire_many(all)).await;
        }
        lock(&shared.results).take();
        if let Some(completer) = self.completer.take() {
            let _ = tokio::time::timeout(CANCEL_GRACE, completer).await;
        }
        shared.quiet.cancel();
        for task in self.background.drain(..) {
            let _ = task.await;
        }
        self.stats()
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shared.stop.cancel();
        self.shared.abort.cancel();
        self.shared.quiet.cancel();
        for task in self
            .claimer
            .iter()
            .chain(self.completer.iter())
            .chain(self.background.iter())
        {
            task.abort();
        }
    }
}

pub(crate) fn start(
    store: Arc<dyn JobStore>,
    handler: Arc<dyn Handler>,
    live: Live,
    config: Config,
) -> Worker {
    let (tx, rx) = mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        store,
        handler,
        events: live.events,
        cancellations: live.cancellations,
        slots: Arc::new(Semaphore::new(config.concurrency)),
        config,
        held: Mutex::new(HashMap::new()),
        buffer: Mutex::new(VecDeque::new()),
        wake: Notify::new(),
        stop: CancellationToken::new(),
        abort: CancellationToken::new(),
        quiet: CancellationToken::new(),
        counters: Counters::default(),
        last_error: Mutex::new(None),
        results: Mutex::new(Some(tx)),
    });
    Worker {
        claimer: Some(tokio::spawn(claim_loop(shared.clone()))),
        completer: Some(tokio::spawn(complete_loop(shared.clone(), rx))),
        background: vec![
            tokio::spawn(heartbeat_loop(shared.clone())),
            tokio::spawn(cleanup_loop(shared.clone())),
            tokio::spawn(wakeup_loop(shared.clone())),
            tokio::spawn(sweep_loop(shared.clone())),
            tokio::spawn(cancel_loop(shared.clone())),
        ],
        shared,
    }
}

/// The longest wait between claims while the store keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait after `failures` consecutive failed claims: the poll interval doubled per
/// failure, at most [`MAX_BACKOFF`] (or the poll interval, if that is longer).
fn backoff(poll: Duration, failures: u32) -> Duration {
    let doubled = poll.saturating_mul(1 << failures.min(16));
    doubled.min(MAX_BACKOFF.max(poll))
}

/// The poll interval with ±20% jitter.
fn jittered(interval: Duration) -> Duration {
    interval.mul_f64(0.8 + 0.4 * fastrand::f64())
}

/// Claims as many jobs as slots are free (plus the prefetch room), starts them, and sleeps
/// until a slot frees up, someone wakes it, or the poll interval passes.
async fn claim_loop(shared: Arc<Shared>) {
    let config = &shared.config;
    // Consecutive failed claims: the wait doubles with each, up to [`MAX_BACKOFF`].
    let mut failures: u32 = 0;
    while !shared.stop.is_cancelled() {
        dispatch(&shared);
        let free = shared.slots.available_permits();
        let buffered = lock(&shared.buffer).len();
        let want = free + config.prefetch.saturating_sub(buffered);
        // With a prefetch, refill once the buffer is half used, not one job at a time.
        let refill = free > 0 || buffered <= config.prefetch / 2;
        let mut full = false;
        if want > 0 && refill {
            match shared
                .store
                .claim_jobs(
                    &config.worker_id,
                    shared.grace_seconds(),
                    config.deployment_id.as_deref(),
                    want,
                )
                .await
            {
                Ok(jobs) => {
                    failures = 0;
                    full = jobs.len() == want;
                    hold(&shared, jobs);
                    dispatch(&shared);
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    shared.note_error("claim_jobs", &e);
                }
            }
        }
        if full
            && (shared.slots.available_permits() > 0
                || lock(&shared.buffer).len() < config.prefetch)
        {
            continue;
        }
        let wait = if failures > 0 {
            // The store is failing (unreachable, restarting): back off, jittered, and
            // claim again when it answers; nothing beyond the held batch is in memory.
            jittered(backoff(config.poll_interval, failures))
        } else if free == 0 || full {
            // Busy: a finishing handler wakes us; the interval only bounds the wait.
            config.poll_interval
        } else {
            jittered(config.poll_interval)
        };
        tokio::select! {
            _ = shared.wake.notified() => {}
            _ = tokio::time::sleep(wait) => {}
            _ = shared.stop.cancelled() => break,
        }
    }
}

/// Records claimed jobs as held (their leases are heartbeated from now on) and queues them
/// for a slot.
fn hold(shared: &Shared, jobs: Vec<Job>) {
    let mut held = lock(&shared.held);
    let mut buffer = lock(&shared.buffer);
    for job in jobs {
        bump(&shared.counters.claimed);
        held.insert(
            job.id.clone(),
            Held {
                attempt: job.attempt,
                cancel: shared.abort.child_token(),
            },
        );
        buffer.push_back(job);
    }
}

/// Starts waiting jobs while slots are free. A slot is taken only with a job to run in
/// it, so [`WorkerStats::running`] never counts a slot taken while the buffer is empty.
fn dispatch(shared: &Arc<Shared>) {
    loop {
        let (job, permit) = {
            let mut buffer = lock(&shared.buffer);
            if buffer.is_empty() {
                return;
            }
            let Ok(permit) = shared.slots.clone().try_acquire_owned() else {
                return;
            };
            let Some(job) = buffer.pop_front() else {
                return;
            };
            (job, permit)
        };
        run_job(shared, job, permit);
    }
}

/// Hands back the claimed jobs that never started (at shutdown), so another worker runs
/// them at the same attempt.
async fn release_unstarted(shared: &Shared) {
    let jobs: Vec<Job> = lock(&shared.buffer).drain(..).collect();
    for job in jobs {
        match shared
            .store
            .release_job(&job.id, &shared.config.worker_id, job.attempt)
            .await
        {
            Ok(_) => bump(&shared.counters.released),
            Err(e) if e.kind() == ErrorKind::LeaseLost => bump(&shared.counters.lease_lost),
            Err(e) => shared.note_error("release_job", &e),
        }
        lock(&shared.held).remove(&job.id);
    }
}

/// Runs one claimed job on its own task; its result goes to the completer.
fn run_job(shared: &Arc<Shared>, job: Job, permit: OwnedSemaphorePermit) {
    let Some(cancel) = lock(&shared.held).get(&job.id).map(|h| h.cancel.clone()) else {
        return;
    };
    let Some(results) = lock(&shared.results).clone() else {
        return;
    };
    let shared = shared.clone();
    tokio::spawn(async move {
        let (id, attempt, last_try) =
            (job.id.clone(), job.attempt, job.attempt >= job.max_attempts);
        let continuation = is_continuation(&job);
        let ctx = JobContext {
            worker_id: shared.config.worker_id.clone(),
            cancelled: cancel,
            run_id: id.clone(),
            attempt,
            events: shared.events.clone(),
        };
        begin_events(&shared, &id, attempt, continuation).await;
        let handler = shared.handler.clone();
        // A panic fails the attempt, on this task (no second spawn per job).
        let run = std::panic::AssertUnwindSafe(handler.run(job, ctx));
        let outcome = match futures::FutureExt::catch_unwind(run).await {
            Ok(outcome) => outcome,
            Err(panic) => Outcome::Failed(format!(
                "the job's handler panicked: {}",
                panic_message(panic.as_ref())
            )),
        };
        end_events(&shared, &id, attempt, &outcome, last_try).await;
        let _ = results.send(Finished {
            id,
            attempt,
            outcome,
        });
        drop(permit);
        // The freed slot takes the next prefetched job at once, not when the claimer is
        // back from a claim in flight; the claimer is woken to refill.
        if !shared.stop.is_cancelled() {
            dispatch(&shared);
        }
        shared.wake.notify_one();
    });
}

/// The text a panic carried (`panic!("…")`'s message), if any.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic without a message")
}

/// Whether `job` is a continuation leg of a paused run (agno: `bool(payload.get("continue"))`,
/// Python's truthiness).
fn is_continuation(job: &Job) -> bool {
    match job.payload.get("continue") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
    }
}

/// Begins the attempt on the event stream, as agno's worker does: it becomes the stream's
/// writer; a retry drops the events of the attempt before it, while a continuation leg
/// keeps the legs before it (valid history) and reopens the stream (voiding the pause's,
/// or a failed leg's, end of stream); the run is marked running. Fails open.
async fn begin_events(shared: &Shared, run_id: &str, attempt: i64, continuation: bool) {
    let Some(events) = &shared.events else { return };
    let begun = async {
        events.begin_attempt(run_id, attempt).await?;
        if continuation {
            events.reopen_run(run_id, true, None).await?;
        } else if attempt > 1 {
            events.reset_run_events(run_id, Some(attempt)).await?;
        }
        events
            .set_run_status(run_id, StreamStatus::Running, Some(attempt))
            .await
    };
    if let Err(e) = begun.await {
        shared.note_error("run events", &e);
    }
}

/// Ends the attempt on the event stream as the handler ended it (a failure with attempts
/// left goes back to pending for its retry). Fails open.
async fn end_events(
    shared: &Shared,
    run_id: &str,
    attempt: i64,
    outcome: &Outcome,
    last_try: bool,
) {
    let Some(events) = &shared.events else { return };
    let status = match outcome {
        Outcome::Completed => StreamStatus::Completed,
        Outcome::Paused => StreamStatus::Paused,
        Outcome::Cancelled => StreamStatus::Cancelled,
        Outcome::Failed(_) if last_try => StreamStatus::Error,
        Outcome::Failed(_) => StreamStatus::Pending,
    };
    let ended = if status.ends_tails() {
        events.complete_run(run_id, status, Some(attempt)).await
    } else {
        events.set_run_status(run_id, status, Some(attempt)).await
    };
    if let Err(e) = ended {
        shared.note_error("run events", &e);
    }
}

/// Writes results as they come: every waiting one at once (up to [`COMPLETION_BATCH`]) in
/// one `complete_jobs`, failures through `retry_or_fail_job`.
async fn complete_loop(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<Finished>) {
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while batch.len() < COMPLETION_BATCH {
            match rx.try_recv() {
                Ok(f) => batch.push(f),
                Err(_) => break,
            }
        }
        write_results(&shared, batch).await;
    }
}

async fn write_results(shared: &Shared, batch: Vec<Finished>) {
    let worker_id = &shared.config.worker_id;
    let c = &shared.counters;
    let mut completions = Vec::new();
    let retries_before = c.retried.load(Ordering::Relaxed);
    for f in batch {
        let status = match f.outcome {
            Outcome::Completed => JobStatus::Completed,
            Outcome::Paused => JobStatus::Paused,
            Outcome::Cancelled => JobStatus::Cancelled,
            Outcome::Failed(error) => {
                let delay = retry_delay_seconds(shared.config.retry_delay, f.attempt);
                match shared
                    .store
                    .retry_or_fail_job(&f.id, worker_id, f.attempt, Some(error), delay)
                    .await
                {
                    Ok(job) if job.status == JobStatus::Queued => bump(&c.retried),
                    Ok(_) => bump(&c.failed),
                    Err(e) if e.kind() == ErrorKind::LeaseLost => bump(&c.lease_lost),
                    Err(e) => shared.note_error("retry_or_fail_job", &e),
                }
                lock(&shared.held).remove(&f.id);
                continue;
            }
        };
        completions.push(JobCompletion {
            id: f.id,
            attempt: f.attempt,
            status,
            error: None,
        });
    }
    if c.retried.load(Ordering::Relaxed) > retries_before {
        // A retry may be due at once: claim without waiting for the poll.
        shared.wake.notify_one();
    }
    if completions.is_empty() {
        return;
    }
    let ids: Vec<(String, JobStatus)> = completions
        .iter()
        .map(|c| (c.id.clone(), c.status))
        .collect();
    match shared.store.complete_jobs(worker_id, completions).await {
        Ok(results) => {
            for ((_, status), result) in ids.iter().zip(results) {
                match result {
                    Ok(()) => bump(match status {
                        JobStatus::Paused => &c.paused,
                        JobStatus::Cancelled => &c.cancelled,
                        _ => &c.completed,
                    }),
                    Err(e) if e.kind() == ErrorKind::LeaseLost => bump(&c.lease_lost),
                    Err(e) => shared.note_error("complete_jobs", &e),
                }
            }
        }
        Err(e) => shared.note_error("complete_jobs", &e),
    }
    let mut held = lock(&shared.held);
    for (id, _) in ids {
        held.remove(&id);
    }
}

/// Renews the leases of every held job every `max(1 s, grace / 3)` (and keeps their event
/// streams alive); when fewer renew than are held, finds the lost ones and fires their
/// cancellation.
async fn heartbeat_loop(shared: Arc<Shared>) {
    let every = (shared.config.lock_grace / 3).max(Duration::from_secs(1));
    let worker_id = &shared.config.worker_id;
    // A fixed cadence: a slow beat does not push the next one back, so a lease sees a
    // beat every `every` while the store answers within it.
    let mut beats = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = beats.tick() => {}
            _ = shared.quiet.cancelled() => return,
        }
        let held: Vec<(String, i64, CancellationToken)> = lock(&shared.held)
            .iter()
            .map(|(id, h)| (id.clone(), h.attempt, h.cancel.clone()))
            .collect();
        if held.is_empty() {
            continue;
        }
        let ids: Vec<String> = held.iter().map(|(id, _, _)| id.clone()).collect();
        if let Some(events) = &shared.events {
            // Quiet runs' streams stay alive while this worker holds them.
            if let Err(e) = events.keep_alive(&ids).await {
                shared.note_error("run events", &e);
            }
        }
        match shared.store.heartbeat_jobs(worker_id, &ids).await {
            Ok(n) if n as usize >= held.len() => {}
            Ok(_) => {
                for (id, attempt, cancel) in held {
                    match shared.store.get_job(&id, None).await {
                        Ok(Some(job)) if job.is_held_by(worker_id, attempt) => {}
                        Ok(_) => cancel.cancel(),
                        Err(e) => shared.note_error("get_job", &e),
                    }
                }
            }
            Err(e) => shared.note_error("heartbeat_jobs", &e),
        }
    }
}

/// How often a worker with shared cancellation flags asks which of its jobs are flagged.
pub const CANCEL_POLL: Duration = Duration::from_millis(200);

/// Every [`CANCEL_POLL`], fires the cancellation of held jobs flagged as cancelled;
/// does nothing without flags. A flags fault is counted and the next round tries again.
async fn cancel_loop(shared: Arc<Shared>) {
    let Some(flags) = shared.cancellations.clone() else {
        return;
    };
    loop {
        tokio::select! {
            _ = tokio::time::sleep(CANCEL_POLL) => {}
            _ = shared.quiet.cancelled() => return,
        }
        let held: Vec<String> = lock(&shared.held).keys().cloned().collect();
        match flags.cancelled(&held).await {
            Ok(flagged) => {
                let held = lock(&shared.held);
                for id in flagged {
                    if let Some(h) = held.get(&id) {
                        h.cancel.cancel();
                    }
                }
            }
            Err(e) => shared.note_error("cancelled", &e),
        }
    }
}

/// Wakes the claimer whenever the store says jobs may be claimable (PostgreSQL
/// `LISTEN`), so new work starts without waiting for the poll; does nothing where the store
/// has no wake-ups.
async fn wakeup_loop(shared: Arc<Shared>) {
    let mut wakeups = match shared.store.job_wakeups().await {
        Ok(Some(wakeups)) => wakeups,
        Ok(None) => return,
        Err(e) => return shared.note_error("job_wakeups", &e),
    };
    loop {
        tokio::select! {
            next = wakeups.next() => match next {
                Some(()) => shared.wake.notify_one(),
                None => return,
            },
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// What a swept job's `error` says: agno 3.1.10's text (`os/job_queue.py`), so an operator
/// reads the same answer whichever worker swept it.
pub const SWEPT_ERROR: &str = "Worker lost and attempt budget exhausted; run was not re-executed. \
Crashed runs fail visibly instead of silently re-executing (at-most-once, max_attempts=1 by default): \
set QueueConfig(max_attempts=2) or higher to allow automatic re-execution, or grant one attempt via \
POST /queue/jobs/{id}/requeue.";

/// The most abandoned jobs one sweep settles (agno's `limit`).
const SWEEP_BATCH: usize = 20;

/// Every poll interval, fails the running jobs whose holder stopped heartbeating and that
/// have no attempt left (no claim will take them): takes each one's lease first
/// ([`JobStore::acquire_sweep`], so a live heartbeat or another sweeper wins), then settles
/// it `failed` with [`SWEPT_ERROR`]. Stops where the store cannot sweep.
async fn sweep_loop(shared: Arc<Shared>) {
    if !shared.config.sweep {
        return;
    }
    let grace = shared.grace_seconds();
    let worker_id = &shared.config.worker_id;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(jittered(shared.config.poll_interval)) => {}
            _ = shared.stop.cancelled() => return,
        }
        let jobs = match shared.store.sweep_exhausted_jobs(grace, SWEEP_BATCH).await {
            Ok(jobs) => jobs,
            Err(e) if e.kind() == ErrorKind::Unsupported => return,
            Err(e) => {
                shared.note_error("sweep_exhausted_jobs", &e);
                continue;
            }
        };
        for job in jobs {
            let settled = match shared.store.acquire_sweep(&job.id, worker_id, grace).await {
                Ok(true) => {
                    shared
                        .store
                        .settle_swept_job(
                            &job.id,
                            worker_id,
                            JobStatus::Failed,
                            Some(SWEPT_ERROR.to_owned()),
                        )
                        .await
                }
                other => other,
            };
            match settled {
                Ok(true) => bump(&shared.counters.swept),
                Ok(false) => {}
                Err(e) if e.kind() == ErrorKind::Unsupported => return,
                Err(e) => shared.note_error("sweep", &e),
            }
        }
    }
}

/// Deletes finished jobs past the retention, at start and every cleanup interval.
async fn cleanup_loop(shared: Arc<Shared>) {
    let retention = shared.config.retention.as_secs() as i64;
    loop {
        if let Err(e) = shared.store.cleanup_jobs(retention).await {
            shared.note_error("cleanup_jobs", &e);
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.config.cleanup_interval) => {}
            _ = shared.quiet.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_back_off_doubling_to_a_cap() {
        let poll = Duration::from_millis(500);
        assert_eq!(backoff(poll, 1), Duration::from_secs(1));
        assert_eq!(backoff(poll, 3), Duration::from_secs(4));
        assert_eq!(backoff(poll, 40), MAX_BACKOFF);
        let slow = Duration::from_secs(60);
        assert_eq!(backoff(slow, 2), slow);
    }
}
