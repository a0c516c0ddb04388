//! The SQLite executor: rusqlite on a blocking thread, one connection per database handle.
//!
//! Every connection runs `PRAGMA journal_mode=WAL`, `PRAGMA foreign_keys=ON` and a busy
//! timeout. Each handle owns one connection on its own thread. Writes waiting for that
//! thread are committed together (group commit): one `BEGIN IMMEDIATE … COMMIT` per batch,
//! each call in its own savepoint, every caller answered only once its write is durable. The
//! writer lock is taken up front, so concurrent writers in one process or several wait for
//! each other (busy timeout) instead of failing with `database is locked`.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use agno_storage_core::migration::{MigrationLock, ReleasedOnDrop};
use agno_storage_core::{async_trait, json::to_python_json, Error, ErrorKind, Result};
use rusqlite::types::{Value as SqliteValue, ValueRef};
use rusqlite::{Connection, ErrorCode};

use crate::exec::{Executor, Statement};
use crate::value::{Row, SqlValue};

const BACKEND: &str = "sqlite";

pub(crate) struct SqliteExecutor {
    jobs: mpsc::Sender<Job>,
    path: Option<PathBuf>,
    memory_lock: Arc<tokio::sync::Mutex<()>>,
}

/// Work for the connection thread. `run` gets the connection (or the error that kept the
/// batch from starting), reports whether it succeeded, and returns how to deliver its outcome
/// once the batch has committed.
struct Job {
    writes: bool,
    /// Several statements that must commit together (a `transaction()` call).
    atomic: bool,
    run: Run,
}

/// A job's work: runs on the connection (or sees why the batch could not start).
type Run =
    Box<dyn FnOnce(std::result::Result<&Connection, &rusqlite::Error>) -> (bool, Delivery) + Send>;

/// Sends a job's result, or the batch's commit error, to its caller.
type Delivery = Box<dyn FnOnce(Option<&rusqlite::Error>) + Send>;

/// At most this many calls share one transaction.
const MAX_BATCH: usize = 256;

/// The connection thread: takes every call waiting in the queue and runs it in one writer
/// transaction (group commit), each call in its own savepoint so a failing call rolls back
/// alone, then commits once and answers every caller. A caller is answered only after the
/// commit that made its write durable. A batch of reads runs without a transaction.
/// Runs a fixed transaction-control statement through the statement cache.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn connection_thread(conn: Connection, jobs: mpsc::Receiver<Job>) {
    while let Ok(first) = jobs.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match jobs.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        // Reads, and a lone single-statement write, run in autocommit: one statement is
        // atomic and durable on its own, so a transaction would only add work.
        if !batch.iter().any(|j| j.writes) || (batch.len() == 1 && !batch[0].atomic) {
            for job in batch {
                let (_, deliver) = (job.run)(Ok(&conn));
                deliver(None);
            }
            continue;
        }
        if let Err(e) = control(&conn, "BEGIN IMMEDIATE") {
            for job in batch {
                let (_, deliver) = (job.run)(Err(&e));
                deliver(None);
            }
            continue;
        }
        let mut deliveries = Vec::with_capacity(batch.len());
        for job in batch {
            let opened = control(&conn, "SAVEPOINT agno_call");
            let (ok, deliver) = match &opened {
                Ok(()) => (job.run)(Ok(&conn)),
                Err(e) => (job.run)(Err(e)),
            };
            if opened.is_ok() {
                if !ok {
                    let _ = control(&conn, "ROLLBACK TO agno_call");
                }
                let _ = control(&conn, "RELEASE agno_call");
            }
            deliveries.push(deliver);
        }
        let committed = control(&conn, "COMMIT");
        if committed.is_err() {
            let _ = control(&conn, "ROLLBACK");
        }
        for deliver in deliveries {
            deliver(committed.as_ref().err());
        }
    }
}

pub(crate) fn map_err(e: rusqlite::Error) -> Error {
    let (kind, temporary) = match &e {
        rusqlite::Error::SqliteFailure(f, _) => match (f.code, f.extended_code) {
            (ErrorCode::ConstraintViolation, 1555 | 2067) => (ErrorKind::AlreadyExists, false),
            (ErrorCode::ConstraintViolation, 787) => (ErrorKind::NotFound, false),
            (ErrorCode::ConstraintViolation, _) => (ErrorKind::InvalidInput, false),
            (ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked, _) => {
                (ErrorKind::Unavailable, true)
            }
            (ErrorCode::CannotOpen | ErrorCode::PermissionDenied | ErrorCode::ReadOnly, _) => {
                (ErrorKind::Unavailable, false)
            }
            _ => (ErrorKind::Unexpected, false),
        },
        _ => (ErrorKind::Unexpected, false),
    };
    Error::new(kind, e.to_string())
        .with_backend(BACKEND)
        .set_temporary(temporary)
        .with_source(e)
}

fn to_sqlite(v: SqlValue) -> SqliteValue {
    match v {
        SqlValue::Int(Some(i)) => SqliteValue::Integer(i),
        SqlValue::Float(Some(f)) => SqliteValue::Real(f),
        SqlValue::Text(Some(s)) => SqliteValue::Text(s),
        SqlValue::Bool(Some(b)) => SqliteValue::Integer(i64::from(b)),
        SqlValue::Json(Some(v)) => SqliteValue::Text(to_python_json(&v)),
        SqlValue::Date(Some(d)) => SqliteValue::Text(d.format("%Y-%m-%d").to_string()),
        _ => SqliteValue::Null,
    }
}

