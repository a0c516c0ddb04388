//! The worker runtime against real stores: the in-memory store, SQLite, PostgreSQL and
//! Redis (`AGNO_TEST_POSTGRES_URL`, `AGNO_TEST_REDIS_URL`; required under `CI=true`,
//! skipped with a note otherwise).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agno_storage_core::run_events::{RunEvents, StreamStatus};
use agno_storage_core::{ContinueOutcome, Job, JobQuery, JobStatus, JobStore};
use agno_storage_doc::InMemoryDb;
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_redis_events::Coordination;
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::servers::{self, Backend};
use agno_storage_worker::{JobContext, LocalRunEvents, Outcome, Worker};
use serde_json::json;

/// One store per backend this run reaches, each fresh.
async fn stores() -> Vec<(&'static str, Arc<dyn JobStore>)> {
    let mut out: Vec<(&'static str, Arc<dyn JobStore>)> =
        vec![("memory", InMemoryDb::new().agno_db().job_store().unwrap())];
    let dir = std::env::temp_dir().join(format!("agno-worker-{}", uuid()));
    std::fs::create_dir_all(&dir).unwrap();
    let sqlite = SqlDb::open_sqlite(dir.join("jobs.db"), TableNames::default())
        .await
        .unwrap()
        .agno_db();
    out.push(("sqlite", sqlite.job_store().unwrap()));
    match servers::url(Backend::Postgres).await.unwrap() {
        Some(url) => {
            let schema = format!("agno_worker_{}", &uuid()[..12]);
            let pg = SqlDb::connect_postgres(&url, &schema, TableNames::default())
                .await
                .unwrap()
                .agno_db();
            out.push(("postgres", pg.job_store().unwrap()));
        }
        None => eprintln!("AGNO_TEST_POSTGRES_URL is not set: PostgreSQL not covered"),
    }
    match servers::url(Backend::Redis).await.unwrap() {
        Some(url) => {
            let options = KvOptions {
                prefix: format!("agno_worker_{}", &uuid()[..12]),
                ..Default::default()
            };
            let redis = KvDb::connect(&url, options).await.unwrap().agno_db();
            out.push(("redis", redis.job_store().unwrap()));
        }
        None => eprintln!("AGNO_TEST_REDIS_URL is not set: Redis not covered"),
    }
    out
}

fn uuid() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn job(i: usize) -> Job {
    Job::new(
        format!("job-{i:05}-{}", &uuid()[..6]),
        "agent",
        "agent-1",
        format!("s{}", i % 7),
        json!({"input": format!("message {i}")}),
    )
}

async fn enqueue(store: &Arc<dyn JobStore>, jobs: Vec<Job>) {
    for outcome in store.enqueue_jobs(jobs, 0).await.unwrap() {
        assert!(outcome.unwrap().rejection.is_none());
    }
}

async fn count(store: &Arc<dyn JobStore>, status: JobStatus) -> u64 {
    store
        .list_jobs(JobQuery {
            status: Some(status),
            ..Default::default()
        })
        .await
        .unwrap()
        .total
}

/// Waits until `done` holds, up to `limit`.
async fn until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// Two workers of concurrency 4 drain 150 jobs: each runs exactly once, never more than
/// 4 at a time per worker, and every job ends completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_run_every_job_once_within_their_bound() {
    for (name, store) in stores().await {
        enqueue(&store, (0..150).map(job).collect()).await;
        let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let mut workers = Vec::new();
        for w in 0..2 {
            let (runs, now, peak) = (
                runs.clone(),
                Arc::new(AtomicUsize::new(0)),
                Arc::new(AtomicUsize::new(0)),
            );
            let peak_seen = peak.clone();
            let worker = Worker::builder(store.clone())
                .worker_id(format!("{name}-w{w}"))
                .concurrency(4)
                .poll_interval(Duration::from_millis(50))
                .handler(move |job: Job, _ctx: JobContext| {
                    let (runs, now, peak) = (runs.clone(), now.clone(), peak.clone());
                    async move {
                        let running = now.fetch_add(1, Ordering::SeqCst) + 1;
                        peak.fetch_max(running, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        *runs.lock().unwrap().entry(job.id).or_default() += 1;
                        now.fetch_sub(1, Ordering::SeqCst);
                        Outcome::Completed
                    }
                })
                .start()
                .unwrap();
            workers.push((worker, peak_seen));
        }
        assert!(
            until(Duration::from_secs(60), || runs.lock().unwrap().len()
                == 150)
            .await,
            "{name}: every job ran"
        );
        let mut completed = 0;
        for (worker, peak) in workers {
            let stats = worker.shutdown(Duration::from_secs(10)).await;
            assert!(
                peak.load(Ordering::SeqCst) <= 4,
                "{name}: concurrency bound"
            );
            assert_eq!(
                (stats.errors, stats.lease_lost, stats.running),
                (0, 0, 0),
                "{name}: {stats:?}"
            );
            completed += stats.completed;
        }
        assert_eq!(completed, 150, "{name}: completions written");
        assert!(
            runs.lock().unwrap().values().all(|&n| n == 1),
            "{name}: a job ran twice"
        );
        assert_eq!(count(&store, JobStatus::Completed).await, 150, "{name}");
    }
}

/// A failing handler is retried while attempts remain, then the job fails; paused and
/// cancelled outcomes are written as such; a panic counts as a failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_are_written_and_failures_retried() {
    for (name, store) in stores().await {
        let mut flaky = job(0);
        flaky.max_attempts = 3;
        let mut pause = job(1);
        pause.payload = json!({"do": "pause"});
        let mut cancel = job(2);
        cancel.payload = json!({"do": "cancel"});
        let mut panics = job(3);
        panics.payload = json!({"do": "panic"});
        let ids = [&flaky, &pause, &cancel, &panics].map(|j| j.id.clone());
        enqueue(&store, vec![flaky, pause, cancel, panics]).await;
        let worker = Worker::builder(store.clone())
            .concurrency(2)
            .retry_delay(Duration::ZERO)
            .poll_interval(Duration::from_millis(50))
            .handler(|job: Job, _ctx: JobContext| async move {
                match job.payload["do"].as_str() {
                    Some("pause") => Outcome::Paused,
                    Some("cancel") => Outcome::Cancelled,
                    Some("panic") => panic!("handler bug"),
                    _ => Outcome::Failed(format!("attempt {} failed", job.attempt)),
                }
            })
            .start()
            .unwrap();
        let settled = |s: &agno_storage_worker::WorkerStats| {
            s.failed == 2 && s.retried == 2 && s.paused == 1 && s.cancelled == 1
        };
        let ok = until(Duration::from_secs(30), || settled(&worker.stats())).await;
        let stats = worker.shutdown(Duration::from_secs(5)).await;
        assert!(ok, "{name}: {stats:?}");
        let get = |i: usize| {
            let (store, id) = (store.clone(), ids[i].clone());
            async move { store.get_job(&id, None).await.unwrap().unwrap() }
        };
        let flaky = get(0).await;
        assert_eq!(
            (flaky.status, flaky.attempt, flaky.error.as_deref()),
            (JobStatus::Failed, 3, Some("attempt 3 failed")),
            "{name}"
        );
        assert_eq!(get(1).await.status, JobStatus::Paused, "{name}");
        assert_eq!(get(2).await.status, JobStatus::Cancelled, "{name}");
        let panicked = get(3).await;
        assert_eq!(panicked.status, JobStatus::Failed, "{name}");
        assert!(
            panicked.error.unwrap_or_default().contains("panicked"),
            "{name}: the panic is the error"
        );
    }
}

