//! The PostgreSQL executor: sqlx with a connection pool.

use std::future::Future;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;

use agno_storage_core::json::parse_value;
use agno_storage_core::migration::{HeldLock, MigrationLock};
use agno_storage_core::{async_trait, Error, ErrorKind, JobWakeups, Result};
use chrono::NaiveDate;
use serde_json::Value;
use sqlx::postgres::{
    PgArguments, PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow, PgValueFormat,
};
use sqlx::{Arguments, AssertSqlSafe, Column, Connection, Row as _, TypeInfo, ValueRef as _};

use crate::exec::{Executor, Statement};
use crate::value::{Row, SqlValue, PARALLEL_JSON_BYTES};

const BACKEND: &str = "postgres";

pub(crate) struct PgExecutor {
    pool: PgPool,
    lock_key: String,
}

pub(crate) fn map_err(e: sqlx::Error) -> Error {
    if let sqlx::Error::Database(db) = &e {
        if db.code().as_deref() == Some("54000") {
            return too_large(e);
        }
    }
    let (kind, temporary) = match &e {
        sqlx::Error::Database(db) => match db.code().as_deref() {
            Some("23505") => (ErrorKind::AlreadyExists, false),
            Some("23503") => (ErrorKind::NotFound, false),
            Some("40001" | "40P01" | "55P03") => (ErrorKind::Conflict, true),
            Some("42P01" | "42703") => (ErrorKind::SchemaMismatch, false),
            Some(code) if code.starts_with("22") || code.starts_with("23") => {
                (ErrorKind::InvalidInput, false)
            }
            Some(code) if code.starts_with("08") || code.starts_with("57") => {
                (ErrorKind::Unavailable, true)
            }
            _ => (ErrorKind::Unexpected, false),
        },
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

/// SQLSTATE 54000 (`program_limit_exceeded`): a value over one of the server's size limits,
/// most often an id or other indexed value too long for its B-tree index ("index row size
/// … exceeds btree version 4 maximum 2704"). The input is at fault, not the database:
/// `InvalidInput`, naming the limit.
fn too_large(e: sqlx::Error) -> Error {
    let detail = e.to_string();
    let what = if detail.contains("index row") {
        "a value is too long for its index (PostgreSQL indexes values of at most about \
         2,700 bytes; ids and other indexed fields must stay under that)"
    } else {
        "a value exceeds a PostgreSQL size limit"
    };
    Error::new(ErrorKind::InvalidInput, format!("{what}: {detail}"))
        .with_backend(BACKEND)
        .set_temporary(false)
        .with_source(e)
}

/// Rewrites `?` placeholders to `$1, $2, …` outside quoted strings and identifiers.
pub(crate) fn number_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let (mut n, mut quote) = (0, None::<char>);
    for c in sql.chars() {
        match (quote, c) {
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (None, '?') => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

/// `InvalidInput` if `text`, bound as text, holds a NUL character.
pub(crate) fn refuse_nul(text: &str) -> Result<()> {
    if !text.contains('\0') {
        return Ok(());
    }
    Err(Error::invalid_input(
        "a text value contains a NUL character (U+0000), which PostgreSQL text \
         cannot hold; nothing was written. Remove it (agno's PostgresDb refuses it \
         too; only JSON values and knowledge contents have NUL stripped, as agno does).",
    )
    .with_backend(BACKEND))
}

fn bind(args: &mut PgArguments, v: SqlValue) -> Result<()> {
    let r = match v {
        SqlValue::Int(i) => args.add(i),
        SqlValue::Float(f) => args.add(f),
        SqlValue::Text(Some(s)) if s.contains('\0') => return refuse_nul(&s),
        SqlValue::Text(s) => args.add(s),
        SqlValue::Bool(b) => args.add(b),
        SqlValue::Json(j) => args.add(j.map(|v| sqlx::types::Json(strip_nul(v)))),
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

/// PostgreSQL text cannot hold NUL; inside JSON values agno strips it
/// (`sanitize_postgres_strings`), and so does this adapter: a JSON string written with NUL
/// reads back without it. Identifiers never get here with NUL (core refuses them).
fn strip_nul(mut v: Value) -> Value {
    // Without recursion: a value may be nested `json::MAX_DEPTH` levels.
    {
        let mut pending: Vec<&mut Value> = vec![&mut v];
        while let Some(value) = pending.pop() {
            match value {
                Value::String(s) => s.retain(|c| c != '\0'),
                Value::Array(items) => pending.extend(items.iter_mut()),
                Value::Object(map) => {
                    if map.keys().any(|k| k.contains('\0')) {
                        let entries = std::mem::take(map);
                        *map = entries
                            .into_iter()
                            .map(|(k, v)| (k.replace('\0', ""), v))
                            .collect();
                    }
                    pending.extend(map.values_mut());
                }
                _ => {}
            }
        }
    }
    v
}

/// Decodes a result's rows, column names taken once. Decoding parses JSON cells, so it runs
/// off the async worker (on the blocking pool, inside a runtime); a result with more than
/// [`PARALLEL_JSON_BYTES`] of JSON is split between two threads.
async fn decode_rows(rows: Vec<PgRow>) -> Result<Vec<Row>> {
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    let columns: Arc<[String]> = first
        .columns()
        .iter()
        .map(|c| c.name().to_owned())
        .collect();
    // Each column's decoder, chosen once for the result rather than per cell.
    let kinds: Arc<[Cell]> = first
        .columns()
        .iter()
        .map(|c| Cell::of(c.type_info().name()))
        .collect();
    let json_columns: Vec<usize> = (0..kinds.len())
        .filter(|&i| kinds[i] == Cell::Json)
        .collect();
    let json_bytes: usize = rows
        .iter()
        .flat_map(|row| json_columns.iter().map(move |&i| row.try_get_raw(i)))
        .filter_map(|raw| raw.ok()?.as_bytes().ok().map(<[u8]>::len))
        .sum();
    if json_bytes <= PARALLEL_JSON_BYTES {
        return rows
            .iter()
            .map(|row| decode(row, &columns, &kinds))
            .collect();
    }
    let decode_all = move || {
        let (front, back) = rows.split_at(rows.len() / 2);
        let decode_part = |part: &[PgRow]| {
            part.iter()
                .map(|row| decode(row, &columns, &kinds))
                .collect::<Result<Vec<_>>>()
        };
        std::thread::scope(|scope| {
            // Without a second thread (the OS refused one) this thread decodes both halves.
            let helper = std::thread::Builder::new()
                .name("agno-postgres-json".into())
                .spawn_scoped(scope, || decode_part(back))
                .ok();
            let mut out = decode_part(front)?;
            let back = match helper.map(|h| h.join()) {
                Some(Ok(back)) => back?,
                Some(Err(_)) => {
                    return Err(Error::new(
                        ErrorKind::Unexpected,
                        "the thread decoding this query's rows panicked",
                    )
                    .with_backend(BACKEND))
                }
                None => decode_part(back)?,
            };
            out.extend(back);
            Ok(out)
        })
    };
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => handle.spawn_blocking(decode_all).await.map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("decoding this query's rows failed: {e}"),
            )
            .with_backend(BACKEND)
        })?,
        Err(_) => decode_all(),
    }
}

/// A JSON or JSONB cell, parsed straight from the driver's buffer; text this code cannot
/// decode (nested past `json::MAX_DEPTH`) arrives as text, for the caller to name.
fn json_cell(row: &PgRow, i: usize) -> Result<SqlValue> {
    let raw = row.try_get_raw(i).map_err(map_err)?;
    if raw.is_null() {
        return Ok(SqlValue::Json(None));
    }
    let bad = |what: String| {
        let column = row.columns().get(i).map_or("?", |c| c.name());
        Error::new(
            ErrorKind::Serialization,
            format!("column {column} is not valid JSON: {what}"),
        )
        .with_backend(BACKEND)
    };
    let bytes = raw.as_bytes().map_err(|e| bad(e.to_string()))?;
    let text = match (raw.format(), raw.type_info().name()) {
        // Binary JSONB is a version byte (1) and the text.
        (PgValueFormat::Binary, "JSONB") => match bytes.split_first() {
            Some((1, text)) => text,
            _ => return Err(bad("unsupported JSONB format version".into())),
        },
        _ => bytes,
    };
    Ok(match parse_value(text) {
        Ok(value) => SqlValue::Json(Some(value)),
        Err(_) => match std::str::from_utf8(text) {
            Ok(text) => SqlValue::Text(Some(text.to_owned())),
            Err(e) => return Err(bad(e.to_string())),
        },
    })
}

/// How a column's cells are decoded, by its PostgreSQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cell {
    Int8,
    Int4,
    Int2,
    Bool,
    Float8,
    Float4,
    Json,
    Date,
    Void,
    Text,
}

impl Cell {
    fn of(type_name: &str) -> Self {
        match type_name {
            "INT8" => Cell::Int8,
            "INT4" => Cell::Int4,
            "INT2" => Cell::Int2,
            "BOOL" => Cell::Bool,
            "FLOAT8" => Cell::Float8,
            "FLOAT4" => Cell::Float4,
            "JSON" | "JSONB" => Cell::Json,
            "DATE" => Cell::Date,
            "VOID" => Cell::Void,
            _ => Cell::Text,
        }
    }
}

fn decode(row: &PgRow, columns: &Arc<[String]>, kinds: &[Cell]) -> Result<Row> {
    let columns = columns.clone();
    let mut values = Vec::with_capacity(columns.len());
    for (i, kind) in kinds.iter().enumerate() {
        let v = match kind {
            Cell::Int8 => SqlValue::Int(row.try_get::<Option<i64>, _>(i).map_err(map_err)?),
            Cell::Int4 => SqlValue::Int(
                row.try_get::<Option<i32>, _>(i)
                    .map_err(map_err)?
                    .map(i64::from),
            ),
            Cell::Int2 => SqlValue::Int(
                row.try_get::<Option<i16>, _>(i)
                    .map_err(map_err)?
                    .map(i64::from),
            ),
            Cell::Bool => SqlValue::Bool(row.try_get::<Option<bool>, _>(i).map_err(map_err)?),
            Cell::Float8 => SqlValue::Float(row.try_get::<Option<f64>, _>(i).map_err(map_err)?),
            Cell::Float4 => SqlValue::Float(
                row.try_get::<Option<f32>, _>(i)
                    .map_err(map_err)?
                    .map(f64::from),
            ),
            Cell::Json => json_cell(row, i)?,
            Cell::Date => SqlValue::Date(row.try_get::<Option<NaiveDate>, _>(i).map_err(map_err)?),
            Cell::Void => SqlValue::Text(None),
            Cell::Text => SqlValue::Text(row.try_get::<Option<String>, _>(i).map_err(map_err)?),
        };
        values.push(v);
    }
    Ok(Row { columns, values })
}

fn arguments(params: Vec<SqlValue>) -> Result<PgArguments> {
    let mut args = PgArguments::default();
    for p in params {
        bind(&mut args, p)?;
    }
    Ok(args)
}

impl PgExecutor {
    /// Connects a pool to `url`.
    pub(crate) async fn connect(
        url: &str,
        lock_key: String,
        settings: crate::PoolSettings,
    ) -> Result<Self> {
        let options = PgConnectOptions::from_str(url)
            .map_err(|e| {
                Error::new(
                    ErrorKind::InvalidInput,
                    format!("invalid PostgreSQL URL: {e}"),
                )
                .with_backend(BACKEND)
            })?
            // Every statement here is short. PostgreSQL compiles one with its JIT when the
            // estimated cost passes `jit_above_cost`, and a claim's per-session condition is
            // estimated as if its subquery ran for every candidate: a claim of 500 jobs
            // spent ~28 ms compiling for ~7 ms of work (EXPLAIN ANALYZE, 20,000 jobs).
            .options([("jit", "off")]);
        // Fail fast with the server's own answer when it cannot be reached at all.
        let probe = sqlx::PgConnection::connect_with(&options)
            .await
            .map_err(|e| {
                let err = map_err(e);
                Error::new(
                    err.kind(),
                    format!("cannot connect to PostgreSQL: {}", err.message()),
                )
                .with_backend(BACKEND)
            })?;
        probe.close().await.map_err(map_err)?;
        let pool = PgPoolOptions::new()
            .max_connections(settings.max_connections)
            .acquire_timeout(settings.acquire_timeout)
            .connect_with(options)
            .await
            .map_err(|e| {
                let err = map_err(e);
                Error::new(
                    err.kind(),
                    format!("cannot connect to PostgreSQL: {}", err.message()),
                )
                .with_backend(BACKEND)
            })?;
        Ok(PgExecutor { pool, lock_key })
    }

    /// Uses an application's own pool as it is.
    pub(crate) fn from_pool(pool: PgPool, lock_key: String) -> Self {
        PgExecutor { pool, lock_key }
    }

    /// Runs `work` on a pooled connection. When PostgreSQL refuses a statement that
    /// connection prepared before a schema change altered its result columns (`cached plan
    /// must not change result type`; anyone's change, agno migrating a shared database,
    /// say), the connection forgets its prepared statements and `work` runs once more:
    /// the refused statement did nothing, and a transaction it was in rolled back.
    async fn replanning<T>(
        &self,
        work: impl for<'c> Fn(&'c mut PgConnection) -> Attempt<'c, T>,
    ) -> Result<T> {
        let mut conn = self.pool.acquire().await.map_err(map_err)?;
        match work(&mut conn).await {
            Err(e) if stale_plan(&e) => {
                conn.clear_cached_statements().await.map_err(map_err)?;
                work(&mut conn).await.map_err(map_err)
            }
            done => done.map_err(map_err),
        }
    }
}

