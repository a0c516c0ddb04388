//! The store behind every trait: an executor, a dialect and the table layout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use agno_storage_core::{Error, ErrorKind, Result, SchemaVersion};

use crate::dialect::Dialect;
use crate::exec::Executor;
use crate::schema::{spec, Ddl, TableNames, Tbl};
use crate::value::{Row, SqlValue};

pub(crate) struct SqlStore {
    pub(crate) exec: Arc<dyn Executor>,
    pub(crate) dialect: Dialect,
    pub(crate) schema: Option<String>,
    pub(crate) names: TableNames,
    /// Tables that exist but lack columns this code needs: table → missing columns.
    invalid: Mutex<HashMap<Tbl, Vec<String>>>,
    /// Whether the sessions table still has agno 2.x's `runs` column.
    legacy_runs_column: AtomicBool,
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
        dialect: Dialect,
        schema: Option<String>,
        names: TableNames,
    ) -> Self {
        SqlStore {
            exec,
            dialect,
            schema,
            names,
            invalid: Mutex::new(HashMap::new()),
            legacy_runs_column: AtomicBool::new(false),
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
    pub(crate) fn t(&self, t: Tbl) -> String {
        self.ddl().table(t)
    }

    /// The table as agno names it in messages (`schema.table` on servers).
    pub(crate) fn table_ref(&self, t: Tbl) -> String {
        match &self.schema {
            Some(s) => format!("{s}.{}", self.names.name(t)),
            None => self.names.name(t),
        }
    }

    pub(crate) fn q(&self, ident: &str) -> String {
        self.dialect.quote(ident)
    }

    /// Refuses to touch a table that lacks columns until it is migrated.
    pub(crate) fn check(&self, t: Tbl) -> Result<()> {
        let invalid = self.invalid.lock().unwrap_or_else(|p| p.into_inner());
        match invalid.get(&t) {
            Some(missing) => Err(Error::migration_required(
                &self.table_ref(t),
                format!("it lacks the columns {missing:?} that agno 3 added"),
            )
            .with_backend(self.dialect.name())),
            None => Ok(()),
        }
    }

    pub(crate) fn has_legacy_runs_column(&self) -> bool {
        self.legacy_runs_column.load(Ordering::SeqCst)
    }

    /// The column names of a table, or `None` when it does not exist.
    pub(crate) async fn columns(&self, t: Tbl) -> Result<Option<Vec<String>>> {
        let name = self.names.name(t);
        let rows: Vec<Row> = match self.dialect {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                self.exec
                    .query(&format!("SELECT name AS column_name FROM pragma_table_info({})", quote_literal(&name)), vec![])
                    .await?
            }
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                self.exec
                    .query(
                        "SELECT column_name::text AS column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position",
                        vec![SqlValue::opt_text(self.schema.as_deref()), SqlValue::text(name)],
                    )
                    .await?
            }
        };
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
        #[cfg(feature = "postgres")]
        if let (Dialect::Postgres, Some(schema)) = (self.dialect, &self.schema) {
            let sql = format!("CREATE SCHEMA IF NOT EXISTS {}", self.q(schema));
            if let Err(e) = self.exec.execute(&sql, vec![]).await {
                // Two processes creating the schema at once: the loser sees a duplicate.
                if e.kind() != ErrorKind::AlreadyExists {
                    return Err(e);
                }
            }
        }
        for t in Tbl::ALL {
            self.ensure_table(t).await?;
        }
        Ok(())
    }

    async fn ensure_table(&self, t: Tbl) -> Result<()> {
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
                if t != Tbl::Versions {
                    self.stamp(&self.names.name(t), SchemaVersion::LATEST)
                        .await?;
                }
                Ok(())
            }
            Some(_) => self.refresh(t).await,
        }
    }

    /// Re-validates a table and creates its missing indexes (after creation or a migration).
    pub(crate) async fn refresh(&self, t: Tbl) -> Result<()> {
        let existing = self.columns(t).await?.unwrap_or_default();
        let missing: Vec<String> = spec(t)
            .columns
            .iter()
            .filter(|c| !existing.iter().any(|e| e == c.name))
            .map(|c| c.name.to_owned())
            .collect();
        if t == Tbl::Sessions {
            self.legacy_runs_column
                .store(existing.iter().any(|c| c == "runs"), Ordering::SeqCst);
        }
        {
            let mut invalid = self.invalid.lock().unwrap_or_else(|p| p.into_inner());
            if missing.is_empty() {
                invalid.remove(&t);
            } else {
                invalid.insert(t, missing);
                return Ok(());
            }
        }
        let ddl = self.ddl();
        for sql in ddl.create_indexes(t, &existing) {
            self.exec.execute(&sql, vec![]).await?;
        }
        for (_, sql) in ddl.partial_unique_indexes(t) {
            if let Err(e) = self.exec.execute(&sql, vec![]).await {
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
        let sql = format!(
            "INSERT INTO {} (table_name, version, created_at, updated_at) VALUES (?, ?, ?, ?) \
             ON CONFLICT (table_name) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at",
            self.t(Tbl::Versions)
        );
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

/// A SQL string literal (for the few places a name cannot be a bound parameter).
#[cfg(feature = "sqlite")]
pub(crate) fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `ORDER BY` for a validated sort column: `updated_at` falls back to `created_at`.
pub(crate) fn order_by(
    dialect: Dialect,
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
pub(crate) fn in_list(values: &[String]) -> (String, Vec<SqlValue>) {
    let marks = vec!["?"; values.len()].join(", ");
    (
        format!("({marks})"),
        values.iter().map(|v| SqlValue::text(v.clone())).collect(),
    )
}
