//! SQLite-specific guarantees: concurrent writers on one file (tasks, handles, processes)
//! never see `database is locked`; duplicate schedule names abort the migration unstamped,
//! naming them; configured identifiers are validated; a job row that does not decode is failed
//! by the claim or sweep that meets it, not a block on the queue.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use agno_storage_core::{
    ErrorKind, Job, JobQuery, JobStatus, MigrationManager, OpenMode, RunQuery, RunRecord, Session,
    SessionType,
};
use agno_storage_sql::{SqlDb, TableNames};
use serde_json::json;

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join("agno-storage-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir.join(format!("{}.db", common::slug(name)))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Each writer upserts its session, then `runs` runs and one job.
async fn write(path: &Path, writer: &str, runs: usize) {
    let db = SqlDb::open_sqlite(path, TableNames::default())
        .await
        .expect("open")
        .agno_db();
    let session = format!("s-{writer}");
    db.sessions()
        .unwrap()
        .upsert_session(Session::new(&session, SessionType::Agent, "a").with_user(writer))
        .await
        .expect("session");
    for i in 0..runs {
        let run = RunRecord::from_run_data(
            &session,
            Some(writer.into()),
            json!({"run_id": format!("{writer}-{i}"), "agent_id": "a"}),
        )
        .unwrap();
        db.runs()
            .unwrap()
            .upsert_run(run)
            .await
            .expect("no write may fail with database is locked");
    }
    let job =
        agno_storage_core::Job::new(format!("job-{writer}"), "agent", "a", &session, json!({}));
    db.jobs().unwrap().enqueue_job(job, 0).await.expect("job");
}

#[test]
fn many_handles_and_tasks_write_one_file() {
    let path = temp_db("handles");
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for w in 0..8 {
            let path = path.clone();
            tasks.push(tokio::spawn(async move {
                write(&path, &format!("w{w}"), 25).await
            }));
        }
        for t in tasks {
            t.await.expect("writer");
        }
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .unwrap()
            .agno_db();
        assert_eq!(
            db.runs()
                .unwrap()
                .get_runs(RunQuery::default())
                .await
                .unwrap()
                .total,
            200
        );
        assert_eq!(
            db.jobs()
                .unwrap()
                .list_jobs(JobQuery::default())
                .await
                .unwrap()
                .total,
            8
        );
    });
}

/// `writers` tasks append `runs` runs each through one shared handle (so their writes are
/// group-committed); returns how many runs the file then holds.
async fn shared_handle_writers(path: &Path, writers: usize, runs: usize, local: bool) -> u64 {
    let db = SqlDb::open_sqlite(path, TableNames::default())
        .await
        .expect("open")
        .agno_db();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let db = db.clone();
        let work = async move {
            let session = format!("s{w}");
            let sessions = db.sessions().expect("sessions");
            sessions
                .upsert_session(Session::new(&session, SessionType::Agent, "a").with_user("u"))
                .await
                .expect("session");
            for i in 0..runs {
                let run = RunRecord::from_run_data(
                    &session,
                    Some("u".into()),
                    json!({"run_id": format!("{w}-{i}"), "agent_id": "a"}),
                )
                .expect("run");
                db.runs()
                    .expect("runs")
                    .upsert_run(run)
                    .await
                    .expect("upsert");
            }
        };
        tasks.push(if local {
            tokio::task::spawn_local(work)
        } else {
            tokio::spawn(work)
        });
    }
    for t in tasks {
        t.await.expect("writer");
    }
    db.runs()
        .unwrap()
        .get_runs(RunQuery::default())
        .await
        .expect("count")
        .total
}

/// The connection is led from wherever the caller runs: tokio workers (`block_in_place`),
/// a current-thread runtime, a `LocalSet` on the thread of a multi-thread runtime's
/// `block_on` (where `block_in_place` would panic), and workers with custom thread names.
/// Every write lands and nothing panics.
#[test]
fn one_handle_serves_every_kind_of_runtime() {
    let multi = runtime();
    assert_eq!(
        multi.block_on(shared_handle_writers(&temp_db("rt-multi"), 8, 20, false)),
        160
    );
    let local = tokio::task::LocalSet::new();
    assert_eq!(
        multi.block_on(local.run_until(shared_handle_writers(&temp_db("rt-local"), 8, 20, true))),
        160
    );
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    assert_eq!(
        current.block_on(shared_handle_writers(&temp_db("rt-current"), 8, 20, false)),
        160
    );
    let named = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("app-worker")
        .enable_all()
        .build()
        .expect("runtime");
    assert_eq!(
        named.block_on(shared_handle_writers(&temp_db("rt-named"), 8, 20, false)),
        160
    );
}

