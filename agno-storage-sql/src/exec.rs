//! The executor seam: each dialect runs SQL text with typed parameters and returns rows.

use agno_storage_core::migration::MigrationLock;
use agno_storage_core::{async_trait, Result};

use crate::value::{Row, SqlValue};

/// One statement and its parameters. SQL uses `?` placeholders; the PostgreSQL executor
/// numbers them.
pub(crate) type Statement = (String, Vec<SqlValue>);

/// Runs SQL against one database.
#[async_trait]
pub(crate) trait Executor: Send + Sync {
    /// Rows of a query (or of a statement with `RETURNING`).
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>>;

    /// Rows affected by a statement.
    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64>;

    /// Runs the statements in one transaction (a writer transaction on SQLite) and returns
    /// the rows of each. Any error rolls everything back.
    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>>;

    /// Serializes migrations across handles and processes until the guard is dropped.
    async fn migration_lock(&self) -> Result<MigrationLock>;
}
