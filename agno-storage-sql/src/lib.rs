//! SQL storage for agno-storage: SQLite (rusqlite), PostgreSQL and MySQL/MariaDB (sqlx).
//!
//! Tables, columns, indexes, JSON encodings and schema stamps are agno 3.1.10's, so a Rust
//! service and a Python AgentOS can share one database, and a database written by agno 2.x
//! migrates to v3 with [`agno_storage_core::MigrationManager`]. Every store of the core
//! contract is implemented and proven by the `conformance-tests` suite.
//!
//! ```no_run
//! # async fn demo() -> agno_storage_core::Result<()> {
//! use agno_storage_sql::{SqlDb, TableNames};
//! let db = SqlDb::open_sqlite("agno.db", TableNames::default()).await?.agno_db();
//! # Ok(()) }
//! ```
//!
//! Fixes over agno kept on its format: atomic `run_index` per session, owner guards on every
//! upsert (memories and learnings included), scoped deletes that never touch another user's
//! runs, atomic schedule and job claims, fenced job transitions, and migrations that stamp a
//! table only after its steps succeeded.
//!
//! SQLite runs in WAL mode: back up the database file together with its `-wal` and `-shm`
//! files.
//!
//! # Features
//!
//! - `sqlite`: SQLite through `rusqlite`, with SQLite itself compiled in (`bundled`).
//! - `postgres`: PostgreSQL through `sqlx` on the tokio runtime.
//! - `mysql`: MySQL 8 and MariaDB 10.6+ through `sqlx` on the tokio runtime.
//!
//! # MySQL
//!
//! Tables, column types (`VARCHAR(n)`, `JSON`, `BOOL`), index names and the default
//! database `ai` are those of agno's `MySQLDb`; the tables agno's MySQL adapter lacks
//! (schedules, schedule runs, learnings, jobs) are added in the same style. MySQL has no
//! partial indexes, so the per-owner unique keys of schedules and jobs run over a stored
//! generated column `owner_key = COALESCE(user_id, '')`. Runs get their `run_index` under
//! agno's own named lock (`GET_LOCK('agno_run_index_' + md5(session_id))`), so Rust and
//! Python writers of one session never collide. agno's tables use the server's default
//! collation, which on MySQL ignores case: user ids differing only in case share reads
//! there, as they do with agno itself (owner guards on writes compare exactly).
//! - `full`: all of the above.
#![deny(missing_docs)]
// Built with no backend feature (as `cargo publish` verifies it), the crate offers nothing
// and its shared machinery is unused: that is expected, not dead code.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres", feature = "mysql")),
    allow(dead_code, unused_imports)
)]

use std::sync::Arc;

use agno_storage_core::{AgnoDb, OpenMode, Result};

mod dialect;
mod evals;
mod exec;
mod jobs;
mod knowledge;
mod learnings;
mod memories;
mod metrics;
mod migrate;
#[cfg(feature = "mysql")]
mod mysql;
mod named;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod row_log;
mod run_cache;
mod runs;
mod schedules;
mod schema;
mod sessions;
#[cfg(feature = "sqlite")]
mod sqlite;
mod store;
mod value;

pub use schema::TableNames;
use store::SqlStore;

/// The connection pool of a server database (PostgreSQL, MySQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolSettings {
    /// The most connections open at once (default 8).
    pub max_connections: u32,
    /// How long a call waits for a free connection before it fails `Unavailable`
    /// (default 20 s).
    pub acquire_timeout: std::time::Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 8,
            acquire_timeout: std::time::Duration::from_secs(20),
        }
    }
}

impl PoolSettings {
    /// A pool for an `agno-storage-worker` of `concurrency` handlers that write through the
    /// same store: one connection per handler, plus the worker's claimer, completer and
    /// heartbeat, plus one for the rest of the application.
    pub fn for_worker(concurrency: usize) -> Self {
        PoolSettings {
            max_connections: u32::try_from(concurrency)
                .unwrap_or(u32::MAX)
                .saturating_add(4),
            ..PoolSettings::default()
        }
    }

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn check(&self) -> Result<()> {
        if self.max_connections == 0 {
            return Err(agno_storage_core::Error::new(
                agno_storage_core::ErrorKind::InvalidInput,
                "a connection pool of 0 connections can run nothing: set max_connections to 1 or more",
            ));
        }
        Ok(())
    }
}

/// What every MySQL connection runs first: READ COMMITTED (claims skip locked rows without
/// gap locks) and `NO_BACKSLASH_ESCAPES` (LIKE patterns escape with `\`). An application
/// that passes its own pool ([`SqlDb::from_mysql_pool`]) runs it in the pool's
/// `after_connect`.
#[cfg(feature = "mysql")]
pub const MYSQL_SESSION_SETUP: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED; \
     SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')";

