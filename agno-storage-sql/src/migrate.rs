//! Schema versions (`agno_schema_versions`) and the SQL migration steps.

use std::sync::Arc;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, RekeyLearningsStep, StepOutcome, TableRef,
};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MigrationTarget, Result, SchemaVersion, SchemaVersionStore,
    TableType,
};

#[cfg(any(feature = "sqlite", feature = "postgres"))]
use crate::exec::Statement;
use crate::schema::{migration_added_columns, spec, Table, OWNER_KEY};
use crate::store::SqlStore;
use crate::value::SqlValue;

#[async_trait]
impl SchemaVersionStore for SqlStore {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        if self.is_absent(Table::Versions) {
            // Opened with OpenMode::Existing on a database without the versions table.
            return Ok(None);
        }
        let sql = format!(
            "SELECT version FROM {} WHERE table_name = ?",
            self.t(Table::Versions)
        );
        match self
            .exec
            .query(&sql, vec![SqlValue::text(table_name)])
            .await?
            .first()
        {
            Some(row) => match row.opt_str("version")?.filter(|v| !v.is_empty()) {
                Some(v) => v.parse().map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        self.stamp(table_name, version).await
    }
}

/// The migration target of one SQL database.
pub(crate) struct SqlMigrations {
    pub(crate) store: Arc<SqlStore>,
}

#[async_trait]
impl MigrationTarget for SqlMigrations {
    fn tables(&self) -> Vec<TableRef> {
        TableType::ALL
            .iter()
            .map(|t| TableRef {
                table_type: *t,
                name: self.store.names.get(Table::from(*t)).to_owned(),
            })
            .collect()
    }

    fn versions(&self) -> &dyn SchemaVersionStore {
        self.store.as_ref()
    }

    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        vec![
            Arc::new(AddColumnsStep {
                store: self.store.clone(),
            }),
            Arc::new(MetricsStep {
                store: self.store.clone(),
            }),
            Arc::new(CopyLegacyRunsStep::new(self.store.clone())),
            Arc::new(RekeyLearningsStep::new(self.store.clone())),
        ]
    }

    async fn lock(&self) -> Result<MigrationLock> {
        self.store.exec.migration_lock().await
    }

    fn damage(&self, table: &TableRef) -> Option<Error> {
        self.store.damage(Table::from(table.table_type))
    }
}

/// 3.0.0 for memories, evals, knowledge, schedules and schedule runs: adds the columns agno 3
/// expects (`user_id`, the schedule provenance columns, …) with their indexes, and the
/// per-owner unique schedule names. Existing rows keep `NULL` owners.
struct AddColumnsStep {
    store: Arc<SqlStore>,
}

