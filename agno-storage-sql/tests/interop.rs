//! Interop with the real agno package from PyPI: agno 2.9.0 writes a legacy database, we
//! migrate it and agno 3.1.10 reads it back exactly as its own migration of a copy; agno
//! 3.1.10 reads what we write; we read what it writes. On SQLite, PostgreSQL and (with the
//! `mysql` feature and `AGNO_TEST_MYSQL_URL`) MySQL/MariaDB.
//!
//! Needs `AGNO_TEST_PYTHON_V2` and `AGNO_TEST_PYTHON_V3` (python executables of venvs with
//! agno 2.9.0 and 3.1.10; `./scripts/test.sh` builds them). Without them the tests are
//! skipped with a note, except under `CI=true`, where they fail.

mod common;

use std::path::{Path, PathBuf};

use agno_storage_core::{async_trait, AgnoDb};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::interop::{
    agno, agno_python, agno_surrogate_read_back, assert_surrogate_reads, runtime, FixtureReadBack,
    InteropTarget,
};

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("agno-storage-interop");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("{}.db", common::slug(name)))
}

/// A database reachable from both sides: our handle and the driver's target string.
enum Target {
    Sqlite(PathBuf),
    Postgres {
        url: String,
        schema: String,
    },
    #[cfg(feature = "mysql")]
    MySql {
        url: String,
        database: String,
    },
}

#[async_trait]
impl InteropTarget for Target {
    fn driver(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![match self {
            Target::Sqlite(p) => format!("sqlite:{}", p.display()),
            Target::Postgres { url, schema } => format!("postgres:{url}#{schema}"),
            #[cfg(feature = "mysql")]
            Target::MySql { url, database } => format!("mysql:{url}#{database}"),
        }]
    }

    async fn open(&self) -> AgnoDb {
        match self {
            Target::Sqlite(p) => SqlDb::open_sqlite(p, TableNames::default()).await,
            Target::Postgres { url, schema } => {
                SqlDb::connect_postgres(url, schema, TableNames::default()).await
            }
            #[cfg(feature = "mysql")]
            Target::MySql { url, database } => {
                SqlDb::connect_mysql(url, database, TableNames::default()).await
            }
        }
        .expect("open the database")
        .agno_db()
    }
}

fn postgres_target(name: &str) -> Option<Target> {
    match std::env::var("AGNO_TEST_POSTGRES_URL") {
        Ok(url) => Some(Target::Postgres {
            url,
            schema: format!(
                "agno_ct_{}_{}",
                agno_storage_core::now_epoch_seconds(),
                common::slug(name)
            ),
        }),
        Err(_) if common::ci() => panic!("CI=true but AGNO_TEST_POSTGRES_URL is not set"),
        Err(_) => None,
    }
}

#[cfg(feature = "mysql")]
fn mysql_target(name: &str) -> Option<Target> {
    match std::env::var("AGNO_TEST_MYSQL_URL") {
        Ok(url) => Some(Target::MySql {
            url,
            database: format!(
                "agno_ct_{}_{}",
                agno_storage_core::now_epoch_seconds(),
                common::slug(name)
            ),
        }),
        Err(_) if common::ci() => panic!("CI=true but AGNO_TEST_MYSQL_URL is not set"),
        Err(_) => None,
    }
}

/// The shared scenarios (`agno_storage_testkit::interop`), when both venvs are configured.
fn v2_migrates_like_agno(a: Target, b: Target) {
    if let (Some(v2), Some(v3)) = (
        agno_python("AGNO_TEST_PYTHON_V2"),
        agno_python("AGNO_TEST_PYTHON_V3"),
    ) {
        agno_storage_testkit::interop::v2_migrates_like_agno(&v2, &v3, &a, &b);
    }
}

fn agno_reads_what_we_write(target: Target) {
    if let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") {
        agno_storage_testkit::interop::agno_reads_what_we_write(
            &v3,
            &target,
            &FixtureReadBack::default(),
        );
    }
}

/// Our tables exist first (agno's driver writes into them).
fn we_read_what_agno_writes(target: Target) {
    if let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") {
        runtime().block_on(async { target.open().await });
        let m = agno_storage_testkit::interop::we_read_what_agno_writes(&v3, &target);
        assert_eq!(m.created_at, 1_710_000_100);
    }
}

#[test]
fn postgres_job_queue_is_shared_with_agno() {
    let (Some(target), Some(v3)) = (postgres_target("jobs"), agno_python("AGNO_TEST_PYTHON_V3"))
    else {
        return;
    };
    let rt = runtime();
    let db = rt.block_on(async { target.open().await });
    agno_storage_testkit::interop::job_queue_is_shared(&v3, &target, &rt, &db);
}

#[test]
fn sqlite_v2_database_migrates_like_agno() {
    v2_migrates_like_agno(
        Target::Sqlite(temp_db("v2a")),
        Target::Sqlite(temp_db("v2b")),
    );
}

#[test]
fn sqlite_agno_reads_what_we_write() {
    agno_reads_what_we_write(Target::Sqlite(temp_db("ours")));
}

#[test]
fn sqlite_we_read_what_agno_writes() {
    we_read_what_agno_writes(Target::Sqlite(temp_db("theirs")));
}

