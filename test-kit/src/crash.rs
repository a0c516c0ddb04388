//! Crash during migration: a child process migrates a large agno 2.x database and is killed
//! with `SIGKILL` at random points; after each kill the database must recover.
//!
//! A backend crate adds a `harness = false` test target whose `main` calls [`main`] with one
//! [`Target`] per backend it covers. The binary runs twice over:
//!
//! * as the **parent** (the test), it creates a fresh pre-v3 database per trial through the
//!   backend's [`CrashBackend::create`], writes `sessions × runs` legacy runs blobs with the
//!   [`LegacyWriter`] it returns, and re-executes itself as a child;
//! * as the **child** (the environment variable [`CHILD_ENV`] names the backend and
//!   [`LOCATOR_ENV`] the database), it opens the database with [`CrashBackend::open`], prints
//!   `READY`, runs [`MigrationManager::up`] and prints `DONE <microseconds>`.
//!
//! The parent first runs one child to completion to measure the migration's duration `D`
//! (lowered later to the duration of any child that finishes before its kill was due),
//! then, per trial, kills a child `f × D` after its `READY` (`f` uniform in `[0, 1)`) with
//! `SIGKILL` (`std::process::Child::kill`). After each kill it checks the database as the
//! child left it, calls [`CrashBackend::after_child`] (a check, or cleanup, after every
//! child), runs `up()` again in-process and checks the result:
//!
//! * as left by the kill: every stamp is either absent or `3.0.0`; the stamped tables are a
//!   prefix of the migration order (no table is stamped whose step had not finished, nor
//!   after one that was not); the runs store holds only original runs, each at most once and
//!   intact (session, owner, position, payload); when the sessions table is stamped, every run
//!   is present;
//! * after the recovering `up()`: it completes (within a timeout, so a lock left behind by the
//!   killed child fails the trial rather than hanging it); every table is stamped `3.0.0`;
//!   every original run is present exactly once, intact, in its session at its blob
//!   position; for a random sample of five sessions, the per-session listing and the session
//!   read return its runs in order; every legacy blob (the backup) is still there and decodes
//!   to the original runs; a second `up()` does nothing.
//!
//! Kills that land after the child finished do not count: trials continue until
//! `AGNO_CRASH_TRIALS` (default 20) children were killed mid-migration (or three times that
//! many attempts were made, which fails). The size is `AGNO_CRASH_SESSIONS` (default
//! [`CrashBackend::default_sessions`], 200) sessions of `AGNO_CRASH_RUNS` (default 10) runs;
//! `AGNO_CRASH_SEED` fixes the random kill points and is printed with every failure.
//!
//! ```no_run
//! use agno_storage_core::{AgnoDb, Result};
//! use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
//! # struct MyBackend;
//! # async fn fresh_legacy_database() -> Result<CrashDb> {
//! #     Err(agno_storage_core::Error::unsupported("this example", "databases"))
//! # }
//! # async fn open_database(_locator: &str) -> Result<AgnoDb> {
//! #     Err(agno_storage_core::Error::unsupported("this example", "databases"))
//! # }
//! #[conformance_tests::async_trait]
//! impl CrashBackend for MyBackend {
//!     fn name(&self) -> &str { "mine" }
//!     // A fresh database in agno 2.x's layout, and a writer of legacy sessions into it.
//!     async fn create(&self) -> Result<CrashDb> { fresh_legacy_database().await }
//!     // The database `locator` names, opened in the parent and in every child.
//!     async fn open(&self, locator: &str) -> Result<AgnoDb> { open_database(locator).await }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     agno_storage_testkit::crash::main(vec![Target::ready(MyBackend)])
//! }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agno_storage_core::legacy::decode_legacy_runs;
use agno_storage_core::{
    AgnoDb, MigrationManager, Pagination, Result, RunJson, RunQuery, SchemaVersion, Session,
    SessionRead, SessionType,
};
use futures::StreamExt;
use serde_json::{json, Value};

