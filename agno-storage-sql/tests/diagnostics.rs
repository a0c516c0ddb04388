//! What a damaged table, a pending migration and an oversized id are told, on every
//! dialect: a table missing a column every agno release creates is damage (`SchemaMismatch`,
//! naming the columns and the repair, and not sending the caller to a migration that would
//! not help); a table agno 2.x made is a pending migration (`MigrationRequired`, naming
//! `agno-storage migrate`), which the migration then clears; a session id too long for the
//! server is `InvalidInput`.
//!
//! PostgreSQL and MySQL come from `AGNO_TEST_POSTGRES_URL` and `AGNO_TEST_MYSQL_URL`;
//! without them those cases are skipped, except under `CI=true`, where they fail.

mod common;

use std::future::Future;

use agno_storage_core::{
    now_epoch_seconds, AgnoDb, Error, ErrorKind, MigrationManager, OpenMode, Session, SessionType,
};
use agno_storage_sql::{PoolSettings, SqlDb, TableNames};

fn unique(name: &str) -> String {
    format!("agno_ct_{}_{}", now_epoch_seconds(), common::slug(name)).to_lowercase()
}

fn temp_db(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join("agno-storage-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("{}.db", common::slug(name)))
}

fn server_url(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) => Some(url),
        Err(_) => {
            assert!(!common::ci(), "CI=true needs {var}");
            eprintln!("skipped: {var} is not set");
            None
        }
    }
}

