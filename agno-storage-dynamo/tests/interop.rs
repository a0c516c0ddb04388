//! Interop with the real agno 3.1.10 `DynamoDb` (boto3) on the same DynamoDB Local tables:
//! agno reads what we write, we read what agno writes.
//!
//! Needs `AGNO_TEST_DYNAMODB_URL` and `AGNO_TEST_PYTHON_V3` (a venv with agno 3.1.10 and
//! boto3; `scripts/test.sh` sets both). Without them the tests pass with a note, except
//! under `CI=true`, where they fail.

use std::path::PathBuf;

use agno_storage_core::{async_trait, AgnoDb, SessionRead};
use agno_storage_dynamo::{DynamoDb, DynamoOptions, StaticCredentials, TableNames};
use agno_storage_testkit::interop::{
    agno, agno_json, agno_surrogate_read_back, assert_surrogate_reads, runtime, FixtureReadBack,
    InteropTarget,
};
use agno_storage_testkit::servers::ci;
use serde_json::{json, Value};

/// `(DynamoDB URL, python of the agno 2.9.0 venv)`, or `None` (skip) when unset.
fn setup_v2() -> Option<(String, String)> {
    let python = std::env::var("AGNO_TEST_PYTHON_V2").ok();
    match (setup(), python) {
        (Some((u, _)), Some(p)) => Some((u, p)),
        (None, _) => None,
        (Some(_), None) => {
            assert!(
                !ci(),
                "CI=true but AGNO_TEST_PYTHON_V2 is not set; run ./scripts/test.sh"
            );
            eprintln!("note: AGNO_TEST_PYTHON_V2 not set; skipping the 2.9.0 DynamoDB interop");
            None
        }
    }
}

/// `(DynamoDB URL, python of the agno 3.1.10 venv)`, or `None` (skip) when unset.
fn setup() -> Option<(String, String)> {
    let url = std::env::var("AGNO_TEST_DYNAMODB_URL").ok();
    let python = std::env::var("AGNO_TEST_PYTHON_V3").ok();
    match (url, python) {
        (Some(u), Some(p)) => Some((u, p)),
        _ => {
            assert!(
                !ci(),
                "CI=true but AGNO_TEST_DYNAMODB_URL or AGNO_TEST_PYTHON_V3 is not set; run ./scripts/test.sh"
            );
            eprintln!("note: AGNO_TEST_DYNAMODB_URL / AGNO_TEST_PYTHON_V3 not set; skipping DynamoDB interop");
            None
        }
    }
}

/// Tables under one prefix on the test server, reachable from both sides.
struct Target {
    url: String,
    prefix: String,
}

impl Target {
    fn new(url: &str) -> Target {
        Target::named(
            url,
            &format!(
                "agno_it_{}_{}_",
                agno_storage_core::now_epoch_seconds(),
                &uuid::Uuid::new_v4().simple().to_string()[..8]
            ),
        )
    }

    fn named(url: &str, prefix: &str) -> Target {
        Target {
            url: url.to_owned(),
            prefix: prefix.to_owned(),
        }
    }

    /// Every item of every table as agno's driver prints it (`raw`: DynamoDB JSON, keyed
    /// by the table name without the prefix, each table's items in a stable order).
    fn raw(&self, python: &str) -> Value {
        agno_json(python, "raw", self)
    }
}

#[async_trait]
impl InteropTarget for Target {
    fn driver(&self) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_dynamo_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![format!("dynamodb:{}#{}", self.url, self.prefix)]
    }

    async fn open(&self) -> AgnoDb {
        DynamoDb::connect(DynamoOptions {
            endpoint: Some(self.url.clone()),
            region: "us-east-1".into(),
            credentials: Some(StaticCredentials {
                access_key_id: "test".into(),
                secret_access_key: "test".into(),
            }),
            tables: TableNames::with_prefix(&self.prefix),
            ..Default::default()
        })
        .await
        .expect("connect")
        .agno_db()
    }

    /// agno's `DynamoDb` reads one unprefixed `agno_schema_versions`, whatever the prefix
    /// (`v2_tables_migrate_like_agno` compares the stamps item by item instead).
    fn agno_reads_our_stamps(&self) -> bool {
        false
    }
}

