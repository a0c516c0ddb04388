//! What differs between SQLite, PostgreSQL and MySQL, behind one trait.
//!
//! [`Dialect`] renders the SQL that differs (quoting, column types, JSON access,
//! case-insensitive matching, upserts, index DDL) and owns the statements whose shape
//! differs: the upsert that returns the stored row, the claim of a job or schedule, a run's
//! index assignment, and the metrics migration. Its provided methods are the SQL SQLite
//! and PostgreSQL share (`ON CONFLICT`, `RETURNING`, `UPDATE … WHERE id = (SELECT …)`);
//! each database has one implementation in its own module, and no other module asks which
//! database it runs on.

use std::collections::HashSet;

use agno_storage_core::json::to_python_json;
use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::migration::StepOutcome;
use agno_storage_core::{async_trait, JobCompletion, Result, RunRecord};
use serde_json::Value;

use crate::exec::Statement;
use crate::named::NamedSql;
use crate::runs::RunWrite;
use crate::schema::Table;
use crate::store::{SqlStore, Upsert};
use crate::value::{Row, SqlValue};

#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "mysql")]
pub(crate) use mysql::MySql;
#[cfg(feature = "postgres")]
pub(crate) use postgres::Postgres;
#[cfg(feature = "sqlite")]
pub(crate) use sqlite::Sqlite;

/// Column types as agno declares them, rendered per dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColType {
    /// `VARCHAR` (MySQL `VARCHAR(n)`).
    Str(u16),
    /// SQLite `VARCHAR`, PostgreSQL and MySQL `TEXT`.
    LongText,
    BigInt,
    Json,
    Bool,
    Date,
}

/// One claim of jobs or a schedule: the first `limit` rows by `order` that meet
/// `predicate` get `set` and are returned (in no particular order), and no two claimers get
/// the same row.
pub(crate) struct Claim<'a> {
    pub(crate) table: Table,
    /// Which rows are claimable, with its parameters.
    pub(crate) predicate: (&'a str, Vec<SqlValue>),
    /// `ORDER BY` of the candidates.
    pub(crate) order: &'a str,
    /// The `SET` list of the claim, with its parameters.
    pub(crate) set: (&'a str, Vec<SqlValue>),
    /// How many rows at most.
    pub(crate) limit: usize,
    /// A further condition on the candidates only, which names the candidate row `c`
    /// (a correlated subquery; not re-checked by the update).
    pub(crate) candidate_filter: Option<String>,
}

impl Claim<'_> {
    /// `SELECT id` of the candidates, locked where the dialect locks rows, and its
    /// parameters: the predicate's, then the limit (a parameter, so claims of any size
    /// share one prepared statement).
    fn candidates(&self, table: &str, skip_locked: &str) -> (String, Vec<SqlValue>) {
        let filter = match &self.candidate_filter {
            Some(f) => format!(" AND {f}"),
            None => String::new(),
        };
        let sql = format!(
            "SELECT id FROM {table} c WHERE {}{filter} ORDER BY {} LIMIT ?{skip_locked}",
            self.predicate.0, self.order
        );
        let mut params = self.predicate.1.clone();
        params.push(SqlValue::int(self.limit as i64));
        (sql, params)
    }
}

/// One chunk of a multi-row insert that skips rows whose key exists: the `VALUES` list, its
/// parameters, and a `SELECT COUNT(*) AS n` of the chunk's keys.
pub(crate) struct InsertChunk {
    pub(crate) values: String,
    pub(crate) params: Vec<SqlValue>,
    pub(crate) count: Statement,
}

/// How a dialect serializes the sequence of a job session ([`Dialect::session_lock`]).
pub(crate) enum SessionLock {
    /// A statement that takes a lock held to the end of the transaction it opens
    /// (PostgreSQL's `pg_advisory_xact_lock`); the dialect has `INSERT … ON CONFLICT DO
    /// NOTHING RETURNING`.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Statement(Statement),
    /// A named lock held from before the transaction begins until after it commits
    /// (MySQL's `GET_LOCK`).
    #[cfg(feature = "mysql")]
    Named(crate::exec::NamedLock),
}