/// Heartbeats keep a long job's lease (no other worker reclaims it); when the lease is
/// taken over anyway, the handler's cancellation fires within a heartbeat and its result
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_hold_the_lease_and_a_lost_lease_cancels() {
    for (name, store) in stores().await {
        let mut long = job(0);
        long.max_attempts = 2;
        enqueue(&store, vec![long.clone()]).await;
        let cancelled_after: Arc<Mutex<Option<Duration>>> = Arc::default();
        let seen = cancelled_after.clone();
        let worker = Worker::builder(store.clone())
            .lock_grace(Duration::from_secs(3))
            .poll_interval(Duration::from_millis(50))
            .handler(move |_job: Job, ctx: JobContext| {
                let seen = seen.clone();
                async move {
                    let start = Instant::now();
                    tokio::select! {
                        _ = ctx.cancelled().cancelled() => {
                            *seen.lock().unwrap() = Some(start.elapsed());
                        }
                        _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                    }
                    Outcome::Completed
                }
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || worker.stats().running == 1).await,
            "{name}: claimed"
        );
        // Longer than the lease: only heartbeats keep the job from being reclaimed.
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(
            store.claim_job("thief", 3, None).await.unwrap().is_none(),
            "{name}: a heartbeating job is not reclaimable"
        );
        let stolen = store.claim_job("thief", 0, None).await.unwrap();
        assert_eq!(
            stolen.map(|j| (j.id, j.attempt)),
            Some((long.id.clone(), 2)),
            "{name}: a forced takeover"
        );
        assert!(
            until(Duration::from_secs(5), || cancelled_after
                .lock()
                .unwrap()
                .is_some())
            .await,
            "{name}: the handler was cancelled after its lease was lost"
        );
        assert!(
            until(Duration::from_secs(5), || worker.stats().lease_lost == 1).await,
            "{name}: the stale result was refused"
        );
        let stats = worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(stats.completed, 0, "{name}: {stats:?}");
        let row = store.get_job(&long.id, None).await.unwrap().unwrap();
        assert!(
            row.is_held_by("thief", 2),
            "{name}: the new holder keeps it"
        );
    }
}

