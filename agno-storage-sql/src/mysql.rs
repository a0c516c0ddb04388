//! The MySQL executor: sqlx with a connection pool, written to the SQL that MySQL 8 and
//! MariaDB 10.6+ both accept.
//!
//! Every connection runs `READ COMMITTED` (as PostgreSQL does by default, so the shared
//! statements behave alike) and `NO_BACKSLASH_ESCAPES` (so `LIKE … ESCAPE '\'` is standard
//! SQL). JSON is bound as the text agno writes (`json.dumps`), which MariaDB stores verbatim.

use std::str::FromStr;
use std::time::Duration;

use agno_storage_core::json::to_python_json;
use agno_storage_core::migration::{HeldLock, MigrationLock};
use agno_storage_core::{async_trait, Error, ErrorKind, Result};
use chrono::NaiveDate;
use sqlx::mysql::{
    MySql, MySqlArguments, MySqlConnectOptions, MySqlPool, MySqlPoolOptions, MySqlRow,
};
use sqlx::pool::PoolConnection;
use sqlx::{Arguments, Column, Connection, Row as _, TypeInfo, ValueRef};

use crate::exec::{Executor, NamedLock, Statement, Tx};
use crate::value::{Row, SqlValue};

const BACKEND: &str = "mysql";

/// How long an upsert waits for agno's run_index lock of its session.
const RUN_INDEX_LOCK_SECONDS: i64 = 30;

pub(crate) struct MySqlExecutor {
    pool: MySqlPool,
    lock_key: String,
    /// Whether the server is MariaDB (JSON columns are `LONGTEXT CHECK (JSON_VALID(..))`).
    mariadb: bool,
}

pub(crate) fn map_err(e: sqlx::Error) -> Error {
    let (kind, temporary) = match &e {
        sqlx::Error::Database(db) => {
            let number = db
                .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                .map(|m| m.number());
            match number {
                // Duplicate key, table, database, index or column.
                Some(1062 | 1586 | 1050 | 1007 | 1061 | 1060) => (ErrorKind::AlreadyExists, false),
                // A child row without its parent.
                Some(1452 | 1216) => (ErrorKind::NotFound, false),
                // Deadlock, lock wait timeout.
                Some(1213 | 1205) => (ErrorKind::Conflict, true),
                // No such table or column; cannot drop what is not there.
                Some(1146 | 1054 | 1091) => (ErrorKind::SchemaMismatch, false),
                // Too many connections, server shutting down.
                Some(1040 | 1053 | 1927) => (ErrorKind::Unavailable, true),
                Some(1044 | 1045) => (ErrorKind::Unavailable, false),
                // Too long, out of range, wrong value, NULL into NOT NULL, invalid JSON,
                // a CHECK (MariaDB's JSON columns) or a parent row still referenced.
                Some(
                    1406 | 1264 | 1366 | 1292 | 1048 | 1364 | 3140 | 4025 | 3819 | 1451 | 1217,
                ) => (ErrorKind::InvalidInput, false),
                _ => (ErrorKind::Unexpected, false),
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_) => (ErrorKind::Unavailable, true),
        sqlx::Error::Configuration(_) => (ErrorKind::InvalidInput, false),
        _ => (ErrorKind::Unexpected, false),
    };
    Error::new(kind, e.to_string())
        .with_backend(BACKEND)
        .set_temporary(temporary)
        .with_source(e)
}

fn bind(args: &mut MySqlArguments, v: SqlValue) -> Result<()> {
    let r = match v {
        SqlValue::Int(i) => args.add(i),
        SqlValue::Float(f) => args.add(f),
        SqlValue::Text(s) => args.add(s),
        SqlValue::Bool(b) => args.add(b),
        SqlValue::Json(j) => args.add(j.map(|v| to_python_json(&v))),
        SqlValue::Date(d) => args.add(d),
    };
    r.map_err(|e| {
        Error::new(
            ErrorKind::InvalidInput,
            format!("cannot bind a parameter: {e}"),
        )
        .with_backend(BACKEND)
    })
}

fn arguments(params: Vec<SqlValue>) -> Result<MySqlArguments> {
    let mut args = MySqlArguments::default();
    for p in params {
        bind(&mut args, p)?;
    }
    Ok(args)
}

fn decode(row: &MySqlRow) -> Result<Row> {
    let columns: std::sync::Arc<[String]> =
        row.columns().iter().map(|c| c.name().to_owned()).collect();
    let mut values = Vec::with_capacity(columns.len());
    for (i, c) in row.columns().iter().enumerate() {
        let name = c.type_info().name();
        let null = row.try_get_raw(i).map_err(map_err)?.is_null();
        let v = match name {
            _ if null => SqlValue::Text(None),
            "BOOLEAN" => SqlValue::Bool(Some(
                row.try_get_unchecked::<i64, _>(i).map_err(map_err)? != 0,
            )),
            "TINYINT" | "SMALLINT" | "MEDIUMINT" | "INT" | "BIGINT" | "YEAR" => {
                SqlValue::Int(Some(row.try_get_unchecked::<i64, _>(i).map_err(map_err)?))
            }
            n if n.ends_with("UNSIGNED") => {
                let u = row.try_get_unchecked::<u64, _>(i).map_err(map_err)?;
                SqlValue::Int(Some(i64::try_from(u).unwrap_or(i64::MAX)))
            }
            "DOUBLE" => SqlValue::Float(Some(row.try_get::<f64, _>(i).map_err(map_err)?)),
            "FLOAT" => SqlValue::Float(Some(f64::from(row.try_get::<f32, _>(i).map_err(map_err)?))),
            "DATE" => SqlValue::Date(Some(row.try_get::<NaiveDate, _>(i).map_err(map_err)?)),
            // Text, JSON (MariaDB: LONGTEXT; MySQL: JSON with the binary collation),
            // decimals: their bytes are UTF-8 text.
            _ => {
                let bytes = row.try_get_unchecked::<Vec<u8>, _>(i).map_err(map_err)?;
                SqlValue::Text(Some(String::from_utf8(bytes).map_err(|e| {
                    Error::new(
                        ErrorKind::Serialization,
                        format!("column {} is not UTF-8 text: {e}", c.name()),
                    )
                    .with_backend(BACKEND)
                })?))
            }
        };
        values.push(v);
    }
    Ok(Row { columns, values })
}

async fn fetch(
    conn: &mut sqlx::MySqlConnection,
    sql: &str,
    params: Vec<SqlValue>,
) -> Result<Vec<Row>> {
    let rows = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_owned()), arguments(params)?)
        .fetch_all(conn)
        .await
        .map_err(map_err)?;
    rows.iter().map(decode).collect()
}