fn from_sqlite(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Text(None),
        ValueRef::Integer(i) => SqlValue::Int(Some(i)),
        ValueRef::Real(f) => SqlValue::Float(Some(f)),
        ValueRef::Text(t) | ValueRef::Blob(t) => {
            SqlValue::Text(Some(String::from_utf8_lossy(t).into_owned()))
        }
    }
}

fn run_query(conn: &Connection, sql: &str, params: Vec<SqlValue>) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let columns: Arc<[String]> = stmt.column_names().into_iter().map(str::to_owned).collect();
    let params: Vec<SqliteValue> = params.into_iter().map(to_sqlite).collect();
    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            values.push(from_sqlite(row.get_ref(i)?));
        }
        out.push(Row {
            columns: columns.clone(),
            values,
        });
    }
    Ok(out)
}

fn run_execute(conn: &Connection, sql: &str, params: Vec<SqlValue>) -> rusqlite::Result<u64> {
    let mut stmt = conn.prepare_cached(sql)?;
    let params: Vec<SqliteValue> = params.into_iter().map(to_sqlite).collect();
    Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
}

impl SqliteExecutor {
    /// Opens (creating) the database file, or an in-memory database for `:memory:`.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let in_memory = path.as_os_str() == ":memory:";
        if !in_memory {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "cannot create the directory {} for the SQLite database: {e}",
                            parent.display()
                        ),
                    )
                    .with_backend(BACKEND)
                })?;
            }
        }
        let conn = Connection::open(path).map_err(|e| {
            let err = map_err(e);
            Error::new(
                err.kind(),
                format!(
                    "cannot open SQLite database {}: {}",
                    path.display(),
                    err.message()
                ),
            )
            .with_backend(BACKEND)
        })?;
        conn.busy_timeout(Duration::from_secs(30))
            .map_err(map_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(map_err)?;
        // WAL is persistent in the file; in-memory databases answer "memory".
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(map_err)?;
        let (jobs, queue) = mpsc::channel();
        std::thread::Builder::new()
            .name("agno-sqlite".into())
            .spawn(move || connection_thread(conn, queue))
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot start the SQLite connection thread: {e}"),
                )
                .with_backend(BACKEND)
            })?;
        Ok(SqliteExecutor {
            jobs,
            path: (!in_memory).then(|| path.to_path_buf()),
            memory_lock: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// Queues `f` on the connection thread and waits for its result; `writes` calls are
    /// answered after their batch commits; `atomic` calls (several statements) always run
    /// inside a transaction.
    async fn call<T: Send + 'static>(
        &self,
        writes: bool,
        atomic: bool,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = tokio::sync::oneshot::channel::<Result<T>>();
        let run = Box::new(
            move |conn: std::result::Result<&Connection, &rusqlite::Error>| -> (bool, Delivery) {
                let outcome = match conn {
                    Ok(conn) => f(conn).map_err(map_err),
                    Err(e) => Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("SQLite could not start a write transaction: {e}"),
                    )
                    .with_backend(BACKEND)
                    .set_temporary(true)),
                };
                let ok = outcome.is_ok();
                let deliver: Delivery = Box::new(move |commit_error: Option<&rusqlite::Error>| {
                    let result = match commit_error {
                        Some(e) => Err(Error::new(
                            ErrorKind::Unavailable,
                            format!("SQLite commit failed: {e}"),
                        )
                        .with_backend(BACKEND)
                        .set_temporary(true)),
                        None => outcome,
                    };
                    let _ = reply.send(result);
                });
                (ok, deliver)
            },
        );
        self.jobs
            .send(Job {
                writes,
                atomic,
                run,
            })
            .map_err(|_| {
                Error::new(
                    ErrorKind::Unavailable,
                    "the SQLite connection thread has stopped",
                )
                .with_backend(BACKEND)
            })?;
        answer.await.map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                "the SQLite connection thread dropped a call",
            )
            .with_backend(BACKEND)
        })?
    }
}

fn is_read(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("select"))
}

#[async_trait]
impl Executor for SqliteExecutor {
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let writes = !is_read(sql);
        let sql = sql.to_owned();
        self.call(writes, false, move |c| run_query(c, &sql, params))
            .await
    }

    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        let sql = sql.to_owned();
        self.call(true, false, move |c| run_execute(c, &sql, params))
            .await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>> {
        // The call runs in its own savepoint of the batch's writer transaction: all of its
        // statements commit together or not at all.
        self.call(true, true, move |c| {
            let mut out = Vec::with_capacity(statements.len());
            for (sql, params) in statements {
                out.push(run_query(c, &sql, params)?);
            }
            Ok(out)
        })
        .await
    }

    async fn migration_lock(&self) -> Result<MigrationLock> {
        let Some(path) = self.path.clone() else {
            return Ok(Box::new(ReleasedOnDrop(
                self.memory_lock.clone().lock_owned().await,
            )));
        };
        let mut lock_path = path.into_os_string();
        lock_path.push(".migrate.lock");
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("migration lock thread failed: {e}"),
            )
        })?
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot take the migration lock file: {e}"),
            )
            .with_backend(BACKEND)
        })?;
        Ok(Box::new(ReleasedOnDrop(file)))
    }
}