/// On PostgreSQL and Redis an idle worker hears of a new job through the store's wake-ups
/// (`LISTEN`/`NOTIFY`, pub/sub), long before its poll interval (a minute here) would find
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_is_woken_by_an_enqueue() {
    for (name, store) in stores().await {
        if !matches!(name, "postgres" | "redis") {
            continue;
        }
        let started = Arc::new(AtomicUsize::new(0));
        let seen = started.clone();
        let worker = Worker::builder(store.clone())
            .poll_interval(Duration::from_secs(60))
            .handler(move |_job: Job, _ctx: JobContext| {
                seen.fetch_add(1, Ordering::SeqCst);
                async { Outcome::Completed }
            })
            .start()
            .unwrap();
        // Past the first (empty) claim, into the minute-long wait.
        tokio::time::sleep(Duration::from_millis(500)).await;
        enqueue(&store, vec![job(1)]).await;
        assert!(
            until(Duration::from_secs(10), || started.load(Ordering::SeqCst)
                == 1)
            .await,
            "{name}: the enqueue woke the worker"
        );
        worker.shutdown(Duration::from_secs(5)).await;
    }
}

/// A running job cancelled from another handle on the store (another replica) stops
/// within one heartbeat interval; its handler's result is refused and the row stays
/// cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_cancelled_elsewhere_stops_within_a_heartbeat() {
    for (name, store) in stores().await {
        let long = job(0);
        enqueue(&store, vec![long.clone()]).await;
        let cancelled_after: Arc<Mutex<Option<Instant>>> = Arc::default();
        let seen = cancelled_after.clone();
        // Heartbeats every second. No sweeping: a beat delayed past the lease by a loaded
        // machine would fail the job (its only attempt) before the cancel, which is the
        // sweep's contract, not this test's subject.
        let worker = Worker::builder(store.clone())
            .lock_grace(Duration::from_secs(3))
            .poll_interval(Duration::from_millis(50))
            .sweep_exhausted(false)
            .handler(move |_job: Job, ctx: JobContext| {
                let seen = seen.clone();
                async move {
                    tokio::select! {
                        _ = ctx.cancelled().cancelled() => {
                            *seen.lock().unwrap() = Some(Instant::now());
                        }
                        _ = tokio::time::sleep(Duration::from_secs(30)) => {}
                    }
                    Outcome::Completed
                }
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || worker.stats().running == 1).await,
            "{name}: claimed"
        );
        let asked = Instant::now();
        if !store.cancel_running_job(&long.id, None).await.unwrap() {
            let row = store.get_job(&long.id, None).await.unwrap();
            panic!("{name}: the running job was not cancelled; its row: {row:?}");
        }
        assert!(
            until(Duration::from_secs(5), || cancelled_after
                .lock()
                .unwrap()
                .is_some())
            .await,
            "{name}: the handler was cancelled"
        );
        let took = cancelled_after.lock().unwrap().unwrap() - asked;
        assert!(
            took < Duration::from_millis(2_500),
            "{name}: cancelled after {took:?}, more than a heartbeat interval"
        );
        let stats = worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            (stats.completed, stats.lease_lost),
            (0, 1),
            "{name}: {stats:?}"
        );
        let row = store.get_job(&long.id, None).await.unwrap().unwrap();
        assert_eq!(row.status, JobStatus::Cancelled, "{name}");
    }
}

