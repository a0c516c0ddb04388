//! Append-runs benchmark on embedded SurrealDB (`mem://`), run on demand, in the dev
//! profile:
//!
//! ```sh
//! BENCH_N=10,1000,3000 cargo bench -p agno-storage-surreal --features kv-mem --profile dev --bench append_runs
//! ```
//!
//! A release build of SurrealDB takes too long on a small machine, and the figure this bench
//! is for, flatness (last-10 over first-10 append latency), is a ratio within one build; the
//! absolute times of an unoptimized engine say nothing about a release one. For each N
//! (`BENCH_N`, default 10,1000,3000): a fresh in-memory datastore, one session, N runs of
//! ~2 KB appended one call at a time, the session read back
//! ([`agno_storage_testkit::bench::append_runs`]). No agno side: agno's `SurrealDb` needs a
//! SurrealDB server.

use agno_storage_surreal::{SurrealDb, SurrealOptions};
use agno_storage_testkit::bench;

fn main() {
    let ns = bench::sizes("10,1000,3000");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("append N runs of ~2 KB to one session, then read it back (mem://)");
    for &n in &ns {
        let db = rt
            .block_on(SurrealDb::connect(
                "mem://",
                SurrealOptions::new("bench", "bench"),
            ))
            .unwrap()
            .agno_db();
        let ours = rt
            .block_on(rt.spawn(async move { bench::append_runs(&db, n).await }))
            .unwrap()
            .unwrap();
        bench::print_figures("surreal-mem ours", &ours);
        bench::print_comparison("surreal-mem", &ours, None);
    }
}
