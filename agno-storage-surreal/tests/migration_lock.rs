//! The migration lock is a lease (on the embedded `mem://` engine): a dead holder's lock is
//! taken over once its lease passes, a live holder's never; a holder that lost its lock does
//! not write it back and reports the loss on release; a lease under one second is refused.

use std::time::{Duration, Instant};

use agno_storage_core::migration::MigrationTarget;
use agno_storage_core::ErrorKind;
use agno_storage_doc::Docs;
use agno_storage_surreal::surrealdb::types::{RecordId, Value};
use agno_storage_surreal::{SurrealDb, SurrealOptions, DEFAULT_MIGRATION_LOCK_LEASE};

/// The lease the lock tests use (the default is 30 s).
const LEASE: Duration = Duration::from_secs(2);

async fn leased() -> Docs<SurrealDb> {
    let options = SurrealOptions::new("lock", "lock").with_migration_lock_lease(LEASE);
    Docs(
        SurrealDb::connect("mem://", options)
            .await
            .expect("open mem://"),
    )
}

/// The lock record, if any.
async fn lock_record(db: &SurrealDb) -> Option<Value> {
    let mut response = db
        .client()
        .query("SELECT * FROM $r")
        .bind((
            "r",
            RecordId::new(db.names().meta.as_str(), "migration_lock"),
        ))
        .await
        .expect("read the lock");
    match response.take::<Value>(0).expect("take") {
        Value::Array(rows) => rows.into_iter().next(),
        Value::None | Value::Null => None,
        other => Some(other),
    }
}

#[tokio::test]
async fn the_default_lease_is_30_seconds() {
    let db = SurrealDb::connect("mem://", SurrealOptions::new("lock", "lock"))
        .await
        .expect("open mem://");
    assert_eq!(db.migration_lock_lease(), DEFAULT_MIGRATION_LOCK_LEASE);
    assert_eq!(DEFAULT_MIGRATION_LOCK_LEASE, Duration::from_secs(30));
    assert_eq!(leased().await.migration_lock_lease(), LEASE);
}

#[tokio::test]
async fn a_lease_below_one_second_is_refused() {
    let options =
        SurrealOptions::new("lock", "lock").with_migration_lock_lease(Duration::from_millis(500));
    let err = SurrealDb::connect("mem://", options)
        .await
        .expect_err("too short");
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
}

/// A holder killed while it holds the lock (its runtime shut down: no heartbeat, no release)
/// blocks the next migration only until its lease passes; then the lock is taken over.
///
/// The embedded engine lives in the test's runtime; the holder takes the lock from a second
/// runtime on another thread, whose shutdown kills its heartbeat task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_holders_lock_is_taken_over_once_its_lease_passes() {
    let store = leased().await;
    let taken_at = {
        let holder_db = store.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            // Before the lock is written: its lease runs from a moment after this.
            let taken_at = Instant::now();
            let lock = rt.block_on(async { holder_db.lock().await.expect("the first lock") });
            std::mem::forget(lock);
            drop(rt); // the "kill": the heartbeat task dies with its runtime
            taken_at
        })
        .join()
        .expect("the holder thread")
    };
    assert!(
        lock_record(&store).await.is_some(),
        "the dead holder's lock"
    );
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
    assert!(lock_record(&store).await.is_none(), "released");
}

/// A holder whose heartbeat runs keeps the lock through several leases; once it releases,
/// the waiter gets the lock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_holders_lock_is_not_taken_over() {
    let store = leased().await;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_lost_its_lock_reports_it() {
    let store = leased().await;
    let held = store.lock().await.expect("lock");
    store
        .client()
        .query("DELETE $r")
        .bind((
            "r",
            RecordId::new(store.names().meta.as_str(), "migration_lock"),
        ))
        .await
        .expect("delete the lock")
        .check()
        .expect("delete the lock");
    tokio::time::sleep(LEASE).await;
    assert!(lock_record(&store).await.is_none(), "resurrected");
    let err = held.release().await.expect_err("the loss is reported");
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
}

/// A lock record written by a version without heartbeats (only `holder` and `locked_at`) is
/// honoured until its `locked_at` is 15 minutes old, then taken over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_without_a_lease_keeps_the_15_minute_rule() {
    let store = leased().await;
    let r = RecordId::new(store.names().meta.as_str(), "migration_lock");
    let now = chrono::Utc::now().timestamp();
    store
        .client()
        .query("UPSERT $r CONTENT { holder: 'old', locked_at: $at }")
        .bind(("r", r.clone()))
        .bind(("at", now - 60))
        .await
        .expect("write an old-style lock")
        .check()
        .expect("write an old-style lock");
    // Recent: not taken over within two leases (lock() gives up after a minute; cut it short).
    let waiting = tokio::time::timeout(LEASE * 2, store.lock()).await;
    assert!(waiting.is_err(), "a recent old-style lock was taken over");
    store
        .client()
        .query("UPSERT $r CONTENT { holder: 'old', locked_at: $at }")
        .bind(("r", r))
        .bind(("at", now - 16 * 60))
        .await
        .expect("age the old-style lock")
        .check()
        .expect("age the old-style lock");
    let lock = tokio::time::timeout(Duration::from_secs(5), store.lock())
        .await
        .expect("a stale old-style lock is taken over at once")
        .expect("lock");
    lock.release().await.expect("release");
}