/// A job whose holder died with no attempt left (agno's default `max_attempts = 1`) is
/// swept to `failed` with agno's message, while a dead holder's job with attempts left is
/// reclaimed and run; the swept one's handler never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_jobs_are_swept_or_reclaimed() {
    for (name, store) in stores().await {
        let mut last_try = job(0);
        last_try.max_attempts = 1;
        let mut retry = job(1);
        retry.max_attempts = 3;
        enqueue(&store, vec![last_try.clone(), retry.clone()]).await;
        // A worker that claims both and dies without a heartbeat.
        let claimed = store.claim_jobs("ghost", 1, None, 2).await.unwrap();
        assert_eq!(claimed.len(), 2, "{name}");
        let ran: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = ran.clone();
        let worker = Worker::builder(store.clone())
            .lock_grace(Duration::from_secs(1))
            .poll_interval(Duration::from_millis(100))
            .handler(move |job: Job, _ctx: JobContext| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(job.id);
                    Outcome::Completed
                }
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || {
                let s = worker.stats();
                s.swept == 1 && s.completed == 1
            })
            .await,
            "{name}: {:?}",
            worker.stats()
        );
        worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(*ran.lock().unwrap(), vec![retry.id.clone()], "{name}");
        let swept = store.get_job(&last_try.id, None).await.unwrap().unwrap();
        assert_eq!(swept.status, JobStatus::Failed, "{name}");
        assert_eq!(
            swept.error.as_deref(),
            Some(agno_storage_worker::SWEPT_ERROR)
        );
        let rerun = store.get_job(&retry.id, None).await.unwrap().unwrap();
        assert_eq!(
            (rerun.status, rerun.attempt),
            (JobStatus::Completed, 2),
            "{name}"
        );
    }
}

