//! The behaviour suite every agno-storage adapter runs, ours and third parties'.
//!
//! Cases are named `async fn`s over an [`AgnoDb`], each tagged with the
//! [`Capabilities`] flags it needs. A backend crate adds a `harness = false` test target
//! whose `main` calls [`main`] with its [`Harness`]; every case becomes one libtest trial,
//! cases needing a capability the backend lacks are reported *ignored* (with the missing
//! flag as the trial's kind), and every failure is reported, not only the first.
//!
//! ```no_run
//! use agno_storage_core::{AgnoDb, Capabilities, Result};
//! use agno_storage_doc::InMemoryDb;
//!
//! struct Memory;
//!
//! #[conformance_tests::async_trait]
//! impl conformance_tests::Harness for Memory {
//!     fn name(&self) -> &str { "memory" }
//!     fn capabilities(&self) -> Capabilities { InMemoryDb::new().agno_db().capabilities() }
//!     async fn open(&self, _case: &str) -> Result<AgnoDb> { Ok(InMemoryDb::new().agno_db()) }
//! }
//!
//! fn main() -> std::process::ExitCode { conformance_tests::main(Memory) }
//! ```
#![deny(missing_docs)]

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use agno_storage_core::async_trait;
use agno_storage_core::{AgnoDb, Capabilities, Error, ErrorKind, Result, Session};
use serde_json::Value;

mod cases;

/// Writes data the way agno 2.x did, for migration cases.
#[async_trait]
pub trait LegacyWriter: Send + Sync {
    /// Stores `session` with its runs in a pre-v3 blob (`runs_blob` is the array as 2.x wrote
    /// it, possibly an encoded JSON string).
    async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()>;
}

/// `runs_blob` as a backend that stores native JSON (a JSONB column, a BSON array, a
/// document field) held it in agno 2.x: an encoded JSON string is decoded; a string that is
/// not JSON stays a string (a corrupt blob, which the migration must report).
pub fn native_runs_blob(runs_blob: Value) -> Value {
    match runs_blob {
        Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
        other => other,
    }
}

/// A fresh database in the state agno 2.x leaves it (nothing stamped), and a way to write
/// legacy rows into it.
pub struct LegacyDb {
    /// The handle the case migrates and reads.
    pub db: AgnoDb,
    /// Writes pre-v3 rows into the same database.
    pub writer: Arc<dyn LegacyWriter>,
}

/// Rewrites stored runs past the adapter, as another writer would, for the case that one
/// run this code cannot decode never hides its neighbours.
#[async_trait]
pub trait RawRunWriter: Send + Sync {
    /// Rewrites the stored `run_data` of `run_id` (written through the adapter, its dict
    /// holding `"content": "output of {run_id}"`) into JSON this code cannot decode: where
    /// the backend keeps JSON as text, that content with a lone surrogate escape
    /// (`"caf\udce9 {run_id}"`, as agno writes file names decoded with `surrogateescape`);
    /// elsewhere, a value nested deeper than `agno_storage_core::json::MAX_DEPTH`.
    async fn make_undecodable(&self, run_id: &str) -> Result<()>;
}

/// A fresh database and a way to rewrite its runs past the adapter.
pub struct RawRunsDb {
    /// The handle the case writes and reads.
    pub db: AgnoDb,
    /// Rewrites runs of the same database.
    pub writer: Arc<dyn RawRunWriter>,
}

/// The size of the job stress case: the issue's trial is 2,000 jobs and 8 workers; a
/// harness whose server is slow (an emulator) may lower the job count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobStress {
    /// Jobs submitted and drained.
    pub jobs: usize,
    /// Concurrent workers.
    pub workers: usize,
}

impl Default for JobStress {
    fn default() -> Self {
        JobStress {
            jobs: 2_000,
            workers: 8,
        }
    }
}

/// How the suite reaches one backend.
#[async_trait]
pub trait Harness: Send + Sync + 'static {
    /// Short backend name, used as the trial name prefix.
    fn name(&self) -> &str;

    /// What the backend offers; cases needing anything else are ignored.
    fn capabilities(&self) -> Capabilities;

    /// A fresh, isolated database for one case (a new namespace, schema, prefix or file):
    /// the isolation hook. `case` is the case name, for naming the namespace.
    async fn open(&self, case: &str) -> Result<AgnoDb>;

    /// A fresh, isolated pre-v3 database (required when `capabilities().legacy_runs`).
    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let _ = case;
        Err(Error::unsupported("this harness", "open_legacy"))
    }

    /// The size of the job stress case on this backend (2,000 jobs, 8 workers by default).
    fn job_stress(&self) -> JobStress {
        JobStress::default()
    }

    /// A fresh, isolated database and a [`RawRunWriter`] on it, when
    /// [`Harness::writes_raw_runs`]; the cases that need it (requirement `raw_runs`) are
    /// ignored otherwise.
    async fn open_with_raw_runs(&self, case: &str) -> Result<RawRunsDb> {
        let _ = case;
        Err(Error::unsupported("this harness", "open_with_raw_runs"))
    }

    /// Whether [`Harness::open_with_raw_runs`] is provided.
    fn writes_raw_runs(&self) -> bool {
        false
    }
}

