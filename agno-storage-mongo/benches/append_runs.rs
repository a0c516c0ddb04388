//! Append-runs benchmark on MongoDB, run on demand:
//!
//! ```sh
//! source /tmp/agno-env   # AGNO_TEST_MONGODB_URL, AGNO_TEST_PYTHON_V3
//! BENCH_N=10,1000,3000 cargo bench -p agno-storage-mongo --features mongodb --bench append_runs
//! ```
//!
//! For each N (`BENCH_N`, default 10,1000,3000; on SecantusDB, the server `scripts/test.sh`
//! starts, the sorted `find_one` that seeds a session's `run_index` scans the session's runs,
//! so ours grows with N there and 10,000 takes most of an hour): a fresh database, one session, N runs of
//! ~2 KB appended one call at a time, the session read back
//! ([`agno_storage_testkit::bench::append_runs`]); then the same workload through agno 3.1.10's
//! `MongoDb` on the same server in another fresh database. Both databases are dropped after.

use agno_storage_mongo::mongodb::Client;
use agno_storage_mongo::{MongoDb, TableNames};
use agno_storage_testkit::bench;

fn main() {
    let Ok(url) = std::env::var("AGNO_TEST_MONGODB_URL") else {
        eprintln!("note: AGNO_TEST_MONGODB_URL is not set; nothing to measure");
        return;
    };
    let ns = bench::sizes("10,1000,3000");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = rt.block_on(Client::with_uri_str(&url)).unwrap();
    println!("append N runs of ~2 KB to one session, then read it back");
    for &n in &ns {
        let name = bench::fresh_name("mongo");
        let db = rt
            .block_on(MongoDb::open(client.database(&name), TableNames::default()))
            .unwrap()
            .agno_db();
        let ours = rt
            .block_on(rt.spawn(async move { bench::append_runs(&db, n).await }))
            .unwrap()
            .unwrap();
        rt.block_on(async { client.database(&name).drop().await })
            .unwrap();
        bench::print_figures("mongodb ours", &ours);
        bench::compare_with_agno("mongodb", &format!("mongo:{url}#{name}_agno"), &ours);
    }
}