use conformance_tests::{async_trait, LegacyWriter};

/// Set in a child process to the name of the backend it migrates.
pub const CHILD_ENV: &str = "AGNO_CRASH_CHILD";
/// Set in a child process to the locator of the database it migrates.
pub const LOCATOR_ENV: &str = "AGNO_CRASH_LOCATOR";

/// How long a child may take to open its database, and a recovering `up()` to finish.
const PATIENCE: Duration = Duration::from_secs(90);

/// Sessions whose per-session listing and merged read are checked after each recovery.
const SAMPLE: usize = 5;

/// A fresh pre-v3 database made for one trial.
pub struct CrashDb {
    /// Names the database so that [`CrashBackend::open`], in this process or a child, reaches
    /// the same one (a file path, a schema name, a key prefix, …).
    pub locator: String,
    /// Writes agno 2.x sessions with their runs blobs into it.
    pub writer: Arc<dyn LegacyWriter>,
}

/// A backend whose migration the crash harness interrupts.
#[async_trait]
pub trait CrashBackend: Send + Sync + 'static {
    /// Short backend name: the trial name prefix, and how a child finds its backend.
    fn name(&self) -> &str;

    /// Creates a fresh, isolated database in the state agno 2.x leaves it (nothing stamped).
    async fn create(&self) -> Result<CrashDb>;

    /// Opens the database `locator` names (called in the parent and in children).
    async fn open(&self, locator: &str) -> Result<AgnoDb>;

    /// Runs after every child, `killed` or finished, before the parent's `up()`: the place
    /// to check that a *finished* child released its migration lock. A killed child's lock
    /// must not be cleared here: the recovering `up()` has to get past it on its own (a lock
    /// that dies with its holder, or a lease that expires), which the trial proves. Does
    /// nothing by default.
    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        let _ = (locator, killed);
        Ok(())
    }

    /// Removes the database after a passing trial (a failing trial keeps it for inspection).
    /// Does nothing by default.
    async fn destroy(&self, locator: &str) -> Result<()> {
        let _ = locator;
        Ok(())
    }

    /// Sessions written when `AGNO_CRASH_SESSIONS` is unset (200; a slow emulator may lower
    /// it).
    fn default_sessions(&self) -> usize {
        200
    }
}

/// One backend of a crash test binary, reachable or not.
pub enum Target {
    /// A backend to test.
    Ready(Arc<dyn CrashBackend>),
    /// A backend whose server is not configured: skipped with a note, except under
    /// `CI=true`, where its trial fails.
    Missing {
        /// The backend name.
        name: String,
        /// Why it is missing (e.g. which variable is unset).
        why: String,
    },
}

impl Target {
    /// A backend to test.
    pub fn ready(backend: impl CrashBackend) -> Self {
        Target::Ready(Arc::new(backend))
    }

    /// A backend whose server variable `var` is unset.
    pub fn missing(name: &str, var: &str) -> Self {
        Target::Missing {
            name: name.to_owned(),
            why: format!("{var} is not set (./scripts/test.sh sets it)"),
        }
    }
}

pub use crate::servers::ci;

/// The size and randomness of a crash test run, from the environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrashConfig {
    /// Legacy sessions per database (`AGNO_CRASH_SESSIONS`).
    pub sessions: usize,
    /// Runs in each session's blob (`AGNO_CRASH_RUNS`, default 10).
    pub runs_per_session: usize,
    /// Children to kill mid-migration (`AGNO_CRASH_TRIALS`, default 20).
    pub trials: usize,
    /// Seed of the kill points (`AGNO_CRASH_SEED`, default from the clock).
    pub seed: u64,
}

