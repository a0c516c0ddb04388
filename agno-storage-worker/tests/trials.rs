//! Worker trials in separate processes: at-least-once execution, effects exactly once.
//!
//! Per backend (SQLite, PostgreSQL, MySQL, Redis, and DynamoDB for the document engine),
//! the parent starts [`CHILDREN`] worker processes (this binary again, with [`CHILD_ENV`]
//! set) over one fresh database, enqueues jobs, then:
//!
//! 1. **Kills**: while they drain, it `SIGKILL`s a child every few hundred milliseconds
//!    ([`KILLS`] times), each one that the store shows holding leased jobs at that moment
//!    (claimed or prefetched), and starts a new one. A handler's effect is a memory keyed by its job and attempt,
//!    and the job's completion is fenced by the attempt, so the completion names the one
//!    effect that counts. After the drain: every job is completed exactly once, by an
//!    attempt whose effect is there, and no attempt ran after it; some jobs needed another
//!    attempt; the tickets of each serialized session ran in order (each handler checks that its predecessor had completed before it ran).
//! 2. **Cancellation from another process**: a long job is cancelled by the parent
//!    (`cancel_running_job`); the child running it sees its token fire within one heartbeat.
//! 3. **Graceful shutdown**: with work in flight, every child gets `SIGTERM`; once they
//!    exit no job is left leased (prefetched jobs were handed back, running ones finished),
//!    so a new worker takes the rest at once rather than after the lease, and at their
//!    first attempt.
//!
//! 4. **Competing schedulers**: [`SCHEDULERS`] scheduler processes fire [`SCHEDULES`] due
//!    schedules, one is `SIGKILL`ed while it holds a claim; each schedule fires exactly
//!    once (one job, one schedule run naming it, released with its next time). Repeated
//!    due times are tested in-process in `scheduler.rs`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use agno_storage_core::{
    now_epoch_seconds, AgnoDb, Job, JobQuery, JobStatus, MemoryQuery, Pagination, Result, Schedule,
    UserMemory,
};
use agno_storage_dynamo::{DynamoDb, DynamoOptions, StaticCredentials};
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::servers::{self, Backend};
use agno_storage_worker::scheduler::{next_fire_after, SCHEDULE_JOB_TYPE};
use agno_storage_worker::{JobContext, Outcome, Scheduler, Worker};
use serde_json::{json, Value};

/// Set in a child to `backend|locator|worker id`.
const CHILD_ENV: &str = "AGNO_WORKER_TRIAL_CHILD";
/// Worker processes running at once.
const CHILDREN: usize = 8;
/// Scheduler processes running at once, and the schedules they fire.
const SCHEDULERS: usize = 3;
const SCHEDULES: usize = 100;
/// Worker ids of scheduler children start with this.
const SCHEDULER_PREFIX: &str = "trial-s";
/// The yearly pattern of the trial's schedules: no due time of its own comes up.
const YEARLY: &str = "0 0 1 1 *";
/// Children killed with `SIGKILL` during the drain.
const KILLS: usize = 6;
/// Free jobs, and serialized sessions of [`TICKETS`] tickets each.
const FREE_JOBS: usize = 200;
const SESSIONS: usize = 4;
const TICKETS: usize = 8;
/// The lease: heartbeats every second, a dead child's jobs are reclaimed after it.
const GRACE: Duration = Duration::from_secs(3);
/// The owner of the effects.
const TRIAL_USER: &str = "trial";

fn main() -> ExitCode {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child_main(&spec);
    }
    let mut args = libtest_mimic::Arguments::from_args();
    // One backend at a time: each already runs several processes on this machine's cores.
    args.test_threads.get_or_insert(1);
    let trials = [
        Backend::Postgres,
        Backend::MySql,
        Backend::Redis,
        Backend::DynamoDb,
    ]
    .into_iter()
    .map(Some)
    .chain([None])
    .map(|backend| {
        let name = backend.map_or("sqlite", |b| b.name()).to_owned();
        libtest_mimic::Trial::test(format!("{name}::workers_killed_and_stopped"), move || {
            let url = match backend {
                None => String::new(),
                Some(b) => match servers::url_blocking(b) {
                    Ok(Some(url)) => url,
                    Ok(None) if !servers::ci() => {
                        eprintln!("note: {} is not set: {name} not covered", b.env_var());
                        return Ok(());
                    }
                    Ok(None) => {
                        return Err(format!("CI=true but {} is not set", b.env_var()).into())
                    }
                    Err(e) => return Err(e.to_string().into()),
                },
            };
            let locator = Locator::fresh(&name, &url);
            runtime().block_on(trial(&locator)).map_err(Into::into)
        })
    })
    .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Where one trial's database is: the backend, its server and the isolated name in it.
