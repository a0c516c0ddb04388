//! Job-claims benchmark on PostgreSQL, run on demand
//! (`cargo bench -p agno-storage-sql --features sqlite,postgres --bench job_claims`).
//!
//! N queued jobs (default 5,000; `BENCH_JOBS=…`), 8 workers sharing 8 connections, each
//! worker claiming and completing jobs until none is left. Three contenders on the same
//! `agno_jobs` layout (each trial in a fresh schema created by `SqlDb::connect_postgres`,
//! seeded by the same `enqueue_job` calls and analyzed, dropped afterwards):
//!
//! - ours: `JobStore::claim_job` + `JobStore::complete_job`;
//! - ours, batched: `JobStore::claim_jobs` of up to `BENCH_BATCH` (default 64) +
//!   `JobStore::complete_jobs` of the batch, per worker;
//! - bare, two statements: `BEGIN; SELECT id … FOR UPDATE SKIP LOCKED; UPDATE … ; COMMIT`,
//!   then the fenced completing `UPDATE`, through sqlx on a pool of 8;
//! - bare, one statement: `UPDATE … WHERE id = (SELECT id … FOR UPDATE SKIP LOCKED)
//!   RETURNING id, attempt`, then the same completing `UPDATE`.
//!
//! The contenders alternate for `BENCH_ROUNDS` rounds (default 3); the ratios printed are of
//! medians. Needs `AGNO_TEST_POSTGRES_URL`.

use std::sync::Arc;
use std::time::Instant;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Job, JobCompletion, JobStatus};
use agno_storage_sql::{SqlDb, TableNames};
use serde_json::json;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};

const WORKERS: usize = 8;

