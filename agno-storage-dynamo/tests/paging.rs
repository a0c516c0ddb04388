//! Reads across many DynamoDB pages: with `DynamoOptions::page_size` at 2, every Scan and
//! Query returns `LastEvaluatedKey` after two items, so each listing below follows the key
//! through several pages and must return every item exactly once. Also the run counter:
//! seeded once from the session's stored runs, raised by the v3 migration's copies; and the
//! migration lock's lease (`DynamoOptions::migration_lock_lease`): a dead holder's lock is
//! taken over once its lease passes, a live holder's never.
//!
//! Needs `AGNO_TEST_DYNAMODB_URL` (DynamoDB Local from `scripts/test.sh`); without it the
//! tests pass with a note, except under `CI=true`, where they fail.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use agno_storage_core::legacy::copy_legacy_runs;
use agno_storage_core::{
    AgnoDb, ErrorKind, MemoryQuery, OpenMode, RunQuery, RunRecord, Session, SessionQuery,
    SessionRead, SessionType, UserMemory,
};
use agno_storage_dynamo::aws_sdk_dynamodb::types::AttributeValue;
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use agno_storage_dynamo::{DynamoDb, DynamoOptions, StaticCredentials, TableNames};
use serde_json::json;

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

fn url() -> Option<String> {
    match std::env::var("AGNO_TEST_DYNAMODB_URL") {
        Ok(u) => Some(u),
        Err(_) => {
            assert!(
                !ci(),
                "CI=true but AGNO_TEST_DYNAMODB_URL is not set; run ./scripts/test.sh"
            );
            eprintln!("note: AGNO_TEST_DYNAMODB_URL not set; skipping the DynamoDB paging tests");
            None
        }
    }
}

