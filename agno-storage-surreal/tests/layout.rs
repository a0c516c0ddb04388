//! The stored records are agno 3.1.10's `SurrealDb` layout: table names, record ids, record
//! links, `datetime` timestamps and the schema-version records.

use agno_storage_core::{
    KnowledgeContent, MetricsRecord, RunRecord, Session, SessionType, UserMemory,
};
use agno_storage_surreal::surrealdb::types::{RecordId, RecordIdKey, Value};
use agno_storage_surreal::{SurrealDb, SurrealOptions};
use serde_json::json;

async fn open() -> SurrealDb {
    SurrealDb::connect("mem://", SurrealOptions::new("layout", "layout"))
        .await
        .expect("open mem://")
}

/// The raw record `table:⟨key⟩`, as SurrealDB stores it.
async fn raw(db: &SurrealDb, table: &str, key: &str) -> Value {
    let mut response = db
        .client()
        .query("SELECT * FROM ONLY $r")
        .bind(("r", RecordId::new(table, key)))
        .await
        .expect("query");
    response.take::<Value>(0).expect("take")
}

fn field<'a>(record: &'a Value, name: &str) -> &'a Value {
    match record {
        Value::Object(o) => o.get(name).unwrap_or(&Value::None),
        other => panic!("not a record: {other:?}"),
    }
}

fn link(value: &Value) -> (String, String) {
    match value {
        Value::RecordId(r) => match &r.key {
            RecordIdKey::String(k) => (r.table.to_string(), k.clone()),
            other => panic!("record id key is not a string: {other:?}"),
        },
        other => panic!("not a record link: {other:?}"),
    }
}

#[tokio::test]
async fn sessions_and_runs_are_agno_records() {
    let db = open().await;
    let agno = db.agno_db();
    let mut s = Session::new("s1", SessionType::Agent, "agent-1").with_user("alice");
    s.created_at = 1_700_000_000;
    agno.sessions().unwrap().upsert_session(s).await.unwrap();
    let run = RunRecord::from_run_data(
        "s1",
        Some("alice".into()),
        json!({"run_id": "r1", "agent_id": "agent-1", "status": "COMPLETED", "created_at": 1_700_000_001}),
    )
    .unwrap();
    agno.runs().unwrap().upsert_run(run).await.unwrap();

    let session = raw(&db, "agno_sessions", "s1").await;
    assert_eq!(
        link(field(&session, "id")),
        ("agno_sessions".into(), "s1".into())
    );
    assert_eq!(
        link(field(&session, "agent")),
        ("agno_agents".into(), "agent-1".into())
    );
    assert_eq!(
        field(&session, "session_type"),
        &Value::None,
        "no session_type field"
    );
    assert_eq!(
        field(&session, "session_id"),
        &Value::None,
        "session_id is the record id"
    );
    assert_eq!(
        field(&session, "agent_id"),
        &Value::None,
        "agent_id is the `agent` link"
    );
    assert_eq!(field(&session, "user_id"), &Value::String("alice".into()));
    match field(&session, "created_at") {
        Value::Datetime(dt) => {
            let t: chrono::DateTime<chrono::Utc> = (*dt).into();
            assert_eq!(t.timestamp(), 1_700_000_000);
        }
        other => panic!("created_at is not a datetime: {other:?}"),
    }
    assert!(matches!(field(&session, "updated_at"), Value::Datetime(_)));

    let run = raw(&db, "agno_runs", "r1").await;
    assert_eq!(link(field(&run, "id")), ("agno_runs".into(), "r1".into()));
    assert_eq!(field(&run, "run_id"), &Value::String("r1".into()));
    assert_eq!(field(&run, "session_id"), &Value::String("s1".into()));
    assert_eq!(field(&run, "run_type"), &Value::String("agent".into()));
    assert_eq!(field(&run, "status"), &Value::String("COMPLETED".into()));
    assert!(matches!(field(&run, "run_data"), Value::Object(_)));
    assert!(matches!(field(&run, "created_at"), Value::Datetime(_)));
    assert!(matches!(field(&run, "run_index"), Value::Number(_)));
}

