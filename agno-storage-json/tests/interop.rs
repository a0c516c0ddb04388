//! Interop with the real agno package from PyPI on a JSON directory (agno's `JsonDb`):
//! agno 2.9.0 writes a legacy directory, we migrate it and agno 3.1.10 reads it back exactly
//! as its own migration of a copy; agno 3.1.10 reads what we write; we read what it writes.
//!
//! Needs `AGNO_TEST_PYTHON_V2` and `AGNO_TEST_PYTHON_V3` (python executables of venvs with
//! agno 2.9.0 and 3.1.10; `./scripts/test.sh` builds them). Without them the tests are
//! skipped with a note, except under `CI=true`, where they fail. The driver runs with
//! `TZ=UTC`: agno writes memory timestamps in the host's local time without an offset and
//! reads them back as UTC, so only a UTC host reads its own memories back unchanged.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agno_storage_core::{
    AgnoDb, EvalRun, EvalType, KnowledgeContent, MigrationManager, RunRecord, Session, SessionRead,
    SessionType, UserMemory,
};
use agno_storage_json::JsonDb;
use serde_json::{json, Value};

fn python(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(p) => Some(p),
        Err(_) if common::ci() => panic!("CI=true but {var} is not set; run ./scripts/test.sh"),
        Err(_) => {
            eprintln!("note: {var} is not set; skipping agno interop (./scripts/test.sh sets it)");
            None
        }
    }
}

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_json_driver.py")
}

