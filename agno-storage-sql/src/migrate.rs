//! Schema versions (`agno_schema_versions`) and the SQL migration steps.

use std::sync::Arc;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, RekeyLearningsStep, StepOutcome, TableRef,
};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MigrationTarget, Result, SchemaVersion, SchemaVersionStore,
    TableType,
};

use crate::dialect::Dialect;
use crate::schema::{migration_added_columns, spec, Tbl};
#[cfg(feature = "sqlite")]
use crate::store::quote_literal;
use crate::store::SqlStore;
use crate::value::SqlValue;

pub(crate) fn tbl(t: TableType) -> Tbl {
    match t {
        TableType::Memories => Tbl::Memories,
        TableType::Sessions => Tbl::Sessions,
        TableType::Metrics => Tbl::Metrics,
        TableType::Evals => Tbl::Evals,
        TableType::Knowledge => Tbl::Knowledge,
        TableType::Schedules => Tbl::Schedules,
        TableType::ScheduleRuns => Tbl::ScheduleRuns,
        TableType::Learnings => Tbl::Learnings,
    }
}

#[async_trait]
impl SchemaVersionStore for SqlStore {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        if self.is_absent(Tbl::Versions) {
            // Opened with OpenMode::Existing on a database without the versions table.
            return Ok(None);
        }
        let sql = format!(
            "SELECT version FROM {} WHERE table_name = ?",
            self.t(Tbl::Versions)
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
                name: self.store.names.name(tbl(*t)),
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
        self.store.damage(tbl(table.table_type))
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
        let t = tbl(table.table_type);
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
        if t == Tbl::Schedules {
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
        #[cfg(feature = "mysql")]
        if s.dialect == Dialect::MySql
            && !crate::schema::mysql_spec(t).owner_unique.is_empty()
            && !s
                .columns(t)
                .await?
                .unwrap_or_default()
                .iter()
                .any(|c| c == crate::schema::OWNER_KEY)
        {
            s.exec
                .execute(
                    &format!("ALTER TABLE {} ADD COLUMN {}", s.t(t), ddl.owner_key_def()),
                    vec![],
                )
                .await?;
            changed = true;
        }
        for (index, sql) in ddl.partial_unique_indexes(t) {
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
        let Some(existing) = s.columns(Tbl::Metrics).await? else {
            return Ok(StepOutcome::NothingToDo);
        };
        match s.dialect {
            #[cfg(feature = "mysql")]
            Dialect::MySql => mysql_metrics_up(s, &existing).await,
            #[cfg(any(feature = "sqlite", feature = "postgres"))]
            #[allow(unreachable_patterns)]
            _ => rekey_metrics(s, &existing).await,
        }
    }
    async fn down(&self, table: &TableRef) -> Result<StepOutcome> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("the per-user metrics of {} cannot be folded back into whole-day rows; recompute them instead", table.name),
        ))
    }
}

/// The metrics step on SQLite (a table rebuild in one transaction, as agno does) and
/// PostgreSQL (new column and key in one transaction).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
async fn rekey_metrics(s: &SqlStore, existing: &[String]) -> Result<StepOutcome> {
    if existing.iter().any(|c| c == "user_id") {
        return Ok(StepOutcome::NothingToDo);
    }
    let name = s.names.name(Tbl::Metrics);
    let table = s.t(Tbl::Metrics);
    let drop_unfinished = format!(
        "DELETE FROM {table} WHERE completed = ? AND user_id = '' AND date = (SELECT MAX(date) FROM {table}) \
         AND date > COALESCE((SELECT MAX(date) FROM {table} WHERE completed = ?), ?)"
    );
    let drop_params = vec![
        SqlValue::Bool(Some(false)),
        SqlValue::Bool(Some(true)),
        SqlValue::Date(chrono::NaiveDate::from_ymd_opt(1, 1, 1)),
    ];
    let statements = match s.dialect {
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => {
            let backup_name = format!("{name}_pre_v3_0_0");
            let backup = s.ddl().qualify(&backup_name);
            let indexes = s
                .exec
                .query(
                    &format!("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = {} AND sql IS NOT NULL", quote_literal(&name)),
                    vec![],
                )
                .await?;
            let carried: Vec<String> = spec(Tbl::Metrics)
                .columns
                .iter()
                .filter(|c| c.name != "user_id" && existing.iter().any(|e| e == c.name))
                .map(|c| s.q(c.name))
                .collect();
            let mut statements = vec![(format!("ALTER TABLE {table} RENAME TO {}", s.q(&backup_name)), vec![])];
            for index in indexes {
                statements.push((format!("DROP INDEX IF EXISTS {}", s.q(&index.str("name")?)), vec![]));
            }
            statements.push((s.ddl().create_table(Tbl::Metrics), vec![]));
            statements.push((
                format!("INSERT INTO {table} ({0}, user_id) SELECT {0}, '' FROM {backup}", carried.join(", ")),
                vec![],
            ));
            statements.push((drop_unfinished, drop_params));
            statements.push((format!("DROP TABLE {backup}"), vec![]));
            statements
        }
        #[cfg(feature = "postgres")]
        Dialect::Postgres => vec![
            (format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS user_id VARCHAR NOT NULL DEFAULT ''"), vec![]),
            (format!("ALTER TABLE {table} ALTER COLUMN user_id DROP DEFAULT"), vec![]),
            (format!("ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {}", s.q(&format!("{name}_uq_metrics_date_period"))), vec![]),
            (
                format!(
                    "ALTER TABLE {table} ADD CONSTRAINT {} UNIQUE (user_id, date, aggregation_period)",
                    s.q(&format!("{name}_uq_metrics_user_date_period"))
                ),
                vec![],
            ),
            (drop_unfinished, drop_params),
        ],
        #[cfg(feature = "mysql")]
        Dialect::MySql => {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "MySQL metrics are migrated by their own step",
            ))
        }
    };
    s.exec.transaction(statements).await?;
    s.refresh(Tbl::Metrics).await?;
    Ok(StepOutcome::Applied)
}