/// Handlers publish events under their job's id; a tail reads them from the start or an
/// offset and ends when the job ends. A retry drops the failed attempt's events and its
/// indices go on. On the in-process stream and on Redis (agno's layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_publish_events_that_a_tail_reads() {
    let mut streams: Vec<(&str, Arc<dyn RunEvents>)> =
        vec![("local", Arc::new(LocalRunEvents::new()))];
    if let Some(url) = servers::url(Backend::Redis).await.unwrap() {
        let prefix = format!("agno_worker_{}", &uuid()[..12]);
        streams.push(("redis", Arc::new(Coordination::new(&url, &prefix).unwrap())));
    }
    for (name, events) in streams {
        let store = InMemoryDb::new().agno_db().job_store().unwrap();
        let mut flaky = job(1);
        flaky.max_attempts = 2;
        enqueue(&store, vec![job(0), flaky.clone()]).await;
        let worker = Worker::builder(store.clone())
            .events(events.clone())
            .retry_delay(Duration::ZERO)
            .poll_interval(Duration::from_millis(50))
            .handler(|job: Job, ctx: JobContext| async move {
                let n = if job.attempt == 1 { 2 } else { 1 };
                for i in 0..n {
                    let event =
                        json!({"event": "RunContent", "content": format!("{}-{i}", job.attempt)});
                    if ctx.publish(event).await.unwrap().is_none() {
                        return Outcome::Failed("fenced out".into());
                    }
                }
                if job.id.starts_with("job-00001") && job.attempt == 1 {
                    Outcome::Failed("first attempt fails".into())
                } else {
                    Outcome::Completed
                }
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || worker.stats().completed == 2).await,
            "{name}: {:?}",
            worker.stats()
        );
        worker.shutdown(Duration::from_secs(5)).await;
        let read = |run: String, after: Option<i64>| {
            let events = events.clone();
            async move {
                let mut tail = events.tail(&run, after).await.unwrap();
                let mut seen = Vec::new();
                while let Some(e) = tail.next().await {
                    let e = e.unwrap();
                    seen.push((e.index, e.data().unwrap()["content"].clone()));
                }
                seen
            }
        };
        let plain = store
            .list_jobs(JobQuery::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .find(|j| j.id != flaky.id)
            .unwrap();
        assert_eq!(
            read(plain.id.clone(), None).await,
            vec![(0, json!("1-0")), (1, json!("1-1"))],
            "{name}"
        );
        assert_eq!(
            read(plain.id.clone(), Some(0)).await,
            vec![(1, json!("1-1"))],
            "{name}"
        );
        assert_eq!(
            events.get_run_status(&plain.id).await.unwrap(),
            Some(StreamStatus::Completed),
            "{name}"
        );
        // The retry's one event, after the first attempt's two indices.
        assert_eq!(
            read(flaky.id.clone(), None).await,
            vec![(2, json!("2-0"))],
            "{name}"
        );
    }
}

