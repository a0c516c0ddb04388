//! Drain benchmark on SQLite, MySQL and Redis, run on demand
//! (`cargo bench -p agno-storage-worker --bench backends`).
//!
//! The PostgreSQL drain (`benches/drain.rs`) on the other backends: N no-op jobs
//! (default 20,000; `BENCH_JOBS=…`) enqueued beforehand into a fresh database of agno's
//! layout, then drained three ways, alternating for `BENCH_ROUNDS` rounds (default 3): one
//! [`Worker`] of concurrency 8 prefetching 500, our store's own loop (`claim_jobs` of up to
//! 500, then one `complete_jobs`), and a bare sqlx loop doing the same claims and
//! completions on the same table (SQLite: one `UPDATE … RETURNING` and one `UPDATE … IN`;
//! MySQL: a transaction of `SELECT … FOR UPDATE SKIP LOCKED` and `UPDATE … IN`, then one
//! `UPDATE … IN`; Redis, on agno's ticket layout: `ZRANGEBYSCORE` of the `queued` set, one
//! pipeline of per-ticket claim scripts, one of per-ticket completion scripts). MySQL needs
//! `AGNO_TEST_MYSQL_URL` and Redis `AGNO_TEST_REDIS_URL`; a backend without its URL is not
//! measured.

use std::sync::Arc;
use std::time::Instant;

use agno_storage_core::JobStore;
use agno_storage_kv::redis;
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_sql::{SqlDb, TableNames};

mod common;
use common::{completed, median};

/// Our store's loop's batch and the worker's prefetch.
const BATCH: usize = 500;

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Sqlite,
    MySql,
    Redis,
}

/// A fresh database holding `n` queued no-op jobs: our job store on it and the URL a bare
/// pool connects to (for Redis, `{server URL}#{key prefix}`). `server` is the server's URL.
async fn fill(backend: Backend, server: &str, n: usize) -> (Arc<dyn JobStore>, String) {
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (db, bare_url) = match backend {
        Backend::Sqlite => {
            let path = std::env::temp_dir().join(format!("agno-drain-{id}.db"));
            let db = SqlDb::open_sqlite(&path, TableNames::default())
                .await
                .unwrap();
            (db.agno_db(), format!("sqlite://{}", path.display()))
        }
        Backend::MySql => {
            let schema = format!("agno_drain_{id}");
            let db = SqlDb::connect_mysql(server, &schema, TableNames::default())
                .await
                .unwrap();
            (
                db.agno_db(),
                format!("{}/{schema}", server.trim_end_matches('/')),
            )
        }
        Backend::Redis => {
            let prefix = format!("agno_drain_{id}");
            let options = KvOptions {
                prefix: prefix.clone(),
                ..Default::default()
            };
            let db = KvDb::connect(server, options).await.unwrap();
            (db.agno_db(), format!("{server}#{prefix}"))
        }
    };
    let store = db.job_store().unwrap();
    common::enqueue(&store, n).await;
    (store, bare_url)
}

/// Drops the database [`fill`] made (its URL for a bare pool).
async fn discard(url: &str) {
    if let Some((server, prefix)) = url.split_once('#') {
        let mut conn = redis_conn(server).await;
        let mut cursor = 0_u64;
        loop {
            let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}:*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .unwrap();
            if !keys.is_empty() {
                let _: i64 = redis::cmd("UNLINK")
                    .arg(&keys)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
            if next == 0 {
                return;
            }
            cursor = next;
        }
    }
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

async fn worker(backend: Backend, server: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, server, n).await;
    let rate = common::worker_drain(&store, n, 8, BATCH).await;
    assert_eq!(completed(&store).await, n);
    discard(&url).await;
    rate
}

async fn store_loop(backend: Backend, server: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, server, n).await;
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

