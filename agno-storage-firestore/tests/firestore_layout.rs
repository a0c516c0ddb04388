//! agno's layout and the fixes over it, checked on the documents themselves: deterministic
//! document ids, one document per session under concurrent first writes, agno's
//! auto-id documents updated in place, the schema-version and metrics document ids, and a
//! deleted run staying deleted; and the migration lock's lease (a dead holder's lock is taken
//! over once its lease passes, a live holder's never). Needs the emulator
//! (`FIRESTORE_EMULATOR_HOST`); skipped without it, except under `CI=true`.

use std::time::{Duration, Instant};

use agno_storage_core::metrics::MetricsRecord;
use agno_storage_core::{
    ErrorKind, MetricsStore, MigrationTarget, OpenMode, RunRecord, RunStore, Session, SessionQuery,
    SessionRead, SessionStore, SessionType,
};
use agno_storage_doc::Docs;
use agno_storage_firestore::firestore::gcloud_sdk::google::firestore::v1::{value, Document};
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use serde_json::json;
use sha2::{Digest, Sha256};

async fn open(stamp: bool) -> Option<Docs<FirestoreDb>> {
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "CI=true but FIRESTORE_EMULATOR_HOST is not set; run ./scripts/test.sh"
        );
        eprintln!("note: FIRESTORE_EMULATOR_HOST is not set; skipping");
        return None;
    }
    let project = format!(
        "agno-layout-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let options = FirestoreOptions {
        stamp_new_database: stamp,
        ..FirestoreOptions::default()
    };
    Some(Docs(
        FirestoreDb::connect(&project, options)
            .await
            .expect("connect"),
    ))
}

async fn docs(db: &FirestoreDb, collection: &str) -> Vec<Document> {
    db.client()
        .fluent()
        .select()
        .from(collection)
        .query()
        .await
        .expect("list documents")
}

fn id_of(d: &Document) -> &str {
    d.name.rsplit('/').next().unwrap_or_default()
}

fn text<'a>(d: &'a Document, field: &str) -> Option<&'a str> {
    match d.fields.get(field).and_then(|v| v.value_type.as_ref()) {
        Some(value::ValueType::StringValue(s)) => Some(s),
        _ => None,
    }
}

#[tokio::test]
async fn documents_use_agno_collections_and_deterministic_ids() {
    let Some(db) = open(true).await else { return };
    let s = Session::new("s-1", SessionType::Agent, "a1").with_user("u1");
    db.upsert_session(s).await.expect("session");
    let run = RunRecord::from_run_data(
        "s-1",
        Some("u1".into()),
        json!({"run_id": "r-1", "agent_id": "a1", "status": "COMPLETED"}),
    )
    .expect("run");
    db.upsert_run(run).await.expect("run");

    let sessions = docs(&db, "agno_sessions").await;
    assert_eq!(sessions.len(), 1);
    assert_eq!(id_of(&sessions[0]), "s-1");
    assert_eq!(text(&sessions[0], "session_type"), Some("agent"));
    let runs = docs(&db, "agno_runs").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(id_of(&runs[0]), "r-1");
    assert!(matches!(
        runs[0]
            .fields
            .get("run_data")
            .and_then(|v| v.value_type.as_ref()),
        Some(value::ValueType::MapValue(_))
    ));
    let stamps = docs(&db, "agno_schema_versions").await;
    let sessions_stamp = stamps
        .iter()
        .find(|d| id_of(d) == "agno_sessions")
        .expect("sessions stamp");
    assert_eq!(text(sessions_stamp, "table_name"), Some("agno_sessions"));
    assert_eq!(text(sessions_stamp, "version"), Some("3.0.0"));
}

#[tokio::test]
async fn concurrent_first_writes_make_one_session() {
    let Some(db) = open(true).await else { return };
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            db.upsert_session(Session::new("same", SessionType::Team, "t1"))
                .await
        }));
    }
    for t in tasks {
        t.await.expect("join").expect("upsert");
    }
    assert_eq!(docs(&db, "agno_sessions").await.len(), 1);
}