async fn run(conn: &mut sqlx::MySqlConnection, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
    Ok(
        sqlx::query_with(sqlx::AssertSqlSafe(sql.to_owned()), arguments(params)?)
            .execute(conn)
            .await
            .map_err(map_err)?
            .rows_affected(),
    )
}

/// Takes `lock` on `conn`, waiting up to `seconds`; `false` when the wait timed out.
async fn get_lock(
    conn: &mut sqlx::MySqlConnection,
    lock: &NamedLock,
    seconds: i64,
) -> Result<bool> {
    let rows = fetch(
        conn,
        "SELECT GET_LOCK(CONCAT(?, MD5(?)), ?) AS locked",
        vec![
            SqlValue::text(lock.prefix),
            SqlValue::text(&lock.key),
            SqlValue::int(seconds),
        ],
    )
    .await?;
    Ok(rows
        .first()
        .map(|r| r.opt_i64("locked"))
        .transpose()?
        .flatten()
        == Some(1))
}

fn connect_error(e: sqlx::Error) -> Error {
    let err = map_err(e);
    Error::new(
        err.kind(),
        format!("cannot connect to MySQL: {}", err.message()),
    )
    .with_backend(BACKEND)
    .set_temporary(err.is_temporary())
}

impl MySqlExecutor {
    /// Connects a pool to `url`.
    pub(crate) async fn connect(
        url: &str,
        lock_key: String,
        settings: crate::PoolSettings,
    ) -> Result<Self> {
        let options = MySqlConnectOptions::from_str(url)
            .map_err(|e| {
                Error::new(ErrorKind::InvalidInput, format!("invalid MySQL URL: {e}"))
                    .with_backend(BACKEND)
            })?
            .charset("utf8mb4");
        // Fail fast with the server's own answer when it cannot be reached at all.
        let mut probe = sqlx::MySqlConnection::connect_with(&options)
            .await
            .map_err(connect_error)?;
        let version: String = sqlx::query_scalar("SELECT VERSION()")
            .fetch_one(&mut probe)
            .await
            .map_err(map_err)?;
        probe.close().await.map_err(map_err)?;
        let pool = MySqlPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .idle_timeout(Duration::from_secs(60))
            .after_connect(|conn, _| {
                Box::pin(async move {
                    sqlx::raw_sql(crate::MYSQL_SESSION_SETUP)
                        .execute(conn)
                        .await
                        .map(|_| ())
                })
            })
            .connect_with(options)
            .await
            .map_err(connect_error)?;
        Ok(MySqlExecutor {
            pool,
            lock_key,
            mariadb: version.contains("MariaDB"),
        })
    }
}