fn fresh_schema(tag: &str) -> String {
    format!(
        "agno_ct_{}_{tag}_{}",
        now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// A fresh schema with our tables and `n` queued jobs, enqueued by 8 tasks.
async fn seeded(url: &str, tag: &str, n: usize) -> (String, AgnoDb) {
    let schema = fresh_schema(tag);
    let db = SqlDb::connect_postgres(url, &schema, TableNames::default())
        .await
        .unwrap()
        .agno_db();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let jobs = db.jobs().unwrap();
            for i in (w..n).step_by(WORKERS) {
                let job = Job::new(
                    format!("job-{i:06}"),
                    "agent",
                    "bench-agent",
                    format!("s{}", i % 100),
                    json!({"input": format!("message {i}"), "stream": false}),
                );
                let out = jobs.enqueue_job(job, 0).await.unwrap();
                assert!(out.rejection.is_none());
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Statistics, as autovacuum leaves a table in use (graphile-worker's table, kept across
    // its runs, has them): on a table never analyzed the planner picks another index for
    // the claim, and every contender here runs about 6x slower.
    let pool = PgPoolOptions::new().connect(url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "ANALYZE \"{schema}\".agno_jobs"
    )))
    .execute(&pool)
    .await
    .unwrap();
    (schema, db)
}

async fn drop_schema(pool: &PgPool, schema: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// Claims per second through our `JobStore`.
async fn ours(db: &AgnoDb, n: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let jobs = db.jobs().unwrap();
            let worker = format!("worker-{w}");
            let mut done = 0usize;
            while let Some(job) = jobs.claim_job(&worker, 300, None).await.unwrap() {
                jobs.complete_job(&job.id, &worker, job.attempt, JobStatus::Completed, None)
                    .await
                    .unwrap();
                done += 1;
            }
            done
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    assert_eq!(done, n, "ours completed {done} of {n}");
    rate
}

/// Claims per second through our batch calls: each worker claims up to `batch` jobs and
/// completes them in one call.
async fn ours_batched(db: &AgnoDb, n: usize, batch: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let jobs = db.jobs().unwrap();
            let worker = format!("worker-{w}");
            let mut done = 0usize;
            loop {
                let claimed = jobs.claim_jobs(&worker, 300, None, batch).await.unwrap();
                if claimed.is_empty() {
                    break;
                }
                let completions = claimed
                    .iter()
                    .map(|j| JobCompletion::of(j, JobStatus::Completed, None))
                    .collect();
                for result in jobs.complete_jobs(&worker, completions).await.unwrap() {
                    result.unwrap();
                    done += 1;
                }
            }
            done
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    assert_eq!(done, n, "ours (batched) completed {done} of {n}");
    rate
}

/// Claims per second through bare sqlx statements on a pool of 8.
async fn bare(pool: &PgPool, schema: &str, n: usize, one_statement: bool) -> f64 {
    let t = format!("\"{schema}\".agno_jobs");
    let pick = format!(
        "SELECT id FROM {t} WHERE status = 'queued' AND available_at <= $1 \
         ORDER BY created_at ASC, id ASC LIMIT 1 FOR UPDATE SKIP LOCKED"
    );
    let sql = Arc::new([
        // two statements in a transaction
        pick.clone(),
        format!(
            "UPDATE {t} SET status = 'running', locked_by = $1, locked_at = $2, attempt = attempt + 1, \
             updated_at = $2 WHERE id = $3 RETURNING attempt"
        ),
        // one statement
        format!(
            "UPDATE {t} SET status = 'running', locked_by = $1, locked_at = $2, attempt = attempt + 1, \
             updated_at = $2 WHERE id = ({}) RETURNING id, attempt",
            pick.replace("$1", "$2")
        ),
        // complete, fenced
        format!(
            "UPDATE {t} SET status = 'completed', locked_by = NULL, locked_at = NULL, completed_at = $1, \
             updated_at = $1 WHERE id = $2 AND locked_by = $3 AND attempt = $4 AND status = 'running'"
        ),
    ]);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WORKERS {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            let mut done = 0usize;
            loop {
                let now = now_epoch_seconds();
                let claimed: Option<(String, i64)> = if one_statement {
                    sqlx::query(sqlx::AssertSqlSafe(sql[2].clone()))
                        .bind(&worker)
                        .bind(now)
                        .fetch_optional(&pool)
                        .await
                        .unwrap()
                        .map(|r| (r.get(0), r.get(1)))
                } else {
                    let mut tx = pool.begin().await.unwrap();
                    let id: Option<String> = sqlx::query(sqlx::AssertSqlSafe(sql[0].clone()))
                        .bind(now)
                        .fetch_optional(&mut *tx)
                        .await
                        .unwrap()
                        .map(|r| r.get(0));
                    let claimed = match id {
                        Some(id) => {
                            let attempt: i64 = sqlx::query(sqlx::AssertSqlSafe(sql[1].clone()))
                                .bind(&worker)
                                .bind(now)
                                .bind(&id)
                                .fetch_one(&mut *tx)
                                .await
                                .unwrap()
                                .get(0);
                            Some((id, attempt))
                        }
                        None => None,
                    };
                    tx.commit().await.unwrap();
                    claimed
                };
                let Some((id, attempt)) = claimed else { break };
                let updated = sqlx::query(sqlx::AssertSqlSafe(sql[3].clone()))
                    .bind(now_epoch_seconds())
                    .bind(&id)
                    .bind(&worker)
                    .bind(attempt)
                    .execute(&pool)
                    .await
                    .unwrap()
                    .rows_affected();
                assert_eq!(updated, 1);
                done += 1;
            }
            done
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await.unwrap();
    }
    let rate = n as f64 / start.elapsed().as_secs_f64();
    assert_eq!(done, n, "bare completed {done} of {n}");
    rate
}

async fn open_all(pool: &PgPool) -> Vec<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let mut held = Vec::new();
    for _ in 0..WORKERS {
        held.push(pool.acquire().await.unwrap());
    }
    held
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// Ratios of two series round by round (each pair measured back to back).
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

fn show(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
        eprintln!("job_claims: AGNO_TEST_POSTGRES_URL is not set; nothing to measure");
        return;
    };
    let n: usize = std::env::var("BENCH_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let batch: usize = std::env::var("BENCH_BATCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let pool = PgPoolOptions::new()
            .max_connections(WORKERS as u32)
            .min_connections(WORKERS as u32)
            .connect(&url)
            .await
            .unwrap();
        // Open all 8 connections before any timing, as ours has after its seeding.
        let held: Vec<_> = open_all(&pool).await;
        drop(held);
        println!(
            "{n} jobs, {WORKERS} workers, {WORKERS} connections, {rounds} rounds, batches of {batch}"
        );
        let (mut o, mut ob, mut b2, mut b1) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            let (schema, db) = seeded(&url, "jobs_ours", n).await;
            o.push(ours(&db, n).await);
            drop(db);
            drop_schema(&pool, &schema).await;

            let (schema, db) = seeded(&url, "jobs_batched", n).await;
            ob.push(ours_batched(&db, n, batch).await);
            drop(db);
            drop_schema(&pool, &schema).await;

            let (schema, db) = seeded(&url, "jobs_bare2", n).await;
            drop(db);
            b2.push(bare(&pool, &schema, n, false).await);
            drop_schema(&pool, &schema).await;

            let (schema, db) = seeded(&url, "jobs_bare1", n).await;
            drop(db);
            b1.push(bare(&pool, &schema, n, true).await);
            drop_schema(&pool, &schema).await;
            println!(
                "round {round}: ours {:.0}/s, ours batched {:.0}/s, bare SELECT+UPDATE {:.0}/s, bare UPDATE…(SELECT) {:.0}/s",
                o[round], ob[round], b2[round], b1[round]
            );
        }
        let (r2, r1) = (ratios(&o, &b2), ratios(&o, &b1));
        println!(
            "median claims/s: ours {:.0}, ours batched {:.0}, bare SELECT FOR UPDATE SKIP LOCKED + UPDATE {:.0}, \
             bare one-statement UPDATE {:.0}",
            median(&o),
            median(&ob),
            median(&b2),
            median(&b1)
        );
        println!(
            "per round (median): ours / bare (SELECT+UPDATE) {} ({:.2}); ours / bare (one statement) {} ({:.2})",
            show(&r2),
            median(&r2),
            show(&r1),
            median(&r1)
        );
    });
}
