//! Drain benchmark on SQLite and MySQL, run on demand
//! (`cargo bench -p agno-storage-worker --bench backends`).
//!
//! The PostgreSQL drain (`benches/drain.rs`) on the other SQL backends: N no-op jobs
//! (default 20,000; `BENCH_JOBS=…`) enqueued beforehand into a fresh database of agno's
//! layout, then drained three ways, alternating for `BENCH_ROUNDS` rounds (default 3): one
//! [`Worker`] of concurrency 8 prefetching 500, our store's own loop (`claim_jobs` of up to
//! 500, then one `complete_jobs`), and a bare sqlx loop doing the same claims and
//! completions on the same table (SQLite: one `UPDATE … RETURNING` and one `UPDATE … IN`;
//! MySQL: a transaction of `SELECT … FOR UPDATE SKIP LOCKED` and `UPDATE … IN`, then one
//! `UPDATE … IN`). MySQL needs `AGNO_TEST_MYSQL_URL`; without it only SQLite is measured.

use std::sync::Arc;
use std::time::Instant;

use agno_storage_core::JobStore;
use agno_storage_sql::{SqlDb, TableNames};

mod common;
use common::{completed, median};

/// Our store's loop's batch and the worker's prefetch.
const BATCH: usize = 500;

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Sqlite,
    MySql,
}

/// A fresh database holding `n` queued no-op jobs: our job store on it and the URL a bare
/// pool connects to.
async fn fill(backend: Backend, mysql: &str, n: usize) -> (Arc<dyn JobStore>, String) {
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (db, bare_url) = match backend {
        Backend::Sqlite => {
            let path = std::env::temp_dir().join(format!("agno-drain-{id}.db"));
            let db = SqlDb::open_sqlite(&path, TableNames::default())
                .await
                .unwrap();
            (db, format!("sqlite://{}", path.display()))
        }
        Backend::MySql => {
            let schema = format!("agno_drain_{id}");
            let db = SqlDb::connect_mysql(mysql, &schema, TableNames::default())
                .await
                .unwrap();
            (db, format!("{}/{schema}", mysql.trim_end_matches('/')))
        }
    };
    let store = db.agno_db().job_store().unwrap();
    common::enqueue(&store, n).await;
    (store, bare_url)
}

/// Drops the database [`fill`] made (its URL for a bare pool).
async fn discard(url: &str) {
    match url.strip_prefix("sqlite://") {
        Some(path) => {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{path}{suffix}"));
            }
        }
        None => {
            let Some((server, schema)) = url.rsplit_once('/') else {
                return;
            };
            let pool = sqlx::MySqlPool::connect(server).await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE `{schema}`")))
                .execute(&pool)
                .await
                .unwrap();
        }
    }
}

async fn worker(backend: Backend, mysql: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, mysql, n).await;
    let rate = common::worker_drain(&store, n, 8, BATCH).await;
    assert_eq!(completed(&store).await, n);
    discard(&url).await;
    rate
}

async fn store_loop(backend: Backend, mysql: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, mysql, n).await;
    let rate = common::store_loop(&store, BATCH).await;
    assert_eq!(completed(&store).await, n);
    discard(&url).await;
    rate
}

/// `sql`'s statement with `now` twice, then `ids`.
fn with_ids<'q, DB: sqlx::Database>(
    sql: String,
    now: i64,
    ids: &'q [(String,)],
) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
where
    i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    &'q String: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    let mut q = sqlx::query(sqlx::AssertSqlSafe(sql)).bind(now).bind(now);
    for (id,) in ids {
        q = q.bind(id);
    }
    q
}

/// `?, ?, …` for `n` parameters.
fn marks(n: usize) -> String {
    vec!["?"; n].join(", ")
}

