//! The scheduler: fires due schedules, across replicas, as jobs.
//!
//! agno's schedules are calls of an AgentOS endpoint (`method`, `endpoint`, `payload`) on a
//! cron. A [`Scheduler`] claims each due schedule ([`ScheduleStore::claim_due_schedule`],
//! so competing schedulers never fire one together), enqueues a job that carries the call
//! for the application's [`crate::Handler`] to perform, records a schedule run with the
//! schedule's owner, and releases the schedule with its next fire time computed as agno
//! computes it ([`next_fire_after`]). The job's idempotency key is made of the schedule id
//! and the due time, so a fire repeated after a crash between the enqueue and the release
//! is deduplicated. A schedule missed during downtime fires once on recovery (the next time
//! is computed from now, as agno does), and an invalid `cron_expr` or `timezone` disables
//! the schedule with a `disabled_reason` instead of stopping the loop.

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agno_storage_core::{
    now_epoch_seconds, AgnoDb, EnqueueRejection, Error, Job, JobStore, Result, Schedule,
    ScheduleRun, ScheduleStore, ScheduleUpdate,
};
use chrono::TimeZone;
use croner::parser::{CronParser, Seconds, Year};
use serde_json::{json, Map, Value};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The `job_type` of the jobs a scheduler enqueues (agno's own run jobs say `run`).
pub const SCHEDULE_JOB_TYPE: &str = "schedule";

/// The next fire time strictly after `after` (epoch seconds) of agno's 5-field
/// `cron_expr` read in the IANA `timezone`, as agno 3.1.10 computes it (croniter over
/// pytz): day of month and day of week combine with OR when both are restricted, names
/// of months and weekdays are accepted, `7` is Sunday. Around daylight-saving changes it
/// keeps croniter's semantics: a wall time the clocks pass twice fires on each pass, and a
/// wall time the clocks skip fires at the first instant after the gap. `None` for an
/// on-demand schedule (`""`). `InvalidInput` naming the problem for a pattern or zone
/// agno would refuse.
pub fn next_fire_after(cron_expr: &str, timezone: &str, after: i64) -> Result<Option<i64>> {
    if cron_expr.is_empty() {
        return Ok(None);
    }
    let tz = chrono_tz::Tz::from_str(timezone).map_err(|_| {
        Error::invalid_input(format!(
            "unknown time zone {timezone:?}: use an IANA name such as \"UTC\" or \"Europe/Berlin\""
        ))
    })?;
    let cron = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
        .parse(cron_expr)
        .map_err(|e| {
            Error::invalid_input(format!(
                "invalid cron expression {cron_expr:?} ({e}): use five fields, minute hour day-of-month month day-of-week"
            ))
        })?;
    let no_next = |detail: String| {
        Error::invalid_input(format!(
            "cron expression {cron_expr:?} has no time after {after} in {timezone}: {detail}"
        ))
    };
    let zone = Zone { tz, cron: &cron };
    // The first match by wall time, where the offset is constant the answer.
    let jump = zone.jump(after).map_err(no_next)?;
    // Where the offset changes between `after` and it, the clocks skip or repeat wall
    // times: look at those minutes one by one, as instants.
    let mut hour = after;
    while hour < jump {
        let next_hour = (hour + 3_600).min(jump);
        if zone.offset(hour) != zone.offset(next_hour) {
            let from = (hour - 3_600).max(after);
            if let Some(hit) = zone.scan(from, (next_hour + 3_600).min(jump)) {
                return Ok(Some(hit));
            }
        }
        hour = next_hour;
    }
    Ok(Some(jump))
}

/// A parsed pattern in a zone.
struct Zone<'a> {
    tz: chrono_tz::Tz,
    cron: &'a croner::Cron,
}