/// A fresh set of tables (`agno_ct_<epoch>_…`, so the conformance run drops stale ones).
async fn open(url: &str, page_size: Option<i32>) -> DynamoDb {
    let prefix = format!(
        "agno_ct_{}_{}_",
        agno_storage_core::now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    DynamoDb::connect(DynamoOptions {
        endpoint: Some(url.to_owned()),
        credentials: Some(StaticCredentials {
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
        }),
        tables: TableNames::with_prefix(&prefix),
        page_size,
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

fn run(session: &str, user: &str, id: &str) -> RunRecord {
    RunRecord::from_run_data(
        session,
        Some(user.into()),
        json!({"run_id": id, "agent_id": "a", "session_id": session, "status": "COMPLETED", "content": id}),
    )
    .expect("run row")
}

/// Every id once: the listing skipped nothing and repeated nothing.
fn once(ids: Vec<String>, expected: &[String], what: &str) {
    let unique: BTreeSet<&String> = ids.iter().collect();
    assert_eq!(
        unique.len(),
        ids.len(),
        "{what}: an item was repeated: {ids:?}"
    );
    let want: BTreeSet<&String> = expected.iter().collect();
    assert_eq!(unique, want, "{what}");
}

async fn write(db: &AgnoDb) -> (Vec<String>, Vec<String>) {
    let mut sessions = Vec::new();
    for i in 0..9 {
        let user = if i < 7 { "alice" } else { "bob" };
        let id = format!("s{i}");
        let mut s = Session::new(&id, SessionType::Agent, "a").with_user(user);
        s.created_at = 1_700_000_000 + i;
        db.sessions().unwrap().upsert_session(s).await.unwrap();
        sessions.push(id);
    }
    let mut runs = Vec::new();
    for i in 0..11 {
        let id = format!("s0-r{i}");
        let written = db
            .runs()
            .unwrap()
            .upsert_run(run("s0", "alice", &id))
            .await
            .unwrap();
        assert_eq!(written.run_index, Some(i));
        runs.push(id);
    }
    for i in 0..3 {
        let id = format!("s7-r{i}");
        db.runs()
            .unwrap()
            .upsert_run(run("s7", "bob", &id))
            .await
            .unwrap();
        runs.push(id);
    }
    (sessions, runs)
}

#[test]
fn listings_follow_last_evaluated_key() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = open(&url, Some(2)).await;
        assert_eq!(store.page_size(), Some(2));
        let db = store.agno_db();
        let (sessions, runs) = write(&db).await;

        let all = db
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery::default())
            .await
            .unwrap();
        assert_eq!(all.total, 9);
        once(
            all.items.into_iter().map(|s| s.session_id).collect(),
            &sessions,
            "get_sessions",
        );
        let alice = db
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery {
                user_id: Some("alice".into()),
                include_runs: true,
                ..Default::default()
            })
            .await
            .unwrap();
        once(
            alice.items.iter().map(|s| s.session_id.clone()).collect(),
            &sessions[..7],
            "get_sessions(alice)",
        );
        let s0 = alice.items.iter().find(|s| s.session_id == "s0").unwrap();
        assert_eq!(s0.runs.as_ref().map(Vec::len), Some(11));

        let session_runs = db
            .runs()
            .unwrap()
            .get_runs(RunQuery {
                session_id: Some("s0".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(
            session_runs
                .items
                .iter()
                .map(|r| r.run_index)
                .collect::<Vec<_>>(),
            (0..11).map(Some).collect::<Vec<_>>(),
            "get_runs(session) in run_index order"
        );
        let every = db
            .runs()
            .unwrap()
            .get_runs(RunQuery::default())
            .await
            .unwrap();
        once(
            every.items.into_iter().map(|r| r.run_id).collect(),
            &runs,
            "get_runs()",
        );
        let read = db
            .sessions()
            .unwrap()
            .get_session("s0", SessionRead::for_user("alice"))
            .await
            .unwrap()
            .unwrap();
        let merged: Vec<String> = read
            .runs
            .unwrap_or_default()
            .iter()
            .filter_map(agno_storage_core::RunJson::run_id)
            .collect();
        assert_eq!(merged, runs[..11].to_vec(), "get_session runs in order");

        let mut memories = Vec::new();
        for i in 0..7 {
            let id = format!("m{i}");
            let m = UserMemory::new(&id, Some("alice".into()), "remember");
            db.memories().unwrap().upsert_memory(m).await.unwrap();
            memories.push(id);
        }
        let listed = db
            .memories()
            .unwrap()
            .get_memories(MemoryQuery {
                user_id: Some("alice".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        once(
            listed.items.into_iter().map(|m| m.memory_id).collect(),
            &memories,
            "get_memories",
        );

        // The cascade finds every run of the session through the paged index query.
        let deleted = db
            .sessions()
            .unwrap()
            .delete_sessions(&["s7".into()], Some("bob"))
            .await
            .unwrap();
        assert_eq!(deleted, 1);
        let left = db
            .runs()
            .unwrap()
            .get_runs(RunQuery::default())
            .await
            .unwrap();
        once(
            left.items.into_iter().map(|r| r.run_id).collect(),
            &runs[..11],
            "runs after deleting s7",
        );
    });
}

#[test]
fn page_size_below_one_is_refused() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = open(&url, None).await;
        let err = store.with_page_size(Some(0)).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    });
}

/// Writes a 2.9.0-style session item (runs inline as an `S` JSON list) straight into the
/// sessions table.
async fn legacy_session(store: &DynamoDb, id: &str, runs: usize) {
    let blob: Vec<_> = (0..runs)
        .map(|i| json!({"run_id": format!("{id}-l{i}"), "agent_id": "a", "status": "COMPLETED", "created_at": 1_700_000_000 + i}))
        .collect();
    let item = HashMap::from([
        ("session_id".to_owned(), AttributeValue::S(id.into())),
        ("session_type".to_owned(), AttributeValue::S("agent".into())),
        ("agent_id".to_owned(), AttributeValue::S("a".into())),
        ("user_id".to_owned(), AttributeValue::S("carol".into())),
        (
            "created_at".to_owned(),
            AttributeValue::N("1700000000".into()),
        ),
        (
            "runs".to_owned(),
            AttributeValue::S(serde_json::Value::Array(blob).to_string()),
        ),
    ]);
    store
        .client()
        .put_item()
        .table_name(&store.names().sessions)
        .set_item(Some(item))
        .send()
        .await
        .expect("put a legacy session");
}

/// The migration's page reader resumes behind its cursor (one stretch of the table per
/// page, never a rescan), and the copied runs move the sessions' run counters.
#[test]
fn legacy_pages_and_run_counters() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = open(&url, Some(2)).await;
        let db = store.agno_db();
        // A current session, so the sessions table exists and holds a non-legacy item.
        let s = Session::new("plain", SessionType::Agent, "a").with_user("carol");
        db.sessions().unwrap().upsert_session(s).await.unwrap();
        let mut ids = Vec::new();
        for i in 0..8 {
            let id = format!("legacy{i}");
            legacy_session(&store, &id, 3).await;
            ids.push(id);
        }
        // legacy0 gets a run before the migration: its counter exists (at 1) when the copy
        // puts the blob's runs at 0, 1 and 2.
        let early = db
            .runs()
            .unwrap()
            .upsert_run(run("legacy0", "carol", "legacy0-new"))
            .await
            .unwrap();
        assert_eq!(early.run_index, Some(0));

        let legacy = db.legacy().unwrap();
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        let mut pages = 0;
        loop {
            let page = legacy.legacy_runs_page(after.as_deref(), 3).await.unwrap();
            pages += 1;
            let full = page.len() == 3;
            if let Some(last) = page.last() {
                after = Some(last.session_id.clone());
            }
            seen.extend(page.into_iter().map(|p| p.session_id));
            if !full {
                break;
            }
        }
        assert_eq!(pages, 3);
        once(seen, &ids, "legacy_runs_page");

        let (scanned, inserted) = copy_legacy_runs(legacy, 3).await.unwrap();
        assert_eq!((scanned, inserted), (8, 24));
        // legacy0's counter was raised past the copies; legacy1 has none and is seeded
        // from the copied runs.
        for (session, next) in [("legacy0", 3), ("legacy1", 3)] {
            let r = db
                .runs()
                .unwrap()
                .upsert_run(run(session, "carol", &format!("{session}-after")))
                .await
                .unwrap();
            assert_eq!(r.run_index, Some(next), "{session}");
        }
        // An explicit index raises an existing counter.
        let mut explicit = run("legacy1", "carol", "legacy1-explicit");
        explicit.run_index = Some(10);
        db.runs().unwrap().upsert_run(explicit).await.unwrap();
        let next = db
            .runs()
            .unwrap()
            .upsert_run(run("legacy1", "carol", "legacy1-next"))
            .await
            .unwrap();
        assert_eq!(next.run_index, Some(11));
    });
}

