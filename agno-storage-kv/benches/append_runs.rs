//! Append-runs benchmark on Redis and Valkey, run on demand:
//!
//! ```sh
//! source /tmp/agno-env   # AGNO_TEST_REDIS_URL, AGNO_TEST_VALKEY_URL, AGNO_TEST_PYTHON_V3
//! BENCH_N=10,1000,10000 cargo bench -p agno-storage-kv --features redis --bench append_runs
//! ```
//!
//! For each N (`BENCH_N`, default 10,1000,10000): a fresh key prefix, one session, N runs of
//! ~2 KB appended one call at a time, the session read back
//! ([`agno_storage_testkit::bench::append_runs`]); then the same workload through agno 3.1.10's
//! `RedisDb` on the same server under another fresh prefix (agno's `ValkeyDb` needs the
//! glide client, so Valkey is measured with `RedisDb` too). Both prefixes are deleted after.
//! `BENCH_WORKERS` sets the tokio runtime's worker threads (default 2); `BENCH_NAGLE=1`
//! connects through a client as the `redis` crate makes it by default, without the
//! `TCP_NODELAY` that `KvDb::connect` sets.

mod common;

use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_testkit::bench;

async fn delete_prefix(url: &str, prefix: &str) {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    common::delete_prefix(&mut conn, prefix).await.unwrap();
}

fn main() {
    let ns = bench::sizes("10,1000,10000");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(
            std::env::var("BENCH_WORKERS")
                .ok()
                .and_then(|w| w.parse().ok())
                .unwrap_or(2),
        )
        .enable_all()
        .build()
        .unwrap();
    println!("append N runs of ~2 KB to one session, then read it back");
    for (backend, var) in [
        ("redis", "AGNO_TEST_REDIS_URL"),
        ("valkey", "AGNO_TEST_VALKEY_URL"),
    ] {
        let Ok(url) = std::env::var(var) else {
            eprintln!("note: {var} is not set; {backend} skipped");
            continue;
        };
        for &n in &ns {
            let prefix = bench::fresh_name(backend);
            let options = KvOptions {
                prefix: prefix.clone(),
                ..KvOptions::default()
            };
            let db = if std::env::var_os("BENCH_NAGLE").is_some() {
                // The client as `redis` makes it by default: Nagle's algorithm on.
                let client = redis::Client::open(url.as_str()).unwrap();
                rt.block_on(KvDb::open(client, options)).unwrap().agno_db()
            } else {
                rt.block_on(KvDb::connect(&url, options)).unwrap().agno_db()
            };
            let ours = rt
                .block_on(rt.spawn(async move { bench::append_runs(&db, n).await }))
                .unwrap()
                .unwrap();
            rt.block_on(delete_prefix(&url, &prefix));
            bench::print_figures(&format!("{backend} ours"), &ours);
            bench::compare_with_agno(backend, &format!("redis:{url}#{prefix}_agno"), &ours);
        }
    }
}