/// `agno_sessions` without `session_data` (a column agno has had since 2.0): every call on
/// sessions is refused as damage, naming the column and how to add it back; no advice to
/// migrate.
async fn damage_is_not_a_pending_migration<F, Fut>(table: &str, open: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = AgnoDb>,
{
    let db = open().await;
    let err = db
        .sessions()
        .unwrap()
        .upsert_session(Session::new("s", SessionType::Agent, "a"))
        .await
        .expect_err("a damaged table is refused");
    assert_damage(&err, table);
    let err = db
        .sessions()
        .unwrap()
        .get_session("s", Default::default())
        .await
        .expect_err("reads too");
    assert_damage(&err, table);
    // The migration does not repair it, and says so rather than "nothing to migrate".
    let failure = MigrationManager::new(db.migrations().unwrap())
        .up()
        .await
        .expect_err("the migration refuses a damaged table");
    assert_damage(&failure.error, table);
    assert!(failure.report.stamped.is_empty(), "{:?}", failure.report);
    let db = open().await;
    let err = db
        .sessions()
        .unwrap()
        .get_session("s", Default::default())
        .await
        .expect_err("still damaged after the migration");
    assert_damage(&err, table);
}

fn assert_damage(err: &Error, table: &str) {
    let message = err.message();
    assert_eq!(err.kind(), ErrorKind::SchemaMismatch, "{message}");
    assert!(message.contains(table), "{message}");
    assert!(message.contains("\"session_data\""), "{message}");
    assert!(
        message.contains("not an agno table of any version"),
        "{message}"
    );
    assert!(message.contains("ADD COLUMN"), "{message}");
    assert!(message.contains("not a pending migration"), "{message}");
    assert!(!message.contains("agno 3 added"), "{message}");
}

/// agno 2.9.0's tables: the eval runs lack `user_id`, which agno 3 added: a pending
/// migration, which `MigrationManager::up` (what `agno-storage migrate` runs) clears.
async fn a_v2_table_asks_for_the_migration(db: AgnoDb, table: &str) {
    let evals = db.evals().unwrap();
    let err = evals
        .get_eval_run("e1", None)
        .await
        .expect_err("a v2 table needs migrating");
    let message = err.message();
    assert_eq!(err.kind(), ErrorKind::MigrationRequired, "{message}");
    assert!(message.contains(table), "{message}");
    assert!(message.contains("\"user_id\""), "{message}");
    assert!(message.contains("agno 3 added"), "{message}");
    assert!(message.contains("agno-storage migrate"), "{message}");
    assert!(
        message.contains("MigrationManager::new(db).up()"),
        "{message}"
    );
    assert!(message.contains("POST /databases/all/migrate"), "{message}");
    MigrationManager::new(db.migrations().unwrap())
        .up()
        .await
        .expect("migrate");
    assert!(evals
        .get_eval_run("e1", None)
        .await
        .expect("usable after the migration")
        .is_none());
}

/// A 10,000-character session id (no server keeps it: PostgreSQL's B-tree limit is
/// ~2,700 bytes, MySQL's key column is `VARCHAR(128)`) is the caller's error, named.
async fn an_oversized_id_is_invalid_input(db: &AgnoDb) {
    // Not compressible, so PostgreSQL cannot squeeze it under its index limit.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let id: String = (0..10_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(state % 36) as usize])
        })
        .collect();
    let err = db
        .sessions()
        .unwrap()
        .upsert_session(Session::new(&id, SessionType::Agent, "a").with_user("u"))
        .await
        .expect_err("a 10,000-character id");
    let message = err.message().to_lowercase();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{message}");
    assert!(!err.is_temporary());
    assert!(
        ["too long", "exceeds", "longer than", "at most"]
            .iter()
            .any(|w| message.contains(w)),
        "the message names the problem: {message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_damage_and_pending_migrations_are_told_apart() {
    let path = temp_db("damage");
    SqlDb::open_sqlite(&path, TableNames::default())
        .await
        .expect("create");
    rusqlite::Connection::open(&path)
        .expect("bare connection")
        .execute_batch("ALTER TABLE agno_sessions DROP COLUMN session_data")
        .expect("drop a column");
    damage_is_not_a_pending_migration("agno_sessions", || async {
        SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .expect("open")
            .agno_db()
    })
    .await;
    let _ = std::fs::remove_file(&path);

    let path = temp_db("v2");
    {
        let conn = rusqlite::Connection::open(&path).expect("bare connection");
        for ddl in common::legacy_ddl("JSON", "VARCHAR", "") {
            conn.execute(&ddl, []).expect("legacy table");
        }
    }
    let db = SqlDb::open_sqlite(&path, TableNames::default())
        .await
        .expect("open")
        .agno_db();
    a_v2_table_asks_for_the_migration(db, "agno_eval_runs").await;
    let _ = std::fs::remove_file(&path);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_damage_and_pending_migrations_are_told_apart() {
    let Some(url) = server_url("AGNO_TEST_POSTGRES_URL") else {
        return;
    };
    let bare = sqlx::PgPool::connect(&url).await.expect("bare pool");
    let run = async |sql: String| {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&bare)
            .await
            .expect("bare SQL");
    };

    let schema = unique("damage");
    SqlDb::connect_postgres(&url, &schema, TableNames::default())
        .await
        .expect("create");
    run(format!(
        "ALTER TABLE \"{schema}\".agno_sessions DROP COLUMN session_data"
    ))
    .await;
    damage_is_not_a_pending_migration(&format!("{schema}.agno_sessions"), || async {
        SqlDb::connect_postgres(&url, &schema, TableNames::default())
            .await
            .expect("connect")
            .agno_db()
    })
    .await;
    run(format!("DROP SCHEMA \"{schema}\" CASCADE")).await;

    let schema = unique("v2");
    run(format!("CREATE SCHEMA \"{schema}\"")).await;
    for ddl in common::legacy_ddl("JSONB", "TEXT", &format!("\"{schema}\".")) {
        run(ddl).await;
    }
    let db = SqlDb::connect_postgres(&url, &schema, TableNames::default())
        .await
        .expect("connect")
        .agno_db();
    a_v2_table_asks_for_the_migration(db, &format!("{schema}.agno_eval_runs")).await;
    run(format!("DROP SCHEMA \"{schema}\" CASCADE")).await;

    let schema = unique("long_id");
    let db = SqlDb::connect_postgres(&url, &schema, TableNames::default())
        .await
        .expect("connect")
        .agno_db();
    an_oversized_id_is_invalid_input(&db).await;
    run(format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_damage_and_pending_migrations_are_told_apart() {
    let Some(url) = server_url("AGNO_TEST_MYSQL_URL") else {
        return;
    };
    let bare = sqlx::MySqlPool::connect(&url).await.expect("bare pool");
    let run = async |sql: String| {
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .execute(&bare)
            .await
            .expect("bare SQL");
    };

    let schema = unique("damage");
    SqlDb::connect_mysql(&url, &schema, TableNames::default())
        .await
        .expect("create");
    run(format!(
        "ALTER TABLE `{schema}`.agno_sessions DROP COLUMN session_data"
    ))
    .await;
    damage_is_not_a_pending_migration(&format!("{schema}.agno_sessions"), || async {
        SqlDb::connect_mysql(&url, &schema, TableNames::default())
            .await
            .expect("connect")
            .agno_db()
    })
    .await;
    run(format!("DROP DATABASE `{schema}`")).await;

    let schema = unique("v2");
    run(format!("CREATE DATABASE `{schema}`")).await;
    for ddl in common::legacy_mysql_ddl(&format!("`{schema}`.")) {
        run(ddl).await;
    }
    let db = SqlDb::connect_mysql(&url, &schema, TableNames::default())
        .await
        .expect("connect")
        .agno_db();
    a_v2_table_asks_for_the_migration(db, &format!("{schema}.agno_eval_runs")).await;
    run(format!("DROP DATABASE `{schema}`")).await;

    let schema = unique("long_id");
    let db = SqlDb::connect_mysql(&url, &schema, TableNames::default())
        .await
        .expect("connect")
        .agno_db();
    an_oversized_id_is_invalid_input(&db).await;
    run(format!("DROP DATABASE `{schema}`")).await;
}

/// A pool of no connections is refused by name; a pool sized for a worker opens and works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_pool_settings_are_checked_and_used() {
    let Some(url) = server_url("AGNO_TEST_POSTGRES_URL") else {
        return;
    };
    let schema = unique("pool");
    let none = PoolSettings {
        max_connections: 0,
        ..PoolSettings::default()
    };
    let err = SqlDb::connect_postgres_with_pool(
        &url,
        &schema,
        TableNames::default(),
        OpenMode::CreateMissing,
        none,
    )
    .await
    .expect_err("a pool of 0");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("max_connections"), "{err}");
    let sized = PoolSettings::for_worker(32);
    assert_eq!(sized.max_connections, 36);
    let db = SqlDb::connect_postgres_with_pool(
        &url,
        &schema,
        TableNames::default(),
        OpenMode::CreateMissing,
        sized,
    )
    .await
    .expect("open")
    .agno_db();
    let jobs = db.jobs().expect("jobs");
    assert_eq!(jobs.count_queued_jobs().await.expect("count"), 0);
}

