//! MongoDB-only behaviour the shared suite cannot see: agno's v3.0.0 index repairs, the
//! migration of a database agno 2.9.0 left behind, the migration lock's lease, a job
//! document that does not decode failed by the claim that meets it, and run indexes taken
//! by a writer that passes its own.
//!
//! Uses `AGNO_TEST_MONGODB_URL`; skipped without it, except under `CI=true`.

use std::time::{Duration, Instant};

use agno_storage_core::{
    now_epoch_seconds, ErrorKind, Job, MigrationManager, MigrationTarget, OpenMode, Pagination,
    RunRecord, Schedule, SchemaVersion, SchemaVersionStore, Session, SessionQuery, SessionRead,
    SessionType,
};
use agno_storage_mongo::mongodb::bson::{doc, Document};
use agno_storage_mongo::mongodb::{Client, Database};
use agno_storage_mongo::{MongoDb, TableNames};

fn url() -> Option<String> {
    match std::env::var("AGNO_TEST_MONGODB_URL") {
        Ok(u) => Some(u),
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI=true but AGNO_TEST_MONGODB_URL is not set; run ./scripts/test.sh")
        }
        Err(_) => {
            eprintln!("note: AGNO_TEST_MONGODB_URL is not set; skipping");
            None
        }
    }
}

async fn fresh(url: &str, label: &str) -> Database {
    let client = Client::with_uri_str(url).await.expect("client");
    client.database(&format!(
        "agno_ct_{}_{label}_{}",
        now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ))
}

/// A schedule document as agno 2.9.0 wrote it (no owner, no provenance).
fn v2_schedule(id: &str, name: &str) -> Document {
    doc! {
        "id": id, "name": name, "description": null, "method": "POST", "endpoint": "/agents/a/runs",
        "payload": null, "cron_expr": "* * * * *", "timezone": "UTC", "timeout_seconds": 3600,
        "max_retries": 0, "retry_delay_seconds": 60, "enabled": true, "next_run_at": null,
        "locked_by": null, "locked_at": null, "created_at": 1_700_000_000, "updated_at": null,
    }
}

async fn indexes(db: &Database, coll: &str) -> Vec<(String, bool)> {
    let listed = db
        .run_command(doc! {"listIndexes": coll})
        .await
        .expect("listIndexes");
    let batch = listed
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .cloned()
        .unwrap_or_default();
    batch
        .iter()
        .filter_map(|b| b.as_document())
        .map(|d| {
            (
                d.get_str("name").unwrap_or_default().to_owned(),
                d.get_bool("unique").unwrap_or(false),
            )
        })
        .collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// agno 2.9.0's global unique `name` index gives way to `uq_user_name`; two owners may then
/// share a name, one owner still may not. The legacy metrics index goes on open.
#[test]
fn v3_replaces_the_global_schedule_name_index() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "sched_repair").await;
        for (coll, key, name) in [
            ("agno_schedules", doc! {"name": 1}, "name_1"),
            ("agno_metrics", doc! {"date": 1, "aggregation_period": 1}, "date_1_aggregation_period_1"),
        ] {
            db.run_command(doc! {"createIndexes": coll, "indexes": [{"key": key, "name": name, "unique": true}]})
                .await
                .expect("legacy index");
        }
        db.collection::<Document>("agno_schedules").insert_one(v2_schedule("s1", "nightly")).await.unwrap();
        let store = MongoDb::open(db.clone(), TableNames::default()).await.unwrap();
        assert!(!indexes(&db, "agno_metrics").await.iter().any(|(n, _)| n == "date_1_aggregation_period_1"));
        assert_eq!(store.get_schema_version("agno_schedules").await.unwrap(), None, "a 2.9 database is unstamped");
        let report = MigrationManager::new(&store).up().await.expect("migration");
        assert_eq!(report.stamped.len(), 8);
        let after = indexes(&db, "agno_schedules").await;
        assert!(after.contains(&("name_1".into(), false)), "{after:?}");
        assert!(after.contains(&("uq_user_name".into(), true)), "{after:?}");
        let schedules = store.agno_db();
        let schedules = schedules.schedules().unwrap();
        let mut alice = Schedule::new("s2", "nightly", "/agents/a/runs", "* * * * *");
        alice.user_id = Some("alice".into());
        schedules.create_schedule(alice.clone()).await.expect("another owner may reuse the name");
        alice.id = "s3".into();
        let err = schedules.create_schedule(alice).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert_eq!(schedules.get_schedules(None, None, Pagination::default()).await.unwrap().total, 2);
    });
}

