//! The SQLite executor: rusqlite on a blocking thread, one connection per database handle.
//!
//! Every connection runs `PRAGMA journal_mode=WAL`, `PRAGMA foreign_keys=ON` and a busy
//! timeout. Calls of one handle are serialized on its connection, and multi-statement writes
//! take the writer lock up front (`BEGIN IMMEDIATE`), so concurrent writers in one process or
//! several wait for each other instead of failing with `database is locked`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agno_storage_core::migration::MigrationLock;
use agno_storage_core::{async_trait, json::to_python_json, Error, ErrorKind, Result};
use rusqlite::types::{Value as SqliteValue, ValueRef};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::exec::{Executor, Statement};
use crate::value::{Row, SqlValue};

const BACKEND: &str = "sqlite";

pub(crate) struct SqliteExecutor {
    conn: Arc<Mutex<Connection>>,
    path: Option<PathBuf>,
    memory_lock: Arc<tokio::sync::Mutex<()>>,
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
        Ok(SqliteExecutor {
            conn: Arc::new(Mutex::new(conn)),
            path: (!in_memory).then(|| path.to_path_buf()),
            memory_lock: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut guard).map_err(map_err)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("SQLite worker thread failed: {e}"),
            )
            .with_backend(BACKEND)
        })?
    }
}

#[async_trait]
impl Executor for SqliteExecutor {
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let sql = sql.to_owned();
        self.with_conn(move |c| run_query(c, &sql, params)).await
    }

    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        let sql = sql.to_owned();
        self.with_conn(move |c| run_execute(c, &sql, params)).await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>> {
        self.with_conn(move |c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let mut out = Vec::with_capacity(statements.len());
            for (sql, params) in statements {
                out.push(run_query(&tx, &sql, params)?);
            }
            tx.commit()?;
            Ok(out)
        })
        .await
    }

    async fn migration_lock(&self) -> Result<MigrationLock> {
        let Some(path) = self.path.clone() else {
            return Ok(Box::new(self.memory_lock.clone().lock_owned().await));
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
        Ok(Box::new(file))
    }
}