/// Group commit answers a write only after its commit: under 8 concurrent writers (served
/// by a committer that waits for them) and then a lone writer (led by the caller again),
/// every run is visible through another connection the moment its call returns.
#[test]
fn every_answered_write_is_committed_under_concurrency_and_after_it() {
    let path = temp_db("answered-committed");
    runtime().block_on(async {
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .expect("open")
            .agno_db();
        let reader = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .expect("second handle")
            .agno_db();
        let phase = |writers: usize, runs: usize, tag: &'static str| {
            let tasks: Vec<_> = (0..writers)
                .map(|w| {
                    let (db, reader) = (db.clone(), reader.clone());
                    tokio::spawn(async move {
                        let session = format!("{tag}{w}");
                        db.sessions()
                            .unwrap()
                            .upsert_session(
                                Session::new(&session, SessionType::Agent, "a").with_user("u"),
                            )
                            .await
                            .expect("session");
                        for i in 0..runs {
                            let run_id = format!("{tag}{w}-{i}");
                            let run = RunRecord::from_run_data(
                                &session,
                                Some("u".into()),
                                json!({"run_id": run_id, "agent_id": "a"}),
                            )
                            .expect("run");
                            let stored = db.runs().unwrap().upsert_run(run).await.expect("upsert");
                            assert_eq!(stored.run_index, Some(i as i64));
                            let seen = reader.runs().unwrap().get_run(&run_id, None).await;
                            assert!(
                                matches!(seen, Ok(Some(_))),
                                "{run_id} was answered before another connection could read it"
                            );
                        }
                    })
                })
                .collect();
            async move {
                for t in tasks {
                    t.await.expect("writer");
                }
            }
        };
        phase(8, 30, "c").await;
        phase(1, 30, "lone").await;
        phase(8, 10, "again").await;
        let total = reader
            .runs()
            .unwrap()
            .get_runs(RunQuery::default())
            .await
            .expect("count")
            .total;
        assert_eq!(total, 8 * 30 + 30 + 8 * 10);
    });
}

/// Child side of the cross-process test: writes when `AGNO_CHILD_DB` is set.
#[test]
fn child_writer() {
    let (Ok(path), Ok(name)) = (
        std::env::var("AGNO_CHILD_DB"),
        std::env::var("AGNO_CHILD_NAME"),
    ) else {
        return;
    };
    runtime().block_on(write(Path::new(&path), &name, 40));
}

#[test]
fn processes_write_one_file() {
    let path = temp_db("processes");
    runtime().block_on(async {
        SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .unwrap()
    });
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..4)
        .map(|p| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--test-threads", "1"])
                .env("AGNO_CHILD_DB", &path)
                .env("AGNO_CHILD_NAME", format!("p{p}"))
                .spawn()
                .expect("spawn a writer process")
        })
        .collect();
    for mut child in children {
        assert!(
            child.wait().expect("wait").success(),
            "a writer process failed"
        );
    }
    runtime().block_on(async {
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .unwrap()
            .agno_db();
        assert_eq!(
            db.runs()
                .unwrap()
                .get_runs(RunQuery::default())
                .await
                .unwrap()
                .total,
            160
        );
    });
}

#[test]
fn duplicate_schedule_names_abort_the_migration_naming_them() {
    let path = temp_db("dups");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        for ddl in common::legacy_ddl("JSON", "VARCHAR", "") {
            conn.execute(&ddl, []).unwrap();
        }
        for id in ["a", "b"] {
            conn.execute(
                "INSERT INTO agno_schedules (id, name, method, endpoint, cron_expr, timezone, timeout_seconds, max_retries, \
                 retry_delay_seconds, enabled, created_at) VALUES (?1, 'nightly', 'POST', '/agents/x/runs', '0 0 * * *', 'UTC', 60, 0, 60, 1, 0)",
                [id],
            )
            .unwrap();
        }
    }
    runtime().block_on(async {
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .unwrap()
            .agno_db();
        let target = db.migrations().unwrap();
        let failure = MigrationManager::new(target)
            .up()
            .await
            .expect_err("duplicates must abort");
        let message = failure.error.message().to_owned();
        assert!(message.contains("(unowned): 'nightly' x2"), "{message}");
        assert_eq!(
            target
                .versions()
                .get_schema_version("agno_schedules")
                .await
                .unwrap(),
            None
        );
        let err = db
            .schedules()
            .unwrap()
            .delete_schedule("b", None)
            .await
            .expect_err("a pre-v3 table needs migrating first");
        assert_eq!(err.kind(), ErrorKind::MigrationRequired);
        assert!(
            err.message().contains("agno-storage migrate"),
            "{}",
            err.message()
        );
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute("DELETE FROM agno_schedules WHERE id = 'b'", [])
            .unwrap();
        MigrationManager::new(target)
            .up()
            .await
            .expect("after fixing the duplicates");
        assert!(target
            .versions()
            .get_schema_version("agno_schedules")
            .await
            .unwrap()
            .is_some());
    });
}