/// A session written and read back through `db`, as `user`.
async fn round_trips_a_session(db: &AgnoDb, user: &str) {
    let id = unique("own_pool_session");
    let session = Session::new(id.clone(), SessionType::Agent, "agent-1").with_user(user);
    let sessions = db.sessions().expect("sessions");
    sessions.upsert_session(session).await.expect("upsert");
    let read = sessions
        .get_session(&id, agno_storage_core::SessionRead::for_user(user))
        .await
        .expect("read");
    assert_eq!(read.map(|s| s.session_id), Some(id));
}

/// An application's own PostgreSQL pool is used as it is: its size is the application's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_uses_the_applications_own_pool() {
    let Some(url) = server_url("AGNO_TEST_POSTGRES_URL") else {
        return;
    };
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .expect("the application's pool");
    let schema = unique("own_pool");
    let db = SqlDb::from_postgres_pool(
        pool.clone(),
        &schema,
        TableNames::default(),
        OpenMode::CreateMissing,
    )
    .await
    .expect("open on the application's pool")
    .agno_db();
    round_trips_a_session(&db, "alice").await;
    assert!(
        pool.size() <= 2,
        "the pool grew past the application's size"
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(&pool)
    .await
    .expect("drop");
}

/// An application's own MySQL pool is refused, naming the fix, until its connections run
/// `MYSQL_SESSION_SETUP`; then it is used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_uses_the_applications_own_pool_once_set_up() {
    let Some(url) = server_url("AGNO_TEST_MYSQL_URL") else {
        return;
    };
    let schema = unique("own_pool");
    let plain = sqlx::MySqlPool::connect(&url).await.expect("plain pool");
    let err = SqlDb::from_mysql_pool(
        plain.clone(),
        &schema,
        TableNames::default(),
        OpenMode::CreateMissing,
    )
    .await
    .expect_err("a pool without the session setup");
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.message().contains("MYSQL_SESSION_SETUP"), "{err}");
    let ready = sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::raw_sql(agno_storage_sql::MYSQL_SESSION_SETUP)
                    .execute(conn)
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .expect("the application's pool");
    let db = SqlDb::from_mysql_pool(
        ready,
        &schema,
        TableNames::default(),
        OpenMode::CreateMissing,
    )
    .await
    .expect("open on the set-up pool")
    .agno_db();
    round_trips_a_session(&db, "alice").await;
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP DATABASE `{schema}`")))
        .execute(&plain)
        .await
        .expect("drop");
}
