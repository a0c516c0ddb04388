//! Crash during migration on SurrealDB's embedded file engine (`surrealkv://`): a child
//! process migrating a large agno 2.x database is killed with SIGKILL at random points, and
//! the database must recover (see `agno_storage_testkit::crash`).
//!
//! Each trial gets its own SurrealKV directory under a scratch directory of this run. The
//! engine takes an exclusive file lock on its directory, so one process opens it at a time:
//! the parent writes the legacy data and closes its handle before the child opens the
//! directory (the handle closes asynchronously, so an open retries while the directory is
//! still locked), and reopens it only after the child has exited or been killed (the
//! kernel drops a killed child's file lock with its process). In the parent, the trial's
//! handle is opened once and shared by the recovery and the `after_child` check.
//!
//! The migration lock is a lease (`migration_lock` in the meta table) that its holder renews
//! every lease/3; the trial's children and parent use a 2-second lease (the default is
//! 30 s), so after a kill the recovering `up()` waits up to 2 seconds for the dead child's
//! lease to pass and takes the lock over: nothing clears it by hand. A holder whose `up()`
//! returned must leave no lock: `up()` awaits `HeldLock::release`, and the `after_child`
//! hook fails the trial when a finished child left its lock.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agno_storage_core::{AgnoDb, Error, ErrorKind, Result};
use agno_storage_surreal::surrealdb::types::{RecordId, Value as SValue};
use agno_storage_surreal::{SurrealDb, SurrealOptions};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use common::Writer;
use conformance_tests::async_trait;

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);
/// How long an open waits for another handle to let go of the directory.
const OPEN_PATIENCE: Duration = Duration::from_secs(30);

fn legacy_options() -> SurrealOptions {
    let mut options = SurrealOptions::new("crash", "crash").with_migration_lock_lease(LEASE);
    options.stamp_new_database = false;
    options
}

/// Opens the SurrealKV directory `dir`, retrying while another handle still holds it.
async fn connect(dir: &str) -> Result<SurrealDb> {
    let url = format!("surrealkv://{dir}");
    let deadline = Instant::now() + OPEN_PATIENCE;
    loop {
        match SurrealDb::connect(&url, legacy_options()).await {
            Ok(db) => return Ok(db),
            Err(e) if e.to_string().contains("locked") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

struct SurrealKv {
    /// This run's scratch directory; each trial's database is a directory in it.
    root: PathBuf,
    /// The parent's handle of each trial's database, opened by the first `open`.
    open: Mutex<HashMap<String, SurrealDb>>,
}

impl SurrealKv {
    fn cached(&self, locator: &str) -> Option<SurrealDb> {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(locator).cloned()
    }
}

#[async_trait]
impl CrashBackend for SurrealKv {
    fn name(&self) -> &str {
        "surrealkv"
    }

    fn default_sessions(&self) -> usize {
        DEFAULT_SESSIONS
    }

    async fn create(&self) -> Result<CrashDb> {
        let dir = self
            .root
            .join(format!("db-{}", uuid::Uuid::new_v4().simple()));
        let locator = dir.display().to_string();
        // Not cached: the writer's handle closes when `prepare` drops it, before the child.
        let db = connect(&locator).await?;
        Ok(CrashDb {
            locator,
            writer: Arc::new(Writer { db }),
        })
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        if let Some(db) = self.cached(locator) {
            return Ok(db.agno_db());
        }
        let db = connect(locator).await?;
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        Ok(open.entry(locator.to_owned()).or_insert(db).agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        if killed {
            // The dead child's lock stays: the recovering up() takes it over after the lease.
            return Ok(());
        }
        let Some(db) = self.cached(locator) else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "after_child: the trial's database is not open in the parent",
            ));
        };
        let lock = RecordId::new(db.names().meta.as_str(), "migration_lock");
        let mut response = db
            .client()
            .query("SELECT * FROM $r")
            .bind(("r", lock))
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        let rows: SValue = response
            .take(0)
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        let held = match rows {
            SValue::Array(a) => !a.is_empty(),
            SValue::None | SValue::Null => false,
            _ => true,
        };
        if held {
            return Err(Error::new(
                ErrorKind::Conflict,
                "a child whose up() returned left its migration lock behind: up() must release it",
            ));
        }
        Ok(())
    }

    async fn destroy(&self, locator: &str) -> Result<()> {
        let db = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            open.remove(locator)
        };
        drop(db);
        // The engine closes in the background; give it a moment before removing its files.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = std::fs::remove_dir_all(locator);
        Ok(())
    }
}

/// Sessions of 10 runs per trial unless `AGNO_CRASH_SESSIONS` says otherwise. The engine is
/// slow in a debug build: 500 runs take about 2.5 s to migrate, and the 20 trials (each
/// seeding, a child, the recovery past the dead child's 2-second lease, and the checks) about
/// two minutes on two shared cores.
const DEFAULT_SESSIONS: usize = 50;

fn main() -> ExitCode {
    let child = std::env::var_os(agno_storage_testkit::crash::CHILD_ENV).is_some();
    let root = std::env::temp_dir().join(format!("agno-surreal-crash-{}", std::process::id()));
    if !child {
        if let Err(e) = std::fs::create_dir_all(&root) {
            eprintln!("cannot create {}: {e}", root.display());
            return ExitCode::FAILURE;
        }
    }
    let backend = SurrealKv {
        root: root.clone(),
        open: Mutex::new(HashMap::new()),
    };
    let code = agno_storage_testkit::crash::main(vec![Target::ready(backend)]);
    if !child {
        // A failing trial keeps its database for inspection; a passing run leaves nothing.
        let _ = std::fs::remove_dir(&root);
    }
    code
}
