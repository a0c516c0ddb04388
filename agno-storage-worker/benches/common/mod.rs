//! What the drain benches share: the jobs they drain, our store's own loop, medians.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agno_storage_core::{Job, JobCompletion, JobStatus, JobStore};
use agno_storage_worker::{JobContext, Outcome, Worker};
use serde_json::json;

/// Enqueues `n` no-op jobs over 100 sessions, 500 per call.
pub async fn enqueue(store: &Arc<dyn JobStore>, n: usize) {
    let jobs: Vec<Job> = (0..n)
        .map(|i| {
            Job::new(
                format!("job-{i:06}"),
                "agent",
                "bench-agent",
                format!("s{}", i % 100),
                json!({"input": format!("message {i}"), "stream": false}),
            )
        })
        .collect();
    for chunk in jobs.chunks(500) {
        for outcome in store.enqueue_jobs(chunk.to_vec(), 0).await.unwrap() {
            assert!(outcome.unwrap().rejection.is_none());
        }
    }
}

/// One [`Worker`] of `concurrency` slots prefetching `prefetch` drains `n` no-op jobs;
/// jobs per second until every result is written.
pub async fn worker_drain(
    store: &Arc<dyn JobStore>,
    n: usize,
    concurrency: usize,
    prefetch: usize,
) -> f64 {
    let start = Instant::now();
    let worker = Worker::builder(store.clone())
        .concurrency(concurrency)
        .prefetch(prefetch)
        .handler(|_job: Job, _ctx: JobContext| async { Outcome::Completed })
        .start()
        .unwrap();
    while (worker.stats().completed as usize) < n {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let stats = worker.shutdown(Duration::from_secs(10)).await;
    assert_eq!((stats.errors, stats.lease_lost), (0, 0), "{stats:?}");
    rate
}

/// Our store's own loop, the adapter's share without the worker's: `claim_jobs` of up to
/// `batch`, then one `complete_jobs`, until none is left. Jobs per second.
pub async fn store_loop(store: &Arc<dyn JobStore>, batch: usize) -> f64 {
    let start = Instant::now();
    let mut done = 0;
    loop {
        let jobs = store.claim_jobs("loop", 300, None, batch).await.unwrap();
        if jobs.is_empty() {
            break;
        }
        let completions = jobs
            .iter()
            .map(|j| JobCompletion::of(j, JobStatus::Completed, None))
            .collect();
        for result in store.complete_jobs("loop", completions).await.unwrap() {
            result.unwrap();
            done += 1;
        }
    }
    done as f64 / start.elapsed().as_secs_f64()
}

/// The jobs `store` holds completed.
pub async fn completed(store: &Arc<dyn JobStore>) -> usize {
    store
        .list_jobs(agno_storage_core::JobQuery {
            status: Some(JobStatus::Completed),
            ..Default::default()
        })
        .await
        .unwrap()
        .total as usize
}

/// The median of `v` (the upper one of an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
