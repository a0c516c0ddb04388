//! The stored records are agno 3.1.10's `SurrealDb` layout: table names, record ids, record
//! links, `datetime` timestamps and the schema-version records.

use agno_storage_core::{
    AgnoDb, Error, ErrorKind, KnowledgeContent, MetricsRecord, OpenMode, RunRecord, Session,
    SessionQuery, SessionRead, SessionType, UserMemory,
};
use agno_storage_surreal::surrealdb::engine::any::Any;
use agno_storage_surreal::surrealdb::types::{RecordId, RecordIdKey, Value};
use agno_storage_surreal::surrealdb::Surreal;
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

/// The first result of `sql` on `client`.
async fn query(client: &Surreal<Any>, sql: &str) -> Value {
    let mut response = client.query(sql).await.expect(sql);
    response.take::<Value>(0).expect(sql)
}

/// The names of the object `info`'s field `what` (`tables` of `INFO FOR DB`, …).
fn names_in(info: &Value, what: &str) -> Vec<String> {
    match field(info, what) {
        Value::Object(o) => o.keys().cloned().collect(),
        other => panic!("{what} is not an object: {other:?}"),
    }
}

/// The current database's definitions (`INFO FOR DB`) and every record of each of its tables:
/// two equal snapshots mean nothing was defined, written or removed in between.
async fn snapshot(client: &Surreal<Any>) -> (Value, Vec<(String, Value)>) {
    let info = query(client, "INFO FOR DB").await;
    let mut records = Vec::new();
    for table in names_in(&info, "tables") {
        let rows = query(client, &format!("SELECT * FROM `{table}` ORDER BY id")).await;
        records.push((table, rows));
    }
    (info, records)
}

/// Writes agent session `x-s1` of alice with run `x-r1`.
async fn write_session(db: &AgnoDb) {
    db.sessions()
        .unwrap()
        .upsert_session(Session::new("x-s1", SessionType::Agent, "a").with_user("alice"))
        .await
        .expect("session");
    let run = RunRecord::from_run_data(
        "x-s1",
        Some("alice".into()),
        json!({"run_id": "x-r1", "agent_id": "a", "status": "COMPLETED", "content": "hi"}),
    )
    .expect("run row");
    db.runs().unwrap().upsert_run(run).await.expect("run");
}

/// Reads session `x-s1` back (with its run) and lists alice's sessions.
async fn read_session(db: &AgnoDb) {
    let session = db
        .sessions()
        .unwrap()
        .get_session("x-s1", SessionRead::for_user("alice"))
        .await
        .expect("read")
        .expect("the session is read back");
    assert_eq!(session.agent_id.as_deref(), Some("a"));
    let runs = session.runs.unwrap_or_default();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run_id().as_deref(), Some("x-r1"));
    let listed = db
        .sessions()
        .unwrap()
        .get_sessions(SessionQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await
        .expect("list");
    assert_eq!(listed.total, 1);
}

/// The checks on an `OpenMode::Existing` open that found no agno database.
fn assert_no_database(err: &Error, names: &[&str], missing: &str) {
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(!err.is_temporary(), "{err}");
    let msg = err.to_string();
    assert!(
        names.iter().all(|n| msg.contains(n)) && msg.contains(missing),
        "names {names:?} and what is missing ({missing}): {msg}"
    );
    assert!(
        msg.contains("agno-storage migrate") || msg.contains("OpenMode::CreateMissing"),
        "names the fix: {msg}"
    );
}

