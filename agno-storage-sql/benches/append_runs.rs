//! Append-runs benchmark, run on demand (`cargo bench -p agno-storage-sql --features sqlite,postgres`,
//! plus `mysql` for the MySQL rows).
//!
//! Appends N runs of ~2 KB to one session and reads the session back, for N = 10, 1,000 and
//! 10,000 (override with `BENCH_N=10,1000`), on SQLite and PostgreSQL, side by side with:
//! a bare prepared rusqlite upsert and ours outside any runtime (the three take turns of 50
//! appends, so a change in the machine's load falls on all) / bare sqlx insert under the
//! same settings, agno 3.1.10
//! (`upsert_run` from the venv in `AGNO_TEST_PYTHON_V3`, skipped when unset), and 8
//! concurrent writers (group commit; ours with 1 and 8 writers and the bare ceilings take
//! turns, as do ours and bare sqlx with 8 writers on PostgreSQL). The read figure is the median of 5 reads, for agno
//! too (both keep recently read runs, ours parsed); the first, uncached read (ours with every run
//! parsed) is printed beside it, and both again with a typed view of every run
//! (`Session::shared_run_views`) in place of the parse. Prints per-run wall and CPU time and the ratios the
//! SQL issue sets. Needs `AGNO_TEST_POSTGRES_URL` for the PostgreSQL rows and
//! `AGNO_TEST_MYSQL_URL` (with the `mysql` feature) for the MySQL ones. Files go to
//! `BENCH_DIR` (default: the system temp dir) — put it on the disk you want to measure.
//! `BENCH_RUN_CACHE_MB` sizes our run cache (`SqlDb::set_run_cache_bytes`; a 10,000-run
//! realistic session holds ~90 MB of run text, past the 64 MiB default).
//! `BENCH_RUN=realistic` appends agno's own realistic run instead (`interop/realistic_run.json`,
//! ~9 KB of messages, tool calls and metrics; see `agno_storage_testkit::bench::run_data`), on
//! both sides, and times only the writes.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agno_storage_core::{AgnoDb, RunRecord, Session, SessionRead, SessionType};
use agno_storage_sql::{SqlDb, TableNames};
use serde_json::Value;

/// User CPU time of the whole process (all threads); kernel time (fsync, futex) is left
/// out so the figure is the cost of the code, not of the disk.
fn cpu_now() -> Duration {
    // SAFETY: getrusage writes into the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    Duration::new(
        usage.ru_utime.tv_sec as u64,
        usage.ru_utime.tv_usec as u32 * 1000,
    )
}

#[derive(Debug, Clone, Default)]
struct Sample {
    wall_per_run: f64,
    cpu_per_run: f64,
    first10: f64,
    last10: f64,
    read: f64,
    /// The read plus parsing every run dict into a `Value` (agno's read builds objects):
    /// `Session::shared_run_values`, so a run parsed by an earlier read is not parsed again.
    read_parsed: f64,
    /// The first read, before either side has anything cached; ours with every run parsed.
    first_read: f64,
    /// Ours: the read plus a typed view of every run (`Session::shared_run_views`, so a run
    /// read by an earlier read is not read again), median of [`READS`].
    read_view: f64,
    /// Ours: the first read (nothing cached) plus a typed view of every run.
    first_view: f64,
    /// Ours: the read plus a typed view of every run right after one more run was appended
    /// (a conversation's turn), median of [`READS`] turns; the append is not timed.
    turn_view: f64,
}

/// Reads of the session per sample, ours and agno's alike; the figure is their median.
const READS: usize = 5;

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

use agno_storage_testkit::bench::run_data;

fn row(i: usize, with_index: bool) -> RunRecord {
    let mut r =
        RunRecord::from_run_data("bench", Some("bench-user".into()), run_data(i)).expect("run row");
    r.run_index = with_index.then_some(i as i64);
    r
}

async fn create_session(db: &AgnoDb) {
    db.sessions()
        .unwrap()
        .upsert_session(
            Session::new("bench", SessionType::Agent, "bench-agent").with_user("bench-user"),
        )
        .await
        .unwrap();
}