#[test]
fn postgres_v2_database_migrates_like_agno() {
    if let (Some(a), Some(b)) = (postgres_target("v2a"), postgres_target("v2b")) {
        v2_migrates_like_agno(a, b);
    }
}

#[test]
fn postgres_agno_reads_what_we_write() {
    if let Some(t) = postgres_target("ours") {
        agno_reads_what_we_write(t);
    }
}

#[test]
fn postgres_we_read_what_agno_writes() {
    if let Some(t) = postgres_target("theirs") {
        we_read_what_agno_writes(t);
    }
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_v2_database_migrates_like_agno() {
    if let (Some(a), Some(b)) = (mysql_target("v2a"), mysql_target("v2b")) {
        v2_migrates_like_agno(a, b);
    }
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_agno_reads_what_we_write() {
    if let Some(t) = mysql_target("ours") {
        agno_reads_what_we_write(t);
    }
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_we_read_what_agno_writes() {
    if let Some(t) = mysql_target("theirs") {
        we_read_what_agno_writes(t);
    }
}

/// Column definitions and indexes of one MySQL table, as `information_schema` lists them.
#[cfg(feature = "mysql")]
async fn mysql_layout(
    pool: &sqlx::MySqlPool,
    database: &str,
    table: &str,
) -> (Vec<String>, Vec<String>) {
    let columns: Vec<(String,)> = sqlx::query_as(
        "SELECT CAST(CONCAT_WS(' ', ordinal_position, column_name, column_type, is_nullable, \
         COALESCE(column_default, '-'), extra) AS CHAR) FROM information_schema.columns \
         WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
    )
    .bind(database)
    .bind(table)
    .fetch_all(pool)
    .await
    .expect("columns");
    let indexes: Vec<(String,)> = sqlx::query_as(
        "SELECT CAST(CONCAT_WS(' ', index_name, non_unique, GROUP_CONCAT(column_name ORDER BY seq_in_index)) AS CHAR) \
         FROM information_schema.statistics WHERE table_schema = ? AND table_name = ? \
         GROUP BY index_name, non_unique ORDER BY index_name",
    )
    .bind(database)
    .bind(table)
    .fetch_all(pool)
    .await
    .expect("indexes");
    (
        columns.into_iter().map(|(c,)| c).collect(),
        indexes.into_iter().map(|(i,)| i).collect(),
    )
}

/// The tables both create have the same columns, types, nullability and indexes (by
/// name and columns) as agno 3.1.10's MySQLDb creates.
#[cfg(feature = "mysql")]
#[test]
fn mysql_tables_match_agno() {
    let (Some(ours), Some(theirs)) = (mysql_target("layout_ours"), mysql_target("layout_agno"))
    else {
        return;
    };
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    agno(&v3, "create-v3", &theirs);
    let (Target::MySql { url, database: a }, Target::MySql { database: b, .. }) = (&ours, &theirs)
    else {
        unreachable!("MySQL targets");
    };
    runtime().block_on(async {
        ours.open().await;
        let pool = sqlx::MySqlPool::connect(url).await.expect("connect");
        for table in [
            "agno_sessions",
            "agno_runs",
            "agno_memories",
            "agno_metrics",
            "agno_eval_runs",
            "agno_knowledge",
            "agno_schema_versions",
        ] {
            let layout = mysql_layout(&pool, a, table).await;
            assert!(!layout.0.is_empty(), "{table} was not created");
            assert_eq!(
                layout,
                mysql_layout(&pool, b, table).await,
                "{table}: ours (left) differs from agno's (right)"
            );
        }
    });
}

/// The stored `run_data` text of `run_id`, read past our adapter.
fn stored_run_text(path: &Path, run_id: &str) -> String {
    let conn = rusqlite::Connection::open(path).expect("open the file");
    conn.query_row(
        "SELECT run_data FROM agno_runs WHERE run_id = ?1",
        [run_id],
        |row| row.get(0),
    )
    .expect("the run is stored")
}

/// agno writes a lone surrogate (`"caf\udce9.txt"`, a file name decoded with
/// `surrogateescape`) into one run of a session. Our session read hands every run over,
/// that one as its stored text byte for byte; `get_runs` lists the two others and names
/// the third as unreadable instead of failing; updating the session leaves the run's text
/// untouched, and agno still reads it back.
#[test]
fn sqlite_lone_surrogates_agno_writes_are_kept_byte_identical() {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let path = temp_db("surrogates");
    let target = Target::Sqlite(path.clone());
    agno(&v3, "write-surrogates", &target);
    let stored = stored_run_text(&path, "sur-r1");
    assert!(stored.contains(r"caf\udce9.txt"), "{stored}");
    runtime().block_on(async {
        let db = target.open().await;
        assert_eq!(assert_surrogate_reads(&db).await, stored);
        db.sessions()
            .unwrap()
            .rename_session("sur-s1", "Renamed in Rust", Some("dave"))
            .await
            .expect("rename")
            .expect("the session exists");
    });
    assert_eq!(
        stored_run_text(&path, "sur-r1"),
        stored,
        "byte-identical after an update"
    );
    assert_eq!(
        agno(&v3, "read-surrogates", &target).trim(),
        agno_surrogate_read_back("Renamed in Rust", &[])
    );
}