/// A paused run continued: `reopen_run` keeps a tail attached before the next leg open
/// (the pause no longer ends it), the worker's continuation leg appends to the first leg's
/// events instead of dropping them as a retry would, and `reopen_run` refuses newer
/// statuses, takes a failed leg only for a redrive, and raises a forgotten run's counter to
/// its floor. On the in-process stream and on Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continued_run_reopens_its_stream_and_keeps_its_history() {
    let mut streams: Vec<(&str, Arc<dyn RunEvents>)> =
        vec![("local", Arc::new(LocalRunEvents::new()))];
    if let Some(url) = servers::url(Backend::Redis).await.unwrap() {
        let prefix = format!("agno_worker_{}", &uuid()[..12]);
        streams.push(("redis", Arc::new(Coordination::new(&url, &prefix).unwrap())));
    }
    for (name, events) in streams {
        let store = InMemoryDb::new().agno_db().job_store().unwrap();
        let run = job(0);
        enqueue(&store, vec![run.clone()]).await;
        let start = || {
            Worker::builder(store.clone())
                .events(events.clone())
                .poll_interval(Duration::from_millis(50))
                .handler(|job: Job, ctx: JobContext| async move {
                    let leg = if job.payload.get("continue").is_some() {
                        "leg2"
                    } else {
                        "leg1"
                    };
                    ctx.publish(json!({"event": "RunContent", "content": leg}))
                        .await
                        .unwrap();
                    match leg {
                        "leg1" => Outcome::Paused,
                        _ => Outcome::Completed,
                    }
                })
                .start()
                .unwrap()
        };
        let worker = start();
        assert!(
            until(Duration::from_secs(10), || worker.stats().paused == 1).await,
            "{name}"
        );
        worker.shutdown(Duration::from_secs(5)).await;
        let read = |after: Option<i64>| {
            let (events, id) = (events.clone(), run.id.clone());
            async move {
                let mut tail = events.tail(&id, after).await.unwrap();
                let mut seen = Vec::new();
                while let Some(e) = tail.next().await {
                    let e = e.unwrap();
                    seen.push((e.index, e.data().unwrap()["content"].clone()));
                }
                seen
            }
        };
        assert_eq!(
            read(None).await,
            vec![(0, json!("leg1"))],
            "{name}: the pause ends tails"
        );

        let continued = store
            .continue_job(&run.id, None, json!({"approved": true}))
            .await
            .unwrap();
        assert_eq!(continued.outcome, ContinueOutcome::Queued, "{name}");
        assert!(
            events.reopen_run(&run.id, false, None).await.unwrap(),
            "{name}"
        );
        let early = tokio::spawn(read(Some(0)));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !early.is_finished(),
            "{name}: a reopened run's tail waits for the next leg"
        );
        let worker = start();
        assert!(
            until(Duration::from_secs(10), || worker.stats().completed == 1).await,
            "{name}"
        );
        worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(early.await.unwrap(), vec![(1, json!("leg2"))], "{name}");
        assert_eq!(
            read(None).await,
            vec![(0, json!("leg1")), (1, json!("leg2"))],
            "{name}: the first leg's events are history, not dropped"
        );

        assert!(
            !events.reopen_run(&run.id, true, None).await.unwrap(),
            "{name}: completed"
        );
        events
            .set_run_status(&run.id, StreamStatus::Error, None)
            .await
            .unwrap();
        assert!(
            !events.reopen_run(&run.id, false, None).await.unwrap(),
            "{name}: error"
        );
        assert!(
            events.reopen_run(&run.id, true, None).await.unwrap(),
            "{name}: redrive"
        );
        assert_eq!(
            events.get_run_status(&run.id).await.unwrap(),
            Some(StreamStatus::Pending),
            "{name}"
        );
        events.cleanup_run(&run.id).await.unwrap();
        assert!(
            events.reopen_run(&run.id, false, Some(41)).await.unwrap(),
            "{name}: forgotten"
        );
        let next = events
            .add_event(&run.id, &json!({"event": "RunContent"}), None)
            .await
            .unwrap();
        assert_eq!(next, Some(42), "{name}: the counter starts past the floor");
    }
}

/// With shared cancellation flags (agno's Redis layout), a job flagged by any replica stops
/// at once, well before a heartbeat, and ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_flagged_on_redis_stops_at_once() {
    let Some(url) = servers::url(Backend::Redis).await.unwrap() else {
        return;
    };
    let flags =
        Arc::new(Coordination::new(&url, &format!("agno_worker_{}", &uuid()[..12])).unwrap());
    let store = InMemoryDb::new().agno_db().job_store().unwrap();
    let long = job(0);
    enqueue(&store, vec![long.clone()]).await;
    let stopped: Arc<Mutex<Option<Instant>>> = Arc::default();
    let seen = stopped.clone();
    let worker = Worker::builder(store.clone())
        .cancellations(flags.clone())
        .lock_grace(Duration::from_secs(30))
        .poll_interval(Duration::from_millis(50))
        .handler(move |_job: Job, ctx: JobContext| {
            let seen = seen.clone();
            async move {
                tokio::select! {
                    _ = ctx.cancelled().cancelled() => {
                        *seen.lock().unwrap() = Some(Instant::now());
                        Outcome::Cancelled
                    }
                    _ = tokio::time::sleep(Duration::from_secs(30)) => Outcome::Completed,
                }
            }
        })
        .start()
        .unwrap();
    assert!(until(Duration::from_secs(10), || worker.stats().running == 1).await);
    let asked = Instant::now();
    assert!(flags.request_cancel(&long.id).await);
    assert!(until(Duration::from_secs(5), || stopped.lock().unwrap().is_some()).await);
    let took = stopped.lock().unwrap().unwrap() - asked;
    // The heartbeat is every 10 s here: only the flag can explain a stop this soon.
    assert!(
        took < Duration::from_millis(1_000),
        "stopped after {took:?}"
    );
    let stats = worker.shutdown(Duration::from_secs(5)).await;
    assert_eq!(stats.cancelled, 1, "{stats:?}");
    let row = store.get_job(&long.id, None).await.unwrap().unwrap();
    assert_eq!(row.status, JobStatus::Cancelled);
}