/// Drops what the bench created on a shared server at `url`: PostgreSQL schemas or MySQL
/// databases `names` (agno's too), with everything in them.
fn drop_created(rt: &tokio::runtime::Runtime, url: &str, names: &[String]) {
    let dropped = rt.block_on(async {
        if url.starts_with("postgres") {
            let pool = sqlx::PgPool::connect(url).await?;
            for name in names {
                let sql = format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE");
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await?;
            }
        } else {
            let pool = sqlx::MySqlPool::connect(url).await?;
            for name in names {
                let sql = format!("DROP DATABASE IF EXISTS `{name}`");
                sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await?;
            }
        }
        Ok::<_, sqlx::Error>(())
    });
    if let Err(e) = dropped {
        eprintln!("could not drop the bench's {names:?}: {e}");
    }
}

/// Appends runs `range` to session `bench`; returns each append's wall time.
async fn append(db: &AgnoDb, range: Range<usize>) -> Vec<f64> {
    let runs = db.runs().unwrap();
    let mut laps = Vec::with_capacity(range.len());
    for i in range {
        let row = row(i, false);
        let t = Instant::now();
        runs.upsert_run(row).await.unwrap();
        laps.push(t.elapsed().as_secs_f64());
    }
    laps
}

/// `db` with the run cache `BENCH_RUN_CACHE_MB` sets (default: the store's, 64 MiB).
/// Our run cache's size: `BENCH_RUN_CACHE_MB`, else the default 64 MiB.
fn run_cache_bytes() -> usize {
    std::env::var("BENCH_RUN_CACHE_MB")
        .ok()
        .and_then(|mb| mb.parse::<usize>().ok())
        .map_or(64 << 20, |mb| mb << 20)
}

fn with_run_cache(db: SqlDb) -> SqlDb {
    db.set_run_cache_bytes(run_cache_bytes());
    db
}

/// Reads session `bench` (holding `n` runs) into `s`, every run parsed after each read
/// (`Session::shared_run_values`): the first read (nothing cached), then [`READS`] more;
/// then the same with a typed view of every run (`Session::shared_run_views`), the first
/// read after `sql`'s run cache is emptied; then [`READS`] turns of one more run appended
/// and the session read and viewed.
async fn read_back(db: &AgnoDb, sql: &SqlDb, n: usize, s: &mut Sample) {
    let sessions = db.sessions().unwrap();
    // Seconds to read the session and, with its views or its parse, to use every run.
    let read = |views: bool, runs: usize| {
        let sessions = &sessions;
        async move {
            let t = Instant::now();
            let session = sessions
                .get_session("bench", SessionRead::default())
                .await
                .unwrap()
                .unwrap();
            let read = t.elapsed().as_secs_f64();
            let used = if views {
                session.shared_run_views().unwrap().len()
            } else {
                session.shared_run_values().unwrap().len()
            };
            assert_eq!(used, runs);
            (read, t.elapsed().as_secs_f64())
        }
    };
    s.first_read = read(false, n).await.1;
    let (mut reads, mut parsed_reads) = (Vec::new(), Vec::new());
    for _ in 0..READS {
        let (read, parsed) = read(false, n).await;
        reads.push(read);
        parsed_reads.push(parsed);
    }
    s.read = median(&reads);
    s.read_parsed = median(&parsed_reads);
    sql.set_run_cache_bytes(0);
    sql.set_run_cache_bytes(run_cache_bytes());
    s.first_view = read(true, n).await.1;
    let mut viewed = Vec::new();
    for _ in 0..READS {
        viewed.push(read(true, n).await.1);
    }
    s.read_view = median(&viewed);
    let mut turns = Vec::new();
    for k in 0..READS {
        append(db, n + k..n + k + 1).await;
        turns.push(read(true, n + k + 1).await.1);
    }
    s.turn_view = median(&turns);
}