#[test]
fn we_read_what_agno_writes() {
    let Some((url, python)) = setup() else { return };
    let m = agno_storage_testkit::interop::we_read_what_agno_writes(&python, &Target::new(&url));
    assert!(m.updated_at.is_some());
}

/// agno's `DynamoDb` hands a memory's `created_at` back as the naive ISO text it stores
/// (we write UTC; agno reads naive as UTC), and reads its stamps elsewhere.
#[test]
fn agno_reads_what_we_write() {
    let Some((url, python)) = setup() else { return };
    let read_back = FixtureReadBack {
        memory_created_at: Some(json!("2024-07-03T09:50:00")),
        stamps_read: false,
        ..FixtureReadBack::default()
    };
    agno_storage_testkit::interop::agno_reads_what_we_write(
        &python,
        &Target::new(&url),
        &read_back,
    );
}

#[test]
fn v2_tables_migrate_and_agno_reads_them() {
    let Some((url, python_v2)) = setup_v2() else {
        return;
    };
    let Some((_, python_v3)) = setup() else {
        return;
    };
    let target = Target::new(&url);
    agno(&python_v2, "write-v2", &target);
    runtime().block_on(async {
        let db = target.open().await;
        let report = agno_storage_core::MigrationManager::new(db.migrations().unwrap())
            .up()
            .await
            .expect("migration");
        assert!(!report.applied.is_empty());
        let s = db
            .sessions()
            .unwrap()
            .get_session("v2-s-agent", SessionRead::for_user("alice"))
            .await
            .unwrap()
            .expect("2.9.0 session");
        let ids: Vec<_> = s
            .runs
            .unwrap_or_default()
            .iter()
            .filter_map(agno_storage_core::RunJson::run_id)
            .collect();
        assert_eq!(ids, ["v2-a0", "v2-a1", "v2-a2"]);
        let run = db
            .runs()
            .unwrap()
            .get_run("v2-a2", None)
            .await
            .unwrap()
            .expect("copied run");
        assert_eq!(run.run_index, Some(2));
        assert_eq!(run.user_id.as_deref(), Some("alice"));
        let m = db
            .memories()
            .unwrap()
            .get_memory("v2-m1", None)
            .await
            .unwrap()
            .expect("memory");
        assert_eq!(m.topics, Some(vec!["drinks".to_owned(), "tea".to_owned()]));
        assert!(db
            .evals()
            .unwrap()
            .get_eval_run("v2-e1", None)
            .await
            .unwrap()
            .is_some());
        assert!(db
            .knowledge()
            .unwrap()
            .get_knowledge_content("v2-k1", None)
            .await
            .unwrap()
            .is_some());
    });
    let dump = agno_json(&python_v3, "dump-v3", &target);
    let table_runs = dump["runs"].as_array().unwrap();
    let team: Vec<_> = table_runs
        .iter()
        .filter(|r| r["session_id"] == "v2-s-team")
        .map(|r| {
            (
                r["run_id"].clone(),
                r["run_index"].clone(),
                r["run_type"].clone(),
            )
        })
        .collect();
    assert_eq!(
        team,
        [
            (json!("v2-t0"), json!(0), json!("team")),
            (json!("v2-t0-m1"), json!(1), json!("agent")),
        ]
    );
    assert_eq!(table_runs.len(), 5);
}

/// `items` without the attributes in `drop`, sorted by their JSON text.
fn strip(items: &Value, drop: &[&str]) -> Vec<Value> {
    let mut items = items.as_array().cloned().unwrap_or_default();
    for item in &mut items {
        if let Some(m) = item.as_object_mut() {
            for key in drop {
                m.remove(*key);
            }
        }
    }
    items.sort_by_key(|i| i.to_string());
    items
}

