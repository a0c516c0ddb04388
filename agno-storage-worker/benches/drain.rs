//! Drain benchmark on PostgreSQL, run on demand
//! (`cargo bench -p agno-storage-worker --bench drain`).
//!
//! N no-op jobs (default 20,000; `BENCH_JOBS=…`) enqueued beforehand into a fresh, analyzed
//! schema, then drained by one [`Worker`] of concurrency 8 (`BENCH_CONCURRENCY=…`), without
//! and with a prefetch of 500 (`BENCH_PREFETCH=…`, the size of graphile-worker's batched
//! local queue); the time runs until every result is written. Beside each, the bare batched
//! loop on agno's layout (sqlx alone: one claim statement of up to 8, or 500, jobs and one
//! completion statement, repeated), on the same number of jobs, and the same loop through
//! our job store (`claim_jobs`, `complete_jobs`: the adapter's share without the worker's). `scripts/bench-worker.sh`
//! installs graphile-worker from npm and runs this with it. With `GRAPHILE_BENCH=DIR` (a
//! folder holding graphile-worker 0.18 in `node_modules` and
//! `../shared/peers/graphile-worker-bench.js`), graphile-worker drains the same number of
//! jobs on the same server, default and batched (`BATCHED=1`), the contenders alternating
//! for `BENCH_ROUNDS` rounds (default 3). Needs `AGNO_TEST_POSTGRES_URL`.

use std::time::Instant;

use std::sync::Arc;

use agno_storage_core::JobStore;
use agno_storage_sql::{SqlDb, TableNames};
use sqlx::postgres::{PgPool, PgPoolOptions};

mod common;
use common::median;

/// A fresh schema of agno's layout holding `n` queued no-op jobs, analyzed: its name, our
/// job store on it and a bare pool.
async fn fill(url: &str, n: usize) -> (String, Arc<dyn JobStore>, PgPool) {
    let schema = format!(
        "agno_drain_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let db = SqlDb::connect_postgres(url, &schema, TableNames::default())
        .await
        .unwrap()
        .agno_db();
    let store = db.job_store().unwrap();
    common::enqueue(&store, n).await;
    let pool = PgPoolOptions::new().connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE \"{schema}\".agno_jobs"
    )))
    .execute(&pool)
    .await
    .unwrap();
    (schema, store, pool)
}

/// Checks every job completed, then drops the schema.
async fn verify_and_drop(schema: &str, store: &Arc<dyn JobStore>, pool: &PgPool, n: usize) {
    let completed = common::completed(store).await;
    assert_eq!(completed, n);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(pool)
    .await
    .unwrap();
}

async fn ours(url: &str, n: usize, concurrency: usize, prefetch: usize) -> f64 {
    let (schema, store, pool) = fill(url, n).await;
    let rate = common::worker_drain(&store, n, concurrency, prefetch).await;
    verify_and_drop(&schema, &store, &pool, n).await;
    rate
}

/// [`common::store_loop`] on a fresh schema of `n` jobs.
async fn store_loop(url: &str, n: usize, batch: usize) -> f64 {
    let (schema, store, pool) = fill(url, n).await;
    let rate = common::store_loop(&store, batch).await;
    verify_and_drop(&schema, &store, &pool, n).await;
    rate
}

