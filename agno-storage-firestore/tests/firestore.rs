//! The conformance suite against Firestore, one fresh project per case (the emulator keeps
//! every project apart).
//!
//! The emulator comes from `FIRESTORE_EMULATOR_HOST` (`scripts/test.sh` starts it and sets
//! it, with `AGNO_TEST_FIRESTORE_URL`). Without them the suite is skipped, except under
//! `CI=true`, where a missing or unreachable emulator fails the run.

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result, Session};
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use agno_storage_testkit::default_paths::DefaultPaths;
use agno_storage_testkit::servers::{self, Backend};
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb, LegacyWriter};
use serde_json::Value;

/// `agno-ct-<case>-<random>`: a project id of lowercase letters, digits and hyphens.
fn project_id(case: &str) -> String {
    let short: String = case
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(20)
        .collect();
    format!(
        "agno-ct-{}-{}",
        short.trim_matches('-'),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// A project per case; on Firestore's native paths, or on the engine's defaults (see
/// `agno_storage_testkit::default_paths`).
struct Firestore {
    default_paths: bool,
}

impl Firestore {
    fn wire(&self, db: FirestoreDb) -> AgnoDb {
        if self.default_paths {
            agno_storage_doc::agno_db(&DefaultPaths(db))
        } else {
            db.agno_db()
        }
    }
}

/// Writes sessions as agno 2.9.0's `FirestoreDb.upsert_session` did: an auto-id document
/// holding the whole session, runs as a native array.
struct Writer {
    db: FirestoreDb,
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        // 2.9.0 stored native arrays; a string that is not JSON stays a string: a corrupt blob.
        let runs = conformance_tests::native_runs_blob(runs_blob);
        self.db.insert_legacy_session(s, runs).await
    }
}

#[async_trait]
impl Harness for Firestore {
    fn name(&self) -> &str {
        if self.default_paths {
            "firestore-default-paths"
        } else {
            "firestore"
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// The emulator serializes commits; 200 jobs keep the trial to about a minute
    /// (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 200,
            ..JobStress::default()
        }
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(self.wire(FirestoreDb::connect(&project_id(case), FirestoreOptions::default()).await?))
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let options = FirestoreOptions {
            stamp_new_database: false,
            ..FirestoreOptions::default()
        };
        let db = FirestoreDb::connect(&project_id(case), options).await?;
        Ok(LegacyDb {
            db: self.wire(db.clone()),
            writer: Arc::new(Writer { db }),
        })
    }
}

fn main() -> ExitCode {
    let host = match std::env::var("FIRESTORE_EMULATOR_HOST") {
        Ok(host) => host,
        Err(_) => match servers::url_for_suite(Backend::Firestore) {
            Ok(url) => url,
            Err(code) => return code,
        },
    };
    let host = host
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        // Only the client reads it; set before any thread starts.
        std::env::set_var("FIRESTORE_EMULATOR_HOST", &host);
    }
    if std::net::TcpStream::connect(&host).is_err() {
        eprintln!("error: the Firestore emulator at {host} is unreachable");
        return ExitCode::FAILURE;
    }
    // Firestore's native paths, then the engine's defaults on the same layout: both pass.
    let mut code = conformance_tests::main(Firestore {
        default_paths: false,
    });
    if code == ExitCode::SUCCESS {
        code = conformance_tests::main(Firestore {
            default_paths: true,
        });
    }
    servers::stop_all();
    code
}