/// Duplicate names inside one owner bucket block `uq_user_name`: the migration aborts with
/// agno's message and leaves schedules unstamped; once resolved, it completes.
#[test]
fn duplicate_schedule_names_abort_unstamped() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "sched_dupes").await;
        let coll = db.collection::<Document>("agno_schedules");
        coll.insert_one(v2_schedule("d1", "report")).await.unwrap();
        coll.insert_one(v2_schedule("d2", "report")).await.unwrap();
        let store = MongoDb::open(db.clone(), TableNames::default())
            .await
            .unwrap();
        let failure = MigrationManager::new(&store)
            .up()
            .await
            .expect_err("duplicates abort");
        assert!(
            failure.to_string().contains(
                "duplicate schedule names exist within one owner bucket ((unowned): 'report' x2)"
            ),
            "{failure}"
        );
        assert_eq!(
            store.get_schema_version("agno_schedules").await.unwrap(),
            None
        );
        assert!(failure
            .report
            .stamped
            .iter()
            .any(|(t, _)| t == "agno_sessions"));
        coll.update_one(doc! {"id": "d2"}, doc! {"$set": {"name": "report (2)"}})
            .await
            .unwrap();
        MigrationManager::new(&store)
            .up()
            .await
            .expect("migration after the fix");
        assert_eq!(
            store.get_schema_version("agno_schedules").await.unwrap(),
            Some(SchemaVersion::LATEST)
        );
        assert!(indexes(&db, "agno_schedules")
            .await
            .contains(&("uq_user_name".into(), true)));
    });
}

/// The lease the lock tests use (the default is 30 s).
const LEASE: Duration = Duration::from_secs(2);

/// The lock document of `db`, if any.
async fn lock_doc(db: &Database) -> Option<Document> {
    db.collection::<Document>("agno_storage_meta")
        .find_one(doc! {"_id": "migration_lock"})
        .await
        .expect("read the lock")
}

async fn leased(db: Database) -> MongoDb {
    MongoDb::open(db, TableNames::default())
        .await
        .expect("open")
        .with_migration_lock_lease(LEASE)
        .expect("lease")
}

/// A holder killed while it holds the lock (its runtime shut down: no heartbeat, no release)
/// blocks the next migration only until its lease passes; then the lock is taken over.
#[test]
fn a_dead_holders_lock_is_taken_over_once_its_lease_passes() {
    let Some(url) = url() else { return };
    let runtime = rt();
    let (name, store) = runtime.block_on(async {
        let db = fresh(&url, "lock_dead").await;
        (db.name().to_owned(), leased(db).await)
    });
    let taken_at = {
        let (url, name) = (url.clone(), name.clone());
        std::thread::spawn(move || {
            let runtime = rt();
            let (lock, taken_at) = runtime.block_on(async {
                let client = Client::with_uri_str(&url).await.expect("client");
                let db = leased(client.database(&name)).await;
                // Before the lock is written: its lease runs from a moment after this.
                let taken_at = Instant::now();
                (db.lock().await.expect("the first lock"), taken_at)
            });
            std::mem::forget(lock);
            drop(runtime); // the "kill": the heartbeat task dies with its runtime
            taken_at
        })
        .join()
        .expect("the holder thread")
    };
    runtime.block_on(async {
        assert!(
            lock_doc(store.database()).await.is_some(),
            "the dead holder's lock"
        );
        let lock = store
            .lock()
            .await
            .expect("take over the dead holder's lock");
        let waited = taken_at.elapsed();
        assert!(
            waited >= LEASE - Duration::from_millis(200)
                && waited < LEASE + Duration::from_secs(10),
            "taken over {waited:?} after the dead holder locked (lease {LEASE:?})"
        );
        lock.release().await.expect("release");
        assert!(lock_doc(store.database()).await.is_none(), "released");
        store.database().drop().await.expect("drop");
    });
}