/// One try of [`PgExecutor::replanning`]'s work on a connection.
type Attempt<'c, T> =
    Pin<Box<dyn Future<Output = std::result::Result<T, sqlx::Error>> + Send + 'c>>;

/// PostgreSQL's refusal of a prepared statement whose result columns changed since.
fn stale_plan(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db)
        if db.code().as_deref() == Some("0A000")
            && db.message().contains("cached plan must not change result type"))
}

struct PgLock {
    conn: sqlx::PgConnection,
}

#[async_trait]
impl HeldLock for PgLock {
    /// Closes the lock's own connection, which frees the advisory lock.
    async fn release(self: Box<Self>) -> Result<()> {
        self.conn.close().await.map_err(map_err)
    }
}

#[async_trait]
impl Executor for PgExecutor {
    async fn listen(&self, channel: &str, payload: &str) -> Result<Option<Box<dyn JobWakeups>>> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool)
            .await
            .map_err(map_err)?;
        listener.listen(channel).await.map_err(map_err)?;
        Ok(Some(Box::new(PgWakeups {
            listener,
            payload: payload.to_owned(),
        })))
    }

    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let (sql, args): (Arc<str>, _) = (number_placeholders(sql).into(), arguments(params)?);
        let rows = self
            .replanning(|conn| {
                let query = sqlx::query_with(AssertSqlSafe(sql.clone()), args.clone());
                Box::pin(query.fetch_all(conn))
            })
            .await?;
        decode_rows(rows).await
    }

    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        let (sql, args): (Arc<str>, _) = (number_placeholders(sql).into(), arguments(params)?);
        self.replanning(|conn| {
            let query = sqlx::query_with(AssertSqlSafe(sql.clone()), args.clone());
            Box::pin(query.execute(conn))
        })
        .await
        .map(|done| done.rows_affected())
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>> {
        let statements: Vec<(Arc<str>, PgArguments)> = statements
            .into_iter()
            .map(|(sql, params)| Ok((number_placeholders(&sql).into(), arguments(params)?)))
            .collect::<Result<_>>()?;
        let fetched = self
            .replanning(|conn| {
                let statements = statements.clone();
                Box::pin(async move {
                    let mut tx = conn.begin().await?;
                    let mut out = Vec::with_capacity(statements.len());
                    for (sql, args) in statements {
                        let rows = sqlx::query_with(AssertSqlSafe(sql), args)
                            .fetch_all(&mut *tx)
                            .await?;
                        out.push(rows);
                    }
                    tx.commit().await?;
                    Ok(out)
                })
            })
            .await?;
        let mut out = Vec::with_capacity(fetched.len());
        for rows in fetched {
            out.push(decode_rows(rows).await?);
        }
        Ok(out)
    }

    async fn migration_lock(&self) -> Result<MigrationLock> {
        // A session-level advisory lock on a connection taken out of the pool: closing the
        // connection (dropping the guard) releases it, even if the process dies.
        let mut conn = self.pool.acquire().await.map_err(map_err)?.detach();
        sqlx::query("SELECT pg_advisory_lock(hashtext($1))")
            .bind(&self.lock_key)
            .execute(&mut conn)
            .await
            .map_err(map_err)?;
        conn.ping().await.map_err(map_err)?;
        Ok(Box::new(PgLock { conn }))
    }
}