#[derive(Clone)]
struct Locator {
    backend: String,
    url: String,
    name: String,
}

impl Locator {
    fn fresh(backend: &str, url: &str) -> Self {
        let id = &uuid::Uuid::new_v4().simple().to_string()[..10];
        let name = match backend {
            "sqlite" => std::env::temp_dir()
                .join(format!("agno-worker-trial-{id}.db"))
                .display()
                .to_string(),
            // `agno_ct_<epoch>_`: the conformance suites drop such leftovers.
            "dynamodb" => format!("agno_ct_{}_wt{id}_", now_epoch_seconds()),
            _ => format!("agno_wt_{id}"),
        };
        Locator {
            backend: backend.to_owned(),
            url: url.to_owned(),
            name,
        }
    }

    fn encode(&self, worker: &str) -> String {
        format!("{}|{}|{}|{worker}", self.backend, self.url, self.name)
    }

    fn decode(spec: &str) -> Option<(Self, String)> {
        let mut parts = spec.splitn(4, '|');
        let (backend, url, name, worker) =
            (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
        Some((
            Locator {
                backend: backend.into(),
                url: url.into(),
                name: name.into(),
            },
            worker.into(),
        ))
    }

    async fn open(&self) -> Result<AgnoDb> {
        let tables = TableNames::default();
        Ok(match self.backend.as_str() {
            "sqlite" => SqlDb::open_sqlite(&self.name, tables).await?.agno_db(),
            "postgres" => SqlDb::connect_postgres(&self.url, &self.name, tables)
                .await?
                .agno_db(),
            "mysql" => SqlDb::connect_mysql(&self.url, &self.name, tables)
                .await?
                .agno_db(),
            "redis" => {
                let options = KvOptions {
                    prefix: self.name.clone(),
                    ..Default::default()
                };
                KvDb::connect(&self.url, options).await?.agno_db()
            }
            _ => DynamoDb::connect(DynamoOptions {
                endpoint: Some(self.url.clone()),
                credentials: Some(StaticCredentials {
                    access_key_id: "test".into(),
                    secret_access_key: "test".into(),
                }),
                tables: TableNames::with_prefix(&self.name),
                ..Default::default()
            })
            .await?
            .agno_db(),
        })
    }
}

// ---------------------------------------------------------------------------------------
// The child: one worker until killed or told to stop.

fn child_main(spec: &str) -> ExitCode {
    let Some((locator, worker_id)) = Locator::decode(spec) else {
        eprintln!("child: bad {CHILD_ENV}: {spec}");
        return ExitCode::FAILURE;
    };
    if worker_id.starts_with(SCHEDULER_PREFIX) {
        return scheduler_child(&locator, worker_id);
    }
    runtime().block_on(async move {
        let Some(db) = open_child_db(&locator, &worker_id).await else {
            return ExitCode::FAILURE;
        };
        let Ok(jobs) = db.job_store() else {
            return ExitCode::FAILURE;
        };
        let worker = Worker::builder(jobs)
            .worker_id(worker_id)
            .concurrency(2)
            .prefetch(2)
            .lock_grace(GRACE)
            .poll_interval(Duration::from_millis(100))
            .retry_delay(Duration::ZERO)
            .handler(move |job: Job, ctx: JobContext| {
                let db = db.clone();
                async move { run(&db, job, ctx).await }
            })
            .start();
        let Ok(worker) = worker else {
            return ExitCode::FAILURE;
        };
        if !ready_until_terminated().await {
            return ExitCode::FAILURE;
        }
        let stats = worker.shutdown(Duration::from_secs(10)).await;
        println!(
            "STOPPED released={} errors={}",
            stats.released, stats.errors
        );
        ExitCode::SUCCESS
    })
}

/// The child's database, or `None` after saying why it could not be opened.
async fn open_child_db(locator: &Locator, worker_id: &str) -> Option<AgnoDb> {
    match locator.open().await {
        Ok(db) => Some(db),
        Err(e) => {
            eprintln!("child {worker_id}: open: {e}");
            None
        }
    }
}

/// Tells the parent the child is ready, then waits for `SIGTERM`; false when the signal
/// cannot be listened for.
async fn ready_until_terminated() -> bool {
    let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    else {
        return false;
    };
    println!("READY");
    term.recv().await;
    true
}

/// A scheduler child: one scheduler until killed or told to stop.
fn scheduler_child(locator: &Locator, worker_id: String) -> ExitCode {
    runtime().block_on(async move {
        let Some(db) = open_child_db(locator, &worker_id).await else {
            return ExitCode::FAILURE;
        };
        let scheduler = Scheduler::builder(&db).map(|b| {
            b.worker_id(worker_id)
                .poll_interval(Duration::from_millis(50))
                .lock_grace(Duration::from_secs(2))
                .start()
        });
        let Ok(Ok(scheduler)) = scheduler else {
            return ExitCode::FAILURE;
        };
        if !ready_until_terminated().await {
            return ExitCode::FAILURE;
        }
        let stats = scheduler.shutdown().await;
        println!("STOPPED fired={} errors={}", stats.fired, stats.errors);
        ExitCode::SUCCESS
    })
}

/// The handler: a long job waits for its cancellation; any other sleeps its `ms`, checks
/// that its session predecessor (`after`) completed, and writes its effect.
async fn run(db: &AgnoDb, job: Job, ctx: JobContext) -> Outcome {
    let jobs = match db.job_store() {
        Ok(jobs) => jobs,
        Err(e) => return Outcome::Failed(e.to_string()),
    };
    if job.payload["long"] == json!(true) {
        tokio::select! {
            _ = ctx.cancelled().cancelled() => {}
            _ = tokio::time::sleep(Duration::from_secs(60)) => return Outcome::Completed,
        }
        let seen = UserMemory::new(
            format!("cancel-{}", job.id),
            Some(TRIAL_USER.into()),
            "seen",
        );
        return match db.memories().map(|m| m.upsert_memory(seen)) {
            Ok(write) => match write.await {
                Ok(_) => Outcome::Cancelled,
                Err(e) => Outcome::Failed(e.to_string()),
            },
            Err(e) => Outcome::Failed(e.to_string()),
        };
    }
    let ms = job.payload["ms"].as_u64().unwrap_or(10);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    let ordered = match job.payload["after"].as_str() {
        None => true,
        Some(before) => match jobs.get_job(before, None).await {
            Ok(Some(prev)) => prev.status == JobStatus::Completed,
            Ok(None) => false,
            Err(e) => return Outcome::Failed(e.to_string()),
        },
    };
    let effect = json!({"attempt": job.attempt, "worker": ctx.worker_id(), "ordered": ordered});
    let effect = UserMemory::new(
        format!("result-{}-{}", job.id, job.attempt),
        Some(TRIAL_USER.into()),
        effect.to_string(),
    );
    let written = match db.memories() {
        Ok(m) => m.upsert_memory(effect).await,
        Err(e) => Err(e),
    };
    match written {
        Ok(_) => Outcome::Completed,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

// ---------------------------------------------------------------------------------------
// The parent.

struct Children {
    locator: Locator,
    /// Worker ids are this and a number.
    prefix: &'static str,
    /// Live children with their worker ids.
    running: Vec<(String, Child)>,
    started: usize,
}

impl Children {
    fn spawn(&mut self) -> std::result::Result<(), String> {
        self.started += 1;
        let worker = format!("{}{}", self.prefix, self.started);
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .env(CHILD_ENV, self.locator.encode(&worker))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawn a child: {e}"))?;
        let stdout = child.stdout.take().ok_or("no child stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        match lines.next() {
            Some(Ok(line)) if line == "READY" => {}
            other => return Err(format!("child {worker} did not start: {other:?}")),
        }
        // Keep reading so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        self.running.push((worker, child));
        Ok(())
    }

    /// `SIGKILL`s a random live child among those whose worker id is in `holders`; false
    /// when none is.
    fn kill_a_holder(&mut self, holders: &HashSet<String>) -> std::result::Result<bool, String> {
        let candidates: Vec<usize> = (0..self.running.len())
            .filter(|i| holders.contains(&self.running[*i].0))
            .collect();
        if candidates.is_empty() {
            return Ok(false);
        }
        let i = candidates[fastrand::usize(..candidates.len())];
        let (_, mut child) = self.running.swap_remove(i);
        let killed = child.kill();
        child.wait().map_err(|e| e.to_string())?;
        killed.map_err(|e| e.to_string())?;
        Ok(true)
    }

    /// `SIGTERM`s every child and waits for each to exit.
    fn stop_all(&mut self) -> std::result::Result<(), String> {
        for (_, child) in &self.running {
            // SAFETY: a plain kill(2) of a child process this parent started and still owns.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
        }
        for (_, mut child) in self.running.drain(..) {
            let status = child.wait().map_err(|e| e.to_string())?;
            if !status.success() {
                return Err(format!("a stopped child exited with {status}"));
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for (_, child) in &mut self.running {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn err(e: agno_storage_core::Error) -> String {
    e.to_string()
}

async fn trial(locator: &Locator) -> std::result::Result<(), String> {
    let started = Instant::now();
    let db = locator.open().await.map_err(err)?;
    let jobs = db.job_store().map_err(err)?;
    let mut all = Vec::new();
    for i in 0..FREE_JOBS {
        let mut job = Job::new(
            format!("free-{i:04}"),
            "agent",
            "agent-1",
            format!("free-session-{i}"),
            json!({"ms": fastrand::u64(30..150)}),
        );
        job.max_attempts = 10;
        all.push(job);
    }
    for s in 0..SESSIONS {
        for t in 0..TICKETS {
            let mut payload = json!({"ms": fastrand::u64(20..80), "serialize_session": true});
            if t > 0 {
                payload["after"] = json!(format!("ticket-{s}-{}", t - 1));
            }
            let mut job = Job::new(
                format!("ticket-{s}-{t}"),
                "agent",
                "agent-1",
                format!("serial-{s}"),
                payload,
            );
            job.max_attempts = 10;
            all.push(job);
        }
    }
    // The children start on an empty queue, so none has drained much before the kills
    // begin however slowly the others start.
    let mut children = Children {
        locator: locator.clone(),
        prefix: "trial-w",
        running: Vec::new(),
        started: 0,
    };
    for _ in 0..CHILDREN {
        children.spawn()?;
    }
    // Tickets of one session in order (their sequence is taken at enqueue).
    for job in all.clone() {
        let outcome = jobs.enqueue_job(job, 0).await.map_err(err)?;
        if outcome.rejection.is_some() {
            return Err(format!("an enqueue was rejected: {outcome:?}"));
        }
    }
    let ids: Vec<String> = all.iter().map(|j| j.id.clone()).collect();

    // 1. Kills during the drain: each lands on a child that holds a leased job (running or
    // prefetched) at that moment, so a fast drain cannot leave the kills idle. Until the
    // first kill the store is looked at every 20 ms, then a kill every few hundred.
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut kills = 0;
    loop {
        let pause = if kills == 0 { 20..21 } else { 150..400 };
        tokio::time::sleep(Duration::from_millis(fastrand::u64(pause))).await;
        if kills < KILLS && children.kill_a_holder(&lease_holders(&db).await?)? {
            children.spawn()?;
            kills += 1;
            continue;
        }
        let done = count(&db, JobStatus::Completed).await?;
        if done as usize == ids.len() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{}: only {done} of {} jobs completed in time",
                locator.backend,
                ids.len()
            ));
        }
    }
    if kills == 0 {
        return Err("the drain ended before any kill: the trial proved nothing".into());
    }
    // Effects by job: the attempts that wrote one.
    let mut attempts: HashMap<String, Vec<i64>> = HashMap::new();
    for (key, effect) in read_effects(&db).await? {
        let job = key
            .strip_prefix("result-")
            .and_then(|k| k.rsplit_once('-'))
            .map(|(id, _)| id.to_owned())
            .ok_or(format!("an effect with an unexpected key {key}"))?;
        if effect["ordered"] != json!(true) {
            return Err(format!(
                "{key} ran before its session predecessor completed: {effect}"
            ));
        }
        let attempt = effect["attempt"]
            .as_i64()
            .ok_or(format!("{key}: {effect}"))?;
        attempts.entry(job).or_default().push(attempt);
    }
    let (mut retried, mut superseded) = (0, 0);
    for id in &ids {
        let job = jobs
            .get_job(id, None)
            .await
            .map_err(err)?
            .ok_or(format!("job {id} is gone"))?;
        if job.status != JobStatus::Completed {
            return Err(format!("job {id} ended {:?}", job.status));
        }
        let wrote = attempts.remove(id).unwrap_or_default();
        // The fenced completion names the attempt whose effect is the result; an earlier
        // attempt may have written one before its worker died or lost the lease, and no
        // attempt after the completing one may have run.
        if !wrote.contains(&job.attempt) {
            return Err(format!(
                "job {id} completed at attempt {} without that attempt's effect (effects from {wrote:?})",
                job.attempt
            ));
        }
        if let Some(late) = wrote.iter().find(|a| **a > job.attempt) {
            return Err(format!(
                "job {id} ran again (attempt {late}) after attempt {} completed it",
                job.attempt
            ));
        }
        superseded += wrote.len() - 1;
        if job.attempt > 1 {
            retried += 1;
        }
    }
    if !attempts.is_empty() {
        return Err(format!("effects of jobs never enqueued: {attempts:?}"));
    }
    if retried == 0 {
        return Err(format!(
            "{kills} kills of lease holders, yet no job needed another attempt"
        ));
    }
    let drained = started.elapsed();

    // 2. A running job cancelled from this process.
    let long = Job::new(
        "long-1",
        "agent",
        "agent-1",
        "long-session",
        json!({"long": true}),
    );
    jobs.enqueue_job(long, 0).await.map_err(err)?;
    let running = until(Duration::from_secs(20), || async {
        matches!(jobs.get_job("long-1", None).await, Ok(Some(j)) if j.status == JobStatus::Running)
    })
    .await;
    if !running {
        return Err("the long job was never claimed".into());
    }
    let asked = Instant::now();
    if !jobs.cancel_running_job("long-1", None).await.map_err(err)? {
        return Err("cancel_running_job refused a running job".into());
    }
    let seen = until(Duration::from_secs(10), || async {
        read_effects(&db)
            .await
            .is_ok_and(|e| e.contains_key("cancel-long-1"))
    })
    .await;
    let took = asked.elapsed();
    // One heartbeat (a second), plus the effect's write and this poll.
    if !seen || took > Duration::from_millis(2_500) {
        return Err(format!(
            "the cancelled job's handler stopped after {took:?} (seen: {seen})"
        ));
    }

    // 3. Graceful shutdown with work in flight.
    let mut tail = Vec::new();
    for i in 0..40 {
        let mut job = Job::new(
            format!("tail-{i:03}"),
            "agent",
            "agent-1",
            format!("tail-session-{i}"),
            json!({"ms": 300}),
        );
        job.max_attempts = 10;
        tail.push(job.id.clone());
        jobs.enqueue_job(job, 0).await.map_err(err)?;
    }
    until(Duration::from_secs(20), || async {
        count(&db, JobStatus::Running).await.is_ok_and(|n| n >= 4)
    })
    .await;
    children.stop_all()?;
    let leased = count(&db, JobStatus::Running).await?;
    if leased != 0 {
        return Err(format!(
            "{leased} jobs were left leased by workers that stopped gracefully"
        ));
    }
    children.spawn()?;
    let all_done = until(Duration::from_secs(60), || async {
        count(&db, JobStatus::Completed)
            .await
            .is_ok_and(|n| n as usize == ids.len() + tail.len())
    })
    .await;
    if !all_done {
        return Err("the jobs handed back at shutdown were not all completed".into());
    }
    let effects = read_effects(&db).await?;
    for id in &tail {
        if !effects.contains_key(&format!("result-{id}-1")) {
            return Err(format!("job {id} completed without its effect"));
        }
    }
    children.stop_all()?;
    let fires = competing_schedulers(locator, &db).await?;
    eprintln!(
        "{}: {} jobs drained through {kills} SIGKILLs ({retried} needed another attempt, \
         {superseded} effects superseded) in {drained:.1?}; cancel seen after {took:?}; \
         shutdown left nothing leased; {fires}; {:.1?} in all",
        locator.backend,
        ids.len(),
        started.elapsed()
    );
    if locator.backend == "sqlite" {
        let _ = std::fs::remove_file(&locator.name);
    }
    Ok(())
}

/// Phase 4: [`SCHEDULERS`] scheduler processes fire [`SCHEDULES`] due schedules; one that
/// holds a claim is `SIGKILL`ed while they fire (when one is seen holding one) and a new
/// one started. Each schedule must fire exactly once: one job, one schedule run naming
/// it, released with its next time.
async fn competing_schedulers(
    locator: &Locator,
    db: &AgnoDb,
) -> std::result::Result<String, String> {
    let schedules = db.schedules().map_err(err)?;
    let now = now_epoch_seconds();
    for i in 0..SCHEDULES {
        let mut s = Schedule::new(
            format!("sch-{i:03}"),
            format!("nightly-{i}"),
            "/agents/a1/runs",
            YEARLY,
        );
        s.user_id = Some(TRIAL_USER.into());
        s.next_run_at = Some(now - 60 - i as i64);
        schedules.create_schedule(s).await.map_err(err)?;
    }
    let mut schedulers = Children {
        locator: locator.clone(),
        prefix: SCHEDULER_PREFIX,
        running: Vec::new(),
        started: 0,
    };
    for _ in 0..SCHEDULERS {
        schedulers.spawn()?;
    }
    let all = |page: &[Schedule]| {
        let now = now_epoch_seconds();
        page.len() == SCHEDULES
            && page
                .iter()
                .all(|s| s.locked_by.is_none() && s.next_run_at.is_some_and(|t| t > now))
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut killed_holder = false;
    let page = loop {
        let page = schedules
            .get_schedules(None, None, Pagination::default())
            .await
            .map_err(err)?
            .items;
        if all(&page) {
            break page;
        }
        if !killed_holder {
            let holders: HashSet<String> =
                page.iter().filter_map(|s| s.locked_by.clone()).collect();
            if schedulers.kill_a_holder(&holders)? {
                schedulers.spawn()?;
                killed_holder = true;
            }
        }
        if Instant::now() > deadline {
            return Err("the schedulers did not fire every due schedule in time".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    schedulers.stop_all()?;
    let jobs = db.job_store().map_err(err)?;
    let queued = JobQuery {
        status: Some(JobStatus::Queued),
        ..Default::default()
    };
    let mut fired: HashMap<String, Vec<Job>> = HashMap::new();
    for job in jobs.list_jobs(queued).await.map_err(err)?.items {
        if job.job_type == SCHEDULE_JOB_TYPE {
            let id = job.payload["schedule_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            fired.entry(id).or_default().push(job);
        }
    }
    let next = next_fire_after(YEARLY, "UTC", now_epoch_seconds())
        .map_err(err)?
        .ok_or("no next new year")?;
    for s in &page {
        let jobs = fired.remove(&s.id).unwrap_or_default();
        let [job] = jobs.as_slice() else {
            return Err(format!("schedule {} fired {} jobs", s.id, jobs.len()));
        };
        let runs = schedules
            .get_schedule_runs(&s.id, None, Pagination::default())
            .await
            .map_err(err)?
            .items;
        let [run] = runs.as_slice() else {
            return Err(format!("schedule {} recorded {} runs", s.id, runs.len()));
        };
        if run.run_id.as_deref() != Some(job.id.as_str())
            || job.payload["schedule_run_id"] != json!(run.id)
        {
            return Err(format!(
                "schedule {}: run {run:?} and job {job:?} do not name each other",
                s.id
            ));
        }
        if s.next_run_at != Some(next) {
            return Err(format!(
                "schedule {} released with next time {:?}, not {next}",
                s.id, s.next_run_at
            ));
        }
    }
    if !fired.is_empty() {
        return Err(format!("jobs of unknown schedules: {:?}", fired.keys()));
    }
    Ok(format!(
        "{SCHEDULERS} schedulers fired {SCHEDULES} schedules once each ({})",
        if killed_holder {
            "one killed while holding a claim"
        } else {
            "none seen holding a claim to kill"
        }
    ))
}

async fn count(db: &AgnoDb, status: JobStatus) -> std::result::Result<u64, String> {
    let query = JobQuery {
        status: Some(status),
        ..Default::default()
    };
    Ok(db
        .job_store()
        .map_err(err)?
        .list_jobs(query)
        .await
        .map_err(err)?
        .total)
}

/// The worker ids that hold a leased job now.
async fn lease_holders(db: &AgnoDb) -> std::result::Result<HashSet<String>, String> {
    let query = JobQuery {
        status: Some(JobStatus::Running),
        ..Default::default()
    };
    let page = db
        .job_store()
        .map_err(err)?
        .list_jobs(query)
        .await
        .map_err(err)?;
    Ok(page.items.into_iter().filter_map(|j| j.locked_by).collect())
}

/// The effects written so far, by memory id.
async fn read_effects(db: &AgnoDb) -> std::result::Result<HashMap<String, Value>, String> {
    let query = MemoryQuery {
        user_id: Some(TRIAL_USER.into()),
        ..Default::default()
    };
    let page = db
        .memories()
        .map_err(err)?
        .get_memories(query)
        .await
        .map_err(err)?;
    Ok(page
        .items
        .into_iter()
        .map(|m| {
            let value = serde_json::from_str(&m.memory).unwrap_or(Value::String(m.memory));
            (m.memory_id, value)
        })
        .collect())
}

/// Polls `done` every 20 ms until it holds, up to `limit`.
async fn until<F, Fut>(limit: Duration, mut done: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done().await
}