/// A failed case: what was expected and what happened.
#[derive(Debug)]
pub struct Failure(String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure(format!("unexpected error [{}]: {e}", e.kind()))
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

impl From<&str> for Failure {
    fn from(s: &str) -> Self {
        Failure(s.to_owned())
    }
}

/// What a case returns.
pub type CaseResult = std::result::Result<(), Failure>;

type CaseFuture<'a> = Pin<Box<dyn Future<Output = CaseResult> + Send + 'a>>;

/// One named case of the suite.
pub struct Case {
    /// Name, unique in the suite.
    pub name: &'static str,
    /// Capability flags it needs (names of [`Capabilities`] fields).
    pub requires: &'static [&'static str],
    run: for<'a> fn(&'a Ctx) -> CaseFuture<'a>,
}

impl Case {
    /// Runs the case against `ctx`.
    pub async fn run(&self, ctx: &Ctx) -> CaseResult {
        (self.run)(ctx).await
    }
}

/// What a case gets: the harness and its own name.
pub struct Ctx {
    harness: Arc<dyn Harness>,
    case: &'static str,
}

impl Ctx {
    /// A context for running `case` against `harness`.
    pub fn new(harness: Arc<dyn Harness>, case: &'static str) -> Self {
        Ctx { harness, case }
    }

    /// A fresh database for this case.
    pub async fn db(&self) -> std::result::Result<AgnoDb, Failure> {
        Ok(self.harness.open(self.case).await?)
    }

    /// A fresh pre-v3 database for this case.
    pub async fn legacy(&self) -> std::result::Result<LegacyDb, Failure> {
        Ok(self.harness.open_legacy(self.case).await?)
    }

    /// A fresh database for this case whose runs can be rewritten past the adapter.
    pub async fn raw_runs(&self) -> std::result::Result<RawRunsDb, Failure> {
        Ok(self.harness.open_with_raw_runs(self.case).await?)
    }

    /// The size of the job stress case: the harness's, unless `AGNO_JOB_STRESS_JOBS` (and
    /// `AGNO_JOB_STRESS_WORKERS`) override it.
    pub fn job_stress(&self) -> JobStress {
        let from_env = |name: &str| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|&n| n > 0)
        };
        let asked = self.harness.job_stress();
        JobStress {
            jobs: from_env("AGNO_JOB_STRESS_JOBS").unwrap_or(asked.jobs),
            workers: from_env("AGNO_JOB_STRESS_WORKERS").unwrap_or(asked.workers),
        }
    }

    /// The capabilities the harness declared.
    pub fn capabilities(&self) -> Capabilities {
        self.harness.capabilities()
    }
}

/// Every case of the suite, in a stable order.
pub fn all_cases() -> Vec<Case> {
    cases::all()
}

/// Fails with `message` unless `condition` holds.
pub fn ensure(condition: bool, message: impl fmt::Display) -> CaseResult {
    if condition {
        Ok(())
    } else {
        Err(Failure(message.to_string()))
    }
}

/// Fails unless `actual == expected`, showing both.
pub fn ensure_eq<T: PartialEq + fmt::Debug>(actual: T, expected: T, what: &str) -> CaseResult {
    if actual == expected {
        Ok(())
    } else {
        Err(Failure(format!(
            "{what}: expected {expected:?}, got {actual:?}"
        )))
    }
}

/// Fails unless `result` is an error of `kind`; returns the error for further checks.
pub fn expect_err<T: fmt::Debug>(
    result: Result<T>,
    kind: ErrorKind,
    what: &str,
) -> std::result::Result<Error, Failure> {
    match result {
        Err(e) if e.kind() == kind => Ok(e),
        Err(e) => Err(Failure(format!(
            "{what}: expected a {kind} error, got [{}] {e}",
            e.kind()
        ))),
        Ok(v) => Err(Failure(format!(
            "{what}: expected a {kind} error, got Ok({v:?})"
        ))),
    }
}

/// Runs the suite against `harness` as a libtest-compatible test binary (use it from a
/// `harness = false` test target). Honours libtest's arguments (filters, `--ignored`,
/// `--test-threads`, `--list`).
pub fn main(harness: impl Harness) -> std::process::ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let harness: Arc<dyn Harness> = Arc::new(harness);
    let capabilities = harness.capabilities();
    let prefix = harness.name().to_owned();
    let trials = all_cases()
        .into_iter()
        .map(|case| {
            let missing: Vec<&str> = case
                .requires
                .iter()
                .copied()
                .filter(|r| match *r {
                    "raw_runs" => !harness.writes_raw_runs(),
                    flag => !capabilities.has(flag),
                })
                .collect();
            let name = format!("{prefix}::{}", case.name);
            let (runtime, harness) = (runtime.clone(), harness.clone());
            let trial = libtest_mimic::Trial::test(name, move || {
                let ctx = Ctx::new(harness, case.name);
                runtime.block_on(case.run(&ctx)).map_err(|f| f.0.into())
            });
            if missing.is_empty() {
                trial
            } else {
                trial
                    .with_ignored_flag(true)
                    .with_kind(format!("unsupported: {}", missing.join(",")))
            }
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