/// agno 2.9.0 writes tables A and B; we migrate A, agno 3.1.10 migrates B: agno reads both
/// the same, and the items are the same, byte for byte, except the copy time.
#[test]
fn v2_tables_migrate_like_agno() {
    let Some((url, python_v2)) = setup_v2() else {
        return;
    };
    let Some((_, python_v3)) = setup() else {
        return;
    };
    let (a, b) = (Target::new(&url), Target::new(&url));
    agno_storage_testkit::interop::v2_migrates_like_agno(&python_v2, &python_v3, &a, &b);
    let (raw_ours, raw_theirs) = (a.raw(&python_v3), b.raw(&python_v3));
    // The copied run items are agno's, byte for byte; only `updated_at` (the copy time)
    // differs.
    let runs = strip(&raw_ours["agno_runs"], &["updated_at"]);
    assert_eq!(runs.len(), 5, "{raw_ours}");
    assert_eq!(runs, strip(&raw_theirs["agno_runs"], &["updated_at"]));
    // Both migrations leave the 2.9.0 sessions, memories, evals and knowledge as they were
    // (the legacy `runs` attribute stays as the backup); the two writes of agno 2.9.0 differ
    // only in the times it stamped when it wrote them.
    for (table, written_at) in [
        ("agno_sessions", &["updated_at"][..]),
        ("agno_memories", &["updated_at"][..]),
        ("agno_eval_runs", &["created_at", "updated_at"][..]),
        ("agno_knowledge", &["created_at", "updated_at"][..]),
    ] {
        let ours = strip(&raw_ours[table], written_at);
        assert!(!ours.is_empty(), "table {table} is empty: {raw_ours}");
        assert_eq!(ours, strip(&raw_theirs[table], written_at), "table {table}");
    }
    // The stamps. agno's `DynamoDb` cannot rename its versions table, so agno stamped B in
    // the unprefixed `agno_schema_versions`; we stamp A in our prefixed one. Each of agno's
    // stamps (the five tables it has) is ours too, item for item but for the table prefix
    // and the stamp time; we also stamp the tables agno's DynamoDb lacks.
    let stamps = |items: &Value, p: &str| -> Vec<Value> {
        let mut out: Vec<Value> = strip(items, &["updated_at"])
            .into_iter()
            .filter_map(|mut item| {
                let name = item["table_name"]["S"]
                    .as_str()?
                    .strip_prefix(p)?
                    .to_owned();
                item["table_name"] = json!({ "S": name });
                Some(item)
            })
            .collect();
        out.sort_by_key(|i| i.to_string());
        out
    };
    let global = Target::named(&url, "agno_schema_versions").raw(&python_v3);
    let theirs = stamps(&global[""], &b.prefix);
    let ours = stamps(&raw_ours["agno_schema_versions"], &a.prefix);
    assert_eq!(theirs.len(), 5, "{global}");
    for stamp in &theirs {
        assert!(
            ours.contains(stamp),
            "agno's stamp {stamp} is not ours: {ours:?}"
        );
    }
}

/// The stored `run_data` text of `run_id`, as agno's driver reads the item.
fn stored_run_text(raw: &Value, run_id: &str) -> String {
    raw["agno_runs"]
        .as_array()
        .and_then(|items| items.iter().find(|i| i["run_id"]["S"] == run_id))
        .and_then(|item| item["run_data"]["S"].as_str())
        .unwrap_or_else(|| panic!("run {run_id} is stored: {raw}"))
        .to_owned()
}

/// agno writes a lone surrogate (`"caf\udce9.txt"`) into one run of a session. Our
/// session read hands every run over, that one as its stored text byte for byte;
/// `get_runs` lists the other two and names the third as unreadable; renaming the session
/// leaves the run's item untouched, and agno still reads it back.
#[test]
fn lone_surrogates_agno_writes_are_kept_byte_identical() {
    let Some((url, python)) = setup() else { return };
    let target = Target::new(&url);
    agno(&python, "write-surrogates", &target);
    let stored = stored_run_text(&target.raw(&python), "sur-r1");
    assert!(stored.contains(r"caf\udce9.txt"), "{stored}");
    runtime().block_on(async {
        let db = target.open().await;
        assert_eq!(assert_surrogate_reads(&db).await, stored);
        db.sessions()
            .unwrap()
            .rename_session("sur-s1", "Renamed in Rust", Some("dave"))
            .await
            .expect("rename")
            .expect("the session exists");
    });
    assert_eq!(
        stored_run_text(&target.raw(&python), "sur-r1"),
        stored,
        "byte-identical after an update"
    );
    assert_eq!(
        agno(&python, "read-surrogates", &target).trim(),
        agno_surrogate_read_back("Renamed in Rust", &[])
    );
}
