//! The store behind every trait: an executor, a dialect and the table layout.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agno_storage_core::{Error, ErrorKind, OpenMode, Result, SchemaVersion};

use crate::dialect::Dialect;
use crate::exec::{Executor, Statement};
use crate::run_cache::{RunCache, DEFAULT_RUN_CACHE_BYTES};
use crate::schema::{spec, Ddl, Table, TableNames, TABLES};
use crate::value::{Row, SqlValue};

pub(crate) struct SqlStore {
    pub(crate) exec: Arc<dyn Executor>,
    pub(crate) dialect: &'static dyn Dialect,
    pub(crate) schema: Option<String>,
    pub(crate) names: TableNames,
    /// Tables that exist but lack columns this code needs: table → missing columns.
    invalid: Mutex<HashMap<Table, Vec<String>>>,
    /// Tables that do not exist in a database opened with [`OpenMode::Existing`] (which
    /// creates none): calls on them fail naming the table.
    absent: Mutex<HashSet<Table>>,
    /// Whether the sessions table still has agno 2.x's `runs` column.
    legacy_runs_column: AtomicBool,
    /// `upsert_run`'s statement, built on first use (the tables' names never change).
    pub(crate) upsert_run_sql: std::sync::OnceLock<crate::named::NamedSql>,
    /// Runs of recently read sessions, reused while the database is unchanged.
    pub(crate) run_cache: RunCache,
}

/// ISO-8601 local time with microseconds, as agno stamps `agno_schema_versions`.
pub(crate) fn iso_now() -> String {
    chrono::Local::now()
        .naive_local()
        .format("%Y-%m-%dT%H:%M:%S%.6f")
        .to_string()
}

impl SqlStore {
    pub(crate) fn new(
        exec: Arc<dyn Executor>,
        dialect: &'static dyn Dialect,
        schema: Option<String>,
        names: TableNames,
    ) -> Self {
        SqlStore {
            exec,
            dialect,
            schema,
            names,
            invalid: Mutex::new(HashMap::new()),
            absent: Mutex::new(HashSet::new()),
            legacy_runs_column: AtomicBool::new(false),
            upsert_run_sql: std::sync::OnceLock::new(),
            run_cache: RunCache::new(DEFAULT_RUN_CACHE_BYTES),
        }
    }

