//! Interop with the real agno package from PyPI on the Firestore emulator: agno 2.9.0 writes
//! a legacy project, we migrate it and agno 3.1.10 reads it back exactly as its own migration
//! of a copy; agno 3.1.10 reads what we write (and finds agno's document shapes); we read
//! what it writes (auto-id documents included).
//!
//! Needs `FIRESTORE_EMULATOR_HOST` and `AGNO_TEST_PYTHON_V2`/`AGNO_TEST_PYTHON_V3` (python
//! executables of venvs with agno 2.9.0 / 3.1.10 and google-cloud-firestore;
//! `./scripts/test.sh` sets them all). Without them the tests are skipped with a note, except
//! under `CI=true`, where they fail.

use std::path::{Path, PathBuf};

use agno_storage_core::{async_trait, AgnoDb, RunRecord};
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use agno_storage_testkit::interop::{
    agno_json, agno_python, assert_agno_document_shapes, assert_raw_migrations_agree, runtime,
    FixtureReadBack, InteropTarget,
};
use agno_storage_testkit::servers::ci;
use serde_json::json;

/// A fresh project on the emulator, reachable from both sides.
struct Target {
    name: String,
}

impl Target {
    fn new(label: &str) -> Target {
        Target {
            name: format!(
                "agno-interop-{label}-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
        }
    }
}

#[async_trait]
impl InteropTarget for Target {
    fn driver(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_firestore_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![format!("firestore:{}", self.name)]
    }

    async fn open(&self) -> AgnoDb {
        FirestoreDb::connect(&self.name, FirestoreOptions::default())
            .await
            .expect("open the database")
            .agno_db()
    }
}

/// The interpreters, or `None` (skip) when the emulator or a venv is not configured.
fn setup() -> Option<(String, String)> {
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        assert!(
            !ci(),
            "CI=true but FIRESTORE_EMULATOR_HOST is not set; run ./scripts/test.sh"
        );
        eprintln!("note: FIRESTORE_EMULATOR_HOST is not set; skipping agno Firestore interop (./scripts/test.sh sets it)");
        return None;
    }
    Some((
        agno_python("AGNO_TEST_PYTHON_V2")?,
        agno_python("AGNO_TEST_PYTHON_V3")?,
    ))
}

/// agno 2.9.0 writes A and B; we migrate A, agno 3.1.10 migrates B; agno reads both the same.
#[test]
fn v2_database_migrates_like_agno() {
    let Some((v2, v3)) = setup() else { return };
    let (a, b) = (Target::new("v2a"), Target::new("v2b"));
    agno_storage_testkit::interop::v2_migrates_like_agno(&v2, &v3, &a, &b);
    assert_raw_migrations_agree(
        &agno_json(&v3, "raw", &a),
        &agno_json(&v3, "raw", &b),
        &["_id"],
    );
}

/// We write; agno 3.1.10 reads it back, and the documents have agno's shapes.
#[test]
fn agno_reads_what_we_write() {
    let Some((_, v3)) = setup() else { return };
    let target = Target::new("ours");
    // agno 3.1.10's FirestoreDb returns no `runs` on a session read (it does the same for
    // its own sessions), and hands back a memory's `created_at` as the ISO text it stores.
    let firestore = FixtureReadBack {
        runs_on_sessions: false,
        memory_created_at: Some(json!("2024-07-03T09:50:00")),
        ..FixtureReadBack::default()
    };
    agno_storage_testkit::interop::agno_reads_what_we_write(&v3, &target, &firestore);
    let raw = agno_json(&v3, "raw", &target);
    assert_agno_document_shapes(&raw, &["_id"]);
    let ours = raw["agno_sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["session_id"] == "rs-s1"))
        .expect("session rs-s1");
    assert_eq!(ours["_id"], "rs-s1", "deterministic session document id");
    for (coll, key) in [
        ("agno_runs", "run_id"),
        ("agno_memories", "memory_id"),
        ("agno_knowledge", "id"),
    ] {
        for d in raw[coll].as_array().unwrap() {
            assert_eq!(d["_id"], d[key], "{coll} document id");
        }
    }
}

/// agno 3.1.10 writes; we read it back.
#[test]
fn we_read_what_agno_writes() {
    let Some((_, v3)) = setup() else { return };
    let target = Target::new("theirs");
    let m = agno_storage_testkit::interop::we_read_what_agno_writes(&v3, &target);
    // agno's FirestoreDb stores `created_at` as ISO text: it reads back as epoch seconds.
    assert_eq!(m.created_at, 1_710_000_100);
    runtime().block_on(async {
        let db = target.open().await;
        // A run appended by us continues agno's numbering.
        let next = RunRecord::from_run_data(
            "py-s1",
            Some("carol".into()),
            json!({"run_id": "rs-next", "agent_id": "agent-py"}),
        )
        .unwrap();
        assert_eq!(
            db.runs().unwrap().upsert_run(next).await.unwrap().run_index,
            Some(2)
        );
    });
}