impl MySqlExecutor {
    /// Uses an application's own pool, after checking on one of its connections that it
    /// runs with what [`crate::MYSQL_SESSION_SETUP`] sets: `InvalidInput` naming the fix
    /// otherwise.
    pub(crate) async fn from_pool(pool: MySqlPool, lock_key: String) -> Result<Self> {
        let mut conn = pool.acquire().await.map_err(connect_error)?;
        let (version, sql_mode): (String, String) =
            sqlx::query_as("SELECT VERSION(), @@SESSION.sql_mode")
                .fetch_one(&mut *conn)
                .await
                .map_err(map_err)?;
        // MySQL 5.7 and MariaDB before 11.1 name it `tx_isolation`.
        let isolation: String = match sqlx::query_scalar("SELECT @@SESSION.transaction_isolation")
            .fetch_one(&mut *conn)
            .await
        {
            Ok(level) => level,
            Err(_) => sqlx::query_scalar("SELECT @@SESSION.tx_isolation")
                .fetch_one(&mut *conn)
                .await
                .map_err(map_err)?,
        };
        let escapes_off = sql_mode.split(',').any(|m| m == "NO_BACKSLASH_ESCAPES");
        if !escapes_off || isolation != "READ-COMMITTED" {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "the pool's connections run with isolation {isolation} and sql_mode \
                     `{sql_mode}`; agno-storage needs READ-COMMITTED and NO_BACKSLASH_ESCAPES \
                     (its claims and LIKE patterns rely on them): build the pool with \
                     `.after_connect(...)` running agno_storage_sql::MYSQL_SESSION_SETUP, or \
                     let SqlDb::connect_mysql_with_pool make it"
                ),
            )
            .with_backend(BACKEND));
        }
        Ok(MySqlExecutor {
            pool,
            lock_key,
            mariadb: version.contains("MariaDB"),
        })
    }
}

/// An interactive transaction on a pooled connection. Dropped uncommitted, the connection
/// is closed rather than returned, so the server rolls back and frees the named lock.
struct MySqlTx {
    conn: PoolConnection<MySql>,
    lock: Option<NamedLock>,
    done: bool,
}

impl Drop for MySqlTx {
    fn drop(&mut self) {
        if !self.done {
            self.conn.close_on_drop();
        }
    }
}

#[async_trait]
impl Tx for MySqlTx {
    async fn query(&mut self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        fetch(&mut self.conn, sql, params).await
    }

    async fn execute(&mut self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        run(&mut self.conn, sql, params).await
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        sqlx::raw_sql("COMMIT")
            .execute(&mut *self.conn)
            .await
            .map_err(map_err)?;
        // Committed: a failed release only costs the connection (closed on drop, which
        // frees the lock), never the caller's write.
        self.done = match self.lock.take() {
            Some(lock) => fetch(
                &mut self.conn,
                "SELECT RELEASE_LOCK(CONCAT(?, MD5(?))) AS released",
                vec![SqlValue::text(lock.prefix), SqlValue::text(lock.key)],
            )
            .await
            .is_ok(),
            None => true,
        };
        Ok(())
    }
}

struct MySqlLock {
    conn: sqlx::MySqlConnection,
}

#[async_trait]
impl HeldLock for MySqlLock {
    /// Closes the lock's own connection, which frees the named lock.
    async fn release(self: Box<Self>) -> Result<()> {
        self.conn.close().await.map_err(map_err)
    }
}

#[async_trait]
impl Executor for MySqlExecutor {
    fn max_json_depth(&self) -> Option<usize> {
        // MariaDB's JSON_VALID refuses 32 levels; MySQL's JSON type allows 100.
        Some(if self.mariadb { 31 } else { 100 })
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let rows = sqlx::query_with(sqlx::AssertSqlSafe(sql.to_owned()), arguments(params)?)
            .fetch_all(&self.pool)
            .await
            .map_err(map_err)?;
        rows.iter().map(decode).collect()
    }

    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        Ok(
            sqlx::query_with(sqlx::AssertSqlSafe(sql.to_owned()), arguments(params)?)
                .execute(&self.pool)
                .await
                .map_err(map_err)?
                .rows_affected(),
        )
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>> {
        let mut tx = self.pool.begin().await.map_err(map_err)?;
        let mut out = Vec::with_capacity(statements.len());
        for (sql, params) in statements {
            out.push(fetch(&mut tx, &sql, params).await?);
        }
        tx.commit().await.map_err(map_err)?;
        Ok(out)
    }

    async fn begin(&self, lock: Option<NamedLock>) -> Result<Box<dyn Tx>> {
        let conn = self.pool.acquire().await.map_err(map_err)?;
        // From here on, any early return drops the transaction and closes the connection.
        let mut tx = MySqlTx {
            conn,
            lock: None,
            done: false,
        };
        if let Some(lock) = lock {
            if !get_lock(&mut tx.conn, &lock, RUN_INDEX_LOCK_SECONDS).await? {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "timed out after {RUN_INDEX_LOCK_SECONDS} s waiting for the lock {}<md5 of {:?}>",
                        lock.prefix, lock.key
                    ),
                )
                .with_backend(BACKEND)
                .set_temporary(true));
            }
            tx.lock = Some(lock);
        }
        sqlx::raw_sql("START TRANSACTION")
            .execute(&mut *tx.conn)
            .await
            .map_err(map_err)?;
        Ok(Box::new(tx))
    }

    async fn migration_lock(&self) -> Result<MigrationLock> {
        // A named lock on a connection taken out of the pool: closing the connection
        // (dropping the guard) releases it, even if the process dies.
        let mut conn = self.pool.acquire().await.map_err(map_err)?.detach();
        let lock = NamedLock {
            prefix: "agno_migrations_",
            key: self.lock_key.clone(),
        };
        while !get_lock(&mut conn, &lock, 60).await? {}
        Ok(Box::new(MySqlLock { conn }))
    }
}
