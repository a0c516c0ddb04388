//! The directory layout: only agno's table files (plus hidden lock files) appear, files
//! are rewritten atomically with no staging files left behind, and foreign files in the
//! directory are left alone.

mod common;

use agno_storage_core::{Session, SessionType, UserMemory};
use agno_storage_json::JsonDb;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn directory_holds_agno_tables_only() {
    let dir = common::scratch_dir("layout");
    std::fs::write(dir.join("notes #1.txt"), "not a table").unwrap();
    std::fs::create_dir_all(dir.join("sub dir")).unwrap();
    std::fs::write(dir.join("sub dir/agno_sessions.json"), "{not json").unwrap();
    runtime().block_on(async {
        let db = JsonDb::open_local(&dir).await.unwrap().agno_db();
        let mut s = Session::new("s1", SessionType::Workflow, "wf").with_user("u");
        s.created_at = 1_700_000_000;
        db.sessions()
            .unwrap()
            .upsert_session(s.clone())
            .await
            .unwrap();
        db.sessions().unwrap().upsert_session(s).await.unwrap();
        let mut m = UserMemory::new("m1", Some("u".into()), "x");
        m.created_at = 1_700_000_000;
        db.memories().unwrap().upsert_memory(m).await.unwrap();
    });
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "agno_memories.json",
            "agno_schema_versions.json",
            "agno_sessions.json",
            "notes #1.txt",
            "sub dir"
        ]
    );
    let sessions = std::fs::read_to_string(dir.join("agno_sessions.json")).unwrap();
    assert!(
        sessions.starts_with("[\n  {\n    \"session_id\": \"s1\",\n    \"user_id\": \"u\",\n    \"workflow_id\": \"wf\",\n    \"workflow_name\": null,"),
        "{sessions}"
    );
    let memories = std::fs::read_to_string(dir.join("agno_memories.json")).unwrap();
    assert!(
        memories.contains("\"created_at\": \"2023-11-14T22:13:20\""),
        "{memories}"
    );
}

#[test]
fn unknown_keys_of_agno_rows_survive_our_writes() {
    let dir = common::scratch_dir("unknown_keys");
    std::fs::write(
        dir.join("agno_sessions.json"),
        r#"[{"session_id": "s1", "user_id": "u", "workflow_id": "wf", "workflow_name": "Flow", "session_data": null,
             "workflow_data": null, "metadata": null, "created_at": 1, "updated_at": 1, "session_type": "workflow",
             "future_field": {"kept": true}}]"#,
    )
    .unwrap();
    runtime().block_on(async {
        let db = JsonDb::open_local(&dir).await.unwrap().agno_db();
        db.sessions()
            .unwrap()
            .rename_session("s1", "renamed", Some("u"))
            .await
            .unwrap()
            .expect("renamed");
    });
    let rows: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("agno_sessions.json")).unwrap()).unwrap();
    assert_eq!(rows[0]["workflow_name"], "Flow");
    assert_eq!(rows[0]["future_field"]["kept"], true);
    assert_eq!(rows[0]["session_data"]["session_name"], "renamed");
}