/// A holder whose heartbeat runs keeps the lock through several leases; once it releases,
/// the waiter gets the lock at once.
#[test]
fn a_live_holders_lock_is_not_taken_over() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let store = leased(fresh(&url, "lock_live").await).await;
        let held = store.lock().await.expect("lock");
        let waiting = tokio::time::timeout(LEASE * 3, store.lock()).await;
        assert!(waiting.is_err(), "a live holder's lock was taken over");
        held.release().await.expect("the holder kept its lock");
        let next = tokio::time::timeout(Duration::from_secs(5), store.lock())
            .await
            .expect("the released lock is free at once")
            .expect("lock");
        next.release().await.expect("release");
        store.database().drop().await.expect("drop");
    });
}

/// A holder whose lock disappears (here deleted behind its back) notices at its next
/// heartbeat, does not write the lock back, and reports the loss on release.
#[test]
fn a_holder_that_lost_its_lock_reports_it() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let store = leased(fresh(&url, "lock_lost").await).await;
        let held = store.lock().await.expect("lock");
        store
            .database()
            .collection::<Document>("agno_storage_meta")
            .delete_one(doc! {"_id": "migration_lock"})
            .await
            .expect("delete the lock");
        tokio::time::sleep(LEASE).await;
        assert!(lock_doc(store.database()).await.is_none(), "resurrected");
        let err = held.release().await.expect_err("the loss is reported");
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        store.database().drop().await.expect("drop");
    });
}

/// Every collection of `db` with its indexes and its documents (ordered by `_id`): two equal
/// snapshots mean nothing in the database was created, written or dropped in between.
async fn snapshot(db: &Database) -> Vec<(String, Vec<(String, bool)>, Vec<Document>)> {
    let mut names = db.list_collection_names().await.expect("listCollections");
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let mut docs: Vec<Document> = futures::TryStreamExt::try_collect(
            db.collection::<Document>(&name)
                .find(doc! {})
                .await
                .expect("find"),
        )
        .await
        .expect("documents");
        docs.sort_by_key(|d| format!("{:?}", d.get("_id")));
        let mut idx = indexes(db, &name).await;
        idx.sort();
        out.push((name, idx, docs));
    }
    out
}

/// `OpenMode::Existing` on a database without agno's collections is `NotFound` naming the
/// database and creates nothing (no collection, index or stamp); on a database a normal
/// open created and one session was written to, it opens, reads the session back, and
/// writes nothing.
#[test]
fn existing_mode_creates_nothing() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "existing").await;
        let name = db.name().to_owned();
        let err = MongoDb::connect_with_mode(&url, &name, TableNames::default(), OpenMode::Existing)
            .await
            .expect_err("an empty database is no agno database");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(!err.is_temporary(), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("`{name}`")) && msg.contains("none of agno's collections exists"),
            "names the database and what is missing: {msg}"
        );
        assert!(
            msg.contains("agno-storage migrate") || msg.contains("OpenMode::CreateMissing"),
            "names the fix: {msg}"
        );
        assert!(snapshot(&db).await.is_empty(), "no collection in {name}");
        let client = Client::with_uri_str(&url).await.expect("client");
        let databases = client.list_database_names().await.expect("listDatabases");
        assert!(!databases.contains(&name), "{name} was created: {databases:?}");

        let store = MongoDb::open(db.clone(), TableNames::default()).await.expect("open");
        let agno = store.agno_db();
        agno.sessions()
            .unwrap()
            .upsert_session(Session::new("x-s1", SessionType::Agent, "a").with_user("alice"))
            .await
            .unwrap();
        let run = RunRecord::from_run_data(
            "x-s1",
            Some("alice".into()),
            serde_json::json!({"run_id": "x-r1", "agent_id": "a", "status": "COMPLETED", "content": "hi"}),
        )
        .unwrap();
        agno.runs().unwrap().upsert_run(run).await.unwrap();
        drop((agno, store));
        let before = snapshot(&db).await;
        assert!(before.iter().any(|(c, _, _)| c == "agno_schema_versions"), "{before:?}");

        let existing =
            MongoDb::connect_with_mode(&url, &name, TableNames::default(), OpenMode::Existing)
                .await
                .expect("an existing database opens")
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
        assert_eq!(snapshot(&db).await, before, "the Existing-mode open and reads wrote nothing");
        db.drop().await.expect("drop");
    });
}

