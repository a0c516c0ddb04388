//! Session reads reuse the runs they read while those provably have not changed (with their
//! parse and their views, also across a change to other runs), and see every change: by
//! their own handle, by another handle (another connection), by a bare connection, and to
//! the schema. SQLite proves "unchanged" by the database's version,
//! PostgreSQL by a digest of its rows' `xmin`s.
//!
//! PostgreSQL comes from `AGNO_TEST_POSTGRES_URL`; without it that case is skipped, except
//! under `CI=true`, where it fails.

mod common;

use agno_storage_core::{
    now_epoch_seconds, AgnoDb, RunRecord, Session, SessionRead, SessionType, SharedRunView,
};
use agno_storage_sql::{SqlDb, TableNames};
use serde_json::{json, Value};
use std::sync::Arc;

/// Session `s`'s runs as `db` reads them, parsed and shared
/// (`Session::shared_run_values`: runs parsed by an earlier read are handed over parsed).
async fn shared_runs(db: &AgnoDb) -> Vec<Arc<Value>> {
    read(db).await.shared_run_values().expect("run JSON")
}

/// Session `s` as `db` reads it.
async fn read(db: &AgnoDb) -> Session {
    read_session(db, "s").await
}

/// Session `session` as `db` reads it.
async fn read_session(db: &AgnoDb, session: &str) -> Session {
    db.sessions()
        .unwrap()
        .get_session(session, SessionRead::default())
        .await
        .unwrap()
        .expect("session")
}

/// A run's id and content.
fn id_and_content(run: &Value) -> (String, String) {
    let text = |key: &str| run[key].as_str().unwrap_or_default().to_owned();
    (text("run_id"), text("content"))
}

/// Session `s`'s runs as `db` reads them, as typed views, shared
/// (`Session::shared_run_views`: runs viewed by an earlier read are handed over viewed).
async fn shared_views(db: &AgnoDb) -> Vec<SharedRunView> {
    read(db).await.shared_run_views().expect("run JSON")
}

/// The run ids and contents of session `s` as `db` reads it.
async fn session_runs(db: &AgnoDb) -> Vec<(String, String)> {
    shared_runs(db)
        .await
        .iter()
        .map(|v| id_and_content(v))
        .collect()
}

fn ids(runs: &[(String, String)]) -> Vec<String> {
    runs.iter().map(|r| r.0.clone()).collect()
}

fn run(i: usize, content: &str) -> RunRecord {
    RunRecord::from_run_data(
        "s",
        Some("u".into()),
        json!({"run_id": format!("r{i}"), "agent_id": "a", "content": content}),
    )
    .unwrap()
}

/// The scenario on two handles `a` and `b` of one database. `bare` runs SQL on a
/// connection of its own: step 1 sets run r2's content to "three"; step 2 creates a table
/// and deletes run r3.
async fn every_change_is_seen(a: &AgnoDb, b: &AgnoDb, small_cache: bool, bare: impl AsyncFn(u8)) {
    a.sessions()
        .unwrap()
        .upsert_session(Session::new("s", SessionType::Agent, "a").with_user("u"))
        .await
        .unwrap();
    for i in 0..3 {
        a.runs().unwrap().upsert_run(run(i, "one")).await.unwrap();
    }
    let first = session_runs(a).await;
    assert_eq!(ids(&first), ["r0", "r1", "r2"]);
    assert_eq!(
        session_runs(a).await,
        first,
        "an unchanged session reads the same"
    );
    let (parsed, again) = (shared_runs(a).await, shared_runs(a).await);
    assert!(
        parsed.iter().zip(&again).all(|(x, y)| Arc::ptr_eq(x, y)),
        "an unchanged session's runs are parsed once"
    );
    let (views, views_again) = (shared_views(a).await, shared_views(a).await);
    assert!(
        views
            .iter()
            .zip(&views_again)
            .all(|(x, y)| std::ptr::eq(x.get(), y.get())),
        "an unchanged session's runs are viewed once"
    );

    b.runs().unwrap().upsert_run(run(3, "one")).await.unwrap();
    let after = shared_runs(a).await;
    assert_eq!(after.len(), 4, "another handle's insert");
    assert!(
        parsed.iter().zip(&after).all(|(x, y)| Arc::ptr_eq(x, y)),
        "the runs another handle's insert left unchanged keep their parse"
    );
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r1", "r2", "r3"],
        "another handle's insert"
    );
    b.runs().unwrap().upsert_run(run(0, "two")).await.unwrap();
    assert_eq!(session_runs(a).await[0].1, "two", "another handle's update");

    a.runs()
        .unwrap()
        .delete_runs(&["r1".into()], None)
        .await
        .unwrap();
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r2", "r3"],
        "its own delete"
    );
    b.runs().unwrap().upsert_run(run(4, "one")).await.unwrap();
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r2", "r3", "r4"],
        "another handle's insert, read"
    );
    b.runs()
        .unwrap()
        .delete_runs(&["r4".into()], None)
        .await
        .unwrap();
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r2", "r3"],
        "another handle's delete, back to rows read two reads before"
    );

    its_own_writes_are_seen(a, b, small_cache).await;

    bare(1).await;
    assert_eq!(
        session_runs(a).await[1].1,
        "three",
        "a bare connection's update"
    );
    bare(2).await;
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r2"],
        "a schema change and a delete"
    );
    assert_eq!(
        session_runs(b).await,
        session_runs(a).await,
        "the other handle agrees"
    );
    concurrent_writes_are_seen(a, b).await;
}