#[test]
fn configured_identifiers_are_validated() {
    runtime().block_on(async {
        let names = TableNames {
            sessions: "sessions\"; DROP TABLE x; --".into(),
            ..TableNames::default()
        };
        let err = SqlDb::open_sqlite(temp_db("names"), names)
            .await
            .expect_err("a hostile table name");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(
            err.message().contains("invalid table name"),
            "{}",
            err.message()
        );
    });
}

/// The entries of `path`'s directory whose names start with its file name: the database
/// and any `-wal`, `-shm`, `-journal` or lock file beside it.
fn siblings(path: &Path) -> Vec<String> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut found: Vec<String> = std::fs::read_dir(path.parent().expect("a parent"))
        .expect("list the temp dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&name))
        .collect();
    found.sort();
    found
}

/// The table names of a SQLite file, read with rusqlite directly.
fn table_names(path: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).expect("open with rusqlite");
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .expect("prepare");
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .expect("query")
        .collect::<Result<Vec<_>, _>>()
        .expect("names");
    names
}

async fn open_existing(path: &Path) -> agno_storage_core::Result<SqlDb> {
    SqlDb::open_sqlite_with_mode(path, TableNames::default(), OpenMode::Existing).await
}

#[test]
fn existing_mode_creates_nothing() {
    runtime().block_on(async {
        // Missing: NotFound, and no file, directory, -wal or -shm appears.
        let missing = temp_db("existing_missing");
        let _ = std::fs::remove_file(&missing);
        let err = open_existing(&missing).await.expect_err("missing file");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("does not exist"), "{err}");
        assert!(siblings(&missing).is_empty(), "{:?}", siblings(&missing));
        let nested = missing.with_extension("d").join("agno.db");
        assert!(open_existing(&nested).await.is_err());
        assert!(!missing.with_extension("d").exists());

        // Zero bytes: NotFound, and still zero bytes.
        let empty = temp_db("existing_empty");
        std::fs::write(&empty, b"").expect("zero-byte file");
        let err = open_existing(&empty).await.expect_err("empty file");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert_eq!(std::fs::metadata(&empty).map(|m| m.len()).ok(), Some(0));
        assert_eq!(siblings(&empty).len(), 1, "{:?}", siblings(&empty));

        // Not a database: SchemaMismatch, bytes untouched.
        let corrupt = temp_db("existing_corrupt");
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        std::fs::write(&corrupt, &noise).expect("noise");
        let err = open_existing(&corrupt).await.expect_err("corrupt file");
        assert_eq!(err.kind(), ErrorKind::SchemaMismatch, "{err}");
        assert_eq!(std::fs::read(&corrupt).ok(), Some(noise));
        assert_eq!(siblings(&corrupt).len(), 1, "{:?}", siblings(&corrupt));

        // A SQLite database of someone else's: NotFound, and no agno table added.
        let foreign = temp_db("existing_foreign");
        let _ = std::fs::remove_file(&foreign);
        {
            let conn = rusqlite::Connection::open(&foreign).expect("create");
            conn.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
                .expect("foreign table");
        }
        let err = open_existing(&foreign).await.expect_err("no agno tables");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("none of agno's tables"), "{err}");
        assert_eq!(table_names(&foreign), vec!["notes".to_owned()]);

        // A partial agno database: opens, reads what exists, names what is absent, and
        // creates nothing (no table, index or stamp).
        let partial = temp_db("existing_partial");
        let _ = std::fs::remove_file(&partial);
        SqlDb::open_sqlite(&partial, TableNames::default())
            .await
            .expect("create")
            .agno_db()
            .sessions()
            .unwrap()
            .upsert_session(Session::new("s1", SessionType::Agent, "a"))
            .await
            .expect("session");
        {
            let conn = rusqlite::Connection::open(&partial).expect("open");
            conn.execute_batch("DROP TABLE agno_memories; DELETE FROM agno_schema_versions")
                .expect("drop");
        }
        let tables = table_names(&partial);
        let schema_before: Vec<String> = {
            let conn = rusqlite::Connection::open(&partial).expect("open");
            let mut stmt = conn
                .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
                .expect("prepare");
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .expect("query")
                .collect::<Result<Vec<_>, _>>()
                .expect("sql");
            rows
        };
        let db = open_existing(&partial)
            .await
            .expect("partial opens")
            .agno_db();
        let sessions = db
            .sessions()
            .unwrap()
            .get_sessions(Default::default())
            .await
            .expect("sessions read");
        assert_eq!(sessions.total, 1);
        let err = db
            .memories()
            .unwrap()
            .get_memories(Default::default())
            .await
            .expect_err("absent table");
        assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
        assert!(err.to_string().contains("agno_memories"), "{err}");
        let stamp = db
            .migrations()
            .unwrap()
            .versions()
            .get_schema_version("agno_sessions")
            .await
            .expect("stamp read");
        assert_eq!(stamp, None, "nothing stamped");
        drop(db);
        assert_eq!(table_names(&partial), tables);
        let schema_after: Vec<String> = {
            let conn = rusqlite::Connection::open(&partial).expect("open");
            let mut stmt = conn
                .prepare("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")
                .expect("prepare");
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .expect("query")
                .collect::<Result<Vec<_>, _>>()
                .expect("sql");
            rows
        };
        assert_eq!(schema_after, schema_before, "no index or table created");
        for path in [&empty, &corrupt, &foreign, &partial] {
            let _ = std::fs::remove_file(path);
        }
    });
}

