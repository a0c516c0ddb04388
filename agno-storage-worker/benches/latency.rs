//! Enqueue-to-start latency on PostgreSQL with an idle worker, run on demand
//! (`cargo bench -p agno-storage-worker --bench latency`).
//!
//! `BENCH_JOBS` jobs (default 200) are enqueued one at a time, 20 ms apart, into a fresh
//! schema that one idle [`Worker`] (concurrency 8, the default 1 s poll interval) serves;
//! each job's latency runs from the start of its `enqueue_job` call to the start of its
//! handler. The worker learns of new jobs through the store's wake-ups (PostgreSQL
//! `LISTEN`/`NOTIFY`), not its poll. Prints p50, p90 and p99. Needs
//! `AGNO_TEST_POSTGRES_URL`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agno_storage_core::Job;
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_worker::{JobContext, Outcome, Worker};
use serde_json::json;

fn main() {
    let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
        eprintln!("latency: AGNO_TEST_POSTGRES_URL is not set; nothing to measure");
        return;
    };
    let n: usize = std::env::var("BENCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut latencies = rt.block_on(measure(&url, n));
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{n} jobs into an idle worker on PostgreSQL: enqueue-to-start p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms",
        at(0.5).as_secs_f64() * 1e3,
        at(0.9).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
    );
}

async fn measure(url: &str, n: usize) -> Vec<Duration> {
    let schema = format!(
        "agno_latency_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let db = SqlDb::connect_postgres(url, &schema, TableNames::default())
        .await
        .unwrap()
        .agno_db();
    let store = db.job_store().unwrap();
    let started: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let seen = started.clone();
    let worker = Worker::builder(store.clone())
        .concurrency(8)
        .handler(move |job: Job, _ctx: JobContext| {
            seen.lock().unwrap().insert(job.id, Instant::now());
            async { Outcome::Completed }
        })
        .start()
        .unwrap();
    // Let the worker reach its idle wait.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut enqueued = HashMap::new();
    for i in 0..n {
        let job = Job::new(
            format!("job-{i:05}"),
            "agent",
            "bench-agent",
            format!("s{i}"),
            json!({"input": "hi"}),
        );
        enqueued.insert(job.id.clone(), Instant::now());
        assert!(store.enqueue_job(job, 0).await.unwrap().rejection.is_none());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    worker.shutdown(Duration::from_secs(5)).await;
    let started = started.lock().unwrap();
    enqueued
        .iter()
        .map(|(id, at)| started.get(id).map_or(Duration::MAX, |s| *s - *at))
        .collect()
}
