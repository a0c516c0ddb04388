//! Crash during migration on Firestore: a child process migrating a large agno 2.x database
//! is killed with SIGKILL at random points, and the database must recover (see
//! `agno_storage_testkit::crash`).
//!
//! The emulator comes from `FIRESTORE_EMULATOR_HOST` (or `AGNO_TEST_FIRESTORE_URL`); without
//! it the test is skipped, except under `CI=true`, where it fails. Each trial gets its own
//! project (the emulator keeps projects apart and in memory).
//!
//! The migration lock is a lease (`migration_lock` in the meta collection) that its holder
//! renews every lease/3; the trial's children and parent use a 2-second lease (the default
//! is 30 s), so after a kill the recovering `up()` waits up to 2 seconds for the dead child's
//! lease to pass and takes the lock over: nothing clears it by hand. A holder whose `up()`
//! returned must leave no lock: `up()` awaits `HeldLock::release`, and the `after_child`
//! hook fails the trial when a finished child left its lock.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{AgnoDb, Error, ErrorKind, Result, Session};
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

struct Firestore;

/// Writes sessions as agno 2.9.0's `FirestoreDb.upsert_session` did: an auto-id document
/// holding the whole session, runs as a native array.
struct Writer {
    db: FirestoreDb,
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        let runs = conformance_tests::native_runs_blob(runs_blob);
        self.db.insert_legacy_session(s, runs).await
    }
}

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);

fn legacy_options() -> FirestoreOptions {
    FirestoreOptions {
        stamp_new_database: false,
        migration_lock_lease: LEASE,
        ..FirestoreOptions::default()
    }
}

#[async_trait]
impl CrashBackend for Firestore {
    fn name(&self) -> &str {
        "firestore"
    }

    fn default_sessions(&self) -> usize {
        // The emulator serializes commits.
        50
    }

    async fn create(&self) -> Result<CrashDb> {
        let project = format!(
            "agno-ct-crash-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let db = FirestoreDb::connect(&project, legacy_options()).await?;
        Ok(CrashDb {
            locator: project,
            writer: Arc::new(Writer { db }),
        })
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        Ok(FirestoreDb::connect(locator, legacy_options())
            .await?
            .agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        if killed {
            // The dead child's lock stays: the recovering up() takes it over after the lease.
            return Ok(());
        }
        let db = FirestoreDb::connect(locator, legacy_options()).await?;
        let held: Option<Value> = db
            .client()
            .fluent()
            .select()
            .by_id_in(&db.names().meta)
            .obj()
            .one("migration_lock")
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        if held.is_some() {
            return Err(Error::new(
                ErrorKind::Conflict,
                "a child whose up() returned left its migration lock behind: up() must release it",
            ));
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let host = std::env::var("FIRESTORE_EMULATOR_HOST")
        .ok()
        .or_else(|| std::env::var("AGNO_TEST_FIRESTORE_URL").ok());
    let Some(host) = host else {
        return agno_storage_testkit::crash::main(vec![Target::missing(
            "firestore",
            "FIRESTORE_EMULATOR_HOST",
        )]);
    };
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        // Only the client reads it; set before any thread starts (children inherit it).
        let host = host
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        std::env::set_var("FIRESTORE_EMULATOR_HOST", host);
    }
    agno_storage_testkit::crash::main(vec![Target::ready(Firestore)])
}