impl Zone<'_> {
    /// The zone's offset from UTC at `t`, in seconds.
    fn offset(&self, t: i64) -> i32 {
        use chrono::Offset;
        self.tz
            .offset_from_utc_datetime(&naive_utc(t))
            .fix()
            .local_minus_utc()
    }

    /// The wall time at `t`.
    fn wall(&self, t: i64) -> chrono::NaiveDateTime {
        naive_utc(t) + chrono::Duration::seconds(self.offset(t).into())
    }

    /// Whether the wall time `wall` matches (the pattern read as wall-clock fields).
    fn matches(&self, wall: chrono::NaiveDateTime) -> bool {
        self.cron
            .is_time_matching(&chrono::Utc.from_utc_datetime(&wall))
            .unwrap_or(false)
    }

    /// The first instant after `after` whose wall time is the next match of the wall
    /// times after `after`'s, mapped to instants as pytz does (the earlier pass of a
    /// repeated time unless it is not after `after`; a skipped time at the end of its gap).
    fn jump(&self, after: i64) -> std::result::Result<i64, String> {
        let mut wall = self.wall(after);
        for _ in 0..8 {
            let next = self
                .cron
                .find_next_occurrence(&chrono::Utc.from_utc_datetime(&wall), false)
                .map_err(|e| e.to_string())?
                .naive_utc();
            let instant = match self.tz.from_local_datetime(&next) {
                chrono::LocalResult::Single(t) => t.timestamp(),
                chrono::LocalResult::Ambiguous(early, _) if early.timestamp() > after => {
                    early.timestamp()
                }
                chrono::LocalResult::Ambiguous(_, late) => late.timestamp(),
                chrono::LocalResult::None => {
                    // In a gap: the wall time read with the offset before the gap.
                    let before = (next - chrono::Duration::hours(3)).and_utc().timestamp();
                    next.and_utc().timestamp() - i64::from(self.offset(before))
                }
            };
            if instant > after {
                return Ok(instant);
            }
            wall = next;
        }
        Err("no matching wall time maps to a later instant".into())
    }

    /// The first whole minute in `(from, to]` that fires: its wall time matches, or the
    /// clocks jumped over a matching wall time just before it.
    fn scan(&self, from: i64, to: i64) -> Option<i64> {
        let mut t = (from.div_euclid(60) + 1) * 60;
        while t <= to {
            let wall = self.wall(t);
            if self.matches(wall) {
                return Some(t);
            }
            let mut skipped = self.wall(t - 60) + chrono::Duration::minutes(1);
            while skipped < wall {
                if self.matches(skipped) {
                    return Some(t);
                }
                skipped += chrono::Duration::minutes(1);
            }
            t += 60;
        }
        None
    }
}

fn naive_utc(t: i64) -> chrono::NaiveDateTime {
    chrono::DateTime::from_timestamp(t, 0)
        .unwrap_or_default()
        .naive_utc()
}

/// A time-ordered schedule-run id, as agno makes them (`sr_{nanoseconds:020}_{uuid}`).
pub fn new_schedule_run_id() -> String {
    static LAST: Mutex<i128> = Mutex::new(0);
    let now = chrono::Utc::now()
        .timestamp_nanos_opt()
        .map_or(0, i128::from);
    let mut last = LAST.lock().unwrap_or_else(|p| p.into_inner());
    *last = now.max(*last + 1);
    format!("sr_{:020}_{}", *last, uuid::Uuid::new_v4())
}

/// What a scheduler has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SchedulerStats {
    /// Schedules fired (a job enqueued, or found enqueued by an earlier fire of the same
    /// due time).
    pub fired: u64,
    /// Fires whose job an earlier fire of the same due time had enqueued.
    pub deduplicated: u64,
    /// Schedules disabled for an invalid cron expression or time zone.
    pub disabled: u64,
    /// Store calls that failed (the schedule is fired again after its claim's grace).
    pub errors: u64,
    /// The last error, if any.
    pub last_error: Option<String>,
}

#[derive(Default)]
struct Counters {
    fired: AtomicU64,
    deduplicated: AtomicU64,
    disabled: AtomicU64,
    errors: AtomicU64,
    last_error: Mutex<Option<String>>,
}

