//! The executor seam: each dialect runs SQL text with typed parameters and returns rows.

use agno_storage_core::migration::MigrationLock;
#[cfg(feature = "mysql")]
use agno_storage_core::Error;
use agno_storage_core::{async_trait, JobWakeups, Result};

use crate::value::{Row, SqlValue};

/// One statement and its parameters. SQL uses `?` placeholders; the PostgreSQL executor
/// numbers them.
pub(crate) type Statement = (String, Vec<SqlValue>);

#[cfg(feature = "mysql")]
/// A server-wide named lock (MySQL `GET_LOCK`) called `prefix` followed by the MD5 of `key`
/// in hex, as agno names its run_index lock.
#[derive(Debug, Clone)]
pub(crate) struct NamedLock {
    pub(crate) prefix: &'static str,
    pub(crate) key: String,
}

#[cfg(feature = "mysql")]
impl NamedLock {
    /// agno's lock serializing run_index backfills of one session:
    /// `agno_run_index_` + md5(session_id).
    pub(crate) fn run_index(session_id: &str) -> Self {
        NamedLock {
            prefix: "agno_run_index_",
            key: session_id.to_owned(),
        }
    }

    /// Our lock serializing the sequence of one job session's serialized tickets (agno has
    /// no MySQL queue): `agno_job_session_` + md5 of the jobs table and the session id.
    pub(crate) fn job_session(table: &str, session_id: &str) -> Self {
        NamedLock {
            prefix: "agno_job_session_",
            key: format!("{table}\u{0}{session_id}"),
        }
    }
}

/// A database's version: equal versions mean no commit by another connection, no schema
/// change, and no change by the executor's own connection to the watched table (to any
/// table, when the table is not watched) in between (SQLite's `data_version` and
/// `schema_version`, and its own connection's changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct DataVersion {
    pub(crate) data: i64,
    pub(crate) schema: i64,
    pub(crate) own_changes: u64,
    /// Whether `own_changes` counts the changes to the watched table ([`RowWatch`]) only.
    pub(crate) watched: bool,
}

/// How a read of one table's rows can fetch only the rows that changed since the caller's
/// last read (SQLite: its update hook notes, by `rowid`, each row its own connection
/// changes, and the caller holds the rows of its last read with their `rowid`s).
#[cfg(feature = "sqlite")]
pub(crate) struct RowWatch {
    /// The table, unquoted.
    pub(crate) table: String,
    /// The read, with each row's `rowid` as `row_id` (same parameters).
    pub(crate) read: String,
    /// The `rowid` (as `row_id`) of each row `read` returns (same parameters).
    pub(crate) row_ids: String,
    /// `read`'s columns for the rows whose `rowid` is in the JSON array bound to its one
    /// `?`.
    pub(crate) rows_by_id: String,
    /// The `rowid`s of the rows the caller holds as read at `known`.
    pub(crate) held: std::sync::Arc<Vec<i64>>,
}

/// A read that a database's version can prove unchanged ([`Executor::query_versioned`]).
pub(crate) struct VersionedRead {
    /// The query and its parameters.
    pub(crate) sql: String,
    pub(crate) params: Vec<SqlValue>,
    /// The version of the caller's last read, if it kept one.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(crate) known: Option<DataVersion>,
    /// How to fetch only what the executor's own connection changed, where it can.
    #[cfg(feature = "sqlite")]
    pub(crate) watch: Option<RowWatch>,
}

/// What [`Executor::query_versioned`] found.
pub(crate) enum Versioned {
    /// The database has not changed since the version the caller knew (only SQLite can
    /// tell).
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    Unchanged,
    /// The rows, with the version they were read at when the executor can tell it.
    Rows(Option<DataVersion>, Vec<Row>),
    /// Only the executor's own connection changed the watched table since the version the
    /// caller knew: `row_ids` lists the `rowid` of every row the read returns now, and
    /// `rows` holds those of them the caller does not hold or that changed since.
    #[cfg(feature = "sqlite")]
    Changed {
        version: DataVersion,
        row_ids: Vec<i64>,
        rows: Vec<Row>,
    },
}