#[tokio::test]
async fn memories_knowledge_and_metrics_are_agno_records() {
    let db = open().await;
    let agno = db.agno_db();
    let m = UserMemory::new("m1", Some("alice".into()), "likes tea");
    agno.memories().unwrap().upsert_memory(m).await.unwrap();
    let memory = raw(&db, "agno_memories", "m1").await;
    assert_eq!(
        link(field(&memory, "id")),
        ("agno_memories".into(), "m1".into())
    );
    assert_eq!(
        link(field(&memory, "user")),
        ("agno_users".into(), "alice".into())
    );
    assert_eq!(field(&memory, "memory_id"), &Value::None);
    assert!(matches!(field(&memory, "updated_at"), Value::Datetime(_)));

    let k = KnowledgeContent::new("k1", "doc", "a document");
    agno.knowledge()
        .unwrap()
        .upsert_knowledge_content(k)
        .await
        .unwrap();
    let knowledge = raw(&db, "agno_knowledge", "k1").await;
    assert_eq!(
        link(field(&knowledge, "id")),
        ("agno_knowledge".into(), "k1".into())
    );
    assert_eq!(field(&knowledge, "name"), &Value::String("doc".into()));
    assert!(matches!(
        field(&knowledge, "created_at"),
        Value::Datetime(_)
    ));

    let record: MetricsRecord = serde_json::from_value(json!({
        "id": "ignored", "user_id": null, "date": "2026-01-02", "aggregation_period": "daily",
        "agent_runs_count": 1, "team_runs_count": 0, "workflow_runs_count": 0,
        "agent_sessions_count": 1, "team_sessions_count": 0, "workflow_sessions_count": 0,
        "users_count": 0, "token_metrics": {}, "model_metrics": [], "completed": true,
        "created_at": 1_767_312_000, "updated_at": 1_767_312_000
    }))
    .unwrap();
    agno.metrics()
        .unwrap()
        .upsert_metrics(vec![record])
        .await
        .unwrap();
    let metrics = raw(&db, "agno_metrics", "2026-01-02|").await;
    assert_eq!(
        link(field(&metrics, "id")),
        ("agno_metrics".into(), "2026-01-02|".into())
    );
    assert_eq!(field(&metrics, "user_id"), &Value::String(String::new()));
    match field(&metrics, "date") {
        Value::Datetime(dt) => {
            let t: chrono::DateTime<chrono::Utc> = (*dt).into();
            assert_eq!(t.to_rfc3339(), "2026-01-02T00:00:00+00:00");
        }
        other => panic!("date is not a datetime: {other:?}"),
    }
}

#[tokio::test]
async fn a_new_database_is_stamped_like_agno() {
    let db = open().await;
    for table in [
        "agno_sessions",
        "agno_memories",
        "agno_metrics",
        "agno_eval_runs",
        "agno_knowledge",
    ] {
        let stamp = raw(&db, "agno_schema_versions", table).await;
        assert_eq!(
            link(field(&stamp, "id")),
            ("agno_schema_versions".into(), table.into())
        );
        assert_eq!(field(&stamp, "table_name"), &Value::String(table.into()));
        assert_eq!(field(&stamp, "version"), &Value::String("3.0.0".into()));
        assert!(matches!(field(&stamp, "updated_at"), Value::Number(_)));
    }
}

#[tokio::test]
async fn run_index_counter_is_seeded_once_and_raised_by_explicit_indexes() {
    let db = open().await;
    let agno = db.agno_db();
    let s = Session::new("s1", SessionType::Agent, "agent-1").with_user("alice");
    agno.sessions().unwrap().upsert_session(s).await.unwrap();
    let runs = agno.runs().unwrap();
    let run = |id: &str, index: Option<i64>| {
        let mut data = json!({"run_id": id, "agent_id": "agent-1", "status": "COMPLETED"});
        if let Some(i) = index {
            data["run_index"] = json!(i);
        }
        RunRecord::from_run_data("s1", Some("alice".into()), data).unwrap()
    };
    // An explicit index before the counter is seeded: the seed must still see it.
    runs.upsert_run(run("r-explicit-3", Some(3))).await.unwrap();
    let a = runs.upsert_run(run("r-a", None)).await.unwrap();
    assert_eq!(
        a.run_index,
        Some(4),
        "seeded one past the highest stored index"
    );
    // An explicit index past the counter raises it.
    runs.upsert_run(run("r-explicit-9", Some(9))).await.unwrap();
    let b = runs.upsert_run(run("r-b", None)).await.unwrap();
    assert_eq!(b.run_index, Some(10), "raised past the explicit index");
    let c = runs.upsert_run(run("r-c", None)).await.unwrap();
    assert_eq!(c.run_index, Some(11));
}