/// Append laps, their total wall time and the CPU time they took, as a [`Sample`].
fn sample(laps: &[f64], wall: f64, cpu: f64) -> Sample {
    let n = laps.len().max(1);
    Sample {
        wall_per_run: wall / n as f64,
        cpu_per_run: cpu / n as f64,
        first10: median(&laps[..n.min(10)]),
        last10: median(&laps[n.saturating_sub(10)..]),
        ..Sample::default()
    }
}

async fn ours(db: &AgnoDb, sql: &SqlDb, n: usize) -> Sample {
    create_session(db).await;
    let (wall0, cpu0) = (Instant::now(), cpu_now());
    let laps = append(db, 0..n).await;
    // A realistic run takes a while to build; as on agno's side, only the writes count.
    let wall = if agno_storage_testkit::bench::realistic() {
        laps.iter().sum()
    } else {
        wall0.elapsed().as_secs_f64()
    };
    let mut s = sample(&laps, wall, (cpu_now() - cpu0).as_secs_f64());
    read_back(db, sql, n, &mut s).await;
    s
}

/// [`ours`] inside a spawned task, on a runtime worker, where a service's request handler
/// runs.
fn in_task(rt: &tokio::runtime::Runtime, sql: &SqlDb, n: usize) -> Sample {
    let (db, sql) = (sql.agno_db(), sql.clone());
    rt.block_on(rt.spawn(async move { ours(&db, &sql, n).await }))
        .expect("bench task")
}

/// A bare rusqlite connection to a database `SqlDb` created, with its pragmas.
fn bare_connection(path: &Path) -> rusqlite::Connection {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.busy_timeout(Duration::from_secs(30)).unwrap();
    conn.pragma_update(None, "foreign_keys", "ON").unwrap();
    let _: String = conn
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    conn.execute("INSERT OR IGNORE INTO agno_sessions (session_id, session_type, created_at) VALUES ('bench', 'agent', 0)", []).unwrap();
    conn
}

/// The bare prepared upsert of a run row into session `bench`.
const BARE_UPSERT: &str = "INSERT INTO agno_runs (run_id, session_id, run_type, agent_id, user_id, status, run_index, run_data, created_at, updated_at) \
     VALUES (?1, 'bench', 'agent', 'bench-agent', 'bench-user', 'COMPLETED', ?2, ?3, ?4, ?4) \
     ON CONFLICT (run_id) DO UPDATE SET run_data = excluded.run_data";

/// Runs `range` through a bare prepared rusqlite upsert, same pragmas, one commit each;
/// returns each append's wall time.
fn bare_append(conn: &rusqlite::Connection, range: Range<usize>) -> Vec<f64> {
    let mut stmt = conn.prepare_cached(BARE_UPSERT).unwrap();
    let mut laps = Vec::with_capacity(range.len());
    for i in range {
        let t = Instant::now();
        let data = serde_json::to_string(&run_data(i)).unwrap();
        stmt.execute(rusqlite::params![
            format!("run-{i}"),
            i as i64,
            data,
            1_700_000_000 + i as i64
        ])
        .unwrap();
        laps.push(t.elapsed().as_secs_f64());
    }
    laps
}

/// Appends per turn in [`sqlite_side_by_side`].
const TURN: usize = 50;

/// Who appends in [`sqlite_side_by_side`]: ours in a spawned task (on a runtime worker,
/// where a service's handler runs), a bare prepared rusqlite upsert, and ours outside any
/// runtime (the calling thread leads its own call, no `block_in_place`), which tells the
/// runtime's share of the gap from the adapter's.
const CONTENDERS: [&str; 3] = ["ours", "bare", "ours outside a runtime"];