/// The `sqlx` this crate is built on, for an application that builds its own pool.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub use sqlx;

/// One SQL database with agno's tables.
#[derive(Clone)]
pub struct SqlDb {
    store: Arc<SqlStore>,
}

impl std::fmt::Debug for SqlDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlDb")
            .field("dialect", &self.store.dialect.name())
            .field("schema", &self.store.schema)
            .finish_non_exhaustive()
    }
}

impl SqlDb {
    /// Opens (creating) a SQLite database file (`:memory:` for a private in-memory one),
    /// creates the tables it lacks (stamped `3.0.0`) and checks the ones it has. Tables an
    /// older agno created keep working where their columns allow; the others answer
    /// `MigrationRequired` until migrated.
    #[cfg(feature = "sqlite")]
    pub async fn open_sqlite(
        path: impl AsRef<std::path::Path>,
        tables: TableNames,
    ) -> Result<Self> {
        Self::open_sqlite_with_mode(path, tables, OpenMode::CreateMissing).await
    }

    /// [`SqlDb::open_sqlite`] in `mode`. With [`OpenMode::Existing`] nothing is created or
    /// altered: the file is opened read-write without `SQLITE_OPEN_CREATE` (no directory is
    /// made and the journal mode is left as the file has it); a missing or zero-byte file,
    /// or one with none of agno's tables, is `NotFound`; a file that is not a SQLite database
    /// is `SchemaMismatch`. Absent tables stay absent: calls on them answer `NotFound`.
    #[cfg(feature = "sqlite")]
    pub async fn open_sqlite_with_mode(
        path: impl AsRef<std::path::Path>,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        crate::schema::validate_names(&tables)?;
        let path = path.as_ref();
        let exec = sqlite::SqliteExecutor::open_with_mode(path, mode)?;
        let what = path.display().to_string();
        Self::init(Arc::new(exec), &dialect::Sqlite, None, tables, mode, &what).await
    }

    /// Connects to PostgreSQL at `url` and uses `schema` (agno's default is `ai`), creating
    /// it and the tables it lacks.
    #[cfg(feature = "postgres")]
    pub async fn connect_postgres(url: &str, schema: &str, tables: TableNames) -> Result<Self> {
        Self::connect_postgres_with_mode(url, schema, tables, OpenMode::CreateMissing).await
    }

    /// [`SqlDb::connect_postgres`] in `mode`. With [`OpenMode::Existing`] no schema, table,
    /// index or stamp is created: a schema with none of agno's tables is `NotFound`, and
    /// calls on an absent table answer `NotFound`.
    #[cfg(feature = "postgres")]
    pub async fn connect_postgres_with_mode(
        url: &str,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        Self::connect_postgres_with_pool(url, schema, tables, mode, PoolSettings::default()).await
    }

    /// [`SqlDb::connect_postgres_with_mode`] with a pool of `pool`'s size (see
    /// [`PoolSettings::for_worker`]).
    #[cfg(feature = "postgres")]
    pub async fn connect_postgres_with_pool(
        url: &str,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
        pool: PoolSettings,
    ) -> Result<Self> {
        schema::validate_identifier("PostgreSQL schema name", schema)?;
        crate::schema::validate_names(&tables)?;
        pool.check()?;
        let exec =
            postgres::PgExecutor::connect(url, format!("agno_migrations:{schema}"), pool).await?;
        Self::init_postgres(exec, schema, tables, mode).await
    }

    /// Uses an application's own PostgreSQL pool (its size, timeouts and TLS are the
    /// application's) and `schema`, as [`SqlDb::connect_postgres_with_mode`] does with the
    /// pool it makes.
    #[cfg(feature = "postgres")]
    pub async fn from_postgres_pool(
        pool: sqlx::PgPool,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        schema::validate_identifier("PostgreSQL schema name", schema)?;
        crate::schema::validate_names(&tables)?;
        let exec = postgres::PgExecutor::from_pool(pool, format!("agno_migrations:{schema}"));
        Self::init_postgres(exec, schema, tables, mode).await
    }

    /// Uses an application's own MySQL or MariaDB pool and the database `schema`, as
    /// [`SqlDb::connect_mysql_with_mode`] does with the pool it makes. The pool's
    /// connections must run [`MYSQL_SESSION_SETUP`] (its `after_connect`); one that does not
    /// is refused with `InvalidInput` naming it.
    #[cfg(feature = "mysql")]
    pub async fn from_mysql_pool(
        pool: sqlx::MySqlPool,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        schema::validate_identifier("MySQL database name", schema)?;
        crate::schema::validate_names(&tables)?;
        let exec = mysql::MySqlExecutor::from_pool(pool, schema.to_owned()).await?;
        Self::init_mysql(exec, schema, tables, mode).await
    }