/// Run id to content of session `session` as `db` reads it.
async fn contents(db: &AgnoDb, session: &str) -> std::collections::BTreeMap<String, String> {
    let runs = read_session(db, session).await.run_values();
    runs.expect("run JSON").iter().map(id_and_content).collect()
}

/// Four writers append 25 runs each to session `c` through `a`, each marking its previous
/// run updated ("!"), while a reader reads `c` through `a`: no read loses a run an earlier
/// read held or an update it saw, and the read after the writers agrees with `b`'s.
async fn concurrent_writes_are_seen(a: &AgnoDb, b: &AgnoDb) {
    a.sessions()
        .unwrap()
        .upsert_session(Session::new("c", SessionType::Agent, "a").with_user("u"))
        .await
        .unwrap();
    let write = |id: String, content: String| async move {
        let data = json!({"run_id": id, "agent_id": "a", "content": content});
        let run = RunRecord::from_run_data("c", Some("u".into()), data).unwrap();
        a.runs().unwrap().upsert_run(run).await.unwrap();
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let writers = async {
        futures::future::join_all((0..4).map(|w| async move {
            for k in 0..25 {
                write(format!("c{w}_{k:02}"), format!("c{w}_{k:02}")).await;
                if k > 0 {
                    write(format!("c{w}_{:02}", k - 1), format!("c{w}_{:02}!", k - 1)).await;
                }
            }
        }))
        .await;
        done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let reader = async {
        let mut last: std::collections::BTreeMap<String, String> = Default::default();
        let mut reads = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            let now = contents(a, "c").await;
            for (id, content) in &last {
                let seen = now.get(id);
                assert!(
                    seen == Some(content) || seen == Some(&format!("{content}!")),
                    "read {reads}: run {id} went from {content} to {seen:?}"
                );
            }
            for (id, content) in &now {
                assert_eq!(content.trim_end_matches('!'), id, "read {reads}");
            }
            last = now;
            reads += 1;
        }
        reads
    };
    let ((), reads) = tokio::join!(writers, reader);
    let ours = contents(a, "c").await;
    assert_eq!(
        ours.len(),
        100,
        "every run, after {reads} reads during the writes"
    );
    assert_eq!(
        ours.values().filter(|c| c.ends_with('!')).count(),
        96,
        "every update"
    );
    assert_eq!(ours, contents(b, "c").await, "the other handle agrees");
}

/// Writes by `a` itself to session `s` (holding r0, r2 and r3) and to another session: each
/// read of `a` agrees with `b`'s, and the runs a write left unchanged keep their parse (when
/// the other session's writes, which read it, leave `s` cached: not with a `small_cache`).
async fn its_own_writes_are_seen(a: &AgnoDb, b: &AgnoDb, small_cache: bool) {
    let (sessions, runs) = (a.sessions().unwrap(), a.runs().unwrap());
    let same = |x: &[Arc<Value>], y: &[Arc<Value>]| x.iter().zip(y).all(|(x, y)| Arc::ptr_eq(x, y));
    let before = shared_runs(a).await;
    assert_eq!(before.len(), 3);
    runs.upsert_run(run(5, "own")).await.unwrap();
    let after = shared_runs(a).await;
    assert_eq!(after.len(), 4, "its own insert");
    assert!(
        same(&before, &after),
        "the runs its own insert left unchanged keep their parse"
    );
    assert_eq!(
        session_runs(a).await,
        session_runs(b).await,
        "its own insert"
    );
    runs.upsert_run(run(5, "own, again")).await.unwrap();
    runs.upsert_run(run(2, "one")).await.unwrap();
    let updated = shared_runs(a).await;
    assert_eq!(updated[3]["content"], "own, again", "its own update");
    assert!(
        same(&after[..3], &updated[..3]),
        "a run written again with the same text keeps its parse"
    );
    assert_eq!(
        session_runs(a).await,
        session_runs(b).await,
        "its own update"
    );

    sessions
        .upsert_session(Session::new("t", SessionType::Agent, "a").with_user("u"))
        .await
        .unwrap();
    let other = |i: usize| {
        RunRecord::from_run_data(
            "t",
            Some("u".into()),
            json!({"run_id": format!("t{i}"), "agent_id": "a", "content": "t"}),
        )
        .unwrap()
    };
    runs.upsert_run(other(0)).await.unwrap();
    runs.upsert_run(other(1)).await.unwrap();
    runs.delete_runs(&["t0".into()], None).await.unwrap();
    let unrelated = shared_runs(a).await;
    assert_eq!(unrelated, updated, "its own writes to another session");
    assert!(
        small_cache || same(&updated, &unrelated),
        "its own writes to another session leave this one's runs parsed"
    );
    runs.delete_runs(&["r5".into()], None).await.unwrap();
    sessions.delete_sessions(&["t".into()], None).await.unwrap();
    assert_eq!(
        ids(&session_runs(a).await),
        ["r0", "r2", "r3"],
        "its own deletes"
    );
    assert_eq!(
        session_runs(a).await,
        session_runs(b).await,
        "its own deletes"
    );
}

/// `db` with its run cache set to `cache_bytes`, if given.
fn with_cache(db: SqlDb, cache_bytes: Option<usize>) -> AgnoDb {
    if let Some(bytes) = cache_bytes {
        db.set_run_cache_bytes(bytes);
    }
    db.agno_db()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_session_reads_see_every_change() {
    sqlite_scenario(None).await;
}

/// A cache of one byte: every session is larger than the whole cache, so each is kept
/// alone (its runs parsed once) until another is read, and every change is still seen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_session_larger_than_the_cache_is_kept_and_sees_every_change() {
    sqlite_scenario(Some(1)).await;
}

async fn sqlite_scenario(cache_bytes: Option<usize>) {
    let dir = std::env::temp_dir().join("agno-storage-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(format!("{}.db", common::slug("session_cache")));
    let open = async || {
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .expect("open");
        with_cache(db, cache_bytes)
    };
    let (a, b) = (open().await, open().await);
    let bare = rusqlite::Connection::open(&path).expect("bare connection");
    every_change_is_seen(&a, &b, cache_bytes.is_some(), async |step| {
        let sql = match step {
            1 => "UPDATE agno_runs SET run_data = json_set(run_data, '$.content', 'three') WHERE run_id = 'r2'",
            _ => "CREATE TABLE unrelated (x INTEGER); DELETE FROM agno_runs WHERE run_id = 'r3'",
        };
        bare.execute_batch(sql).expect("bare SQL");
    })
    .await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_session_reads_see_every_change() {
    postgres_scenario(None).await;
}

/// [`sqlite_a_session_larger_than_the_cache_is_kept_and_sees_every_change`] on PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_a_session_larger_than_the_cache_is_kept_and_sees_every_change() {
    postgres_scenario(Some(1)).await;
}

async fn postgres_scenario(cache_bytes: Option<usize>) {
    let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
        assert!(!common::ci(), "CI=true needs AGNO_TEST_POSTGRES_URL");
        eprintln!("skipped: AGNO_TEST_POSTGRES_URL is not set");
        return;
    };
    let schema = format!(
        "agno_ct_{}_{}",
        now_epoch_seconds(),
        common::slug("session_cache")
    )
    .to_lowercase();
    let open = async || {
        let db = SqlDb::connect_postgres(&url, &schema, TableNames::default())
            .await
            .expect("connect");
        with_cache(db, cache_bytes)
    };
    let (a, b) = (open().await, open().await);
    let bare = sqlx::PgPool::connect(&url).await.expect("bare pool");
    every_change_is_seen(&a, &b, cache_bytes.is_some(), async |step| {
        let statements = match step {
            1 => vec![format!(
                "UPDATE \"{schema}\".agno_runs SET run_data = jsonb_set(run_data, '{{content}}', '\"three\"') WHERE run_id = 'r2'"
            )],
            _ => vec![
                format!("CREATE TABLE \"{schema}\".unrelated (x INTEGER)"),
                format!("DELETE FROM \"{schema}\".agno_runs WHERE run_id = 'r3'"),
            ],
        };
        for sql in statements {
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .execute(&bare)
                .await
                .expect("bare SQL");
        }
    })
    .await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(&bare)
    .await
    .expect("drop the test schema");
}