/// `OpenMode::Existing` on an empty `mem://` database is `NotFound` naming the namespace and
/// database and defines nothing (`INFO FOR DB` lists no table), though `stamp_new_database`
/// is on; after a normal open and one session it opens, reads the session back, and writes
/// nothing.
#[tokio::test]
async fn existing_mode_creates_nothing_in_memory() {
    let options = || SurrealOptions::new("existing_ns", "existing_db");
    let err = SurrealDb::connect_with_mode("mem://", options(), OpenMode::Existing)
        .await
        .expect_err("a new mem:// database is no agno database");
    let names = ["`existing_ns`", "`existing_db`"];
    assert_no_database(&err, &names, "none of agno's tables holds a record");

    let client = agno_storage_surreal::surrealdb::engine::any::connect("mem://")
        .await
        .expect("mem://");
    client
        .use_ns("existing_ns")
        .use_db("existing_db")
        .await
        .expect("use");
    let err = SurrealDb::open_with_mode(client.clone(), options(), OpenMode::Existing)
        .await
        .expect_err("an empty database is no agno database");
    assert_no_database(&err, &names, "none of agno's tables holds a record");
    let info = query(&client, "INFO FOR DB").await;
    assert_eq!(names_in(&info, "tables"), Vec::<String>::new(), "{info:?}");

    let created = SurrealDb::open(client.clone(), options())
        .await
        .expect("open");
    write_session(&created.agno_db()).await;
    drop(created);
    let before = snapshot(&client).await;
    assert!(
        names_in(&before.0, "tables").contains(&"agno_schema_versions".to_owned()),
        "{before:?}"
    );

    let existing = SurrealDb::open_with_mode(client.clone(), options(), OpenMode::Existing)
        .await
        .expect("an existing database opens");
    read_session(&existing.agno_db()).await;
    assert_eq!(
        snapshot(&client).await,
        before,
        "the Existing-mode open and reads wrote nothing"
    );
}

/// Opens `url` in `mode`, retrying while a handle dropped a moment ago still holds the
/// SurrealKV directory.
#[cfg(feature = "surrealkv")]
async fn open_kv(
    url: &str,
    options: SurrealOptions,
    mode: OpenMode,
) -> agno_storage_core::Result<SurrealDb> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        match SurrealDb::connect_with_mode(url, options.clone(), mode).await {
            Err(e) if e.to_string().contains("locked") && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

/// The namespaces of the store (`INFO FOR ROOT`) and the databases of the current namespace
/// (`INFO FOR NS`).
#[cfg(feature = "surrealkv")]
async fn namespaces_and_databases(client: &Surreal<Any>) -> (Vec<String>, Vec<String>) {
    let root = query(client, "INFO FOR ROOT").await;
    let ns = query(client, "INFO FOR NS").await;
    (names_in(&root, "namespaces"), names_in(&ns, "databases"))
}

/// `OpenMode::Existing` on a `surrealkv://PATH` that does not exist is `NotFound` naming the
/// path, and the path still does not exist; on a store a normal open created and one
/// session was written to, an Existing open of another namespace and database is `NotFound`
/// and defines neither, and an Existing open of the written one reads the session back and
/// writes nothing.
#[cfg(feature = "surrealkv")]
#[tokio::test]
async fn existing_mode_creates_nothing_in_surrealkv() {
    let dir = std::env::temp_dir().join(format!(
        "agno-surreal-existing-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    ));
    let path = dir.display().to_string();
    let url = format!("surrealkv://{path}");
    let options = || SurrealOptions::new("existing_ns", "existing_db");
    let err = open_kv(&url, options(), OpenMode::Existing)
        .await
        .expect_err("a missing store is no agno database");
    assert_no_database(&err, &[path.as_str()], "does not exist");
    assert!(!dir.exists(), "{path} was created");

    let created = open_kv(&url, options(), OpenMode::CreateMissing)
        .await
        .expect("create the store");
    write_session(&created.agno_db()).await;
    let before = snapshot(created.client()).await;
    let before_spaces = namespaces_and_databases(created.client()).await;
    assert!(
        names_in(&before.0, "tables").contains(&"agno_schema_versions".to_owned()),
        "{before:?}"
    );
    drop(created);

    let err = open_kv(
        &url,
        SurrealOptions::new("other_ns", "other_db"),
        OpenMode::Existing,
    )
    .await
    .expect_err("an empty database of an existing store is no agno database");
    assert_no_database(
        &err,
        &["`other_ns`", "`other_db`"],
        "none of agno's tables holds a record",
    );
    drop(err);

    let existing = open_kv(&url, options(), OpenMode::Existing)
        .await
        .expect("an existing store opens");
    read_session(&existing.agno_db()).await;
    assert_eq!(
        snapshot(existing.client()).await,
        before,
        "the Existing-mode open and reads wrote nothing"
    );
    assert_eq!(
        namespaces_and_databases(existing.client()).await,
        before_spaces,
        "no namespace or database was defined"
    );
    drop(existing);
    let _ = std::fs::remove_dir_all(&dir);
}