/// The bare batched loop on agno's layout, through sqlx alone: claim up to `batch` jobs in
/// one `UPDATE … SKIP LOCKED … RETURNING`, finish them in one `UPDATE … FROM unnest(…)`
/// fenced on `(id, attempt, locked_by, running)`, repeat until none is left.
async fn bare(url: &str, n: usize, batch: usize) -> f64 {
    let (schema, store, pool) = fill(url, n).await;
    let table = format!("\"{schema}\".agno_jobs");
    let claim = format!(
        "UPDATE {table} SET status = 'running', locked_by = $1, locked_at = $2, attempt = attempt + 1, updated_at = $2 \
         WHERE id = ANY(ARRAY(SELECT id FROM {table} WHERE status = 'queued' AND available_at <= $2 \
         ORDER BY created_at, id LIMIT $3 FOR UPDATE SKIP LOCKED)) RETURNING id, attempt"
    );
    let finish = format!(
        "UPDATE {table} AS j SET status = 'completed', locked_by = NULL, locked_at = NULL, completed_at = $3, \
         updated_at = $3 FROM unnest($1::text[], $2::bigint[]) AS v(id, attempt) \
         WHERE j.id = v.id AND j.attempt = v.attempt AND j.locked_by = $4 AND j.status = 'running'"
    );
    let start = Instant::now();
    let mut done = 0;
    loop {
        let now = agno_storage_core::now_epoch_seconds();
        let rows: Vec<(String, i64)> = sqlx::query_as(sqlx::AssertSqlSafe(claim.clone()))
            .bind("bare")
            .bind(now)
            .bind(batch as i64)
            .fetch_all(&pool)
            .await
            .unwrap();
        if rows.is_empty() {
            break;
        }
        let (ids, attempts): (Vec<String>, Vec<i64>) = rows.into_iter().unzip();
        let finished = sqlx::query(sqlx::AssertSqlSafe(finish.clone()))
            .bind(&ids)
            .bind(&attempts)
            .bind(now)
            .bind("bare")
            .execute(&pool)
            .await
            .unwrap()
            .rows_affected();
        done += finished as usize;
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    verify_and_drop(&schema, &store, &pool, n).await;
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
    let (n, rounds) = (env("BENCH_JOBS", 20_000), env("BENCH_ROUNDS", 3));
    let concurrency = env("BENCH_CONCURRENCY", 8);
    let prefetch = env("BENCH_PREFETCH", 500);
    let peer = std::env::var("GRAPHILE_BENCH").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("{n} jobs, concurrency {concurrency}, {rounds} rounds");
    let mut o = Vec::new();
    let mut op = Vec::new();
    let mut b = Vec::new();
    let mut bp = Vec::new();
    let mut sp = Vec::new();
    let mut g = Vec::new();
    let mut gb = Vec::new();
    for round in 0..rounds {
        o.push(rt.block_on(ours(&url, n, concurrency, 0)));
        b.push(rt.block_on(bare(&url, n, concurrency)));
        op.push(rt.block_on(ours(&url, n, concurrency, prefetch)));
        bp.push(rt.block_on(bare(&url, n, prefetch)));
        sp.push(rt.block_on(store_loop(&url, n, prefetch)));
        let mut line = format!(
            "round {round}: ours {:.0}/s, bare loop of {concurrency} {:.0}/s, ours prefetching {prefetch} {:.0}/s, \
             bare loop of {prefetch} {:.0}/s, our store's loop of {prefetch} {:.0}/s",
            o[round], b[round], op[round], bp[round], sp[round]
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
    let ratio = |a: &[f64], b: &[f64]| {
        let r: Vec<f64> = a.iter().zip(b).map(|(x, y)| x / y).collect();
        median(&r)
    };
    println!(
        "median jobs/s: ours {:.0}, prefetching {:.0}, bare loop of {concurrency} {:.0}, of {prefetch} {:.0}; \
         ours / bare {:.2}, prefetching / bare {:.2}, our store's loop / bare {:.2} (medians of per-round ratios)",
        median(&o),
        median(&op),
        median(&b),
        median(&bp),
        ratio(&o, &b),
        ratio(&op, &bp),
        ratio(&sp, &bp)
    );
    if peer.is_some() {
        println!(
            "graphile-worker {:.0}, batched {:.0}; ours / graphile-worker {:.2}, prefetching / batched {:.2}",
            median(&g),
            median(&gb),
            ratio(&o, &g),
            ratio(&op, &gb)
        );
    }
}