/// Shutdown lets a running handler finish and writes its result; a handler that outruns
/// the deadline is cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_or_cancels_running_handlers() {
    for (name, store) in stores().await {
        let mut quick = job(0);
        quick.payload = json!({"ms": 300});
        let mut slow = job(1);
        slow.payload = json!({"ms": 60_000});
        enqueue(&store, vec![quick.clone(), slow.clone()]).await;
        let worker = Worker::builder(store.clone())
            .concurrency(2)
            .poll_interval(Duration::from_millis(50))
            .handler(|job: Job, ctx: JobContext| async move {
                let ms = job.payload["ms"].as_u64().unwrap_or(0);
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(ms)) => Outcome::Completed,
                    _ = ctx.cancelled().cancelled() => Outcome::Cancelled,
                }
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || worker.stats().running == 2).await,
            "{name}: both running"
        );
        let stats = worker.shutdown(Duration::from_secs(2)).await;
        assert_eq!(
            (stats.completed, stats.cancelled, stats.running),
            (1, 1, 0),
            "{name}: {stats:?}"
        );
        let status = |id: String| {
            let store = store.clone();
            async move { store.get_job(&id, None).await.unwrap().unwrap().status }
        };
        assert_eq!(status(quick.id).await, JobStatus::Completed, "{name}");
        assert_eq!(status(slow.id).await, JobStatus::Cancelled, "{name}");
    }
}

/// With a prefetch, jobs claimed ahead wait for a slot under this worker's lease; at
/// shutdown the ones never started are handed back at their attempt and another worker
/// runs them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetched_jobs_are_handed_back_at_shutdown() {
    for (name, store) in stores().await {
        enqueue(&store, (0..10).map(job).collect()).await;
        let worker = Worker::builder(store.clone())
            .concurrency(1)
            .prefetch(5)
            .poll_interval(Duration::from_millis(50))
            .handler(|_job: Job, _ctx: JobContext| async {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Outcome::Completed
            })
            .start()
            .unwrap();
        assert!(
            until(Duration::from_secs(10), || worker.stats().claimed == 6).await,
            "{name}: one running and five waiting: {:?}",
            worker.stats()
        );
        let stats = worker.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            (stats.completed, stats.released, stats.errors),
            (1, 5, 0),
            "{name}: {stats:?}"
        );
        assert_eq!(
            count(&store, JobStatus::Queued).await,
            9,
            "{name}: handed back"
        );
        let all = store.claim_jobs("next", 60, None, 20).await.unwrap();
        assert_eq!(all.len(), 9, "{name}");
        assert!(
            all.iter().all(|j| j.attempt == 1),
            "{name}: no attempt was spent"
        );
    }
}

/// A builder without a handler, or with a zero concurrency or sub-second lease, is refused
/// with the setting named.
#[tokio::test]
async fn bad_settings_are_refused() {
    let store = InMemoryDb::new().agno_db().job_store().unwrap();
    let err = |r: agno_storage_core::Result<Worker>| r.err().expect("refused").to_string();
    assert!(err(Worker::builder(store.clone()).start()).contains("handler"));
    let noop = |_: Job, _: JobContext| async { Outcome::Completed };
    assert!(err(Worker::builder(store.clone())
        .handler(noop)
        .concurrency(0)
        .start())
    .contains("concurrency"));
    assert!(err(Worker::builder(store)
        .handler(noop)
        .lock_grace(Duration::from_millis(10))
        .start())
    .contains("lock_grace"));
}
