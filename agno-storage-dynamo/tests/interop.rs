//! Interop with the real agno 3.1.10 `DynamoDb` (boto3) on the same DynamoDB Local tables:
//! agno reads what we write, we read what agno writes.
//!
//! Needs `AGNO_TEST_DYNAMODB_URL` and `AGNO_TEST_PYTHON_V3` (a venv with agno 3.1.10 and
//! boto3; `scripts/test.sh` sets both). Without them the tests pass with a note, except
//! under `CI=true`, where they fail.

use std::path::PathBuf;
use std::process::Command;

use agno_storage_core::{
    EvalRun, EvalType, KnowledgeContent, RunRecord, Session, SessionRead, SessionType, UserMemory,
};
use agno_storage_dynamo::{DynamoDb, DynamoOptions, StaticCredentials, TableNames};
use agno_storage_testkit::interop::{
    agno_surrogate_read_back, assert_surrogate_reads, read_agno_fixture,
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

fn prefix() -> String {
    format!(
        "agno_it_{}_{}_",
        agno_storage_core::now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn agno(python: &str, command: &str, url: &str, prefix: &str) -> String {
    let driver = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_dynamo_driver.py");
    let out = Command::new(python)
        .arg(driver)
        .arg(command)
        .arg(format!("dynamodb:{url}#{prefix}"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("run the agno driver");
    assert!(
        out.status.success(),
        "agno {command} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs a driver command whose stdout is one JSON document; a failure shows what it printed.
fn agno_json(python: &str, command: &str, url: &str, prefix: &str) -> Value {
    let out = agno(python, command, url, prefix);
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("agno {command} printed no JSON document ({e}):\n{out}"))
}

async fn open(url: &str, prefix: &str) -> DynamoDb {
    DynamoDb::connect(DynamoOptions {
        endpoint: Some(url.to_owned()),
        region: "us-east-1".into(),
        credentials: Some(StaticCredentials {
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
        }),
        tables: TableNames::with_prefix(prefix),
        ..Default::default()
    })
    .await
    .expect("connect")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn we_read_what_agno_writes() {
    let Some((url, python)) = setup() else { return };
    let p = prefix();
    agno(&python, "write-v3", &url, &p);
    runtime().block_on(async {
        let db = open(&url, &p).await.agno_db();
        let m = read_agno_fixture(&db).await;
        assert!(m.updated_at.is_some());
    });
}

#[test]
fn agno_reads_what_we_write() {
    let Some((url, python)) = setup() else { return };
    let p = prefix();
    runtime().block_on(async {
        let db = open(&url, &p).await.agno_db();
        let mut s = Session::new("rs-s1", SessionType::Agent, "agent-rs").with_user("dave");
        s.set_session_name("From Rust");
        s.metadata = Some(json!({"k": [1, 2]}));
        s.created_at = 1720000000;
        db.sessions().unwrap().upsert_session(s).await.unwrap();
        for i in 0..2 {
            let data = json!({"run_id": format!("rs-r{i}"), "agent_id": "agent-rs", "session_id": "rs-s1",
                              "user_id": "dave", "content": format!("rust answer {i}"), "status": "COMPLETED",
                              "created_at": 1720000000 + i});
            let run = RunRecord::from_run_data("rs-s1", Some("dave".into()), data).unwrap();
            db.runs().unwrap().upsert_run(run).await.unwrap();
        }
        let mut m = UserMemory::new("rs-m1", Some("dave".into()), "written by rust");
        m.topics = Some(vec!["interop".into()]);
        m.created_at = 1720000100;
        db.memories().unwrap().upsert_memory(m).await.unwrap();
        db.evals()
            .unwrap()
            .create_eval_run(EvalRun {
                run_id: "rs-e1".into(),
                eval_type: EvalType::Accuracy,
                eval_data: json!({"avg_score": 9}),
                eval_input: Some(json!({"input": "2+2"})),
                name: Some("math".into()),
                agent_id: Some("agent-rs".into()),
                team_id: None,
                workflow_id: None,
                model_id: None,
                model_provider: None,
                evaluated_component_name: None,
                user_id: None,
                created_at: 1720000200,
                updated_at: Some(1720000200),
            })
            .await
            .unwrap();
        let mut k = KnowledgeContent::new("rs-k1", "doc.pdf", "a doc");
        k.metadata = Some(json!({"pages": 3}));
        db.knowledge().unwrap().upsert_knowledge_content(k).await.unwrap();
    });
    let dump = agno_json(&python, "dump-v3", &url, &p);
    let session = &dump["sessions"][0];
    assert_eq!(session["session_id"], "rs-s1");
    assert_eq!(session["user_id"], "dave");
    assert_eq!(session["session_data"]["session_name"], "From Rust");
    assert_eq!(session["metadata"], json!({"k": [1, 2]}));
    let runs: Vec<_> = session["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].clone())
        .collect();
    assert_eq!(runs, [json!("rs-r0"), json!("rs-r1")]);
    let table_runs = dump["runs"].as_array().unwrap();
    assert_eq!(table_runs.len(), 2);
    assert!(table_runs
        .iter()
        .all(|r| r["run_type"] == "agent" && r["user_id"] == "dave"));
    let memory = &dump["memories"][0];
    assert_eq!(memory["memory_id"], "rs-m1");
    assert_eq!(memory["topics"], json!(["interop"]));
    // agno's own encoding: a naive ISO string (we write UTC; agno reads naive as UTC).
    assert_eq!(memory["created_at"], "2024-07-03T09:48:20");
    assert_eq!(dump["evals"][0]["run_id"], "rs-e1");
    assert_eq!(dump["evals"][0]["eval_data"], json!({"avg_score": 9}));
    assert_eq!(dump["knowledge"][0]["metadata"], json!({"pages": 3}));
}

#[test]
fn v2_tables_migrate_and_agno_reads_them() {
    let Some((url, python_v2)) = setup_v2() else {
        return;
    };
    let Some((_, python_v3)) = setup() else {
        return;
    };
    let p = prefix();
    agno(&python_v2, "write-v2", &url, &p);
    runtime().block_on(async {
        let store = open(&url, &p).await;
        let db = store.agno_db();
        let report =
            agno_storage_core::MigrationManager::new(store.agno_db().migrations().unwrap())
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
    let dump = agno_json(&python_v3, "dump-v3", &url, &p);
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

/// Every item of every table of `prefix` as agno's driver prints it (`raw`: DynamoDB JSON,
/// keyed by the table name without the prefix, each table's items in a stable order).
fn raw(python: &str, url: &str, prefix: &str) -> Value {
    agno_json(python, "raw", url, prefix)
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
    let (a, b) = (prefix(), prefix());
    agno(&python_v2, "write-v2", &url, &a);
    agno(&python_v2, "write-v2", &url, &b);
    runtime().block_on(async {
        let store = open(&url, &a).await;
        let report =
            agno_storage_core::MigrationManager::new(store.agno_db().migrations().unwrap())
                .up()
                .await
                .expect("our migration");
        assert!(!report.applied.is_empty(), "{report:?}");
    });
    agno(&python_v3, "migrate-v3", &url, &b);
    let (ours, theirs) = (
        agno_json(&python_v3, "dump-v3", &url, &a),
        agno_json(&python_v3, "dump-v3", &url, &b),
    );
    assert_eq!(
        ours, theirs,
        "agno 3.1.10 reads our migration differently from its own"
    );
    assert_eq!(ours["runs"].as_array().map(Vec::len), Some(5), "{ours}");
    let (raw_ours, raw_theirs) = (raw(&python_v3, &url, &a), raw(&python_v3, &url, &b));
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
    let global = agno_json(&python_v3, "raw", &url, "agno_schema_versions");
    let theirs = stamps(&global[""], &b);
    let ours = stamps(&raw_ours["agno_schema_versions"], &a);
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
    let p = prefix();
    agno(&python, "write-surrogates", &url, &p);
    let stored = stored_run_text(&raw(&python, &url, &p), "sur-r1");
    assert!(stored.contains(r"caf\udce9.txt"), "{stored}");
    runtime().block_on(async {
        let db = open(&url, &p).await.agno_db();
        assert_eq!(assert_surrogate_reads(&db).await, stored);
        db.sessions()
            .unwrap()
            .rename_session("sur-s1", "Renamed in Rust", Some("dave"))
            .await
            .expect("rename")
            .expect("the session exists");
    });
    assert_eq!(
        stored_run_text(&raw(&python, &url, &p), "sur-r1"),
        stored,
        "byte-identical after an update"
    );
    assert_eq!(
        agno(&python, "read-surrogates", &url, &p).trim(),
        agno_surrogate_read_back("Renamed in Rust", &[])
    );
}