/// The SQL dialect of one database. One implementation per database; the provided methods
/// are what SQLite and PostgreSQL share.
#[async_trait]
pub(crate) trait Dialect: Send + Sync + 'static {
    /// The backend's name in errors and `AgnoDb`.
    fn name(&self) -> &'static str;

    /// The longest identifier, in characters, agno's key columns hold (`None`: no limit).
    fn max_id_chars(&self) -> Option<usize>;

    /// A quoted identifier.
    fn quote(&self, ident: &str) -> String {
        format!("\"{}\"", ident.replace('"', "\"\""))
    }

    /// A column type as agno declares it on this database.
    fn col_type(&self, t: ColType) -> String;

    /// A case-insensitive `LIKE` of `expr` against one bound pattern made by
    /// [`like_pattern`].
    fn ilike(&self, expr: &str) -> String;

    /// The incoming row's `column` in an upsert's update list.
    fn excluded(&self, column: &str) -> String {
        format!("excluded.{}", self.quote(column))
    }

    /// The stored row's `column` in an upsert's update list (the table is aliased `t`).
    fn stored(&self, column: &str) -> String {
        format!("t.{}", self.quote(column))
    }

    /// `a = b`, exactly (compared as bytes where the default collation ignores case).
    fn same(&self, a: &str, b: &str) -> String {
        format!("{a} = {b}")
    }

    /// agno's owner guard on upserts: the stored row is unowned or owned by the writer.
    fn owner_guard(&self) -> String {
        let stored = self.stored("user_id");
        format!(
            "{stored} IS NULL OR {}",
            self.same(&stored, &self.excluded("user_id"))
        )
    }

    /// ` FOR UPDATE SKIP LOCKED` where the dialect has row locks.
    fn skip_locked(&self) -> &'static str {
        " FOR UPDATE SKIP LOCKED"
    }

    /// A JSON column's top-level string field as text (`''` when absent).
    fn json_field_text(&self, column: &str, field: &str) -> String;

    /// Whether a JSON column's top-level `field` is JSON `true` (false when absent, of
    /// another type, or the column is not JSON).
    fn json_field_is_true(&self, column: &str, field: &str) -> String;

    /// A JSON column's top-level integer `field` (0 when absent).
    fn json_field_int(&self, column: &str, field: &str) -> String;

    /// The JSON `json` with top-level `field` set to the integer `value` (SQL expressions).
    fn json_with_int(&self, json: &str, field: &str, value: &str) -> String;

    /// `a < b` for ids, in the order of their code points where the collation would fold
    /// case.
    fn id_before(&self, a: &str, b: &str) -> String {
        format!("{a} < {b}")
    }

    /// The statement that wakes idle workers after a job may have become claimable
    /// (PostgreSQL: `NOTIFY` on [`crate::jobs::WAKE_CHANNEL`] with the jobs table as
    /// payload); `None` where the database has no notifications.
    fn wake_workers(&self, s: &SqlStore) -> Option<Statement> {
        let _ = s;
        None
    }

    /// The lock that serializes the sequence of a job session's serialized tickets, where
    /// writers are not serialized already (SQLite's are): on PostgreSQL agno's advisory
    /// lock, on MySQL a named lock (`None` elsewhere).
    fn session_lock(&self, s: &SqlStore, session_id: &str) -> Option<SessionLock> {
        let _ = (s, session_id);
        None
    }

    /// A JSON column rendered as text.
    fn json_as_text(&self, column: &str) -> String {
        format!("CAST({column} AS TEXT)")
    }

    /// A present JSON value as a parameter: agno's JSON text, encoded now, where the
    /// database stores JSON as text.
    fn json_param(&self, v: &Value) -> SqlValue {
        SqlValue::Text(Some(to_python_json(v)))
    }

    /// Whether text columns can hold NUL (PostgreSQL's cannot).
    fn text_holds_nul(&self) -> bool {
        true
    }

    /// The pseudo-column naming a row's place in its table, by which the executor notes the
    /// rows its own connection changes (SQLite's `rowid`; see [`crate::exec::RowWatch`]).
    #[cfg(feature = "sqlite")]
    fn row_id(&self) -> Option<&'static str> {
        None
    }

    /// How rows of the table aliased `alias`, keyed by column `key`, tell their version,
    /// where the dialect can (PostgreSQL's `xmin`).
    fn row_versioning(&self, alias: &str, key: &str) -> Option<RowVersioning> {
        let _ = (alias, key);
        None
    }

    /// A memories filter: the `topics` JSON list holds `topic`.
    fn topic_filter(&self, topic: &str) -> (String, SqlValue);

    /// A memories filter: the `memory` JSON text contains `search`, ignoring case.
    fn memory_search(&self, search: &str) -> (String, SqlValue);

    /// A query of one table's column names (`column_name`), in order; no rows when it does
    /// not exist.
    fn columns_query(&self, schema: Option<&str>, table: &str) -> Statement;

    /// Agno's physical column order of `t`, where it differs from the spec's.
    fn column_order(&self, t: Table) -> Option<&'static [&'static str]> {
        let _ = t;
        None
    }

    /// Whether agno declares the index (a column or a composite's declared name) on `t`.
    fn declares_index(&self, t: Table, name: &str) -> bool {
        let _ = (t, name);
        true
    }

    /// The name of a composite index, as agno names it.
    fn composite_index_name(&self, table: &str, declared: &str, columns: &[&str]) -> String {
        let _ = declared;
        format!("idx_{table}_{}", columns.join("_"))
    }

    /// Whether `CREATE INDEX … WHERE` makes a partial index.
    fn has_partial_indexes(&self) -> bool {
        true
    }

    /// `IF NOT EXISTS ` where `CREATE INDEX` takes it.
    fn if_not_exists(&self) -> &'static str {
        "IF NOT EXISTS "
    }

    /// Where the dialect has no partial indexes: the unique keys (declared name, columns)
    /// over the generated owner column that replace agno's partial unique indexes of `t`.
    fn owner_unique_keys(
        &self,
        t: Table,
    ) -> Option<&'static [(&'static str, &'static [&'static str])]> {
        let _ = t;
        None
    }

    /// Creates the schema when the database has them and it is missing.
    async fn create_schema(&self, s: &SqlStore, schema: &str) -> Result<()> {
        let _ = (s, schema);
        Ok(())
    }

    /// Creates indexes from `(name, sql)` pairs; existing ones are skipped (`IF NOT
    /// EXISTS`, or by name where the dialect cannot say it).
    async fn create_indexes(
        &self,
        s: &SqlStore,
        t: Table,
        indexes: Vec<(String, String)>,
    ) -> Result<()> {
        let _ = t;
        for (_, sql) in indexes {
            s.exec.execute(&sql, vec![]).await?;
        }
        Ok(())
    }

    /// The SQL of an upsert into `table` (qualified, quoted).
    fn upsert_sql(&self, table: &str, u: &Upsert<'_>) -> String {
        let set: Vec<String> = u
            .set
            .iter()
            .map(|(c, e)| format!("{} = {e}", self.quote(c)))
            .collect();
        format!(
            "INSERT INTO {table} AS t ({}) VALUES {} ON CONFLICT ({}) DO UPDATE SET {}{}",
            self.quote_list(u.columns),
            u.values,
            u.conflict,
            set.join(", "),
            u.guard
                .as_ref()
                .map(|g| format!(" WHERE {g}"))
                .unwrap_or_default()
        )
    }

    /// Quoted column names, comma-separated.
    fn quote_list(&self, columns: &[&str]) -> String {
        columns
            .iter()
            .map(|c| self.quote(c))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Runs an upsert made by [`Dialect::upsert_sql`] and returns the stored row's
    /// `returning` columns, or `None` when its guard kept the stored row. Dialects without
    /// `RETURNING` read the row back by `key` in the same transaction and ask `refused`
    /// whether the guard held it back.
    async fn upsert_returning(
        &self,
        s: &SqlStore,
        table: Table,
        (sql, params): Statement,
        returning: &str,
        key: (&str, SqlValue),
        refused: &(dyn for<'r> Fn(&'r Row) -> Result<bool> + Sync),
    ) -> Result<Option<Row>> {
        let _ = (table, key, refused);
        Ok(s.exec
            .query(&format!("{sql} RETURNING {returning}"), params)
            .await?
            .into_iter()
            .next())
    }

    /// Runs `write` (an `INSERT` or `UPDATE`) and returns the rows it wrote, read by
    /// `read` in the same transaction where the dialect has no `RETURNING`.
    async fn write_returning(
        &self,
        s: &SqlStore,
        write: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        let _ = read;
        s.exec
            .query(&format!("{} RETURNING *", write.0), write.1)
            .await
    }

    /// Runs writes (upserts) in one transaction and returns the rows each stored, read by
    /// its read statement where the dialect has no `RETURNING`.
    async fn writes_returning(
        &self,
        s: &SqlStore,
        writes: Vec<(Statement, Statement)>,
    ) -> Result<Vec<Row>> {
        let statements = writes
            .into_iter()
            .map(|((sql, params), _)| (format!("{sql} RETURNING *"), params))
            .collect();
        Ok(s.exec
            .transaction(statements)
            .await?
            .into_iter()
            .flatten()
            .collect())
    }

    /// Runs `insert` unless its key exists, and returns the inserted row (none when the key
    /// was taken, whether by a stored row or a concurrent insert).
    async fn insert_if_absent(
        &self,
        s: &SqlStore,
        insert: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        let _ = read;
        s.exec
            .query(
                &format!("{} ON CONFLICT DO NOTHING RETURNING *", insert.0),
                insert.1,
            )
            .await
    }

    /// Runs the statements in one transaction and returns the rows the last one (a
    /// `DELETE` or `UPDATE`) affected.
    async fn transaction_count(&self, s: &SqlStore, mut statements: Vec<Statement>) -> Result<u64> {
        if let Some(last) = statements.last_mut() {
            last.0.push_str(" RETURNING 1");
        }
        let results = s.exec.transaction(statements).await?;
        Ok(results.last().map_or(0, |rows| rows.len() as u64))
    }

    /// `id` among the rows a subquery selects, the subquery run once.
    fn id_among(&self, subquery: &str) -> String {
        format!("id IN ({subquery})")
    }

    /// One claim (see [`Claim`]): the candidates are chosen and locked, then re-checked in
    /// one statement, so two claimers never get the same row (SQLite serializes writers;
    /// PostgreSQL skips rows another claimer holds).
    async fn claim(&self, s: &SqlStore, c: Claim<'_>) -> Result<Vec<Row>> {
        if c.limit == 0 {
            return Ok(Vec::new());
        }
        let table = s.t(c.table);
        let (candidates, candidate_params) = c.candidates(&table, self.skip_locked());
        let among = self.id_among(&candidates);
        let (set, mut params) = c.set;
        let (predicate, predicate_params) = c.predicate;
        let sql = format!("UPDATE {table} SET {set} WHERE {predicate} AND {among} RETURNING *");
        params.extend(predicate_params);
        params.extend(candidate_params);
        s.exec.query(&sql, params).await
    }

    /// Finishes held jobs of `worker_id` at `now`, each fenced on its own (`locked_by`,
    /// its `attempt`, `running`), and returns the ids it finished: one
    /// `UPDATE … FROM (VALUES …)` joined on `id`.
    async fn finish_jobs(
        &self,
        s: &SqlStore,
        worker_id: &str,
        completions: &[JobCompletion],
        now: i64,
    ) -> Result<HashSet<String>> {
        if completions.is_empty() {
            return Ok(HashSet::new());
        }
        let values = vec!["(?, ?, ?, ?)"; completions.len()].join(", ");
        let sql = format!(
            "UPDATE {} AS j SET status = v.column3, error = v.column4, locked_by = NULL, locked_at = NULL, \
             completed_at = CASE WHEN v.column3 = 'paused' THEN NULL ELSE ? END, updated_at = ? \
             FROM (VALUES {values}) AS v \
             WHERE j.id = v.column1 AND j.attempt = v.column2 AND j.locked_by = ? AND j.status = 'running' RETURNING id",
            s.t(Table::Jobs)
        );
        let mut params = vec![SqlValue::int(now), SqlValue::int(now)];
        for c in completions {
            params.extend([
                SqlValue::text(&c.id),
                SqlValue::int(c.attempt),
                SqlValue::text(c.status.as_str()),
                SqlValue::Text(c.error.clone()),
            ]);
        }
        params.push(SqlValue::text(worker_id));
        s.exec
            .query(&sql, params)
            .await?
            .iter()
            .map(|r| r.str("id"))
            .collect()
    }

    /// Inserts rows whose `key` is not stored yet, a chunk at a time in one transaction
    /// (`insert` is `INSERT INTO … (…) VALUES`), counting the rows inserted and the chunks'
    /// keys present after.
    async fn insert_absent(
        &self,
        s: &SqlStore,
        insert: &str,
        key: &str,
        chunks: Vec<InsertChunk>,
    ) -> Result<InsertedRuns> {
        let mut statements: Vec<Statement> = Vec::with_capacity(chunks.len() * 2);
        for chunk in chunks {
            statements.push((
                format!(
                    "{insert} {} ON CONFLICT ({key}) DO NOTHING RETURNING {key}",
                    chunk.values
                ),
                chunk.params,
            ));
            statements.push(chunk.count);
        }
        let results = s.exec.transaction(statements).await?;
        let mut outcome = InsertedRuns::default();
        for pair in results.chunks(2) {
            outcome.inserted += pair.first().map_or(0, |r| r.len() as u64);
            outcome.present += count_of(pair.get(1).map(Vec::as_slice).unwrap_or_default())?;
        }
        Ok(outcome)
    }

    /// `upsert_run`'s statement, built once per store.
    fn run_upsert(&self, s: &SqlStore) -> NamedSql;

    /// Writes `run` with `statement`, assigning the session's next `run_index` when the run
    /// has none; `now` is its update time. A missing or foreign session fails with the
    /// constraint error of the database ([`ErrorKind::NotFound`] or
    /// [`ErrorKind::InvalidInput`]), which the caller explains.
    ///
    /// [`ErrorKind::NotFound`]: agno_storage_core::ErrorKind::NotFound
    /// [`ErrorKind::InvalidInput`]: agno_storage_core::ErrorKind::InvalidInput
    async fn upsert_run(
        &self,
        s: &SqlStore,
        statement: &NamedSql,
        run: &RunRecord,
        now: i64,
    ) -> Result<RunWrite>;

    /// The 3.0.0 metrics step: per-user rows, unique on `(user_id, date,
    /// aggregation_period)`, given the table's current columns.
    async fn migrate_metrics(&self, s: &SqlStore, existing: &[String]) -> Result<StepOutcome>;
}

/// The `n` of a `SELECT COUNT(*) AS n` result.
pub(crate) fn count_of(rows: &[Row]) -> Result<u64> {
    Ok(rows
        .first()
        .map(|row| row.i64("n"))
        .transpose()?
        .unwrap_or(0)
        .max(0) as u64)
}

/// Escapes `%`, `_` and `\` so user text matches literally in `LIKE … ESCAPE '\'`.
pub(crate) fn like_pattern(text: &str) -> String {
    let mut out = String::from("%");
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// SQL expressions for the versions of a table's rows ([`Dialect::row_versioning`]).
pub(crate) struct RowVersioning {
    /// A row's version, as text; it changes whenever the row is written.
    pub(crate) version: String,
    /// An aggregate over the selected rows that changes when any of them is added, removed
    /// or written; it takes one parameter, a 64-bit seed.
    pub(crate) digest: String,
}