/// A job document with a field of the wrong type is failed, naming it, by the claim that
/// meets it; the claim returns the next job, and later claims are not blocked.
#[test]
fn an_undecodable_job_is_failed_by_the_claim() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "bad_job").await;
        let store = MongoDb::open(db.clone(), TableNames::default())
            .await
            .unwrap();
        let jobs = store.agno_db().job_store().unwrap();
        let mut bad = Job::new("a-bad", "agent", "agent-1", "s1", serde_json::json!({}));
        bad.created_at -= 10;
        let good = Job::new("b-good", "agent", "agent-1", "s2", serde_json::json!({}));
        for outcome in jobs.enqueue_jobs(vec![bad, good], 0).await.unwrap() {
            outcome.unwrap();
        }
        let coll = db.collection::<Document>("agno_jobs");
        coll.update_one(doc! {"id": "a-bad"}, doc! {"$set": {"component_id": 42}})
            .await
            .unwrap();
        let claimed = jobs.claim_job("w1", 60, None).await.unwrap().unwrap();
        assert_eq!(claimed.id, "b-good");
        let failed = coll.find_one(doc! {"id": "a-bad"}).await.unwrap().unwrap();
        assert_eq!(failed.get_str("status").unwrap(), "failed");
        let error = failed.get_str("error").unwrap();
        assert!(
            error.starts_with("job a-bad could not be decoded ("),
            "{error}"
        );
        assert!(jobs.claim_job("w2", 60, None).await.unwrap().is_none());
    });
}

/// A writer that passes its own `run_index` (agno does, and never moves our counter) can
/// take the index our counter would hand out next: the next append skips every stored
/// index instead of writing a second run at it, and no run is lost.
#[test]
fn an_index_a_foreign_writer_took_is_never_taken_again() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "run_counter").await;
        let store = MongoDb::open(db.clone(), TableNames::default())
            .await
            .unwrap()
            .agno_db();
        let sessions = store.sessions().unwrap();
        let runs = store.runs().unwrap();
        let session = Session::new("s1", SessionType::Agent, "a").with_user("u");
        sessions.upsert_session(session).await.unwrap();
        let run = |id: &str, index: Option<i64>| {
            let mut run = RunRecord::from_run_data(
                "s1",
                Some("u".into()),
                serde_json::json!({"run_id": id, "agent_id": "a"}),
            )
            .unwrap();
            run.run_index = index;
            run
        };
        let first = runs.upsert_run(run("ours-0", None)).await.unwrap();
        assert_eq!(first.run_index, Some(0));
        // agno's positions: it counts the runs it has read and writes that index.
        for (id, index) in [("theirs-1", 1), ("theirs-2", 2)] {
            runs.upsert_run(run(id, Some(index))).await.unwrap();
        }
        let third = runs.upsert_run(run("ours-3", None)).await.unwrap();
        assert_eq!(third.run_index, Some(3));
        let fourth = runs.upsert_run(run("ours-4", None)).await.unwrap();
        assert_eq!(fourth.run_index, Some(4));
        let stored: Vec<i64> = db
            .collection::<Document>("agno_runs")
            .distinct("run_index", doc! {"session_id": "s1"})
            .await
            .unwrap()
            .iter()
            .filter_map(|b| b.as_i64().or(b.as_i32().map(i64::from)))
            .collect();
        let count = db
            .collection::<Document>("agno_runs")
            .count_documents(doc! {"session_id": "s1"})
            .await
            .unwrap();
        assert_eq!((stored.len(), count), (5, 5), "indexes {stored:?}");
        db.drop().await.unwrap();
    });
}