impl CrashConfig {
    /// Reads the environment; `default_sessions` applies when `AGNO_CRASH_SESSIONS` is unset.
    pub fn from_env(default_sessions: usize) -> Self {
        fn var(name: &str) -> Option<u64> {
            std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
        }
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        CrashConfig {
            sessions: var("AGNO_CRASH_SESSIONS").map_or(default_sessions, |v| v as usize),
            runs_per_session: var("AGNO_CRASH_RUNS").map_or(10, |v| v as usize),
            trials: var("AGNO_CRASH_TRIALS").map_or(20, |v| v as usize),
            seed: var("AGNO_CRASH_SEED").unwrap_or(clock),
        }
    }
}

/// What one backend's crash test did.
#[derive(Debug, Clone, Default)]
pub struct CrashReport {
    /// Children killed mid-migration (each followed by a recovery and its checks).
    pub kills: usize,
    /// Children that finished before their kill was due.
    pub finished_first: usize,
    /// The uncut migration's duration, as the child measured it (lowered to the fastest
    /// migration of a child that finished before its kill): the span the kill points cover.
    pub uncut: Duration,
    /// Kills after which the sessions table was already stamped.
    pub sessions_stamped_at_kill: usize,
    /// Kills after which some, but not all, runs had been copied.
    pub partial_copies: usize,
    /// The whole test, seeding and checks included.
    pub elapsed: Duration,
}

/// Runs the crash test binary: in a child, the migration; otherwise one libtest trial per
/// target (honouring libtest's arguments), named `<backend>::crash_during_migration`.
pub fn main(targets: Vec<Target>) -> ExitCode {
    if let Ok(name) = std::env::var(CHILD_ENV) {
        return child_main(&name, targets);
    }
    let args = libtest_mimic::Arguments::from_args();
    let trials = targets
        .into_iter()
        .map(|target| match target {
            Target::Ready(backend) => {
                let name = format!("{}::crash_during_migration", backend.name());
                libtest_mimic::Trial::test(name, move || {
                    let config = CrashConfig::from_env(backend.default_sessions());
                    match run(backend.clone(), config) {
                        Ok(report) => {
                            eprintln!(
                                "{}: {} kills mid-migration ({} sessions stamped at the kill, {} partial copies), {} children \
                                 finished first; {} sessions x {} runs, uncut up() {:?}, {:.1?} in all (AGNO_CRASH_SEED={})",
                                backend.name(),
                                report.kills,
                                report.sessions_stamped_at_kill,
                                report.partial_copies,
                                report.finished_first,
                                config.sessions,
                                config.runs_per_session,
                                report.uncut,
                                report.elapsed,
                                config.seed
                            );
                            Ok(())
                        }
                        Err(f) => Err(format!("{f} (AGNO_CRASH_SEED={})", config.seed).into()),
                    }
                })
            }
            Target::Missing { name, why } => {
                let trial_name = format!("{name}::crash_during_migration");
                if ci() {
                    libtest_mimic::Trial::test(trial_name, move || {
                        Err(format!("CI=true but {why}").into())
                    })
                } else {
                    eprintln!("note: skipping the {name} crash test: {why}");
                    libtest_mimic::Trial::test(trial_name, || Ok(()))
                        .with_ignored_flag(true)
                        .with_kind("not configured")
                }
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}

/// The child: opens the database, says `READY`, migrates, says `DONE <µs>`.
fn child_main(name: &str, targets: Vec<Target>) -> ExitCode {
    let Some(backend) = targets.into_iter().find_map(|t| match t {
        Target::Ready(b) if b.name() == name => Some(b),
        _ => None,
    }) else {
        eprintln!("crash child: no backend named {name:?} in this binary");
        return ExitCode::from(3);
    };
    let Ok(locator) = std::env::var(LOCATOR_ENV) else {
        eprintln!("crash child: {LOCATOR_ENV} is not set");
        return ExitCode::from(3);
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("crash child: cannot start a runtime: {e}");
            return ExitCode::from(3);
        }
    };
    runtime.block_on(async {
        let db = match backend.open(&locator).await {
            Ok(db) => db,
            Err(e) => {
                eprintln!("crash child: cannot open {locator}: {e}");
                return ExitCode::from(2);
            }
        };
        let target = match db.migrations() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("crash child: no migration target: {e}");
                return ExitCode::from(2);
            }
        };
        println!("READY");
        let started = Instant::now();
        match MigrationManager::new(target).up().await {
            Ok(_) => {
                println!("DONE {}", started.elapsed().as_micros());
                ExitCode::SUCCESS
            }
            Err(f) => {
                eprintln!("crash child: up() failed: {f}");
                ExitCode::from(1)
            }
        }
    })
}