/// The lease the lock tests use (the default is 30 s).
const LEASE: Duration = Duration::from_secs(2);

/// The tables under `prefix`, with the test lease.
async fn leased(url: &str, prefix: &str) -> DynamoDb {
    DynamoDb::connect(DynamoOptions {
        endpoint: Some(url.to_owned()),
        credentials: Some(StaticCredentials {
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
        }),
        tables: TableNames::with_prefix(prefix),
        migration_lock_lease: LEASE,
        ..Default::default()
    })
    .await
    .expect("connect")
}

fn lock_prefix() -> String {
    format!(
        "agno_ct_{}_{}_",
        agno_storage_core::now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// The lock item's key attribute.
fn lock_key(store: &DynamoDb) -> AttributeValue {
    AttributeValue::S(format!("migration_lock#{}", store.names().versions))
}

/// Takes `store`'s migration lock.
async fn lock(
    store: &DynamoDb,
) -> agno_storage_core::Result<agno_storage_core::migration::MigrationLock> {
    store.agno_db().migrations()?.lock().await
}

/// Whether the lock item exists.
async fn lock_held(store: &DynamoDb) -> bool {
    store
        .client()
        .get_item()
        .table_name(&store.names().meta)
        .key("pk", lock_key(store))
        .consistent_read(true)
        .send()
        .await
        .expect("read the lock")
        .item()
        .is_some()
}

#[test]
fn a_lease_below_one_second_is_refused() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = open(&url, None).await;
        let err = store
            .with_migration_lock_lease(Duration::from_millis(500))
            .expect_err("too short");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    });
}