/// Settings of a [`Scheduler`]; made by [`Scheduler::builder`].
pub struct SchedulerBuilder {
    schedules: Arc<dyn ScheduleStore>,
    jobs: Arc<dyn JobStore>,
    worker_id: String,
    poll_interval: Duration,
    lock_grace: Duration,
}

impl SchedulerBuilder {
    /// The claim holder's id (default `scheduler-{uuid}`).
    pub fn worker_id(mut self, id: impl Into<String>) -> Self {
        self.worker_id = id.into();
        self
    }

    /// How often due schedules are looked for (default 15 s, agno's, ±20% jitter).
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a claim stays with a scheduler that died mid-fire before another one
    /// fires the schedule (default 60 s).
    pub fn lock_grace(mut self, grace: Duration) -> Self {
        self.lock_grace = grace;
        self
    }

    /// Starts the scheduler on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when the poll interval is zero.
    pub fn start(self) -> Result<Scheduler> {
        if self.poll_interval.is_zero() {
            return Err(Error::invalid_input(
                "scheduler poll_interval must be longer than zero",
            ));
        }
        let shared = Arc::new(Shared {
            schedules: self.schedules,
            jobs: self.jobs,
            worker_id: self.worker_id,
            poll_interval: self.poll_interval,
            lock_grace: self.lock_grace,
            counters: Counters::default(),
            stop: CancellationToken::new(),
        });
        let task = tokio::spawn(poll_loop(shared.clone()));
        Ok(Scheduler {
            shared,
            task: Some(task),
        })
    }
}

struct Shared {
    schedules: Arc<dyn ScheduleStore>,
    jobs: Arc<dyn JobStore>,
    worker_id: String,
    poll_interval: Duration,
    lock_grace: Duration,
    counters: Counters,
    stop: CancellationToken,
}

impl Shared {
    fn note_error(&self, what: &str, e: &Error) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        *self
            .counters
            .last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(format!("{what}: {e}"));
    }
}

/// A running scheduler; see the module docs. Dropping it stops it.
pub struct Scheduler {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

impl Scheduler {
    /// Settings for a scheduler over `db`'s schedules and job queue.
    ///
    /// # Errors
    ///
    /// `Unsupported` when the backend lacks either.
    pub fn builder(db: &AgnoDb) -> Result<SchedulerBuilder> {
        Ok(SchedulerBuilder {
            schedules: db.schedule_store()?,
            jobs: db.job_store()?,
            worker_id: format!("scheduler-{}", uuid::Uuid::new_v4().simple()),
            poll_interval: Duration::from_secs(15),
            lock_grace: Duration::from_secs(60),
        })
    }