type Check = std::result::Result<(), String>;

fn fail<T>(message: impl Into<String>) -> std::result::Result<T, String> {
    Err(message.into())
}

fn err(context: &str) -> impl Fn(agno_storage_core::Error) -> String + '_ {
    move |e| format!("{context}: [{}] {e}", e.kind())
}

/// splitmix64: enough randomness for kill points, reproducible from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One original session: its record, its runs in blob order and the blob as written.
struct Original {
    session: Session,
    runs: Vec<Value>,
    blob: Value,
}

/// The original database: sessions by id, and each run id's session and position.
struct Originals {
    sessions: Vec<Original>,
    runs: HashMap<String, (usize, usize)>,
}

impl Originals {
    fn new(config: &CrashConfig) -> Self {
        let base = 1_700_000_000;
        let mut sessions = Vec::with_capacity(config.sessions);
        let mut runs = HashMap::new();
        for i in 0..config.sessions {
            let session_id = format!("crash-session-{i:06}");
            let user = format!("crash-user-{}", i % 17);
            let mut session = Session::new(&session_id, SessionType::Agent, "crash-agent");
            session.user_id = Some(user.clone());
            session.session_data =
                Some(json!({"session_name": format!("crash {i}"), "session_state": {"turn": i}}));
            session.created_at = base + i as i64;
            session.updated_at = Some(base + i as i64 + 60);
            let session_runs: Vec<Value> = (0..config.runs_per_session)
                .map(|j| {
                    let run_id = format!("{session_id}-run-{j:03}");
                    runs.insert(run_id.clone(), (i, j));
                    json!({
                        "run_id": run_id,
                        "agent_id": "crash-agent",
                        "session_id": session_id,
                        "user_id": user,
                        "status": if j % 7 == 6 { "ERROR" } else { "COMPLETED" },
                        "content": format!("answer {j} of session {i}: {}", "lorem ipsum dolor sit amet ".repeat(8)),
                        "model": "gpt-4o",
                        "model_provider": "OpenAI",
                        "created_at": base + (i * 100 + j) as i64,
                        "messages": [
                            {"role": "user", "content": format!("question {j}")},
                            {"role": "assistant", "content": format!("answer {j}")}
                        ],
                        "metrics": {"input_tokens": 40 + j, "output_tokens": 120 + j, "total_tokens": 160 + 2 * j}
                    })
                })
                .collect();
            // Half as agno 2.x SQLite wrote it: a JSON string holding the array.
            let array = Value::Array(session_runs.clone());
            let blob = if i % 2 == 0 {
                array
            } else {
                Value::String(array.to_string())
            };
            sessions.push(Original {
                session,
                runs: session_runs,
                blob,
            });
        }
        Originals { sessions, runs }
    }

    fn total_runs(&self) -> usize {
        self.runs.len()
    }
}

/// How a child ended.
enum ChildEnd {
    /// It printed `DONE` and exited cleanly, after `up()` took this long.
    Finished(Duration),
    /// The kill landed.
    Killed,
}