/// The metrics step on MySQL, whose DDL commits on its own: every change is checked before
/// it is made, so a run interrupted anywhere completes on the next one, and the step is
/// only reported done (and the table stamped) once all of it is. As agno's MySQL step: the
/// new key goes on before the legacy one comes off, the newest unfinished shared day is
/// dropped so it is recomputed per user (deleting an unfinished day loses nothing: it is
/// recomputed anyway), and `user_id` ends without a default.
#[cfg(feature = "mysql")]
async fn mysql_metrics_up(s: &SqlStore, existing: &[String]) -> Result<StepOutcome> {
    let name = s.names.name(Tbl::Metrics);
    let table = s.t(Tbl::Metrics);
    let mut changed = false;
    if !existing.iter().any(|c| c == "user_id") {
        s.exec
            .execute(
                &format!(
                    "ALTER TABLE {table} ADD COLUMN `user_id` VARCHAR(128) NOT NULL DEFAULT ''"
                ),
                vec![],
            )
            .await?;
        changed = true;
    }
    // Unique keys by their column sets.
    let keys = s
        .exec
        .query(
            "SELECT index_name AS index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index SEPARATOR ',') AS cols \
             FROM information_schema.statistics WHERE table_schema = ? AND table_name = ? AND non_unique = 0 \
             GROUP BY index_name",
            vec![SqlValue::opt_text(s.schema.as_deref()), SqlValue::text(&name)],
        )
        .await?;
    let mut has_new = false;
    let mut legacy = Vec::new();
    for key in &keys {
        let cols = key.str("cols")?;
        match cols.as_str() {
            "user_id,date,aggregation_period" => has_new = true,
            "date,aggregation_period" | "aggregation_period,date" => {
                legacy.push(key.str("index_name")?)
            }
            _ => {}
        }
    }
    if !has_new {
        let unique = format!("{name}_uq_metrics_user_date_period");
        let added = s
            .exec
            .execute(
                &format!(
                    "ALTER TABLE {table} ADD CONSTRAINT {} UNIQUE (`user_id`, `date`, `aggregation_period`)",
                    s.q(&unique)
                ),
                vec![],
            )
            .await;
        match added {
            Err(e)
                if e.kind() == ErrorKind::AlreadyExists
                    && s.index_names(Tbl::Metrics).await?.contains(&unique) => {}
            other => {
                other?;
            }
        }
        changed = true;
    }
    if !legacy.is_empty() {
        // Separate reads: MySQL cannot subquery the table a DELETE targets.
        let mut dates = Vec::new();
        for filter in ["", " WHERE completed = TRUE"] {
            let rows = s
                .exec
                .query(
                    &format!("SELECT MAX(date) AS d FROM {table}{filter}"),
                    vec![],
                )
                .await?;
            dates.push(rows.first().map(|r| r.opt_date("d")).transpose()?.flatten());
        }
        let (newest, last_completed) = (dates[0], dates[1]);
        if let Some(newest) = newest.filter(|n| last_completed.is_none_or(|c| n > &c)) {
            s.exec
                .execute(
                    &format!(
                        "DELETE FROM {table} WHERE completed = FALSE AND user_id = '' AND date = ?"
                    ),
                    vec![SqlValue::Date(Some(newest))],
                )
                .await?;
        }
        for index in legacy {
            s.exec
                .execute(&format!("DROP INDEX {} ON {table}", s.q(&index)), vec![])
                .await?;
        }
        changed = true;
    }
    let default = s
        .exec
        .query(
            "SELECT column_default AS d FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND column_name = 'user_id'",
            vec![SqlValue::opt_text(s.schema.as_deref()), SqlValue::text(&name)],
        )
        .await?;
    if default
        .first()
        .map(|r| r.opt_str("d"))
        .transpose()?
        .flatten()
        .is_some()
    {
        s.exec
            .execute(
                &format!("ALTER TABLE {table} MODIFY COLUMN `user_id` VARCHAR(128) NOT NULL"),
                vec![],
            )
            .await?;
        changed = true;
    }
    s.refresh(Tbl::Metrics).await?;
    Ok(if changed {
        StepOutcome::Applied
    } else {
        StepOutcome::NothingToDo
    })
}