#[async_trait]
impl MigrationStep for AddColumnsStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::LATEST
    }
    fn description(&self) -> String {
        "add user_id (and schedule provenance) columns and indexes".into()
    }
    fn applies_to(&self, table: TableType) -> bool {
        matches!(
            table,
            TableType::Memories
                | TableType::Evals
                | TableType::Knowledge
                | TableType::Schedules
                | TableType::ScheduleRuns
        )
    }
    async fn up(&self, table: &TableRef) -> Result<StepOutcome> {
        let s = &self.store;
        let t = Table::from(table.table_type);
        let Some(existing) = s.columns(t).await? else {
            return Ok(StepOutcome::NothingToDo);
        };
        let ddl = s.ddl();
        let mut changed = false;
        // Only the columns agno 3 (and 2.3.0) added: a table lacking any other is damaged,
        // which `SqlStore::check` reports; the migration does not paper over it.
        for column in spec(t).columns.iter().filter(|c| {
            migration_added_columns(t).contains(&c.name) && !existing.iter().any(|e| e == c.name)
        }) {
            let def = ddl.column_def(&crate::schema::Column {
                not_null: false,
                ..*column
            });
            s.exec
                .execute(&format!("ALTER TABLE {} ADD COLUMN {def}", s.t(t)), vec![])
                .await?;
            if column.name == "created_at" {
                s.exec
                    .execute(
                        &format!("UPDATE {} SET created_at = COALESCE(updated_at, ?) WHERE created_at IS NULL", s.t(t)),
                        vec![SqlValue::int(agno_storage_core::now_epoch_seconds())],
                    )
                    .await?;
            }
            changed = true;
        }
        if t == Table::Schedules {
            let dups = s
                .exec
                .query(
                    &format!("SELECT user_id, name, COUNT(*) AS n FROM {} GROUP BY user_id, name HAVING COUNT(*) > 1 ORDER BY name", s.t(t)),
                    vec![],
                )
                .await?;
            if !dups.is_empty() {
                let listed: Vec<String> = dups
                    .iter()
                    .map(|r| {
                        let owner = r
                            .opt_str("user_id")
                            .ok()
                            .flatten()
                            .unwrap_or_else(|| "(unowned)".into());
                        format!(
                            "{owner}: '{}' x{}",
                            r.opt_str("name").ok().flatten().unwrap_or_default(),
                            r.i64("n").unwrap_or(0)
                        )
                    })
                    .collect();
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "Cannot create the per-owner unique schedule names on {}: duplicate schedule names exist within one owner \
                         bucket ({}). Rename or delete the duplicates, then re-run the migration; {} was not stamped.",
                        table.name,
                        listed.join(", "),
                        table.name
                    ),
                ));
            }
        }
        // Where per-owner unique keys replace partial indexes, their owner column first.
        let mut columns = s.columns(t).await?.unwrap_or_default();
        if let Some(def) = ddl.owner_key_def(t) {
            if !columns.iter().any(|c| c == OWNER_KEY) {
                s.exec
                    .execute(&format!("ALTER TABLE {} ADD COLUMN {def}", s.t(t)), vec![])
                    .await?;
                columns.push(OWNER_KEY.to_owned());
                changed = true;
            }
        }
        for (index, sql) in ddl.partial_unique_indexes(t, &columns) {
            if let Err(e) = s.create_indexes(t, vec![(index.clone(), sql)]).await {
                if e.kind() == ErrorKind::AlreadyExists {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        format!(
                            "Cannot create unique index {index} on {}: duplicate schedule names exist within one owner bucket. \
                             Resolve the duplicates (the router enforces per-owner uniqueness on create, so these predate it), \
                             then re-run the migration.",
                            table.name
                        ),
                    ));
                }
                return Err(e);
            }
        }
        s.refresh(t).await?;
        Ok(if changed {
            StepOutcome::Applied
        } else {
            StepOutcome::NothingToDo
        })
    }
    async fn down(&self, _table: &TableRef) -> Result<StepOutcome> {
        // The added columns are nullable and harmless to agno 2.x; keeping them loses no data.
        Ok(StepOutcome::NothingToDo)
    }
}

/// 3.0.0 for metrics: per-user rows, unique on `(user_id, date, aggregation_period)`; old
/// rows become the shared bucket (`''`) and the newest unfinished shared day is dropped so it
/// is recomputed per user. SQLite rebuilds the table in one transaction, as agno does.
struct MetricsStep {
    store: Arc<SqlStore>,
}

#[async_trait]
impl MigrationStep for MetricsStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::LATEST
    }
    fn description(&self) -> String {
        "metrics per user: add user_id, unique (user_id, date, aggregation_period)".into()
    }
    fn applies_to(&self, table: TableType) -> bool {
        table == TableType::Metrics
    }
    async fn up(&self, _table: &TableRef) -> Result<StepOutcome> {
        let s = &self.store;
        let Some(existing) = s.columns(Table::Metrics).await? else {
            return Ok(StepOutcome::NothingToDo);
        };
        s.dialect.migrate_metrics(s, &existing).await
    }
    async fn down(&self, table: &TableRef) -> Result<StepOutcome> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the per-user metrics of {} cannot be folded back into whole-day rows; recompute them instead", table.name),
        ))
    }
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// The statement that drops the newest unfinished shared day of the metrics, so it is
/// recomputed per user (deleting an unfinished day loses nothing).
pub(crate) fn drop_unfinished_metrics(s: &SqlStore) -> Statement {
    let table = s.t(Table::Metrics);
    (
        format!(
            "DELETE FROM {table} WHERE completed = ? AND user_id = '' AND date = (SELECT MAX(date) FROM {table}) \
             AND date > COALESCE((SELECT MAX(date) FROM {table} WHERE completed = ?), ?)"
        ),
        vec![
            SqlValue::Bool(Some(false)),
            SqlValue::Bool(Some(true)),
            SqlValue::Date(chrono::NaiveDate::from_ymd_opt(1, 1, 1)),
        ],
    )
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
/// Applies a metrics rekey made of `statements` in one transaction (SQLite, PostgreSQL).
pub(crate) async fn rekey_metrics(s: &SqlStore, statements: Vec<Statement>) -> Result<StepOutcome> {
    s.exec.transaction(statements).await?;
    s.refresh(Table::Metrics).await?;
    Ok(StepOutcome::Applied)
}