/// N appends through each of [`CONTENDERS`], each on a fresh file of its own, taking turns
/// of [`TURN`] appends (who goes first rotates), so a change in the machine's load falls on
/// all alike; then ours reads its session back. Returns (ours, bare, ours outside a
/// runtime).
fn sqlite_side_by_side(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    n: usize,
) -> (Sample, Sample, Sample) {
    let open = |name: &str| {
        let path = fresh(dir, name);
        let sql = rt
            .block_on(SqlDb::open_sqlite(&path, TableNames::default()))
            .unwrap();
        let sql = with_run_cache(sql);
        let db = sql.agno_db();
        rt.block_on(create_session(&db));
        (path, db, sql)
    };
    let (_, db, sql) = open("ours");
    let (_, outside, _) = open("outside");
    let (bare_path, _, _) = open("bare");
    let bare = bare_connection(&bare_path);
    // (laps, wall, cpu) of each contender.
    let mut totals: [(Vec<f64>, f64, f64); 3] = Default::default();
    for (turn, start) in (0..n).step_by(TURN).enumerate() {
        let range = start..(start + TURN).min(n);
        for side in (0..3).map(|k| (turn + k) % 3) {
            let (wall0, cpu0) = (Instant::now(), cpu_now());
            let laps = match side {
                0 => {
                    let (db, range) = (db.clone(), range.clone());
                    rt.block_on(rt.spawn(async move { append(&db, range).await }))
                        .expect("bench task")
                }
                1 => bare_append(&bare, range.clone()),
                _ => futures::executor::block_on(append(&outside, range.clone())),
            };
            let total = &mut totals[side];
            total.0.extend(laps);
            total.1 += wall0.elapsed().as_secs_f64();
            total.2 += (cpu_now() - cpu0).as_secs_f64();
        }
    }
    for (label, (laps, _, _)) in CONTENDERS.iter().zip(&totals) {
        print_laps(label, laps);
    }
    let [mut o, b, i] = totals.map(|(laps, wall, cpu)| sample(&laps, wall, cpu));
    rt.block_on(read_back(&db, &sql, n, &mut o));
    (o, b, i)
}

/// What the disk allows group commit: bare rusqlite upserts of runs `range`, `per_commit`
/// rows per transaction; returns the seconds they took. With 8 writers each waiting for its
/// own commit, no commit holds more than 8 of their runs, so 8 rows per commit over 1 is the
/// ceiling of the 8-writers ratio on this disk.
fn bare_rows(conn: &rusqlite::Connection, per_commit: usize, range: Range<usize>) -> f64 {
    let mut stmt = conn.prepare_cached(BARE_UPSERT).unwrap();
    let start = Instant::now();
    let last = range.end - 1;
    for i in range {
        if i % per_commit == 0 {
            conn.execute_batch("BEGIN IMMEDIATE").unwrap();
        }
        let data = serde_json::to_string(&run_data(i)).unwrap();
        let id = format!("ceiling-{per_commit}-{i}");
        stmt.execute(rusqlite::params![
            id,
            i as i64,
            data,
            1_700_000_000 + i as i64
        ])
        .unwrap();
        if i % per_commit == per_commit - 1 || i == last {
            conn.execute_batch("COMMIT").unwrap();
        }
    }
    start.elapsed().as_secs_f64()
}