    pub(crate) fn ddl(&self) -> Ddl<'_> {
        Ddl {
            dialect: self.dialect,
            schema: self.schema.as_deref(),
            names: &self.names,
        }
    }

    /// The qualified, quoted table reference for SQL.
    pub(crate) fn t(&self, t: Table) -> String {
        self.ddl().table(t)
    }

    /// The table as agno names it in messages (`schema.table` on servers).
    pub(crate) fn table_ref(&self, t: Table) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.names.get(t)),
            None => self.names.get(t).to_owned(),
        }
    }

    pub(crate) fn q(&self, ident: &str) -> String {
        self.dialect.quote(ident)
    }

    /// Refuses to touch a table that lacks columns until it is migrated.
    pub(crate) fn check(&self, t: Table) -> Result<()> {
        if self.is_absent(t) {
            return Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "table {} does not exist, and this database was opened without creating \
                     tables (OpenMode::Existing): create it with `agno-storage migrate <URL>`",
                    self.table_ref(t)
                ),
            )
            .set_temporary(false)
            .with_backend(self.dialect.name()));
        }
        let invalid = self.invalid.lock().unwrap_or_else(|p| p.into_inner());
        match invalid.get(&t) {
            Some(missing) => Err(self.missing_columns_error(t, missing)),
            None => Ok(()),
        }
    }

    /// Why `t` cannot be used while it lacks `missing`: `MigrationRequired` when only
    /// columns the migration adds are missing; otherwise `SchemaMismatch`, naming the columns
    /// every agno release creates (damage no migration repairs) and how to repair them.
    /// The `SchemaMismatch` of a table that lacks columns no migration adds (damage, not a
    /// pending migration), if it does.
    pub(crate) fn damage(&self, t: Table) -> Option<Error> {
        let invalid = self.invalid.lock().unwrap_or_else(|p| p.into_inner());
        let error = self.missing_columns_error(t, invalid.get(&t)?);
        (error.kind() == ErrorKind::SchemaMismatch).then_some(error)
    }

    fn missing_columns_error(&self, t: Table, missing: &[String]) -> Error {
        let added = crate::schema::migration_added_columns(t);
        let (pending, damaged): (Vec<&String>, Vec<&String>) =
            missing.iter().partition(|c| added.contains(&c.as_str()));
        let table = self.table_ref(t);
        // `ALTER TABLE … ADD COLUMN …` for each column, as agno declares it (nullable, as
        // the migration adds columns to a table that has rows).
        let ddl = self.ddl();
        let repair = |columns: &[&String]| -> String {
            columns
                .iter()
                .filter_map(|name| spec(t).columns.iter().find(|c| c.name == name.as_str()))
                .map(|c| {
                    let def = ddl.column_def(&crate::schema::Column {
                        not_null: false,
                        ..*c
                    });
                    format!("ALTER TABLE {} ADD COLUMN {def}", self.t(t))
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        if damaged.is_empty() {
            return Error::migration_required(
                &table,
                format!(
                    "it lacks the columns {pending:?} that agno 3 added, which the migration \
                     adds (if `agno-storage status` already shows this table at 3.0.0, they \
                     were dropped after its migration, which will not run again: add them \
                     back with {})",
                    repair(&pending)
                ),
            )
            .with_backend(self.dialect.name());
        }
        let repairs = repair(&damaged);
        let also = if pending.is_empty() {
            String::new()
        } else {
            format!(
                " It also lacks {pending:?}, which agno 3 added: once the others are repaired, \
                 `agno-storage migrate <URL>` (`MigrationManager::new(db).up()`) adds those."
            )
        };
        Error::new(
            ErrorKind::SchemaMismatch,
            format!(
                "Table {table} has an invalid schema: it lacks the columns {damaged:?}, which every \
                 agno release that has this table creates, so it is not an agno table of any \
                 version (damaged, or made outside agno). This is not a pending migration: no \
                 migration adds these columns, and `agno-storage migrate` will not repair it. \
                 Add them back as agno declares them ({}), or recreate the table or restore it \
                 from a backup.{also}",
                repairs
            ),
        )
        .with_backend(self.dialect.name())
    }

    /// Whether `t` was found missing by [`SqlStore::open_existing`].
    pub(crate) fn is_absent(&self, t: Table) -> bool {
        self.absent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&t)
    }

    /// Where this database is, for messages: the schema on servers, `what` otherwise.
    fn location(&self, what: &str) -> String {
        match &self.schema {
            Some(schema) => format!("{what} (schema {schema})"),
            None => what.to_owned(),
        }
    }

    /// [`OpenMode::Existing`]: reads which tables exist and which columns they lack, and
    /// creates or alters nothing (no schema, table, index or stamp). `NotFound` when none
    /// of agno's tables exists; absent tables are remembered for [`SqlStore::check`].
    pub(crate) async fn open_existing(&self, what: &str) -> Result<()> {
        let mut found = 0;
        for t in TABLES {
            match self.columns(t).await? {
                None => {
                    self.absent
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(t);
                }
                Some(existing) => {
                    found += 1;
                    self.validate(t, &existing);
                }
            }
        }
        if found == 0 {
            return Err(
                OpenMode::no_database(self.location(what), "none of agno's tables exists")
                    .with_backend(self.dialect.name()),
            );
        }
        Ok(())
    }

    /// Records which columns `t` lacks (see [`SqlStore::check`]) and whether the sessions
    /// table keeps agno 2.x's `runs`; true when nothing is missing.
    fn validate(&self, t: Table, existing: &[String]) -> bool {
        let missing: Vec<String> = spec(t)
            .columns
            .iter()
            .filter(|c| !existing.iter().any(|e| e == c.name))
            .map(|c| c.name.to_owned())
            .collect();
        if t == Table::Sessions {
            self.legacy_runs_column
                .store(existing.iter().any(|c| c == "runs"), Ordering::SeqCst);
        }
        let mut invalid = self.invalid.lock().unwrap_or_else(|p| p.into_inner());
        if missing.is_empty() {
            invalid.remove(&t);
            true
        } else {
            invalid.insert(t, missing);
            false
        }
    }

    pub(crate) fn has_legacy_runs_column(&self) -> bool {
        self.legacy_runs_column.load(Ordering::SeqCst)
    }

    /// The column names of a table, or `None` when it does not exist.
    pub(crate) async fn columns(&self, t: Table) -> Result<Option<Vec<String>>> {
        let name = self.names.get(t).to_owned();
        let (sql, params) = self.dialect.columns_query(self.schema.as_deref(), &name);
        let rows: Vec<Row> = self.exec.query(&sql, params).await?;
        if rows.is_empty() {
            return Ok(None);
        }
        rows.iter()
            .map(|r| r.str("column_name"))
            .collect::<Result<Vec<_>>>()
            .map(Some)
    }

    /// Creates what is missing and validates what exists, as agno does on first use: a new
    /// table gets its indexes and a `3.0.0` stamp; an existing one is checked for the
    /// columns this code needs and otherwise left untouched until migrated.
    pub(crate) async fn ensure_schema(&self) -> Result<()> {
        if let Some(schema) = &self.schema {
            self.dialect.create_schema(self, schema).await?;
        }
        for t in TABLES {
            self.ensure_table(t).await?;
        }
        Ok(())
    }

    /// Creates indexes from `(name, sql)` pairs, skipping existing ones.
    pub(crate) async fn create_indexes(
        &self,
        t: Table,
        indexes: Vec<(String, String)>,
    ) -> Result<()> {
        self.dialect.create_indexes(self, t, indexes).await
    }

    async fn ensure_table(&self, t: Table) -> Result<()> {
        match self.columns(t).await? {
            None => {
                let ddl = self.ddl();
                let created = self.exec.execute(&ddl.create_table(t), vec![]).await;
                if let Err(e) = created {
                    if e.kind() != ErrorKind::AlreadyExists {
                        return Err(e);
                    }
                }
                self.refresh(t).await?;
                if t != Table::Versions {
                    self.stamp(self.names.get(t), SchemaVersion::LATEST).await?;
                }
                Ok(())
            }
            Some(_) => self.refresh(t).await,
        }
    }

    /// Re-validates a table and creates its missing indexes (after creation or a migration).
    pub(crate) async fn refresh(&self, t: Table) -> Result<()> {
        let existing = self.columns(t).await?.unwrap_or_default();
        if !self.validate(t, &existing) {
            return Ok(());
        }
        let ddl = self.ddl();
        self.create_indexes(t, ddl.create_indexes(t, &existing))
            .await?;
        for index in ddl.partial_unique_indexes(t, &existing) {
            if let Err(e) = self.create_indexes(t, vec![index]).await {
                // Duplicates in a pre-v3 table: the migration reports them; reads still work.
                if e.kind() != ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn stamp(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        let now = iso_now();
        let d = self.dialect;
        let sql = self.upsert_sql(&Upsert {
            table: Table::Versions,
            columns: &["table_name", "version", "created_at", "updated_at"],
            values: "(?, ?, ?, ?)".into(),
            conflict: "table_name",
            set: vec![
                ("version", d.excluded("version")),
                ("updated_at", d.excluded("updated_at")),
            ],
            guard: None,
        });
        self.exec
            .execute(
                &sql,
                vec![
                    SqlValue::text(table_name),
                    SqlValue::text(version.to_string()),
                    SqlValue::text(now.clone()),
                    SqlValue::text(now),
                ],
            )
            .await?;
        Ok(())
    }

    /// `SELECT COUNT(*)` of a `FROM … WHERE …` tail.
    pub(crate) async fn count(&self, from_where: &str, params: Vec<SqlValue>) -> Result<u64> {
        let rows = self
            .exec
            .query(&format!("SELECT COUNT(*) AS n {from_where}"), params)
            .await?;
        Ok(rows
            .first()
            .map(|r| r.i64("n"))
            .transpose()?
            .unwrap_or(0)
            .max(0) as u64)
    }
}

/// `ORDER BY` for a validated sort column: `updated_at` falls back to `created_at`.
pub(crate) fn order_by(
    dialect: &dyn Dialect,
    sort: &agno_storage_core::Sort,
    allowed: &[&str],
) -> Result<Option<String>> {
    agno_storage_core::validate_sort(sort, allowed)?;
    Ok(sort.sort_by.as_ref().map(|c| {
        let expr = if c == "updated_at" {
            "COALESCE(updated_at, created_at)".to_owned()
        } else {
            dialect.quote(c)
        };
        let dir = match sort.sort_order {
            agno_storage_core::SortOrder::Asc => "ASC",
            agno_storage_core::SortOrder::Desc => "DESC",
        };
        format!("{expr} {dir}")
    }))
}

/// `LIMIT … OFFSET …` after validating the pagination.
pub(crate) fn limit_offset(p: &agno_storage_core::Pagination) -> Result<String> {
    p.validate()?;
    Ok(match p.limit {
        Some(limit) => format!(" LIMIT {limit} OFFSET {}", p.offset()),
        None => String::new(),
    })
}

/// A `WHERE` clause builder with bound parameters.
#[derive(Default)]
pub(crate) struct Where {
    clauses: Vec<String>,
    pub(crate) params: Vec<SqlValue>,
}

impl Where {
    pub(crate) fn push(
        &mut self,
        clause: impl Into<String>,
        params: impl IntoIterator<Item = SqlValue>,
    ) {
        self.clauses.push(clause.into());
        self.params.extend(params);
    }

    /// `column = ?` when `value` is set.
    pub(crate) fn eq(&mut self, column: &str, value: Option<&str>) {
        if let Some(v) = value {
            self.push(format!("{column} = ?"), [SqlValue::text(v)]);
        }
    }

    pub(crate) fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }
}

/// The `(sql, params)` of an `IN (?, ?, …)` list.
pub(crate) fn in_list<S: AsRef<str>>(values: &[S]) -> (String, Vec<SqlValue>) {
    let marks = vec!["?"; values.len()].join(", ");
    (
        format!("({marks})"),
        values
            .iter()
            .map(|v| SqlValue::text(v.as_ref().to_owned()))
            .collect(),
    )
}

/// One upsert: `INSERT … ON CONFLICT (…) DO UPDATE SET … WHERE guard` on SQLite and
/// PostgreSQL, `INSERT … ON DUPLICATE KEY UPDATE col = IF(guard, new, col)` on MySQL.
pub(crate) struct Upsert<'a> {
    pub(crate) table: Table,
    /// Inserted columns, unquoted.
    pub(crate) columns: &'a [&'a str],
    /// The `VALUES` tuple, e.g. `(?, ?, ?)`.
    pub(crate) values: String,
    /// The conflict target (SQLite, PostgreSQL); MySQL updates on whichever unique key
    /// collides.
    pub(crate) conflict: &'a str,
    /// `(column, expression)`: expressions name the incoming row with
    /// [`Dialect::excluded`] and the stored one with [`Dialect::stored`].
    pub(crate) set: Vec<(&'a str, String)>,
    /// The condition the stored row must meet to be updated, in the same terms. MySQL tests
    /// it in every assignment and assigns `user_id` last, so the guard reads the stored
    /// owner throughout (MySQL assigns left to right, each seeing the ones before).
    pub(crate) guard: Option<String>,
}

impl SqlStore {
    /// `SELECT * FROM {t} WHERE {column} = ?`, to read back what a write touched.
    pub(crate) fn select_by(&self, t: Table, column: &str, value: &str) -> Statement {
        (
            format!("SELECT * FROM {} WHERE {} = ?", self.t(t), self.q(column)),
            vec![SqlValue::text(value)],
        )
    }

    pub(crate) fn upsert_sql(&self, u: &Upsert<'_>) -> String {
        self.dialect.upsert_sql(&self.t(u.table), u)
    }

    /// Runs an upsert made by [`SqlStore::upsert_sql`] and returns the stored row (see
    /// [`Dialect::upsert_returning`]).
    pub(crate) async fn upsert_returning(
        &self,
        table: Table,
        sql: String,
        params: Vec<SqlValue>,
        returning: &str,
        key: (&str, SqlValue),
        refused: &(dyn Fn(&Row) -> Result<bool> + Sync),
    ) -> Result<Option<Row>> {
        self.dialect
            .upsert_returning(self, table, (sql, params), returning, key, refused)
            .await
    }

    /// Runs `write` and returns the rows it wrote (see [`Dialect::write_returning`]).
    pub(crate) async fn write_returning(
        &self,
        write: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        self.dialect.write_returning(self, write, read).await
    }

    /// Runs the statements in one transaction and returns the rows the last one affected.
    pub(crate) async fn transaction_count(&self, statements: Vec<Statement>) -> Result<u64> {
        self.dialect.transaction_count(self, statements).await
    }
}

/// Whether a row read back after an upsert shows agno's owner guard refused the writer
/// `user_id`: the stored owner is someone else. (When the guard lets a write through, the
/// stored owner is unset or the writer.)
pub(crate) fn owned_by_other(user_id: Option<&str>) -> impl Fn(&Row) -> Result<bool> + Sync + '_ {
    move |row| {
        Ok(row
            .opt_str("user_id")?
            .is_some_and(|u| Some(u.as_str()) != user_id))
    }
}