/// A holder killed while it holds the lock (its runtime shut down: no heartbeat, no release)
/// blocks the next migration only until its lease passes; then the lock is taken over.
#[test]
fn a_dead_holders_lock_is_taken_over_once_its_lease_passes() {
    let Some(url) = url() else { return };
    let prefix = lock_prefix();
    let rt = runtime();
    let store = rt.block_on(leased(&url, &prefix));
    let taken_at = {
        let (url, prefix) = (url.clone(), prefix.clone());
        std::thread::spawn(move || {
            let rt = runtime();
            let (lock, taken_at) = rt.block_on(async {
                let db = leased(&url, &prefix).await;
                // Before the lock is written: its lease runs from a moment after this.
                let taken_at = Instant::now();
                (lock(&db).await.expect("the first lock"), taken_at)
            });
            std::mem::forget(lock);
            drop(rt); // the "kill": the heartbeat task dies with its runtime
            taken_at
        })
        .join()
        .expect("the holder thread")
    };
    rt.block_on(async {
        assert!(lock_held(&store).await, "the dead holder's lock");
        let lock = lock(&store)
            .await
            .expect("take over the dead holder's lock");
        let waited = taken_at.elapsed();
        assert!(
            waited >= LEASE - Duration::from_millis(200)
                && waited < LEASE + Duration::from_secs(10),
            "taken over {waited:?} after the dead holder locked (lease {LEASE:?})"
        );
        lock.release().await.expect("release");
        assert!(!lock_held(&store).await, "released");
    });
}

/// A holder whose heartbeat runs keeps the lock through several leases; once it releases,
/// the waiter gets the lock at once.
#[test]
fn a_live_holders_lock_is_not_taken_over() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = leased(&url, &lock_prefix()).await;
        let held = lock(&store).await.expect("lock");
        let waiting = tokio::time::timeout(LEASE * 3, lock(&store)).await;
        assert!(waiting.is_err(), "a live holder's lock was taken over");
        held.release().await.expect("the holder kept its lock");
        let next = tokio::time::timeout(Duration::from_secs(5), lock(&store))
            .await
            .expect("the released lock is free at once")
            .expect("lock");
        next.release().await.expect("release");
    });
}

/// A holder whose lock disappears (here deleted behind its back) notices at its next
/// heartbeat, does not write the lock back, and reports the loss on release.
#[test]
fn a_holder_that_lost_its_lock_reports_it() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let store = leased(&url, &lock_prefix()).await;
        let held = lock(&store).await.expect("lock");
        store
            .client()
            .delete_item()
            .table_name(&store.names().meta)
            .key("pk", lock_key(&store))
            .send()
            .await
            .expect("delete the lock");
        tokio::time::sleep(LEASE).await;
        assert!(!lock_held(&store).await, "resurrected");
        let err = held.release().await.expect_err("the loss is reported");
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
    });
}

/// The options of the tables named `{prefix}agno_…` on DynamoDB Local.
fn options_with_prefix(url: &str, prefix: &str) -> DynamoOptions {
    DynamoOptions {
        endpoint: Some(url.to_owned()),
        credentials: Some(StaticCredentials {
            access_key_id: "test".into(),
            secret_access_key: "test".into(),
        }),
        tables: TableNames::with_prefix(prefix),
        ..Default::default()
    }
}

/// A client of its own for DynamoDB Local (static test credentials).
fn bare_client(url: &str) -> Client {
    use agno_storage_dynamo::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
    let conf = agno_storage_dynamo::aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    Client::from_conf(conf)
}

/// The tables whose names start with `prefix` (every page of ListTables), sorted.
async fn tables_with_prefix(client: &Client, prefix: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut start: Option<String> = None;
    loop {
        let out = client
            .list_tables()
            .set_exclusive_start_table_name(start.take())
            .send()
            .await
            .expect("ListTables");
        names.extend(
            out.table_names()
                .iter()
                .filter(|t| t.starts_with(prefix))
                .cloned(),
        );
        match out.last_evaluated_table_name() {
            Some(next) => start = Some(next.to_owned()),
            None => break,
        }
    }
    names.sort();
    names
}