/// `LISTEN` on a connection of its own: a wake-up per notification carrying `payload`.
struct PgWakeups {
    listener: sqlx::postgres::PgListener,
    payload: String,
}

#[async_trait]
impl JobWakeups for PgWakeups {
    async fn next(&mut self) -> Option<()> {
        loop {
            match self.listener.recv().await {
                Ok(n) if n.payload() == self.payload => return Some(()),
                Ok(_) => {}
                // The listener reconnects on the next call; meanwhile the worker polls.
                Err(_) => {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                    return Some(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SQLSTATE 54000 from a value too long for its B-tree index (what a 10,000-character
    /// session id met before core capped ids) is `InvalidInput`, naming the problem.
    #[tokio::test]
    async fn a_value_too_long_for_its_index_is_invalid_input() {
        let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(!ci, "CI=true needs AGNO_TEST_POSTGRES_URL");
            eprintln!("skipped: AGNO_TEST_POSTGRES_URL is not set");
            return;
        };
        let mut conn = PgConnection::connect(&url).await.expect("connect");
        sqlx::query("CREATE TEMP TABLE long_keys (k VARCHAR PRIMARY KEY)")
            .execute(&mut conn)
            .await
            .expect("temp table");
        // Not compressible, so the server cannot squeeze it under the index limit.
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let key: String = (0..10_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                char::from(b"abcdefghijklmnopqrstuvwxyz0123456789"[(state % 36) as usize])
            })
            .collect();
        let err = sqlx::query("INSERT INTO long_keys (k) VALUES ($1)")
            .bind(key)
            .execute(&mut conn)
            .await
            .expect_err("too long for the index");
        let err = map_err(err);
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{}", err.message());
        assert!(!err.is_temporary());
        assert!(
            err.message().contains("too long for its index"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn numbers_placeholders_outside_quotes() {
        assert_eq!(
            number_placeholders("SELECT ? , '?', \"a?\" WHERE x = ?"),
            "SELECT $1 , '?', \"a?\" WHERE x = $2"
        );
    }
}