/// What one call `agno_note(value, 'tag', more…)` in a statement saw (see
/// [`Executor::execute_noting`]).
#[cfg(feature = "sqlite")]
#[derive(Debug)]
pub(crate) struct Note {
    pub(crate) tag: String,
    /// `value`, then `more…`.
    pub(crate) values: Vec<SqlValue>,
}

/// Runs SQL against one database.
#[async_trait]
pub(crate) trait Executor: Send + Sync {
    /// Rows of a query (or of a statement with `RETURNING`).
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>>;

    /// The deepest JSON nesting the server's JSON columns accept, when it is below
    /// `agno_storage_core::json::MAX_DEPTH` (MariaDB's `JSON_VALID` stops at 31 levels,
    /// MySQL's JSON type at 100).
    fn max_json_depth(&self) -> Option<usize> {
        None
    }

    /// Like [`Executor::query`], for rows with large JSON cells: where the executor can, a
    /// column declared JSON arrives already decoded (`SqlValue::Json`), parsed straight from
    /// the driver's buffer instead of through an owned copy of its text. A cell that is not
    /// valid JSON arrives as text, as from `query`.
    async fn query_json(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        self.query(sql, params).await
    }

    /// [`Executor::query`] unless the database is provably unchanged since `known` was
    /// read: then [`Versioned::Unchanged`]. Rows come with the database's version as of
    /// their read, when the executor can tell it (SQLite; others answer `None` and never
    /// `Unchanged`). With `watch`, where the executor keeps track of its own changes to the
    /// watched table, the rows are `watch.read`'s and a read after changes of its own only
    /// fetches the rows that changed ([`Versioned::Changed`]).
    async fn query_versioned(&self, read: VersionedRead) -> Result<Versioned> {
        Ok(Versioned::Rows(
            None,
            self.query(&read.sql, read.params).await?,
        ))
    }

    /// Rows affected by a statement (rows matched, for updates).
    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64>;

    /// Runs a write and returns how many rows it changed and what its SQL noted: each call
    /// `agno_note(value, 'tag', more…)` evaluates to `value` and notes `tag` with `value,
    /// more…`, in call order. It stands in for `RETURNING` on SQLite, where `RETURNING`
    /// runs a trigger program into a temporary table and costs more than the few values a
    /// caller needs. Only SQLite has it.
    #[cfg(feature = "sqlite")]
    async fn execute_noting(&self, sql: &str, params: Vec<SqlValue>) -> Result<(u64, Vec<Note>)> {
        let _ = (sql, params);
        Err(agno_storage_core::Error::unsupported(
            "this SQL executor",
            "agno_note",
        ))
    }

    /// Runs the statements in one transaction (a writer transaction on SQLite) and returns
    /// the rows of each. Any error rolls everything back.
    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>>;

    #[cfg(feature = "mysql")]
    /// An interactive transaction on one connection, holding `lock` from before it begins
    /// until after it ends. Only dialects without `RETURNING` and `UPDATE … FROM (SELECT …)`
    /// on the target table (MySQL) need one.
    async fn begin(&self, lock: Option<NamedLock>) -> Result<Box<dyn Tx>> {
        let _ = lock;
        Err(Error::unsupported(
            "this SQL executor",
            "interactive transactions",
        ))
    }

    /// Serializes migrations across handles and processes until the guard is dropped.
    async fn migration_lock(&self) -> Result<MigrationLock>;

    /// Notifications on `channel` whose payload is `payload`, as job wake-ups, where the
    /// database has them (PostgreSQL `LISTEN`); `None` (the default) elsewhere.
    async fn listen(&self, channel: &str, payload: &str) -> Result<Option<Box<dyn JobWakeups>>> {
        let _ = (channel, payload);
        Ok(None)
    }
}

#[cfg(feature = "mysql")]
/// An open transaction. Dropping it without [`Tx::commit`] rolls it back (and releases its
/// lock).
#[async_trait]
pub(crate) trait Tx: Send {
    /// Rows of a query inside the transaction.
    async fn query(&mut self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>>;

    /// Rows affected (matched, for updates) by a statement inside the transaction.
    async fn execute(&mut self, sql: &str, params: Vec<SqlValue>) -> Result<u64>;

    /// Commits, then releases the lock.
    async fn commit(self: Box<Self>) -> Result<()>;
}