/// One item, its attributes in name order.
type Item = std::collections::BTreeMap<String, AttributeValue>;

/// Every table under `prefix` with its items (a full Scan each, in a stable order): two equal
/// snapshots mean nothing was created, written or deleted in between.
async fn snapshot(client: &Client, prefix: &str) -> Vec<(String, Vec<Item>)> {
    let mut out = Vec::new();
    for table in tables_with_prefix(client, prefix).await {
        let mut items: Vec<Item> = Vec::new();
        let mut start: Option<HashMap<String, AttributeValue>> = None;
        loop {
            let page = client
                .scan()
                .table_name(&table)
                .consistent_read(true)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .expect("Scan");
            items.extend(
                page.items()
                    .iter()
                    .map(|i| i.clone().into_iter().collect::<Item>()),
            );
            match page.last_evaluated_key() {
                Some(k) if !k.is_empty() => start = Some(k.clone()),
                _ => break,
            }
        }
        items.sort_by_key(|i| format!("{i:?}"));
        out.push((table, items));
    }
    out
}

/// `OpenMode::Existing` on a table prefix without agno's tables is `NotFound` naming what is
/// missing and creates no table (ListTables); on tables a normal open created and one session
/// was written to, it opens, reads the session back, and writes nothing (no table, no item).
#[test]
fn existing_mode_creates_nothing() {
    let Some(url) = url() else { return };
    runtime().block_on(async {
        let prefix = format!(
            "agno_ct_{}_{}_existing_",
            agno_storage_core::now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let err =
            DynamoDb::connect_with_mode(options_with_prefix(&url, &prefix), OpenMode::Existing)
                .await
                .expect_err("a prefix without tables is no agno database");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(!err.is_temporary(), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("none of agno's tables exists"),
            "names what is missing: {msg}"
        );
        assert!(
            msg.contains(&prefix) || msg.contains(&format!("{prefix}agno_sessions")),
            "names the table prefix: {msg}"
        );
        assert!(
            msg.contains("agno-storage migrate") || msg.contains("OpenMode::CreateMissing"),
            "names the fix: {msg}"
        );
        let client = bare_client(&url);
        assert_eq!(
            tables_with_prefix(&client, &prefix).await,
            Vec::<String>::new(),
            "no table under {prefix}"
        );

        let created = DynamoDb::connect(options_with_prefix(&url, &prefix))
            .await
            .expect("connect");

        let agno = created.agno_db();
        agno.sessions()
            .unwrap()
            .upsert_session(Session::new("x-s1", SessionType::Agent, "a").with_user("alice"))
            .await
            .unwrap();
        agno.runs()
            .unwrap()
            .upsert_run(run("x-s1", "alice", "x-r1"))
            .await
            .unwrap();
        drop((agno, created));
        let before = snapshot(&client, &prefix).await;
        assert!(
            before
                .iter()
                .any(|(t, _)| t == &format!("{prefix}agno_sessions")),
            "{before:?}"
        );

        let existing =
            DynamoDb::connect_with_mode(options_with_prefix(&url, &prefix), OpenMode::Existing)
                .await
                .expect("existing tables open")
                .agno_db();
        let session = existing
            .sessions()
            .unwrap()
            .get_session("x-s1", SessionRead::for_user("alice"))
            .await
            .unwrap()
            .expect("the session is read back");
        assert_eq!(session.agent_id.as_deref(), Some("a"));
        let runs = session.runs.unwrap_or_default();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].run_id().as_deref(), Some("x-r1"));
        let listed = existing
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery {
                user_id: Some("alice".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.total, 1);
        assert_eq!(
            snapshot(&client, &prefix).await,
            before,
            "the Existing-mode open and reads wrote nothing"
        );
        for table in tables_with_prefix(&client, &prefix).await {
            client
                .delete_table()
                .table_name(&table)
                .send()
                .await
                .expect("DeleteTable");
        }
    });
}