#[tokio::test]
async fn agno_auto_id_session_is_updated_in_place_and_deleted_runs_stay_deleted() {
    let Some(db) = open(false).await else { return };
    let s = Session::new("legacy", SessionType::Agent, "a1");
    db.insert_legacy_session(
        s.clone(),
        json!([{"run_id": "old-1", "agent_id": "a1"}, {"run_id": "old-2", "agent_id": "a1"}]),
    )
    .await
    .expect("legacy session");
    let before = docs(&db, "agno_sessions").await;
    assert_eq!(before.len(), 1);
    assert_ne!(id_of(&before[0]), "legacy");

    db.upsert_session(s).await.expect("update");
    let after = docs(&db, "agno_sessions").await;
    assert_eq!(
        after.len(),
        1,
        "no duplicate next to agno's auto-id document"
    );
    assert_eq!(after[0].name, before[0].name);
    assert!(after[0].fields.contains_key("runs"), "legacy runs kept");

    db.delete_runs(&["old-1".to_owned()], None)
        .await
        .expect("delete");
    let read = db
        .get_session("legacy", SessionRead::default())
        .await
        .expect("read")
        .expect("session");
    let ids: Vec<_> = read
        .runs
        .unwrap_or_default()
        .iter()
        .filter_map(agno_storage_core::RunJson::run_id)
        .collect();
    assert_eq!(ids, vec!["old-2".to_owned()]);
}

#[tokio::test]
async fn metrics_documents_use_agno_ids() {
    let Some(db) = open(true).await else { return };
    let record = |user: Option<&str>| -> MetricsRecord {
        serde_json::from_value(json!({
            "id": format!("m-{}", user.unwrap_or("shared")),
            "user_id": user,
            "date": "2026-01-02",
            "aggregation_period": "daily",
            "agent_runs_count": 1, "team_runs_count": 0, "workflow_runs_count": 0,
            "agent_sessions_count": 1, "team_sessions_count": 0, "workflow_sessions_count": 0,
            "users_count": i64::from(user.is_some()),
            "token_metrics": {}, "model_metrics": [],
            "completed": true, "created_at": 1, "updated_at": 1
        }))
        .expect("record")
    };
    db.upsert_metrics(vec![record(None), record(Some("u1"))])
        .await
        .expect("metrics");
    let mut ids: Vec<String> = docs(&db, "agno_metrics")
        .await
        .iter()
        .map(|d| id_of(d).to_owned())
        .collect();
    ids.sort();
    let user = hex::encode(Sha256::digest(b"u1"));
    let mut want = vec![
        "2026-01-02_shared_daily".to_owned(),
        format!("2026-01-02_{user}_daily"),
    ];
    want.sort();
    assert_eq!(ids, want);
    let shared = docs(&db, "agno_metrics").await;
    let shared = shared
        .iter()
        .find(|d| id_of(d) == "2026-01-02_shared_daily")
        .expect("shared");
    assert_eq!(text(shared, "user_id"), Some(""));
}

fn run_row(session: &str, run_id: &str, index: Option<i64>) -> RunRecord {
    let mut run = RunRecord::from_run_data(
        session,
        None,
        json!({"run_id": run_id, "agent_id": "a1", "status": "COMPLETED"}),
    )
    .expect("run");
    run.run_index = index;
    run
}

/// The run counter is seeded from the stored runs only when it is missing, and the indexes
/// this crate writes without it (explicit ones, the migration's copies) move it.
#[tokio::test]
async fn run_counter_is_seeded_once_and_raised_by_copies() {
    let Some(db) = open(false).await else { return };
    // Runs written with explicit indexes and no counter: the first append seeds past them.
    db.upsert_session(Session::new("explicit", SessionType::Agent, "a1"))
        .await
        .expect("session");
    for i in 0..5 {
        db.upsert_run(run_row("explicit", &format!("e{i}"), Some(i)))
            .await
            .expect("explicit run");
    }
    let seeded = db
        .upsert_run(run_row("explicit", "e-next", None))
        .await
        .expect("append");
    assert_eq!(seeded.run_index, Some(5));
    // Counter present: an explicit index past it raises it.
    db.upsert_run(run_row("explicit", "e-far", Some(10)))
        .await
        .expect("explicit run");
    let next = db
        .upsert_run(run_row("explicit", "e-after-far", None))
        .await
        .expect("append");
    assert_eq!(next.run_index, Some(11));

    // A 2.x session that gets a run before the migration (its counter starts at 1), then
    // the copies of its three legacy runs (indexes 0-2): the next append goes past them.
    let s = Session::new("legacy", SessionType::Agent, "a1");
    db.insert_legacy_session(
        s,
        json!([{"run_id": "l0", "agent_id": "a1"}, {"run_id": "l1", "agent_id": "a1"}, {"run_id": "l2", "agent_id": "a1"}]),
    )
    .await
    .expect("legacy session");
    let early = db
        .upsert_run(run_row("legacy", "early", None))
        .await
        .expect("append before the migration");
    assert_eq!(early.run_index, Some(0));
    let (_, inserted) = agno_storage_core::legacy::copy_legacy_runs(&db, 50)
        .await
        .expect("copy legacy runs");
    assert_eq!(inserted, 3);
    let after = db
        .upsert_run(run_row("legacy", "after", None))
        .await
        .expect("append after the migration");
    assert_eq!(after.run_index, Some(3));
}