/// Runs the agno driver on `dir` and returns its stdout.
fn agno(python: &str, command: &str, dir: &Path) -> String {
    let target = format!("json:{}", dir.display());
    let out = Command::new(python)
        .arg(driver())
        .arg(command)
        .arg(&target)
        .env("TZ", "UTC")
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "agno {command} {target} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn agno_json(python: &str, command: &str, dir: &Path) -> Value {
    serde_json::from_str(&agno(python, command, dir)).expect("the driver prints JSON")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

async fn open(dir: &Path) -> AgnoDb {
    JsonDb::open_local(dir)
        .await
        .expect("open the directory")
        .agno_db()
}

#[test]
fn v2_directory_migrates_like_agno() {
    let (Some(v2), Some(v3)) = (python("AGNO_TEST_PYTHON_V2"), python("AGNO_TEST_PYTHON_V3"))
    else {
        return;
    };
    let (a, b) = (common::scratch_dir("v2a"), common::scratch_dir("v2b"));
    agno(&v2, "write-v2", &a);
    agno(&v2, "write-v2", &b);
    runtime().block_on(async {
        let db = open(&a).await;
        let report = MigrationManager::new(db.migrations().unwrap())
            .up()
            .await
            .expect("our migration");
        assert!(!report.stamped.is_empty());
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
    let (ours, theirs) = (agno_json(&v3, "dump-v3", &a), agno_json(&v3, "dump-v3", &b));
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
    // The legacy blob stays as agno's backup, so agno's own cleanup still refuses unforced.
    let sessions: Value =
        serde_json::from_slice(&std::fs::read(a.join("agno_sessions.json")).unwrap()).unwrap();
    assert!(sessions[0]["runs"].is_array());
}

#[test]
fn agno_reads_what_we_write() {
    let Some(v3) = python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let dir = common::scratch_dir("ours");
    runtime().block_on(async {
        let db = open(&dir).await;
        let mut s = Session::new("rs-s1", SessionType::Agent, "agent-rs").with_user("dave");
        s.session_data = Some(json!({"session_name": "Written by Rust ✓", "session_state": {"n": 1}}));
        s.created_at = 1_720_000_000;
        db.sessions().unwrap().upsert_session(s).await.unwrap();
        let mut team = Session::new("rs-s2", SessionType::Team, "team-rs").with_user("dave");
        team.created_at = 1_720_000_100;
        db.sessions().unwrap().upsert_session(team).await.unwrap();
        for (i, status) in ["COMPLETED", "ERROR"].iter().enumerate() {
            let run = RunRecord::from_run_data("rs-s1", Some("dave".into()), json!({
                "run_id": format!("rs-r{i}"), "agent_id": "agent-rs", "session_id": "rs-s1", "user_id": "dave",
                "status": status, "content": format!("rust answer {i}"), "created_at": 1_720_000_000 + i as i64
            }))
            .unwrap();
            db.runs().unwrap().upsert_run(run).await.unwrap();
        }
        for (id, data) in [
            ("rs-t0", json!({"run_id": "rs-t0", "team_id": "team-rs", "session_id": "rs-s2", "status": "COMPLETED", "content": "team"})),
            ("rs-t0-m", json!({"run_id": "rs-t0-m", "agent_id": "member", "session_id": "rs-s2", "parent_run_id": "rs-t0", "status": "COMPLETED", "content": "member"})),
        ] {
            let run = RunRecord::from_run_data("rs-s2", Some("dave".into()), data).unwrap();
            assert_eq!(db.runs().unwrap().upsert_run(run).await.unwrap().run_id, id);
        }
        let mut m = UserMemory::new("rs-m1", Some("dave".into()), "Rust remembers \"quotes\" and ü");
        m.topics = Some(vec!["rust".into()]);
        m.created_at = 1_720_000_200;
        db.memories().unwrap().upsert_memory(m).await.unwrap();
        db.evals()
            .unwrap()
            .create_eval_run(EvalRun {
                run_id: "rs-e1".into(),
                eval_type: EvalType::Reliability,
                eval_data: json!({"passed": true}),
                eval_input: None,
                name: Some("tools".into()),
                agent_id: Some("agent-rs".into()),
                team_id: None,
                workflow_id: None,
                model_id: None,
                model_provider: None,
                evaluated_component_name: None,
                user_id: Some("dave".into()),
                created_at: 1_720_000_300,
                updated_at: None,
            })
            .await
            .unwrap();
        let mut k = KnowledgeContent::new("rs-k1", "notes.md", "rust notes");
        k.user_id = Some("dave".into());
        db.knowledge().unwrap().upsert_knowledge_content(k).await.unwrap();
    });
    let d = agno_json(&v3, "dump-v3", &dir);
    let sessions = d["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{d}");
    assert_eq!(
        sessions[0]["session_data"]["session_name"],
        "Written by Rust ✓"
    );
    assert_eq!(sessions[0]["user_id"], "dave");
    assert_eq!(sessions[0]["created_at"], 1_720_000_000);
    let runs: Vec<&str> = sessions[0]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["run_id"].as_str().unwrap())
        .collect();
    assert_eq!(runs, ["rs-r0", "rs-r1"]);
    assert_eq!(sessions[0]["runs"][1]["status"], "ERROR");
    assert_eq!(sessions[1]["runs"][1]["parent_run_id"], "rs-t0");
    let table_runs = d["runs"].as_array().unwrap();
    assert_eq!(
        table_runs
            .iter()
            .map(|r| r["run_index"].as_i64().unwrap())
            .collect::<Vec<_>>(),
        [0, 1, 0, 1]
    );
    assert_eq!(table_runs[2]["run_type"], "team");
    assert_eq!(
        d["memories"][0]["memory"],
        "Rust remembers \"quotes\" and ü"
    );
    assert_eq!(d["evals"][0]["eval_type"], "reliability");
    assert_eq!(d["evals"][0]["user_id"], "dave");
    assert_eq!(d["knowledge"][0]["user_id"], "dave");
    assert!(
        d["versions"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == "3.0.0"),
        "{d}"
    );
    let memories = agno_json(&v3, "memories-v3", &dir);
    assert_eq!(memories[0]["created_at"], 1_720_000_200, "{memories}");
}

#[test]
fn we_read_what_agno_writes() {
    let Some(v3) = python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let dir = common::scratch_dir("theirs");
    agno(&v3, "write-v3", &dir);
    runtime().block_on(async {
        let db = open(&dir).await;
        let s = db
            .sessions()
            .unwrap()
            .get_session("py-s1", SessionRead::for_user("carol"))
            .await
            .unwrap()
            .expect("python's session");
        assert_eq!(s.session_name(), Some("From Python"));
        let runs = s.run_values().unwrap();
        assert_eq!(
            runs.iter()
                .map(|r| r["content"].as_str().unwrap())
                .collect::<Vec<_>>(),
            ["python answer 0", "python answer 1"]
        );
        let r1 = db
            .runs()
            .unwrap()
            .get_run("py-r1", Some("carol"))
            .await
            .unwrap()
            .expect("python's run");
        assert_eq!(
            (r1.run_index, r1.status.as_deref()),
            (Some(1), Some("COMPLETED"))
        );
        let m = db
            .memories()
            .unwrap()
            .get_memory("py-m1", Some("carol"))
            .await
            .unwrap()
            .expect("python's memory");
        assert_eq!(
            (m.memory.as_str(), m.created_at),
            ("written by python", 1_710_000_100)
        );
        assert_eq!(m.topics, Some(vec!["interop".to_owned()]));
        // A write of ours into agno's directory keeps agno's layout readable to agno.
        db.sessions()
            .unwrap()
            .rename_session("py-s1", "Renamed by Rust", Some("carol"))
            .await
            .unwrap()
            .expect("rename");
    });
    let d = agno_json(&v3, "dump-v3", &dir);
    assert_eq!(
        d["sessions"][0]["session_data"]["session_name"],
        "Renamed by Rust"
    );
    assert_eq!(d["sessions"][0]["runs"].as_array().map(Vec::len), Some(2));
}
