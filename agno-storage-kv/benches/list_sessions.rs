//! "List 20 sessions of one user among 100,000 keys": our sorted-set index against agno's
//! `SCAN` plus one `GET` per key (and against a kinder `SCAN` plus pipelined `MGET`).
//!
//! Run on demand (not part of the tests):
//!
//! ```text
//! AGNO_BENCH_REDIS_URL=redis://127.0.0.1:6379 cargo bench -p agno-storage-kv --features redis --bench list_sessions
//! ```
//!
//! It writes 100,000 session records (1,000 users × 100 sessions) the way agno's `RedisDb`
//! lays them out under a fresh `agno_bench_<epoch>` prefix, indexes them once with
//! `KvDb::rebuild_indexes`, measures, and deletes the prefix. `AGNO_BENCH_SESSIONS` and
//! `AGNO_BENCH_USERS` change the sizes.

mod common;

use std::time::{Duration, Instant};

use agno_storage_core::json::to_python_json;
use agno_storage_core::{Pagination, SessionQuery, Sort, SortOrder};
use agno_storage_kv::{KvDb, KvOptions};
use serde_json::{json, Value};

type BenchResult<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn record(i: usize, users: usize) -> (String, String) {
    let user = format!("user-{}", i % users);
    let id = format!("s-{i:06}");
    let value = json!({
        "session_id": id, "session_type": "agent", "agent_id": format!("agent-{}", i % 7),
        "team_id": null, "workflow_id": null, "user_id": user,
        "agent_data": {"name": "bench agent", "model": {"id": "gpt-4o", "provider": "OpenAI"}},
        "team_data": null, "workflow_data": null,
        "session_data": {"session_name": format!("chat {i}"), "session_state": {"step": i % 13}},
        "summary": null, "metadata": {"source": "bench"},
        "created_at": 1_700_000_000 + i as i64, "updated_at": 1_700_000_000 + i as i64,
    });
    (id, to_python_json(&value))
}

fn stats(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    (at(0.5), at(0.95))
}

async fn populate(
    conn: &mut redis::aio::ConnectionManager,
    prefix: &str,
    n: usize,
    users: usize,
) -> BenchResult<()> {
    let mut i = 0;
    while i < n {
        let mut pipe = redis::pipe();
        for j in i..(i + 1000).min(n) {
            let (id, value) = record(j, users);
            pipe.cmd("SET")
                .arg(format!("{prefix}:sessions:{id}"))
                .arg(value)
                .ignore();
        }
        pipe.query_async::<()>(conn).await?;
        i += 1000;
    }
    Ok(())
}

/// agno's `RedisDb.get_sessions(user_id=…, limit=20, sort_by="created_at")`: SCAN every
/// session key, GET each one, filter, sort, page.
async fn agno_like(
    conn: &mut redis::aio::ConnectionManager,
    prefix: &str,
    user: &str,
    pipelined: bool,
) -> BenchResult<Vec<Value>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:sessions:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        let index = format!("{prefix}:sessions:index:");
        keys.extend(batch.into_iter().filter(|k| !k.starts_with(&index)));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    let mut records = Vec::new();
    if pipelined {
        for chunk in keys.chunks(1000) {
            let values: Vec<Option<String>> =
                redis::cmd("MGET").arg(chunk).query_async(conn).await?;
            records.extend(values.into_iter().flatten());
        }
    } else {
        for key in &keys {
            let value: Option<String> = redis::cmd("GET").arg(key).query_async(conn).await?;
            records.extend(value);
        }
    }
    let mut mine: Vec<Value> = records
        .iter()
        .filter_map(|r| serde_json::from_str::<Value>(r).ok())
        .filter(|r| r["user_id"] == user)
        .collect();
    mine.sort_by_key(|r| std::cmp::Reverse(r["created_at"].as_i64()));
    mine.truncate(20);
    Ok(mine)
}

async fn run() -> BenchResult<()> {
    let url = std::env::var("AGNO_BENCH_REDIS_URL")
        .or_else(|_| std::env::var("AGNO_TEST_REDIS_URL"))
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let n = env_usize("AGNO_BENCH_SESSIONS", 100_000);
    let users = env_usize("AGNO_BENCH_USERS", 1_000).max(1);
    let prefix = format!("agno_bench_{}", agno_storage_core::now_epoch_seconds());
    let mut conn = redis::Client::open(url.as_str())?
        .get_connection_manager()
        .await?;

    let t = Instant::now();
    populate(&mut conn, &prefix, n, users).await?;
    println!(
        "wrote {n} session keys ({users} users) under {prefix}: {:?}",
        t.elapsed()
    );
    let kv = KvDb::connect(
        &url,
        KvOptions {
            prefix: prefix.clone(),
            stamp_new: false,
            ..KvOptions::default()
        },
    )
    .await?;
    let t = Instant::now();
    let report = kv.rebuild_indexes().await?;
    println!(
        "indexed once with rebuild_indexes: {:?} ({report:?})",
        t.elapsed()
    );
    let db = kv.agno_db();
    let sessions = db.sessions()?;
    let query = |user: &str| SessionQuery {
        user_id: Some(user.to_owned()),
        pagination: Pagination::limit(20),
        sort: Sort::by("created_at", SortOrder::Desc),
        ..Default::default()
    };

    let mut ours = Vec::new();
    for k in 0..500 {
        let user = format!("user-{}", (k * 37) % users);
        let t = Instant::now();
        let page = sessions.get_sessions(query(&user)).await?;
        ours.push(t.elapsed());
        assert_eq!(page.items.len(), 20.min(n / users));
    }
    let mut mget = Vec::new();
    for k in 0..5 {
        let user = format!("user-{}", (k * 37) % users);
        let t = Instant::now();
        let page = agno_like(&mut conn, &prefix, &user, true).await?;
        mget.push(t.elapsed());
        assert_eq!(page.len(), 20.min(n / users));
    }
    let mut agno = Vec::new();
    for k in 0..3 {
        let user = format!("user-{}", (k * 37) % users);
        let t = Instant::now();
        let page = agno_like(&mut conn, &prefix, &user, false).await?;
        agno.push(t.elapsed());
        // Same rows as ours.
        let expected = sessions.get_sessions(query(&user)).await?;
        let ids: Vec<&str> = page
            .iter()
            .filter_map(|r| r["session_id"].as_str())
            .collect();
        let ours_ids: Vec<&str> = expected
            .items
            .iter()
            .map(|s| s.session_id.as_str())
            .collect();
        assert_eq!(ids, ours_ids);
    }
    let ((o50, o95), (m50, m95), (a50, a95)) = (stats(ours), stats(mget), stats(agno));
    println!("list 20 sessions of one user among {n} keys:");
    println!("  index (ours)            median {o50:?}  p95 {o95:?}  (500 calls)");
    println!("  SCAN + MGET             median {m50:?}  p95 {m95:?}  (5 calls)");
    println!("  SCAN + GET/key (agno)   median {a50:?}  p95 {a95:?}  (3 calls)");
    println!(
        "  ratio: agno / ours = {:.0}x, SCAN+MGET / ours = {:.0}x (medians)",
        a50.as_secs_f64() / o50.as_secs_f64(),
        m50.as_secs_f64() / o50.as_secs_f64()
    );

    let t = Instant::now();
    common::delete_prefix(&mut conn, &prefix).await?;
    println!("deleted {prefix}: {:?}", t.elapsed());
    Ok(())
}

fn main() -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(run()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
