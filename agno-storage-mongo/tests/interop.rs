//! Interop with the real agno package from PyPI on MongoDB: agno 2.9.0 writes a legacy
//! database, we migrate it and agno 3.1.10 reads it back exactly as its own migration of a
//! copy; agno 3.1.10 reads what we write (and finds agno's document shapes); we read what
//! it writes.
//!
//! Needs `AGNO_TEST_MONGODB_URL` and `AGNO_TEST_PYTHON_V2`/`AGNO_TEST_PYTHON_V3` (python
//! executables of venvs with agno 2.9.0 / 3.1.10 and pymongo; `./scripts/test.sh` sets them
//! all). Without them the tests are skipped with a note, except under `CI=true`, where they
//! fail.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use agno_storage_core::{now_epoch_seconds, AgnoDb, MigrationManager, RunRecord, SessionRead};
use agno_storage_mongo::{MongoDb, TableNames};
use agno_storage_testkit::interop::{
    agno_python, assert_agno_read_fixture, read_agno_fixture, run_driver, write_fixture,
    FixtureReadBack,
};
use agno_storage_testkit::servers::ci;
use serde_json::{json, Value};

fn env(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(p) => Some(p),
        Err(_) if ci() => panic!("CI=true but {var} is not set; run ./scripts/test.sh"),
        Err(_) => {
            eprintln!(
                "note: {var} is not set; skipping agno MongoDB interop (./scripts/test.sh sets it)"
            );
            None
        }
    }
}

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_mongo_driver.py")
}

/// Runs the agno driver and returns its stdout.
fn agno(python: &str, command: &str, target: &Target) -> String {
    let target = target.for_python();
    run_driver(
        python,
        &[driver().as_os_str(), command.as_ref(), target.as_ref()],
    )
}

fn json_out(python: &str, command: &str, target: &Target) -> Value {
    serde_json::from_str(&agno(python, command, target)).expect("the driver prints JSON")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// A fresh database on the test server, reachable from both sides.
struct Target {
    url: String,
    name: String,
}

impl Target {
    fn new(url: &str, label: &str) -> Target {
        Target {
            url: url.to_owned(),
            name: format!(
                "agno_ct_{}_interop_{label}_{}",
                now_epoch_seconds(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
        }
    }

    fn for_python(&self) -> String {
        format!("mongodb:{}#{}", self.url, self.name)
    }

    async fn open(&self) -> AgnoDb {
        MongoDb::connect(&self.url, &self.name, TableNames::default())
            .await
            .expect("open the database")
            .agno_db()
    }
}

/// The interpreters and server, or `None` (skip) when not configured.
fn setup() -> Option<(String, String, String)> {
    let url = env("AGNO_TEST_MONGODB_URL")?;
    let v2 = agno_python("AGNO_TEST_PYTHON_V2")?;
    let v3 = agno_python("AGNO_TEST_PYTHON_V3")?;
    Some((url, v2, v3))
}

fn keys(doc: &Value) -> BTreeSet<String> {
    doc.as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// agno 2.9.0 writes A and B; we migrate A, agno 3.1.10 migrates B; agno reads both the same.
#[test]
fn v2_database_migrates_like_agno() {
    let Some((url, v2, v3)) = setup() else { return };
    let (a, b) = (Target::new(&url, "v2a"), Target::new(&url, "v2b"));
    agno(&v2, "write-v2", &a);
    agno(&v2, "write-v2", &b);
    runtime().block_on(async {
        let db = a.open().await;
        let report = MigrationManager::new(db.migrations().unwrap())
            .up()
            .await
            .expect("our migration");
        assert_eq!(report.stamped.len(), 8, "{report:?}");
        let s = db
            .sessions()
            .unwrap()
            .get_session("v2-s-team", SessionRead::for_user("bob"))
            .await
            .unwrap()
            .expect("team session");
        let ids: Vec<String> = s
            .runs
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(agno_storage_core::RunJson::run_id)
            .collect();
        assert_eq!(ids, ["v2-t0", "v2-t0-m1"]);
    });
    agno(&v3, "migrate-v3", &b);
    let (ours, theirs) = (json_out(&v3, "dump-v3", &a), json_out(&v3, "dump-v3", &b));
    assert_eq!(
        ours, theirs,
        "agno 3.1.10 reads our migration differently from its own"
    );
    assert_eq!(ours["runs"].as_array().map(Vec::len), Some(5), "{ours}");
    assert!(
        ours["versions"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == "3.0.0"),
        "{ours}"
    );
    // The copied run documents are the ones agno's migration writes (only `updated_at`,
    // a copy time, differs).
    let strip = |raw: &Value, coll: &str| -> Vec<Value> {
        let mut runs = raw[coll].as_array().cloned().unwrap_or_default();
        for r in &mut runs {
            r.as_object_mut().map(|m| m.remove("updated_at"));
        }
        runs
    };
    let (raw_ours, raw_theirs) = (json_out(&v3, "raw", &a), json_out(&v3, "raw", &b));
    assert_eq!(
        strip(&raw_ours, "agno_runs"),
        strip(&raw_theirs, "agno_runs")
    );
    // Sessions are untouched by both migrations (agno 2.9.0 wrote their `updated_at`).
    assert_eq!(
        strip(&raw_ours, "agno_sessions"),
        strip(&raw_theirs, "agno_sessions")
    );
}

/// We write; agno 3.1.10 reads it back, and the documents have agno's shapes.
#[test]
fn agno_reads_what_we_write() {
    let Some((url, _, v3)) = setup() else { return };
    let target = Target::new(&url, "ours");
    runtime().block_on(async {
        let db = target.open().await;
        write_fixture(&db).await;
    });
    let d = json_out(&v3, "dump-v3", &target);
    assert_agno_read_fixture(&d, &FixtureReadBack::default());

    let raw = json_out(&v3, "raw", &target);
    let agent_session: BTreeSet<String> = [
        "session_id",
        "session_type",
        "agent_id",
        "user_id",
        "agent_data",
        "session_data",
        "summary",
        "metadata",
        "created_at",
        "updated_at",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    let ours = raw["agno_sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "rs-s1")
        .unwrap();
    assert_eq!(keys(ours), agent_session, "agent session document: {ours}");
    let run_row: BTreeSet<String> = [
        "run_id",
        "session_id",
        "run_type",
        "run_index",
        "user_id",
        "agent_id",
        "team_id",
        "workflow_id",
        "parent_run_id",
        "status",
        "run_data",
        "created_at",
        "updated_at",
    ]
    .iter()
    .map(|k| k.to_string())
    .collect();
    for r in raw["agno_runs"].as_array().unwrap() {
        assert_eq!(keys(r), run_row, "run document: {r}");
    }
    let stamps = raw["agno_schema_versions"].as_array().unwrap();
    assert!(stamps.iter().all(|s| keys(s)
        == ["table_name", "updated_at", "version"]
            .iter()
            .map(|k| k.to_string())
            .collect()));
}

/// agno 3.1.10 writes; we read it back.
#[test]
fn we_read_what_agno_writes() {
    let Some((url, _, v3)) = setup() else { return };
    let target = Target::new(&url, "theirs");
    agno(&v3, "write-v3", &target);
    runtime().block_on(async {
        let db = target.open().await;
        let m = read_agno_fixture(&db).await;
        // agno's MongoDb.upsert_user_memory stores no created_at: it reads back as updated_at.
        assert_eq!(Some(m.created_at), m.updated_at);
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