/// Runs one child on `locator`; kills it `kill_after` after its `READY` when given.
fn run_child(
    backend: &str,
    locator: &str,
    kill_after: Option<Duration>,
) -> std::result::Result<ChildEnd, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the test binary: {e}"))?;
    let mut child = Command::new(exe)
        .env(CHILD_ENV, backend)
        .env(LOCATOR_ENV, locator)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the child: {e}"))?;
    let (stdout, mut stderr) = match (child.stdout.take(), child.stderr.take()) {
        (Some(o), Some(e)) => (o, e),
        _ => return fail("the child has no pipes"),
    };
    let (lines_tx, lines) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout)
            .lines()
            .map_while(std::io::Result::ok)
        {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let ready = lines.recv_timeout(PATIENCE);
    if ready.as_deref() != Ok("READY") {
        let _ = child.kill();
        let status = child.wait();
        return fail(format!(
            "the child did not get ready ({ready:?}, {status:?}): {}",
            errors.join().unwrap_or_default().trim()
        ));
    }
    if let Some(delay) = kill_after {
        std::thread::sleep(delay);
        // SIGKILL on Unix; Ok even when the child just exited (it is not reaped yet).
        child
            .kill()
            .map_err(|e| format!("cannot kill the child: {e}"))?;
    } else {
        let deadline = Instant::now() + PATIENCE;
        while child.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return fail(format!("the uncut migration took longer than {PATIENCE:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("cannot reap the child: {e}"))?;
    let stderr = errors.join().unwrap_or_default();
    // The child has exited: wait for the reader to pass on its last lines (`DONE`).
    let _ = reader.join();
    if status.signal() == Some(9) {
        return Ok(ChildEnd::Killed);
    }
    let done: Option<Duration> = lines.try_iter().find_map(|l| {
        l.strip_prefix("DONE ")
            .and_then(|us| us.parse().ok())
            .map(Duration::from_micros)
    });
    match (status.success(), done) {
        (true, Some(took)) => Ok(ChildEnd::Finished(took)),
        _ => fail(format!(
            "the child's migration failed ({status}): {}",
            stderr.trim()
        )),
    }
}

/// A fresh database holding the originals.
async fn prepare(backend: &dyn CrashBackend, originals: &Originals) -> Result<String> {
    let db = backend.create().await?;
    let writer = db.writer.clone();
    let mut writes = futures::stream::iter(originals.sessions.iter().map(|o| {
        let writer = writer.clone();
        async move {
            writer
                .write_legacy_session(o.session.clone(), o.blob.clone())
                .await
        }
    }))
    .buffer_unordered(8);
    while let Some(written) = writes.next().await {
        written?;
    }
    Ok(db.locator)
}

/// The stamps of every table, in migration order.
async fn stamps(db: &AgnoDb) -> std::result::Result<Vec<(String, Option<SchemaVersion>)>, String> {
    let target = db.migrations().map_err(err("migration target"))?;
    let mut out = Vec::new();
    for t in target.tables() {
        let v = target
            .versions()
            .get_schema_version(&t.name)
            .await
            .map_err(err("reading a stamp"))?;
        out.push((t.name, v));
    }
    Ok(out)
}

/// Every stored run is an original one, intact and at most once; returns how many are stored.
async fn check_runs(db: &AgnoDb, originals: &Originals) -> std::result::Result<usize, String> {
    let page = db
        .runs()
        .map_err(err("runs store"))?
        .get_runs(RunQuery::default())
        .await
        .map_err(err("listing every run"))?;
    if page.total != page.items.len() as u64 {
        return fail(format!(
            "the run listing says {} runs but returned {}",
            page.total,
            page.items.len()
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for run in &page.items {
        let Some(&(i, j)) = originals.runs.get(&run.run_id) else {
            return fail(format!(
                "run {} is not one of the original runs",
                run.run_id
            ));
        };
        *seen.entry(run.run_id.as_str()).or_default() += 1;
        let o = &originals.sessions[i];
        if run.session_id != o.session.session_id
            || run.run_index != Some(j as i64)
            || run.user_id != o.session.user_id
            || run.run_data != o.runs[j]
        {
            return fail(format!(
                "run {} was copied wrong: session {} index {:?} owner {:?} (expected {} index {j} owner {:?}), data {}",
                run.run_id,
                run.session_id,
                run.run_index,
                run.user_id,
                o.session.session_id,
                o.session.user_id,
                if run.run_data == o.runs[j] { "intact" } else { "differs" }
            ));
        }
    }
    if let Some((id, n)) = seen.iter().find(|(_, n)| **n > 1) {
        return fail(format!("run {id} is stored {n} times"));
    }
    Ok(seen.len())
}

/// Every legacy blob is still there and decodes to the original runs.
async fn check_backup(db: &AgnoDb, originals: &Originals) -> Check {
    let legacy = db.legacy().map_err(err("legacy runs store"))?;
    let mut found: BTreeMap<String, Value> = BTreeMap::new();
    let mut after: Option<String> = None;
    loop {
        let page = legacy
            .legacy_runs_page(after.as_deref(), 100)
            .await
            .map_err(err("reading the legacy blobs"))?;
        let full = page.len() == 100;
        for s in page {
            after = Some(s.session_id.clone());
            found.insert(s.session_id, s.runs);
        }
        if !full {
            break;
        }
    }
    if found.len() != originals.sessions.len() {
        return fail(format!(
            "{} sessions carry a legacy blob, expected {}",
            found.len(),
            originals.sessions.len()
        ));
    }
    for o in &originals.sessions {
        let Some(blob) = found.get(&o.session.session_id) else {
            return fail(format!(
                "the legacy blob of {} is gone",
                o.session.session_id
            ));
        };
        match decode_legacy_runs(Some(blob)) {
            Ok(runs) if runs == o.runs => {}
            Ok(runs) => {
                return fail(format!(
                    "the legacy blob of {} changed: {} runs, expected {}",
                    o.session.session_id,
                    runs.len(),
                    o.runs.len()
                ))
            }
            Err(why) => {
                return fail(format!(
                    "the legacy blob of {} no longer decodes: {why}",
                    o.session.session_id
                ))
            }
        }
    }
    let pending = legacy
        .count_legacy_runs()
        .await
        .map_err(err("counting legacy blobs"))?;
    if pending != originals.sessions.len() as u64 {
        return fail(format!(
            "count_legacy_runs is {pending}, expected {}",
            originals.sessions.len()
        ));
    }
    Ok(())
}

/// What a kill left, before anything repairs it.
struct AtKill {
    sessions_stamped: bool,
    runs: usize,
}

/// The database as the killed child left it.
async fn check_at_kill(db: &AgnoDb, originals: &Originals) -> std::result::Result<AtKill, String> {
    let target = db.migrations().map_err(err("migration target"))?;
    let sessions_table = target
        .tables()
        .into_iter()
        .find(|t| t.table_type == agno_storage_core::TableType::Sessions)
        .map(|t| t.name);
    let stamps = stamps(db).await?;
    let mut unstamped_before: Option<&str> = None;
    let mut sessions_stamped = false;
    for (table, version) in &stamps {
        match version {
            None => {
                unstamped_before.get_or_insert(table);
            }
            Some(v) if *v == SchemaVersion::LATEST => {
                if let Some(earlier) = unstamped_before {
                    return fail(format!(
                        "{table} is stamped {v} but {earlier}, migrated before it, is not: stamps {stamps:?}"
                    ));
                }
                if Some(table) == sessions_table.as_ref() {
                    sessions_stamped = true;
                }
            }
            Some(v) => return fail(format!("{table} is stamped {v} after a kill: {stamps:?}")),
        }
    }
    let runs = check_runs(db, originals).await?;
    if sessions_stamped && runs != originals.total_runs() {
        return fail(format!(
            "the sessions table is stamped {} but only {runs} of the {} runs were copied",
            SchemaVersion::LATEST,
            originals.total_runs()
        ));
    }
    // The backup is checked after the recovering up(), which never writes it: a blob the
    // kill damaged would show there.
    Ok(AtKill {
        sessions_stamped,
        runs,
    })
}

/// The database after a complete `up()`.
async fn check_complete(db: &AgnoDb, originals: &Originals, rng: &mut Rng) -> Check {
    let stamps = stamps(db).await?;
    if let Some((table, v)) = stamps
        .iter()
        .find(|(_, v)| *v != Some(SchemaVersion::LATEST))
    {
        return fail(format!(
            "{table} is stamped {v:?} after a complete up(), expected {}",
            SchemaVersion::LATEST
        ));
    }
    let runs = check_runs(db, originals).await?;
    if runs != originals.total_runs() {
        return fail(format!(
            "{runs} of the {} original runs are in the runs store after a complete up()",
            originals.total_runs()
        ));
    }
    // The per-session listing and the session read, on a sample (all of them when small).
    let sample: Vec<&Original> = if originals.sessions.len() <= SAMPLE {
        originals.sessions.iter().collect()
    } else {
        (0..SAMPLE)
            .map(|_| &originals.sessions[(rng.next() % originals.sessions.len() as u64) as usize])
            .collect()
    };
    let run_store = db.runs().map_err(err("runs store"))?;
    let session_store = db.sessions().map_err(err("sessions store"))?;
    for o in sample {
        let sid = &o.session.session_id;
        let expected: Vec<&str> = o
            .runs
            .iter()
            .filter_map(|r| r.get("run_id").and_then(Value::as_str))
            .collect();
        let mut listed = run_store
            .get_runs(RunQuery {
                session_id: Some(sid.clone()),
                pagination: Pagination::default(),
                ..Default::default()
            })
            .await
            .map_err(err("listing a session's runs"))?
            .items;
        listed.sort_by_key(|r| r.run_index);
        let listed: Vec<&str> = listed.iter().map(|r| r.run_id.as_str()).collect();
        if listed != expected {
            return fail(format!(
                "the runs of {sid} list as {listed:?}, expected {expected:?}"
            ));
        }
        let read = session_store
            .get_session(
                sid,
                SessionRead::for_user(o.session.user_id.clone().unwrap_or_default()),
            )
            .await
            .map_err(err("reading a session"))?
            .ok_or_else(|| format!("session {sid} is gone"))?;
        let merged: Vec<String> = read
            .runs
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(RunJson::run_id)
            .collect();
        if merged != expected {
            return fail(format!(
                "session {sid} reads with runs {merged:?}, expected {expected:?}"
            ));
        }
    }
    check_backup(db, originals).await?;
    let again = MigrationManager::new(db.migrations().map_err(err("migration target"))?)
        .up()
        .await
        .map_err(|f| format!("a second up() failed: {f}"))?;
    if !again.applied.is_empty() || !again.stamped.is_empty() {
        return fail(format!("a second up() was not a no-op: {again:?}"));
    }
    Ok(())
}

/// After a child: the checks of the state a kill left, the hook, the recovering `up()`, the
/// checks of the result.
async fn recover(
    backend: &dyn CrashBackend,
    locator: &str,
    originals: &Originals,
    killed: bool,
    rng: &mut Rng,
) -> std::result::Result<Option<AtKill>, String> {
    let db = backend
        .open(locator)
        .await
        .map_err(err("reopening after the kill"))?;
    let at_kill = if killed {
        Some(
            check_at_kill(&db, originals)
                .await
                .map_err(|e| format!("as the kill left it: {e}"))?,
        )
    } else {
        None
    };
    backend
        .after_child(locator, killed)
        .await
        .map_err(err("after_child"))?;
    let target = db.migrations().map_err(err("migration target"))?;
    match tokio::time::timeout(PATIENCE, MigrationManager::new(target).up()).await {
        Err(_) => {
            return fail(format!(
                "the recovering up() did not finish within {PATIENCE:?} (a lock left by the killed child?)"
            ))
        }
        Ok(Err(f)) => return fail(format!("the recovering up() failed: {f}")),
        Ok(Ok(_)) => {}
    }
    check_complete(&db, originals, rng)
        .await
        .map_err(|e| format!("after the recovering up(): {e}"))?;
    Ok(at_kill)
}

/// The whole crash test of one backend.
pub fn run(
    backend: Arc<dyn CrashBackend>,
    config: CrashConfig,
) -> std::result::Result<CrashReport, String> {
    let started = Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let mut rng = Rng(config.seed);
    let originals = Originals::new(&config);
    let name = backend.name().to_owned();
    let mut report = CrashReport::default();

    // The uncut migration: its duration spreads the kill points.
    let locator = runtime
        .block_on(prepare(backend.as_ref(), &originals))
        .map_err(err("preparing the database"))?;
    report.uncut = match run_child(&name, &locator, None)
        .map_err(|e| format!("uncut migration of {locator}: {e}"))?
    {
        ChildEnd::Finished(took) => took,
        ChildEnd::Killed => return fail("the uncut child was killed by someone else"),
    };
    runtime
        .block_on(recover(
            backend.as_ref(),
            &locator,
            &originals,
            false,
            &mut rng,
        ))
        .map_err(|e| format!("uncut migration of {locator}: {e}"))?;
    runtime
        .block_on(backend.destroy(&locator))
        .map_err(err("removing the database"))?;

    let mut attempts = 0;
    while report.kills < config.trials {
        attempts += 1;
        if attempts > 3 * config.trials.max(1) {
            return fail(format!(
                "only {} of {attempts} children were killed before finishing their migration",
                report.kills
            ));
        }
        let t0 = Instant::now();
        let locator = runtime
            .block_on(prepare(backend.as_ref(), &originals))
            .map_err(err("preparing the database"))?;
        let prepared = t0.elapsed();
        let t0 = Instant::now();
        let fraction = rng.fraction();
        let delay = report.uncut.mul_f64(fraction);
        let end = run_child(&name, &locator, Some(delay)).map_err(|e| {
            format!("trial {attempts} ({locator}, kill at {fraction:.3} = {delay:?}): {e}")
        })?;
        let killed = matches!(end, ChildEnd::Killed);
        let child = t0.elapsed();
        let recovered = Instant::now();
        let at_kill = runtime
            .block_on(recover(
                backend.as_ref(),
                &locator,
                &originals,
                killed,
                &mut rng,
            ))
            .map_err(|e| {
                format!("trial {attempts} ({locator}, kill at {fraction:.3} = {delay:?}): {e}")
            })?;
        if std::env::var_os("AGNO_CRASH_VERBOSE").is_some() {
            eprintln!(
                "{name} trial {attempts}: kill at {fraction:.3} ({delay:?}): {}; prepared in {prepared:?}, child {child:?}, recovered and checked in {:?}",
                match &at_kill {
                    Some(at) => format!("killed with {} runs copied, sessions stamped: {}", at.runs, at.sessions_stamped),
                    None => "finished first".to_owned(),
                },
                recovered.elapsed()
            );
        }
        match at_kill {
            Some(at) => {
                report.kills += 1;
                report.sessions_stamped_at_kill += usize::from(at.sessions_stamped);
                report.partial_copies +=
                    usize::from(at.runs > 0 && at.runs < originals.total_runs());
            }
            None => {
                report.finished_first += 1;
                // The machine got faster than at calibration: aim within the faster run.
                if let ChildEnd::Finished(took) = end {
                    report.uncut = report.uncut.min(took);
                }
            }
        }
        runtime
            .block_on(backend.destroy(&locator))
            .map_err(err("removing the database"))?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