/// A stored job whose payload is not JSON (written by hand or by a buggy writer) is failed,
/// naming it, by the claim that meets it, which returns the other jobs; later claims are not
/// blocked. A sweep does the same with a bad job whose holder died.
#[test]
fn an_undecodable_job_is_failed_not_a_block_on_the_queue() {
    let path = temp_db("undecodable-job");
    runtime().block_on(async {
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await
            .unwrap()
            .agno_db();
        let jobs = db.job_store().unwrap();
        let mut batch = Vec::new();
        for (i, id) in ["a-first", "b-bad", "c-last", "d-bad-swept"]
            .iter()
            .enumerate()
        {
            let mut job = Job::new(*id, "agent", "agent-1", format!("s{i}"), json!({"n": i}));
            job.created_at += i as i64;
            batch.push(job);
        }
        for outcome in jobs.enqueue_jobs(batch, 0).await.unwrap() {
            outcome.unwrap();
        }
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE agno_jobs SET payload = '{not json' WHERE id IN ('b-bad', 'd-bad-swept')",
            [],
        )
        .unwrap();
        // The swept one: held by a dead worker, no attempt left.
        conn.execute(
            "UPDATE agno_jobs SET status = 'running', attempt = 1, max_attempts = 1, \
             locked_by = 'ghost', locked_at = 0 WHERE id = 'd-bad-swept'",
            [],
        )
        .unwrap();

        let claimed = jobs.claim_jobs("w1", 60, None, 3).await.unwrap();
        let ids: Vec<&str> = claimed.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(ids, ["a-first", "c-last"]);
        let first = jobs.get_job("a-first", None).await.unwrap().unwrap();
        assert_eq!(first.status, JobStatus::Running);
        let (status, error): (String, String) = conn
            .query_row(
                "SELECT status, error FROM agno_jobs WHERE id = 'b-bad'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(status, "failed");
        assert!(
            error.starts_with("job b-bad could not be decoded (") && error.contains("payload"),
            "{error}"
        );
        // Nothing queued is left, and the next claim is not blocked by anything.
        assert!(jobs.claim_job("w2", 60, None).await.unwrap().is_none());

        assert!(jobs.sweep_exhausted_jobs(60, 20).await.unwrap().is_empty());
        let swept: String = conn
            .query_row(
                "SELECT status FROM agno_jobs WHERE id = 'd-bad-swept'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(swept, "failed");
    });
}