async fn bare(backend: Backend, mysql: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, mysql, n).await;
    let claim_set =
        "status = 'running', locked_by = 'bare', locked_at = ?, attempt = attempt + 1, \
         updated_at = ?";
    let candidates = "SELECT id FROM agno_jobs WHERE status = 'queued' AND available_at <= ? \
         ORDER BY created_at, id LIMIT ?";
    let finish = |k: usize| {
        format!(
            "UPDATE agno_jobs SET status = 'completed', locked_by = NULL, locked_at = NULL, \
             completed_at = ?, updated_at = ? WHERE locked_by = 'bare' AND status = 'running' \
             AND id IN ({})",
            marks(k)
        )
    };
    let start = Instant::now();
    let mut done = 0;
    match backend {
        Backend::Sqlite => {
            let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
            let claim =
                format!("UPDATE agno_jobs SET {claim_set} WHERE id IN ({candidates}) RETURNING id");
            loop {
                let now = agno_storage_core::now_epoch_seconds();
                let ids: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(claim.clone()))
                    .bind(now)
                    .bind(now)
                    .bind(now)
                    .bind(BATCH as i64)
                    .fetch_all(&pool)
                    .await
                    .unwrap();
                if ids.is_empty() {
                    break;
                }
                let finished = with_ids(finish(ids.len()), now, &ids).execute(&pool);
                done += finished.await.unwrap().rows_affected() as usize;
            }
        }
        Backend::MySql => {
            let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
            let select = format!("{candidates} FOR UPDATE SKIP LOCKED");
            loop {
                let now = agno_storage_core::now_epoch_seconds();
                let mut tx = pool.begin().await.unwrap();
                let ids: Vec<(String,)> = sqlx::query_as(sqlx::AssertSqlSafe(select.clone()))
                    .bind(now)
                    .bind(BATCH as i64)
                    .fetch_all(&mut *tx)
                    .await
                    .unwrap();
                if ids.is_empty() {
                    break;
                }
                let sql = format!(
                    "UPDATE agno_jobs SET {claim_set} WHERE id IN ({})",
                    marks(ids.len())
                );
                with_ids(sql, now, &ids).execute(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                let finished = with_ids(finish(ids.len()), now, &ids).execute(&pool);
                done += finished.await.unwrap().rows_affected() as usize;
            }
        }
    }
    let rate = done as f64 / start.elapsed().as_secs_f64();
    assert_eq!(completed(&store).await, n);
    discard(&url).await;
    rate
}

fn main() {
    let env = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (n, rounds) = (env("BENCH_JOBS", 20_000), env("BENCH_ROUNDS", 3));
    let mysql = std::env::var("AGNO_TEST_MYSQL_URL").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut backends = vec![("SQLite", Backend::Sqlite)];
    match &mysql {
        Some(_) => backends.push(("MySQL", Backend::MySql)),
        None => eprintln!("backends: AGNO_TEST_MYSQL_URL is not set; MySQL not measured"),
    }
    let url = mysql.unwrap_or_default();
    println!("{n} jobs, worker of concurrency 8 prefetching {BATCH}, {rounds} rounds");
    for (name, backend) in backends {
        let (mut w, mut s, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..rounds {
            w.push(rt.block_on(worker(backend, &url, n)));
            s.push(rt.block_on(store_loop(backend, &url, n)));
            b.push(rt.block_on(bare(backend, &url, n)));
            println!(
                "{name} round {round}: worker {:.0}/s, our store's loop {:.0}/s, bare loop {:.0}/s",
                w[round], s[round], b[round]
            );
        }
        let ratio = |a: &[f64]| {
            let r: Vec<f64> = a.iter().zip(&b).map(|(x, y)| x / y).collect();
            median(&r)
        };
        println!(
            "{name} median jobs/s: worker {:.0}, store loop {:.0}, bare loop {:.0}; worker / bare {:.2}, \
             store loop / bare {:.2} (medians of per-round ratios)",
            median(&w),
            median(&s),
            median(&b),
            ratio(&w),
            ratio(&s)
        );
    }
}
