//! Append-runs benchmark on JSON files in a local directory and on JSON documents in
//! memory, run on demand:
//!
//! ```sh
//! source /tmp/agno-env   # AGNO_TEST_PYTHON_V3
//! BENCH_N=10,1000,3000 cargo bench -p agno-storage-json --features fs,memory --bench append_runs
//! ```
//!
//! For each N (`BENCH_N`, default 10,1000,3000; agno's `JsonDb` rewrites its whole runs file
//! on every append, so its side grows quadratically): one session, N runs of ~2 KB appended
//! one call at a time, the session read back ([`agno_storage_testkit::bench::append_runs`]), in
//! a fresh directory under `BENCH_DIR` (default: the system temp dir) and in a fresh
//! in-memory store. Beside them, agno 3.1.10's `JsonDb` in another fresh directory and its
//! `InMemoryDb` (a Python dict: the nearest thing agno has to a JSON store in memory).
//! Directories are removed after. The local directory runs with fsync on (the default) and
//! off, alternately, `BENCH_FSYNC_ROUNDS` times (default 1), printing fsync's cost as ratios
//! within each round; agno's figures are compared with the first round's fsync-on figures.

use std::path::PathBuf;

use agno_storage_json::JsonDb;
use agno_storage_testkit::bench;

fn main() {
    let ns = bench::sizes("10,1000,3000");
    let dir = std::env::var_os("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!(
        "append N runs of ~2 KB to one session, then read it back (dir {})",
        dir.display()
    );
    let rounds: usize = std::env::var("BENCH_FSYNC_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    for &n in &ns {
        // The local directory with fsync on (the default) and off, alternately (on/off,
        // then off/on, …) so drift of the machine falls on both; ratios within one round.
        let mut ours = None;
        for round in 0..rounds {
            let order = if round % 2 == 0 {
                [true, false]
            } else {
                [false, true]
            };
            let mut figures = [None, None];
            for fsync in order {
                agno_storage_json::set_local_fsync(fsync);
                let path = dir.join(bench::fresh_name("json"));
                std::fs::create_dir_all(&path).unwrap();
                let db = rt.block_on(JsonDb::open_local(&path)).unwrap().agno_db();
                let f = rt
                    .block_on(rt.spawn(async move { bench::append_runs(&db, n).await }))
                    .unwrap()
                    .unwrap();
                std::fs::remove_dir_all(&path).unwrap();
                let label = if fsync {
                    "json-local ours"
                } else {
                    "json-local ours nosync"
                };
                bench::print_figures(label, &f);
                figures[usize::from(!fsync)] = Some(f);
            }
            agno_storage_json::set_local_fsync(true);
            let [Some(synced), Some(unsynced)] = figures else {
                unreachable!()
            };
            println!(
                "json-local fsync cost, round {round}: wall/run x{:.2}, first10 x{:.2}, last10 x{:.2} (fsync / no fsync)",
                synced.wall_per_run / unsynced.wall_per_run,
                synced.first10 / unsynced.first10,
                synced.last10 / unsynced.last10,
            );
            ours.get_or_insert(synced);
        }
        let ours = ours.expect("BENCH_FSYNC_ROUNDS must be at least 1");
        let agno_path = dir.join(bench::fresh_name("json_agno"));
        bench::compare_with_agno(
            "json-local",
            &format!("json:{}", agno_path.display()),
            &ours,
        );
        let _ = std::fs::remove_dir_all(&agno_path);

        let db = rt.block_on(JsonDb::in_memory()).unwrap().agno_db();
        let ours = rt
            .block_on(rt.spawn(async move { bench::append_runs(&db, n).await }))
            .unwrap()
            .unwrap();
        bench::print_figures("json-memory ours", &ours);
        bench::compare_with_agno("json-memory", "memory:", &ours);
    }
}