    /// Connects to MySQL or MariaDB at `url` and uses the database `schema` (agno's default
    /// is `ai`), creating it and the tables it lacks. The URL's own database, if any, only
    /// serves the connection.
    #[cfg(feature = "mysql")]
    pub async fn connect_mysql(url: &str, schema: &str, tables: TableNames) -> Result<Self> {
        Self::connect_mysql_with_mode(url, schema, tables, OpenMode::CreateMissing).await
    }

    /// [`SqlDb::connect_mysql`] in `mode`. With [`OpenMode::Existing`] no database, table,
    /// index or stamp is created: a database `schema` with none of agno's tables (or none
    /// at all) is `NotFound`, and calls on an absent table answer `NotFound`.
    #[cfg(feature = "mysql")]
    pub async fn connect_mysql_with_mode(
        url: &str,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        Self::connect_mysql_with_pool(url, schema, tables, mode, PoolSettings::default()).await
    }

    /// [`SqlDb::connect_mysql_with_mode`] with a pool of `pool`'s size (see
    /// [`PoolSettings::for_worker`]).
    #[cfg(feature = "mysql")]
    pub async fn connect_mysql_with_pool(
        url: &str,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
        pool: PoolSettings,
    ) -> Result<Self> {
        schema::validate_identifier("MySQL database name", schema)?;
        crate::schema::validate_names(&tables)?;
        pool.check()?;
        let exec = mysql::MySqlExecutor::connect(url, schema.to_owned(), pool).await?;
        Self::init_mysql(exec, schema, tables, mode).await
    }

    /// [`SqlDb::init`] over PostgreSQL schema `schema`.
    #[cfg(feature = "postgres")]
    async fn init_postgres(
        exec: postgres::PgExecutor,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        let schema = Some(schema.to_owned());
        let what = "the PostgreSQL server";
        Self::init(
            Arc::new(exec),
            &dialect::Postgres,
            schema,
            tables,
            mode,
            what,
        )
        .await
    }

    /// [`SqlDb::init`] over MySQL database `schema`.
    #[cfg(feature = "mysql")]
    async fn init_mysql(
        exec: mysql::MySqlExecutor,
        schema: &str,
        tables: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        let schema = Some(schema.to_owned());
        let what = "the MySQL server";
        Self::init(Arc::new(exec), &dialect::MySql, schema, tables, mode, what).await
    }

    /// Builds the store and creates what is missing, or, in [`OpenMode::Existing`], only
    /// checks what exists; `what` names the database in errors.
    async fn init(
        exec: Arc<dyn exec::Executor>,
        dialect: &'static dyn dialect::Dialect,
        schema: Option<String>,
        tables: TableNames,
        mode: OpenMode,
        what: &str,
    ) -> Result<Self> {
        let store = Arc::new(SqlStore::new(exec, dialect, schema, tables));
        if mode.creates() {
            store.ensure_schema().await?;
        } else {
            store.open_existing(what).await?;
        }
        Ok(SqlDb { store })
    }

    /// Bytes of run JSON that session reads may keep, to reuse while those runs provably have
    /// not changed (default 64 MiB; 0 keeps nothing and drops what is kept). One session
    /// larger than the bound is kept alone until another session is read, so a long
    /// conversation re-read every turn stays cached: memory held is at most the bound or
    /// that one session, whichever is larger. SQLite proves
    /// it by the database's version and the rows its own connection changed (after the
    /// store's own writes only new and changed runs are read), PostgreSQL by a digest of the
    /// rows' `xmin`s; MySQL keeps nothing. Runs parsed through [`agno_storage_core::Session::shared_run_values`]
    /// are kept parsed while cached, so a session re-read every turn is parsed once; the
    /// bound counts their text, and a parsed tree takes a few times its text beside it.
    pub fn set_run_cache_bytes(&self, bytes: usize) {
        self.store.run_cache.set_capacity(bytes);
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        let s = self.store.clone();
        let mut builder = AgnoDb::builder(s.dialect.name());
        if let Some(max) = s.dialect.max_id_chars() {
            builder = builder.max_id_chars(max);
        }
        if let Some(max) = s.exec.max_json_depth() {
            builder = builder.max_json_depth(max);
        }
        builder
            .all_stores(s.clone())
            .tables(s.names.clone())
            .migrations(Arc::new(migrate::SqlMigrations { store: s }))
            .durable(true)
            .build()
    }
}