/// The lease the lock tests use (the default is 30 s).
const LEASE: Duration = Duration::from_secs(2);

/// A fresh project for a lock test, or `None` without the emulator.
fn lock_project() -> Option<String> {
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(
            !ci,
            "CI=true but FIRESTORE_EMULATOR_HOST is not set; run ./scripts/test.sh"
        );
        eprintln!("note: FIRESTORE_EMULATOR_HOST is not set; skipping");
        return None;
    }
    Some(format!(
        "agno-lock-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ))
}

async fn leased(project: &str) -> Docs<FirestoreDb> {
    let options = FirestoreOptions {
        migration_lock_lease: LEASE,
        ..FirestoreOptions::default()
    };
    Docs(
        FirestoreDb::connect(project, options)
            .await
            .expect("connect"),
    )
}

/// The lock document, if any.
async fn lock_doc(db: &FirestoreDb) -> Option<serde_json::Value> {
    db.client()
        .fluent()
        .select()
        .by_id_in(&db.names().meta)
        .obj()
        .one("migration_lock")
        .await
        .expect("read the lock")
}

#[tokio::test]
async fn a_lease_below_one_second_is_refused() {
    let Some(project) = lock_project() else {
        return;
    };
    let options = FirestoreOptions {
        migration_lock_lease: Duration::from_millis(500),
        ..FirestoreOptions::default()
    };
    let err = FirestoreDb::connect(&project, options)
        .await
        .expect_err("too short");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

/// A holder killed while it holds the lock (its runtime shut down: no heartbeat, no release)
/// blocks the next migration only until its lease passes; then the lock is taken over.
#[tokio::test]
async fn a_dead_holders_lock_is_taken_over_once_its_lease_passes() {
    let Some(project) = lock_project() else {
        return;
    };
    let taken_at = {
        let project = project.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let (lock, taken_at) = rt.block_on(async {
                let db = leased(&project).await;
                // Before the lock is written: its lease runs from a moment after this.
                let taken_at = Instant::now();
                (db.lock().await.expect("the first lock"), taken_at)
            });
            std::mem::forget(lock);
            drop(rt); // the "kill": the heartbeat task dies with its runtime
            taken_at
        })
        .join()
        .expect("the holder thread")
    };
    let store = leased(&project).await;
    assert!(lock_doc(&store).await.is_some(), "the dead holder's lock");
    let lock = store
        .lock()
        .await
        .expect("take over the dead holder's lock");
    let waited = taken_at.elapsed();
    assert!(
        waited >= LEASE - Duration::from_millis(500) && waited < LEASE + Duration::from_secs(10),
        "taken over {waited:?} after the dead holder locked (lease {LEASE:?})"
    );
    lock.release().await.expect("release");
    assert!(lock_doc(&store).await.is_none(), "released");
}

/// A holder whose heartbeat runs keeps the lock through several leases; once it releases,
/// the waiter gets the lock at once.
#[tokio::test]
async fn a_live_holders_lock_is_not_taken_over() {
    let Some(project) = lock_project() else {
        return;
    };
    let store = leased(&project).await;
    let held = store.lock().await.expect("lock");
    let waiting = tokio::time::timeout(LEASE * 3, store.lock()).await;
    assert!(waiting.is_err(), "a live holder's lock was taken over");
    held.release().await.expect("the holder kept its lock");
    let next = tokio::time::timeout(Duration::from_secs(5), store.lock())
        .await
        .expect("the released lock is free at once")
        .expect("lock");
    next.release().await.expect("release");
}