    /// What the scheduler has done so far.
    pub fn stats(&self) -> SchedulerStats {
        let c = &self.shared.counters;
        SchedulerStats {
            fired: c.fired.load(Ordering::Relaxed),
            deduplicated: c.deduplicated.load(Ordering::Relaxed),
            disabled: c.disabled.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            last_error: c
                .last_error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Stops polling once the fire in progress (if any) is written; returns the stats.
    pub async fn shutdown(mut self) -> SchedulerStats {
        self.shared.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.stats()
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        self.shared.stop.cancel();
    }
}

async fn poll_loop(shared: Arc<Shared>) {
    let grace = shared.lock_grace.as_secs() as i64;
    while !shared.stop.is_cancelled() {
        // Every due schedule, one claim at a time, as agno's poller does.
        loop {
            match shared
                .schedules
                .claim_due_schedule(&shared.worker_id, grace)
                .await
            {
                Ok(Some(schedule)) => {
                    if let Err(e) = fire(&shared, schedule).await {
                        shared.note_error("fire", &e);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    shared.note_error("claim_due_schedule", &e);
                    break;
                }
            }
            if shared.stop.is_cancelled() {
                return;
            }
        }
        let wait = shared.poll_interval.mul_f64(0.8 + 0.4 * fastrand::f64());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shared.stop.cancelled() => return,
        }
    }
}

/// The job that carries one fire of `schedule` due at `due`.
fn fire_job(schedule: &Schedule, due: i64, run_id: &str) -> Job {
    let mut call = Map::new();
    call.insert("schedule_id".into(), json!(schedule.id));
    call.insert("schedule_run_id".into(), json!(run_id));
    call.insert("due_at".into(), json!(due));
    call.insert("method".into(), json!(schedule.method));
    call.insert("endpoint".into(), json!(schedule.endpoint));
    call.insert(
        "payload".into(),
        schedule.payload.clone().unwrap_or(Value::Null),
    );
    call.insert("timeout_seconds".into(), json!(schedule.timeout_seconds));
    // The job id is the id of the run the call starts, as for agno's run jobs.
    let mut job = Job::new(
        uuid::Uuid::new_v4().to_string(),
        schedule.target_type.as_deref().unwrap_or(SCHEDULE_JOB_TYPE),
        schedule
            .target_id
            .clone()
            .unwrap_or_else(|| schedule.id.clone()),
        format!("schedule-{}", schedule.id),
        Value::Object(call),
    );
    job.job_type = SCHEDULE_JOB_TYPE.into();
    job.user_id = schedule.user_id.clone();
    job.max_attempts = schedule.max_retries.max(0) + 1;
    job.idempotency_key = Some(format!("schedule:{}:{due}", schedule.id));
    job
}

/// One fire: the next time first (an invalid schedule is disabled and not fired), then the
/// job, the run record, and the release with the next time.
async fn fire(shared: &Shared, schedule: Schedule) -> Result<()> {
    let now = now_epoch_seconds();
    let owner = schedule.user_id.as_deref();
    let next = match next_fire_after(&schedule.cron_expr, &schedule.timezone, now) {
        // agno never schedules in the past: at least a second from now.
        Ok(next) => next.map(|t| t.max(now + 1)),
        Err(e) => {
            let mut columns = Map::new();
            columns.insert("enabled".into(), json!(false));
            columns.insert(
                "disabled_reason".into(),
                json!(format!("invalid_schedule: {}", e.message())),
            );
            shared
                .schedules
                .update_schedule(&schedule.id, owner, ScheduleUpdate::new(columns)?)
                .await?;
            shared.counters.disabled.fetch_add(1, Ordering::Relaxed);
            shared
                .schedules
                .release_schedule(&schedule.id, &shared.worker_id, schedule.locked_at, None)
                .await?;
            return Ok(());
        }
    };
    let due = schedule.next_run_at.unwrap_or(now);
    let run_id = new_schedule_run_id();
    let outcome = shared
        .jobs
        .enqueue_job(fire_job(&schedule, due, &run_id), 0)
        .await?;
    let job = outcome.job.ok_or_else(|| {
        Error::invalid_input(format!(
            "enqueue_job returned no job for schedule {}",
            schedule.id
        ))
    })?;
    if outcome.rejection == Some(EnqueueRejection::Duplicate) {
        shared.counters.deduplicated.fetch_add(1, Ordering::Relaxed);
    }
    // The run the job's payload names (an earlier fire's, for a duplicate), recorded once.
    let run_id = job.payload["schedule_run_id"]
        .as_str()
        .unwrap_or(&run_id)
        .to_owned();
    if shared
        .schedules
        .get_schedule_run(&run_id, None)
        .await?
        .is_none()
    {
        shared
            .schedules
            .create_schedule_run(ScheduleRun {
                id: run_id,
                schedule_id: schedule.id.clone(),
                attempt: 1,
                triggered_at: Some(now),
                completed_at: None,
                status: "running".into(),
                status_code: None,
                run_id: Some(job.id.clone()),
                session_id: None,
                error: None,
                input: None,
                output: None,
                requirements: None,
                user_id: schedule.user_id.clone(),
                created_at: now,
            })
            .await?;
    }
    shared
        .schedules
        .release_schedule(&schedule.id, &shared.worker_id, schedule.locked_at, next)
        .await?;
    // Counted once the schedule is released with its next time: the fire is whole.
    shared.counters.fired.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
