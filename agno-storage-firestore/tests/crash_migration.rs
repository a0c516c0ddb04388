//! Crash during migration on Firestore: a child process migrating a large agno 2.x database
//! is killed with SIGKILL at random points, and the database must recover (see
//! `conformance_tests::crash`).
//!
//! The emulator comes from `FIRESTORE_EMULATOR_HOST` (or `AGNO_TEST_FIRESTORE_URL`); without
//! it the test is skipped, except under `CI=true`, where it fails. Each trial gets its own
//! project (the emulator keeps projects apart and in memory).
//!
//! The migration lock is a document (`migration_lock` in the meta collection) that a later
//! `lock()` breaks only once it is 15 minutes old: a killed holder blocks every migration
//! until then (a recovering `up()` gives up after a minute). A holder whose `up()` returned
//! leaves it too when its process exits right away: the guard deletes it from a task spawned
//! in `Drop`, which the exiting runtime never runs (a known bug). The `after_child` hook
//! deletes it, as an operator who knows the holder is dead would (the lock's error message
//! says so).

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Error, ErrorKind, Result, Session};
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use conformance_tests::crash::{CrashBackend, CrashDb, Target};
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
        let runs = match runs_blob {
            Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
            other => other,
        };
        self.db.insert_legacy_session(s, runs).await
    }
}

fn legacy_options() -> FirestoreOptions {
    FirestoreOptions {
        stamp_new_database: false,
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
        let db = FirestoreDb::connect(locator, legacy_options()).await?;
        let meta = db.names().meta.clone();
        let fs_err = |e: agno_storage_firestore::firestore::errors::FirestoreError| {
            Error::new(ErrorKind::Unavailable, e.to_string())
        };
        let held: Option<Value> = db
            .client()
            .fluent()
            .select()
            .by_id_in(&meta)
            .obj()
            .one("migration_lock")
            .await
            .map_err(fs_err)?;
        if held.is_some() {
            db.client()
                .fluent()
                .delete()
                .from(meta.as_str())
                .document_id("migration_lock")
                .execute()
                .await
                .map_err(fs_err)?;
            if !killed && std::env::var_os("AGNO_CRASH_VERBOSE").is_some() {
                eprintln!(
                    "firestore: a child whose up() returned left its migration lock behind (released by a task \
                     spawned in LockGuard::drop, which the exiting process never ran)"
                );
            }
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let host = std::env::var("FIRESTORE_EMULATOR_HOST")
        .ok()
        .or_else(|| std::env::var("AGNO_TEST_FIRESTORE_URL").ok());
    let Some(host) = host else {
        return conformance_tests::crash::main(vec![Target::missing(
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
    conformance_tests::crash::main(vec![Target::ready(Firestore)])
}