async fn redis_conn(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Claims ticket `KEYS[1]` (member `ARGV[3]`) if still queued: running, held by `ARGV[1]`
/// since `ARGV[2]`, one more attempt, moved from the `queued` set (`KEYS[2]`) to `running`
/// (`KEYS[3]`). 1 when claimed.
const BARE_CLAIM: &str = r#"
local text = redis.call('GET', KEYS[1])
if not text then return 0 end
local job = cjson.decode(text)
if job.status ~= 'queued' then return 0 end
local now = tonumber(ARGV[2])
job.status = 'running'; job.locked_by = ARGV[1]; job.locked_at = now
job.attempt = (tonumber(job.attempt) or 0) + 1; job.updated_at = now
redis.call('SET', KEYS[1], cjson.encode(job))
redis.call('ZREM', KEYS[2], ARGV[3])
redis.call('ZADD', KEYS[3], now, ARGV[3])
return 1
"#;

/// Completes ticket `KEYS[1]` (member `ARGV[3]`) if `ARGV[1]` holds it, leaving the
/// `running` set (`KEYS[2]`). 1 when completed.
const BARE_COMPLETE: &str = r#"
local text = redis.call('GET', KEYS[1])
if not text then return 0 end
local job = cjson.decode(text)
if job.status ~= 'running' or job.locked_by ~= ARGV[1] then return 0 end
local now = tonumber(ARGV[2])
job.status = 'completed'; job.locked_by = cjson.null; job.locked_at = cjson.null
job.completed_at = now; job.updated_at = now
redis.call('SET', KEYS[1], cjson.encode(job))
redis.call('ZREM', KEYS[2], ARGV[3])
return 1
"#;

/// The bare Redis loop: up to [`BATCH`] due members of agno's `queued` set, one pipeline
/// of claim scripts over their tickets, one of completion scripts over those claimed.
async fn bare_redis(url: &str) -> usize {
    let (server, prefix) = url.split_once('#').unwrap();
    let mut conn = redis_conn(server).await;
    let load = |src: &str| redis::cmd("SCRIPT").arg("LOAD").arg(src).clone();
    let claim: String = load(BARE_CLAIM).query_async(&mut conn).await.unwrap();
    let complete: String = load(BARE_COMPLETE).query_async(&mut conn).await.unwrap();
    let (queued, running) = (
        format!("{prefix}:jobs:queued"),
        format!("{prefix}:jobs:running"),
    );
    let ticket = |id: &str| format!("{prefix}:jobs:job:{id}");
    let mut done = 0;
    loop {
        let now = agno_storage_core::now_epoch_seconds();
        let ids: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(&queued)
            .arg("-inf")
            .arg(now)
            .arg("LIMIT")
            .arg(0)
            .arg(BATCH)
            .query_async(&mut conn)
            .await
            .unwrap();
        if ids.is_empty() {
            return done;
        }
        let mut pipe = redis::pipe();
        for id in &ids {
            pipe.cmd("EVALSHA")
                .arg(&claim)
                .arg(3)
                .arg(ticket(id))
                .arg(&queued)
                .arg(&running)
                .arg("bare")
                .arg(now)
                .arg(id);
        }
        let claimed: Vec<i64> = pipe.query_async(&mut conn).await.unwrap();
        let mut pipe = redis::pipe();
        for (id, _) in ids.iter().zip(claimed).filter(|(_, c)| *c == 1) {
            pipe.cmd("EVALSHA")
                .arg(&complete)
                .arg(2)
                .arg(ticket(id))
                .arg(&running)
                .arg("bare")
                .arg(now)
                .arg(id);
        }
        let completed: Vec<i64> = pipe.query_async(&mut conn).await.unwrap();
        done += completed.iter().filter(|c| **c == 1).count();
    }
}

async fn bare(backend: Backend, server: &str, n: usize) -> f64 {
    let (store, url) = fill(backend, server, n).await;
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
        Backend::Redis => done = bare_redis(&url).await,
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
    let env_url = |k: &str| std::env::var(k).ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut backends = vec![("SQLite", Backend::Sqlite, String::new())];
    for (name, backend, var) in [
        ("MySQL", Backend::MySql, "AGNO_TEST_MYSQL_URL"),
        ("Redis", Backend::Redis, "AGNO_TEST_REDIS_URL"),
    ] {
        match env_url(var) {
            Some(u) => backends.push((name, backend, u)),
            None => eprintln!("backends: {var} is not set; {name} not measured"),
        }
    }
    println!("{n} jobs, worker of concurrency 8 prefetching {BATCH}, {rounds} rounds");
    for (name, backend, url) in backends {
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
