//! Interop with the real agno package from PyPI on MongoDB: agno 2.9.0 writes a legacy
//! database, we migrate it and agno 3.1.10 reads it back exactly as its own migration of a
//! copy; agno 3.1.10 reads what we write (and finds agno's document shapes); we read what
//! it writes.
//!
//! Needs `AGNO_TEST_MONGODB_URL` and `AGNO_TEST_PYTHON_V2`/`AGNO_TEST_PYTHON_V3` (python
//! executables of venvs with agno 2.9.0 / 3.1.10 and pymongo; `./scripts/test.sh` sets them
//! all). Without them the tests are skipped with a note, except under `CI=true`, where they
//! fail.

use std::path::{Path, PathBuf};

use agno_storage_core::{async_trait, now_epoch_seconds, AgnoDb, RunRecord};
use agno_storage_mongo::{MongoDb, TableNames};
use agno_storage_testkit::interop::{
    agno_json, agno_python, assert_agno_document_shapes, assert_raw_migrations_agree, runtime,
    FixtureReadBack, InteropTarget,
};
use agno_storage_testkit::servers::ci;
use serde_json::json;

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
}

#[async_trait]
impl InteropTarget for Target {
    fn driver(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_mongo_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![format!("mongodb:{}#{}", self.url, self.name)]
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
    let url = match std::env::var("AGNO_TEST_MONGODB_URL") {
        Ok(url) => url,
        Err(_) if ci() => {
            panic!("CI=true but AGNO_TEST_MONGODB_URL is not set; run ./scripts/test.sh")
        }
        Err(_) => {
            eprintln!("note: AGNO_TEST_MONGODB_URL is not set; skipping agno MongoDB interop (./scripts/test.sh sets it)");
            return None;
        }
    };
    let v2 = agno_python("AGNO_TEST_PYTHON_V2")?;
    let v3 = agno_python("AGNO_TEST_PYTHON_V3")?;
    Some((url, v2, v3))
}

/// agno 2.9.0 writes A and B; we migrate A, agno 3.1.10 migrates B; agno reads both the same.
#[test]
fn v2_database_migrates_like_agno() {
    let Some((url, v2, v3)) = setup() else { return };
    let (a, b) = (Target::new(&url, "v2a"), Target::new(&url, "v2b"));
    agno_storage_testkit::interop::v2_migrates_like_agno(&v2, &v3, &a, &b);
    assert_raw_migrations_agree(&agno_json(&v3, "raw", &a), &agno_json(&v3, "raw", &b), &[]);
}

/// We write; agno 3.1.10 reads it back, and the documents have agno's shapes.
#[test]
fn agno_reads_what_we_write() {
    let Some((url, _, v3)) = setup() else { return };
    let target = Target::new(&url, "ours");
    agno_storage_testkit::interop::agno_reads_what_we_write(
        &v3,
        &target,
        &FixtureReadBack::default(),
    );

    assert_agno_document_shapes(&agno_json(&v3, "raw", &target), &[]);
}

/// agno 3.1.10 writes; we read it back.
#[test]
fn we_read_what_agno_writes() {
    let Some((url, _, v3)) = setup() else { return };
    let target = Target::new(&url, "theirs");
    let m = agno_storage_testkit::interop::we_read_what_agno_writes(&v3, &target);
    // agno's MongoDb.upsert_user_memory stores no created_at: it reads back as updated_at.
    assert_eq!(Some(m.created_at), m.updated_at);
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