/// A holder whose lock disappears (here deleted behind its back) notices at its next
/// heartbeat, does not write the lock back, and reports the loss on release.
#[tokio::test]
async fn a_holder_that_lost_its_lock_reports_it() {
    let Some(project) = lock_project() else {
        return;
    };
    let store = leased(&project).await;
    let held = store.lock().await.expect("lock");
    store
        .client()
        .fluent()
        .delete()
        .from(store.names().meta.as_str())
        .document_id("migration_lock")
        .execute()
        .await
        .expect("delete the lock");
    tokio::time::sleep(LEASE).await;
    assert!(lock_doc(&store).await.is_none(), "resurrected");
    let err = held.release().await.expect_err("the loss is reported");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
}

/// Every collection at the root of `client`'s database with its documents (by name, with
/// their create and update times): two equal snapshots mean nothing was created, written or
/// deleted in between.
async fn snapshot(
    client: &agno_storage_firestore::firestore::FirestoreDb,
) -> Vec<(String, Vec<Document>)> {
    use futures::StreamExt;
    let mut ids: Vec<String> = client
        .fluent()
        .list()
        .collections()
        .stream_all_with_errors()
        .await
        .expect("list collection ids")
        .map(|r| r.expect("collection id"))
        .collect()
        .await;
    ids.sort();
    let mut out = Vec::new();
    for id in ids {
        let mut documents: Vec<Document> = client
            .fluent()
            .list()
            .from(&id)
            .stream_all_with_errors()
            .await
            .expect("list documents")
            .map(|r| r.expect("document"))
            .collect()
            .await;
        documents.sort_by(|a, b| a.name.cmp(&b.name));
        out.push((id, documents));
    }
    out
}

/// `OpenMode::Existing` on a project without agno's documents is `NotFound` naming the
/// database and writes nothing (no stamp, though `stamp_new_database` asks for one, no
/// collection); on a project a normal open stamped and one session was written to, it opens,
/// reads the session back, and writes nothing.
#[tokio::test]
async fn existing_mode_creates_nothing() {
    let Some(project) = lock_project().map(|p| p.replace("agno-lock-", "agno-existing-")) else {
        return;
    };
    let err =
        FirestoreDb::connect_with_mode(&project, FirestoreOptions::default(), OpenMode::Existing)
            .await
            .expect_err("an empty project is no agno database");
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert!(!err.is_temporary(), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("projects/{project}/"))
            && msg.contains("none of agno's collections holds a document"),
        "names the database and what is missing: {msg}"
    );
    assert!(
        msg.contains("agno-storage migrate") || msg.contains("OpenMode::CreateMissing"),
        "names the fix: {msg}"
    );
    let client = agno_storage_firestore::firestore::FirestoreDb::with_options(
        agno_storage_firestore::firestore::FirestoreDbOptions::new(project.clone()),
    )
    .await
    .expect("client");
    assert!(snapshot(&client).await.is_empty(), "nothing in {project}");

    let db = FirestoreDb::connect(&project, FirestoreOptions::default())
        .await
        .expect("connect")
        .agno_db();
    db.sessions()
        .unwrap()
        .upsert_session(Session::new("x-s1", SessionType::Agent, "a").with_user("alice"))
        .await
        .expect("session");
    db.runs()
        .unwrap()
        .upsert_run(
            RunRecord::from_run_data(
                "x-s1",
                Some("alice".into()),
                json!({"run_id": "x-r1", "agent_id": "a", "status": "COMPLETED", "content": "hi"}),
            )
            .expect("run row"),
        )
        .await
        .expect("run");
    drop(db);
    let before = snapshot(&client).await;
    assert!(
        before.iter().any(|(c, _)| c == "agno_schema_versions"),
        "{before:?}"
    );

    let db =
        FirestoreDb::connect_with_mode(&project, FirestoreOptions::default(), OpenMode::Existing)
            .await
            .expect("an existing database opens")
            .agno_db();
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
    assert_eq!(
        snapshot(&client).await,
        before,
        "the Existing-mode open and reads wrote nothing"
    );
}