/// Several handles (several processes) append to one session at once: each index is
/// claimed by exactly one run (`_id: {session_id, run_index}`), none is skipped; an index
/// agno stored in between is stepped over; a handle new to the session starts from the
/// counter; and after the session is deleted and created again, appends start at 0 even
/// from a handle whose hint is far ahead.
#[test]
fn handles_appending_at_once_claim_each_index_once() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "run_claims").await;
        let mut handles = Vec::new();
        for _ in 0..3 {
            handles.push(
                MongoDb::open(db.clone(), TableNames::default())
                    .await
                    .unwrap()
                    .agno_db(),
            );
        }
        let session = || Session::new("s1", SessionType::Agent, "a").with_user("u");
        handles[0]
            .sessions()
            .unwrap()
            .upsert_session(session())
            .await
            .unwrap();
        let run = |id: String| {
            RunRecord::from_run_data(
                "s1",
                Some("u".into()),
                serde_json::json!({"run_id": id, "agent_id": "a"}),
            )
            .unwrap()
        };
        let mut writers = Vec::new();
        for (w, handle) in handles.iter().take(2).enumerate() {
            let handle = handle.clone();
            writers.push(tokio::spawn(async move {
                let runs = handle.runs().unwrap();
                for i in 0..20 {
                    runs.upsert_run(run(format!("w{w}-{i}"))).await.unwrap();
                }
            }));
        }
        for w in writers {
            w.await.unwrap();
        }
        let coll = db.collection::<Document>("agno_runs");
        let indexes = |coll: agno_storage_mongo::mongodb::Collection<Document>| async move {
            let cursor = coll.find(doc! {"session_id": "s1"}).await.unwrap();
            let mut found: Vec<i64> = futures::TryStreamExt::try_collect::<Vec<_>>(cursor)
                .await
                .unwrap()
                .iter()
                .map(|d| d.get_i64("run_index").unwrap())
                .collect();
            found.sort_unstable();
            found
        };
        assert_eq!(indexes(coll.clone()).await, (0..40).collect::<Vec<_>>());
        let claimed = coll
            .find_one(doc! {"run_id": "w1-19"})
            .await
            .unwrap()
            .unwrap();
        let index = claimed.get_i64("run_index").unwrap();
        assert_eq!(
            claimed.get_document("_id").unwrap(),
            &doc! {"session_id": "s1", "run_index": index}
        );
        // agno's writer stores 40 with an ObjectId `_id`, never moving our counter.
        coll.insert_one(doc! {"run_id": "agno-40", "session_id": "s1", "run_index": 40_i64})
            .await
            .unwrap();
        let ours = handles[0].runs().unwrap();
        let next = ours.upsert_run(run("after-agno".into())).await.unwrap();
        assert_eq!(next.run_index, Some(41));
        // A claim the look-up cannot see (held by a document of another session): the
        // append that meets it takes the next index instead of failing or writing twice.
        coll.insert_one(doc! {
            "_id": {"session_id": "s1", "run_index": 42_i64},
            "run_id": "elsewhere", "session_id": "s2", "run_index": 0_i64,
        })
        .await
        .unwrap();
        let past_claim = ours.upsert_run(run("past-claim".into())).await.unwrap();
        assert_eq!(past_claim.run_index, Some(43));
        // The counter moved at 32: a new handle looks from there, not from 0.
        let counter = db
            .collection::<Document>(&TableNames::default().meta)
            .find_one(doc! {"_id": "run_index:s1"})
            .await
            .unwrap()
            .expect("a run counter");
        assert!(counter.get_i64("next").unwrap() >= 33, "{counter}");
        let fresh_handle = handles[2].runs().unwrap();
        let third = fresh_handle.upsert_run(run("third".into())).await.unwrap();
        assert_eq!(third.run_index, Some(44));
        // Deleted and created again: a stale hint (44) finds nothing and starts over.
        let sessions = handles[0].sessions().unwrap();
        sessions
            .delete_sessions(&["s1".into()], None)
            .await
            .unwrap();
        sessions.upsert_session(session()).await.unwrap();
        let again = ours.upsert_run(run("again".into())).await.unwrap();
        assert_eq!(again.run_index, Some(0));
        assert_eq!(indexes(coll).await, vec![0]);
        db.drop().await.unwrap();
    });
}