/// `writers` tasks each append runs `range` to a session of their own (`{label}{w}`);
/// returns the seconds it took.
async fn concurrent(db: &AgnoDb, label: &str, writers: usize, range: Range<usize>) -> f64 {
    for w in 0..writers {
        db.sessions()
            .unwrap()
            .upsert_session(
                Session::new(format!("{label}{w}"), SessionType::Agent, "a").with_user("u"),
            )
            .await
            .unwrap();
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (db, range, session) = (db.clone(), range.clone(), format!("{label}{w}"));
        tasks.push(tokio::spawn(async move {
            for i in range {
                let mut r =
                    RunRecord::from_run_data(session.clone(), Some("u".into()), run_data(i))
                        .unwrap();
                r.run_id = format!("{session}-{i}");
                r.run_index = Some(i as i64);
                db.runs().unwrap().upsert_run(r).await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed().as_secs_f64()
}

/// Bare sqlx upserts of runs `range` from `writers` tasks on `pool`; returns the seconds it
/// took.
async fn bare_pg_concurrent(
    pool: &sqlx::PgPool,
    schema: &str,
    writers: usize,
    range: Range<usize>,
) -> f64 {
    let sql = format!(
        "INSERT INTO \"{schema}\".agno_runs (run_id, session_id, run_type, agent_id, user_id, status, run_index, run_data, created_at, updated_at) \
         VALUES ($1, $2, 'agent', 'a', 'u', 'COMPLETED', $3, $4, $5, $5) ON CONFLICT (run_id) DO UPDATE SET run_data = excluded.run_data"
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (pool, sql, range) = (pool.clone(), sql.clone(), range.clone());
        tasks.push(tokio::spawn(async move {
            for i in range {
                sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(format!("bare-c{w}-{i}"))
                    .bind(format!("c{w}"))
                    .bind(i as i64)
                    .bind(sqlx::types::Json(run_data(i)))
                    .bind(1_700_000_000 + i as i64)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    start.elapsed().as_secs_f64()
}

/// Bare sqlx inserts into MySQL from `writers` tasks; returns runs per second.
#[cfg(feature = "mysql")]
async fn bare_mysql_concurrent(
    url: &str,
    database: &str,
    writers: usize,
    per_writer: usize,
) -> f64 {
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(8)
        .connect(url)
        .await
        .unwrap();
    let sql = format!(
        "INSERT INTO `{database}`.agno_runs (run_id, session_id, run_type, agent_id, user_id, status, run_index, run_data, created_at, updated_at) \
         VALUES (?, ?, 'agent', 'a', 'u', 'COMPLETED', ?, ?, ?, ?) ON DUPLICATE KEY UPDATE run_data = VALUES(run_data)"
    );
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (pool, sql) = (pool.clone(), sql.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let at = 1_700_000_000 + i as i64;
                sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                    .bind(format!("bare-c{w}-{i}"))
                    .bind(format!("c{w}"))
                    .bind(i as i64)
                    .bind(serde_json::to_string(&run_data(i)).unwrap())
                    .bind(at)
                    .bind(at)
                    .execute(&pool)
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (writers * per_writer) as f64 / start.elapsed().as_secs_f64()
}

fn agno(target: &str, n: usize) -> Option<Sample> {
    let python = std::env::var("AGNO_TEST_PYTHON_V3").ok()?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/bench_agno.py");
    let out = Command::new(python)
        .arg(script)
        .arg(target)
        .arg(n.to_string())
        .output()
        .ok()?;
    if !out.status.success() {
        eprintln!(
            "agno bench failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return None;
    }
    // agno may log to stdout first (MySQLDb does); the figures are the last line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(stdout.lines().last()?).ok()?;
    Some(Sample {
        wall_per_run: v["wall_per_run_s"].as_f64()?,
        cpu_per_run: v["cpu_per_run_s"].as_f64()?,
        first10: v["first10_s"].as_f64()?,
        last10: v["last10_s"].as_f64()?,
        read: v["read_s"].as_f64()?,
        read_parsed: v["read_s"].as_f64()?,
        first_read: v["first_read_s"].as_f64()?,
        ..Sample::default()
    })
}

/// agno's read (it builds every run) over ours with a typed view of every run, warm and
/// first.
fn print_read_ratios(a: &Sample, o: &Sample) {
    println!(
        "    agno/ours read {:.1}x, read and parse every run {:.1}x, read and view every run {:.1}x (>= 5 wanted); first read and parse {:.1}x, first read and view {:.1}x (>= 5 wanted); agno's read / ours read and view after an append {:.1}x",
        a.read / o.read.max(1e-9),
        a.read / o.read_parsed.max(1e-9),
        a.read / o.read_view.max(1e-9),
        a.first_read / o.first_read.max(1e-9),
        a.first_read / o.first_view.max(1e-9),
        a.read / o.turn_view.max(1e-9)
    );
}

fn print(label: &str, n: usize, s: &Sample) {
    println!(
        "{label:<24} N={n:<6} wall/run {:>9.1} µs  user cpu/run {:>8.1} µs  10th-ish {:>8.1} µs  last {:>8.1} µs  read {:>9.2} ms  read+parse {:>9.2} ms  first read {:>9.2} ms  read+view {:>9.2} ms  first read+view {:>9.2} ms  after an append {:>9.2} ms",
        s.wall_per_run * 1e6,
        s.cpu_per_run * 1e6,
        s.first10 * 1e6,
        s.last10 * 1e6,
        s.read * 1e3,
        s.read_parsed * 1e3,
        s.first_read * 1e3,
        s.read_view * 1e3,
        s.first_view * 1e3,
        s.turn_view * 1e3
    );
}

/// Quantiles of one side's append times: the low ones show the steady cost, the high ones
/// the disk's stalls.
fn print_laps(label: &str, laps: &[f64]) {
    let mut sorted = laps.to_vec();
    sorted.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| {
        sorted
            .get(((sorted.len().max(1) - 1) as f64 * p) as usize)
            .map_or(0.0, |s| s * 1e6)
    };
    println!(
        "    {label} append µs: p10 {:.0}  p50 {:.0}  p90 {:.0}  p99 {:.0}",
        q(0.1),
        q(0.5),
        q(0.9),
        q(0.99)
    );
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(format!("{name}-{}.db", uuid::Uuid::new_v4().simple()));
    let _ = std::fs::remove_file(&p);
    p
}

fn main() {
    let ns: Vec<usize> = std::env::var("BENCH_N")
        .unwrap_or_else(|_| "10,1000,10000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let dir = std::env::var_os("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("agno-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pg_url = std::env::var("AGNO_TEST_POSTGRES_URL").ok();
    #[cfg(feature = "mysql")]
    let my_url = std::env::var("AGNO_TEST_MYSQL_URL").ok();
    println!(
        "append N runs of ~2 KB to one session, then read it back (dir {})",
        dir.display()
    );
    for &n in &ns {
        let (o, b, i) = sqlite_side_by_side(&rt, &dir, n);
        print("sqlite ours", n, &o);
        print("sqlite bare rusqlite", n, &b);
        print("sqlite ours, no runtime", n, &i);
        println!("    ours/bare commit rate {:.2} (>= 0.95 wanted), outside a runtime {:.2}; last/first append {:.2} (<= 1.2 wanted)", b.wall_per_run / o.wall_per_run, b.wall_per_run / i.wall_per_run, o.last10 / o.first10.max(1e-9));
        if let Some(a) = agno(&format!("sqlite:{}", fresh(&dir, "agno").display()), n) {
            print("sqlite agno 3.1.10", n, &a);
            println!(
                "    agno/ours cpu per run {:.1}x (>= 20 wanted); read {:.1}x (>= 10 wanted)",
                a.cpu_per_run / o.cpu_per_run,
                a.read / o.read.max(1e-9),
            );
            print_read_ratios(&a, &o);
        }
        if let Some(url) = &pg_url {
            let schema = format!(
                "agno_ct_{}_bench_{}",
                agno_storage_core::now_epoch_seconds(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            );
            let db = rt
                .block_on(SqlDb::connect_postgres(url, &schema, TableNames::default()))
                .unwrap();
            let o = in_task(&rt, &with_run_cache(db), n);
            print("postgres ours", n, &o);
            if let Some(a) = agno(&format!("postgres:{url}#{schema}_agno"), n) {
                print("postgres agno 3.1.10", n, &a);
                print_read_ratios(&a, &o);
            }
            drop_created(&rt, url, &[schema.clone(), format!("{schema}_agno")]);
        }
        #[cfg(feature = "mysql")]
        if let Some(url) = &my_url {
            let database = format!(
                "agno_ct_{}_bench_{}",
                agno_storage_core::now_epoch_seconds(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            );
            let db = rt
                .block_on(SqlDb::connect_mysql(url, &database, TableNames::default()))
                .unwrap();
            let o = in_task(&rt, &db, n);
            print("mysql ours", n, &o);
            println!(
                "    last/first append {:.2} (<= 1.2 wanted)",
                o.last10 / o.first10.max(1e-9)
            );
            if let Some(a) = agno(&format!("mysql:{url}#{database}_agno"), n) {
                print("mysql agno 3.1.10", n, &a);
                println!(
                    "    agno/ours cpu per run {:.1}x",
                    a.cpu_per_run / o.cpu_per_run,
                );
                print_read_ratios(&a, &o);
            }
            drop_created(&rt, url, &[database.clone(), format!("{database}_agno")]);
        }
    }
    // Group commit: ours with 1 writer and with 8, and the bare ceilings, take turns for
    // ROUNDS rounds of 8 * PER runs each, so the disk's changing speed falls on all four.
    const ROUNDS: usize = 4;
    const PER: usize = 50;
    let db = rt
        .block_on(SqlDb::open_sqlite(
            &fresh(&dir, "conc"),
            TableNames::default(),
        ))
        .unwrap()
        .agno_db();
    let ceiling_path = fresh(&dir, "ceiling");
    rt.block_on(SqlDb::open_sqlite(&ceiling_path, TableNames::default()))
        .unwrap();
    let bare = bare_connection(&ceiling_path);
    // Seconds of: ours 1 writer, ours 8 writers, bare 1 row per commit, bare 8 rows per commit.
    let mut secs = [0.0; 4];
    for round in 0..ROUNDS {
        let each = round * PER..(round + 1) * PER;
        let all = 8 * round * PER..8 * (round + 1) * PER;
        secs[0] += rt.block_on(concurrent(&db, "one", 1, all.clone()));
        secs[1] += rt.block_on(concurrent(&db, "c", 8, each));
        secs[2] += bare_rows(&bare, 1, all.clone());
        secs[3] += bare_rows(&bare, 8, all);
    }
    let [one, eight, bare1, bare8] = secs.map(|s| (8 * ROUNDS * PER) as f64 / s);
    println!("sqlite group commit: 1 writer {one:.0} runs/s, 8 writers {eight:.0} runs/s = {:.1}x (>= 5 wanted)", eight / one);
    println!("    the disk's ceiling: bare rusqlite 1 row per commit {bare1:.0} rows/s, 8 rows per commit {bare8:.0} rows/s = {:.1}x; ours 8 writers / bare 8 per commit {:.2}", bare8 / bare1, eight / bare8);
    let per = 50;
    if let Some(url) = &pg_url {
        let schema = format!(
            "agno_ct_{}_benchc_{}",
            agno_storage_core::now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let db = rt
            .block_on(SqlDb::connect_postgres(url, &schema, TableNames::default()))
            .unwrap()
            .agno_db();
        let pool = rt
            .block_on(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(8)
                    .connect(url),
            )
            .unwrap();
        // Ours and bare sqlx take turns for ROUNDS rounds of `per` runs per writer, who goes
        // first alternating, so a change in the server's speed falls on both.
        let (mut ours_secs, mut bare_secs) = (0.0, 0.0);
        for round in 0..ROUNDS {
            let each = round * per..(round + 1) * per;
            for turn in 0..2 {
                if (round + turn) % 2 == 0 {
                    ours_secs += rt.block_on(concurrent(&db, "c", 8, each.clone()));
                } else {
                    bare_secs += rt.block_on(bare_pg_concurrent(&pool, &schema, 8, each.clone()));
                }
            }
        }
        let [ours8, bare8] = [ours_secs, bare_secs].map(|s| (8 * ROUNDS * per) as f64 / s);
        println!("postgres 8 writers: ours {ours8:.0} runs/s, bare sqlx {bare8:.0} runs/s = bare/ours {:.2}x (<= 1.3 wanted)", bare8 / ours8);
        drop_created(&rt, url, &[schema]);
    }
    #[cfg(feature = "mysql")]
    if let Some(url) = &my_url {
        let database = format!(
            "agno_ct_{}_benchc_{}",
            agno_storage_core::now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let db = rt
            .block_on(SqlDb::connect_mysql(url, &database, TableNames::default()))
            .unwrap()
            .agno_db();
        let per = ROUNDS * per;
        let ours8 = (8 * per) as f64 / rt.block_on(concurrent(&db, "c", 8, 0..per));
        let bare8 = rt.block_on(bare_mysql_concurrent(url, &database, 8, per));
        println!("mysql 8 writers: ours {ours8:.0} runs/s, bare sqlx {bare8:.0} runs/s = bare/ours {:.2}x", bare8 / ours8);
        drop_created(&rt, url, &[database]);
    }
}
