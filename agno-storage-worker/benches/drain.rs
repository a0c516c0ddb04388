//! Drain benchmark on PostgreSQL, run on demand
//! (`cargo bench -p agno-storage-worker --bench drain`).
//!
//! N no-op jobs (default 5,000; `BENCH_JOBS=…`) enqueued beforehand into a fresh, analyzed
//! schema, then drained by one [`Worker`] of concurrency 8 (`BENCH_CONCURRENCY=…`), without
//! and with a prefetch of 500 (`BENCH_PREFETCH=…`, the size of graphile-worker's batched
//! local queue); the time runs until every result is written. With `GRAPHILE_BENCH=DIR` (a
//! folder holding graphile-worker 0.18 in `node_modules` and
//! `../shared/peers/graphile-worker-bench.js`), graphile-worker drains the same number of
//! jobs on the same server, default and batched (`BATCHED=1`), the contenders alternating
//! for `BENCH_ROUNDS` rounds (default 3). Needs `AGNO_TEST_POSTGRES_URL`.

use std::time::{Duration, Instant};

use agno_storage_core::{Job, JobStatus};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_worker::{JobContext, Outcome, Worker};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;

async fn ours(url: &str, n: usize, concurrency: usize, prefetch: usize) -> f64 {
    let schema = format!(
        "agno_drain_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let db = SqlDb::connect_postgres(url, &schema, TableNames::default())
        .await
        .unwrap()
        .agno_db();
    let store = db.job_store().unwrap();
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
    let pool = PgPoolOptions::new().connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE \"{schema}\".agno_jobs"
    )))
    .execute(&pool)
    .await
    .unwrap();
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
    assert_eq!(
        store
            .list_jobs(agno_storage_core::JobQuery {
                status: Some(JobStatus::Completed),
                ..Default::default()
            })
            .await
            .unwrap()
            .total as usize,
        n
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    rate
}

/// graphile-worker's jobs/s from its reference script.
fn graphile(dir: &str, url: &str, n: usize, concurrency: usize, batched: bool) -> f64 {
    let out = std::process::Command::new("node")
        .current_dir(dir)
        .arg("graphile-worker-bench.js")
        .args([url, &n.to_string(), &concurrency.to_string()])
        .env("BATCHED", if batched { "1" } else { "0" })
        .output()
        .expect("node runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let line: serde_json::Value = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "graphile-worker printed no result: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    line["jobs_per_s"].as_f64().expect("jobs_per_s")
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
        eprintln!("drain: AGNO_TEST_POSTGRES_URL is not set; nothing to measure");
        return;
    };
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (n, rounds) = (env("BENCH_JOBS", 5000), env("BENCH_ROUNDS", 3));
    let concurrency = env("BENCH_CONCURRENCY", 8);
    let prefetch = env("BENCH_PREFETCH", 500);
    let peer = std::env::var("GRAPHILE_BENCH").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("{n} jobs, concurrency {concurrency}, {rounds} rounds");
    let (mut o, mut op, mut g, mut gb) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        o.push(rt.block_on(ours(&url, n, concurrency, 0)));
        op.push(rt.block_on(ours(&url, n, concurrency, prefetch)));
        let mut line = format!(
            "round {round}: ours {:.0}/s, ours prefetching {prefetch} {:.0}/s",
            o[round], op[round]
        );
        if let Some(dir) = &peer {
            g.push(graphile(dir, &url, n, concurrency, false));
            gb.push(graphile(dir, &url, n, concurrency, true));
            line += &format!(
                ", graphile-worker {:.0}/s, graphile-worker batched {:.0}/s",
                g[round], gb[round]
            );
        }
        println!("{line}");
    }
    if peer.is_some() {
        let r: Vec<f64> = o.iter().zip(&g).map(|(a, b)| a / b).collect();
        let rb: Vec<f64> = op.iter().zip(&gb).map(|(a, b)| a / b).collect();
        println!(
            "median jobs/s: ours {:.0}, prefetching {:.0}, graphile-worker {:.0}, batched {:.0}; \
             ours / graphile-worker {:.2}, prefetching / batched {:.2} (medians of per-round ratios)",
            median(&o),
            median(&op),
            median(&g),
            median(&gb),
            median(&r),
            median(&rb)
        );
    } else {
        println!(
            "median jobs/s: ours {:.0}, prefetching {:.0}",
            median(&o),
            median(&op)
        );
    }
}
