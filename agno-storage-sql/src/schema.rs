//! Table layouts exactly as agno 3.1.10 declares them, and their DDL per dialect.

use crate::dialect::{ColType, Dialect};

pub use agno_storage_core::{Table, TableNames};

/// Every table this crate creates, in creation order (foreign-key parents first; the
/// versions table first). SQL keeps no `Table::Meta`.
pub(crate) const TABLES: [Table; 11] = [
    Table::Versions,
    Table::Sessions,
    Table::Runs,
    Table::Memories,
    Table::Metrics,
    Table::Evals,
    Table::Knowledge,
    Table::Schedules,
    Table::ScheduleRuns,
    Table::Learnings,
    Table::Jobs,
];

/// Checks every name: 1 to 63 ASCII letters, digits or `_`, not starting with a digit.
/// Names are quoted in SQL anyway; this refuses names that would surprise an operator.
pub(crate) fn validate_names(names: &TableNames) -> agno_storage_core::Result<()> {
    for t in TABLES {
        validate_identifier("table name", names.get(t))?;
    }
    Ok(())
}

pub(crate) struct Column {
    pub(crate) name: &'static str,
    pub(crate) ty: ColType,
    pub(crate) not_null: bool,
    pub(crate) index: bool,
}

const fn col(name: &'static str, ty: ColType, not_null: bool, index: bool) -> Column {
    Column {
        name,
        ty,
        not_null,
        index,
    }
}

use ColType::{BigInt, Bool, Date, Json, LongText, Str};

pub(crate) struct TableSpec {
    pub(crate) columns: &'static [Column],
    pub(crate) primary_key: &'static str,
    /// `(declared name, columns)`; physical name `idx_{table}_{cols}` on SQLite/PostgreSQL,
    /// `{table}_{declared}` on MySQL.
    pub(crate) composite_indexes: &'static [(&'static str, &'static [&'static str])],
    /// `(declared name, columns)`; physical name `{table}_{declared}`.
    pub(crate) unique: &'static [(&'static str, &'static [&'static str])],
    /// `(declared name, columns, WHERE)`; physical name `{table}_{declared}`.
    pub(crate) partial_unique: &'static [(&'static str, &'static [&'static str], &'static str)],
    /// `(column, parent table, parent column)`, `ON DELETE CASCADE`.
    pub(crate) foreign_key: Option<(&'static str, Table, &'static str)>,
    /// Our own partial indexes, which agno does not declare (its schema checks ignore
    /// extra indexes): `(declared name, columns, WHERE)`; physical name `ix_{table}_{declared}`.
    /// Made where the dialect has partial indexes.
    pub(crate) own_partial: &'static [(&'static str, &'static [&'static str], &'static str)],
}

const SESSIONS: TableSpec = TableSpec {
    columns: &[
        col("session_id", Str(128), true, false),
        col("session_type", Str(20), true, true),
        col("agent_id", Str(128), false, false),
        col("team_id", Str(128), false, false),
        col("workflow_id", Str(128), false, false),
        col("user_id", Str(128), false, false),
        col("session_data", Json, false, false),
        col("agent_data", Json, false, false),
        col("team_data", Json, false, false),
        col("workflow_data", Json, false, false),
        col("metadata", Json, false, false),
        col("summary", Json, false, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
    ],
    primary_key: "session_id",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const RUNS: TableSpec = TableSpec {
    columns: &[
        col("run_id", Str(128), true, false),
        col("session_id", Str(128), true, true),
        col("run_type", Str(20), true, true),
        col("agent_id", Str(128), false, true),
        col("team_id", Str(128), false, true),
        col("workflow_id", Str(128), false, true),
        col("user_id", Str(128), false, true),
        col("parent_run_id", Str(128), false, false),
        col("status", Str(50), false, true),
        col("run_index", BigInt, false, false),
        col("run_data", Json, true, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
    ],
    primary_key: "run_id",
    composite_indexes: &[("runs_session_id_run_index", &["session_id", "run_index"])],
    unique: &[],
    partial_unique: &[],
    foreign_key: Some(("session_id", Table::Sessions, "session_id")),
    own_partial: &[],
};

const MEMORIES: TableSpec = TableSpec {
    columns: &[
        col("memory_id", Str(128), true, false),
        col("memory", Json, true, false),
        col("input", LongText, false, false),
        col("agent_id", Str(128), false, false),
        col("team_id", Str(128), false, false),
        col("user_id", Str(128), false, true),
        col("topics", Json, false, false),
        col("feedback", LongText, false, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, true),
    ],
    primary_key: "memory_id",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const METRICS: TableSpec = TableSpec {
    columns: &[
        col("id", Str(128), true, false),
        col("agent_runs_count", BigInt, true, false),
        col("team_runs_count", BigInt, true, false),
        col("workflow_runs_count", BigInt, true, false),
        col("agent_sessions_count", BigInt, true, false),
        col("team_sessions_count", BigInt, true, false),
        col("workflow_sessions_count", BigInt, true, false),
        col("users_count", BigInt, true, false),
        col("token_metrics", Json, true, false),
        col("model_metrics", Json, true, false),
        col("date", Date, true, true),
        col("aggregation_period", Str(20), true, true),
        col("user_id", Str(128), true, true),
        col("created_at", BigInt, true, false),
        col("updated_at", BigInt, false, false),
        col("completed", Bool, true, false),
    ],
    primary_key: "id",
    composite_indexes: &[],
    unique: &[(
        "uq_metrics_user_date_period",
        &["user_id", "date", "aggregation_period"],
    )],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const EVALS: TableSpec = TableSpec {
    columns: &[
        col("run_id", Str(128), true, false),
        col("eval_type", Str(50), true, false),
        col("eval_data", Json, true, false),
        col("eval_input", Json, true, false),
        col("name", Str(255), false, false),
        col("agent_id", Str(128), false, false),
        col("team_id", Str(128), false, false),
        col("workflow_id", Str(128), false, false),
        col("model_id", Str(128), false, false),
        col("model_provider", Str(128), false, false),
        col("evaluated_component_name", Str(255), false, false),
        col("user_id", Str(128), false, true),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
    ],
    primary_key: "run_id",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const KNOWLEDGE: TableSpec = TableSpec {
    columns: &[
        col("id", Str(128), true, false),
        col("name", Str(255), true, false),
        col("description", LongText, true, false),
        col("metadata", Json, false, false),
        col("type", Str(50), false, false),
        col("size", BigInt, false, false),
        col("linked_to", Str(128), false, false),
        col("access_count", BigInt, false, false),
        col("status", Str(50), false, false),
        col("status_message", LongText, false, false),
        col("created_at", BigInt, false, false),
        col("updated_at", BigInt, false, false),
        col("external_id", Str(128), false, false),
        col("user_id", Str(128), false, true),
    ],
    primary_key: "id",
    composite_indexes: &[("user_id_linked_to", &["user_id", "linked_to"])],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const VERSIONS: TableSpec = TableSpec {
    columns: &[
        col("table_name", Str(128), true, false),
        col("version", Str(10), true, false),
        col("created_at", Str(128), true, true),
        col("updated_at", Str(128), false, false),
    ],
    primary_key: "table_name",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const LEARNINGS: TableSpec = TableSpec {
    columns: &[
        col("learning_id", Str(128), true, false),
        col("learning_type", Str(128), true, true),
        col("namespace", Str(128), false, true),
        col("user_id", Str(128), false, true),
        col("agent_id", Str(128), false, true),
        col("team_id", Str(128), false, true),
        col("workflow_id", Str(128), false, true),
        col("session_id", Str(128), false, true),
        col("entity_id", Str(128), false, true),
        col("entity_type", Str(128), false, true),
        col("content", Json, true, false),
        col("metadata", Json, false, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
    ],
    primary_key: "learning_id",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: None,
    own_partial: &[],
};

const SCHEDULES: TableSpec = TableSpec {
    columns: &[
        col("id", Str(128), true, false),
        col("name", Str(255), true, true),
        col("description", LongText, false, false),
        col("method", Str(10), true, false),
        col("endpoint", Str(512), true, false),
        col("payload", Json, false, false),
        col("cron_expr", Str(128), true, false),
        col("timezone", Str(64), true, false),
        col("timeout_seconds", BigInt, true, false),
        col("max_retries", BigInt, true, false),
        col("retry_delay_seconds", BigInt, true, false),
        col("enabled", Bool, true, false),
        col("next_run_at", BigInt, false, true),
        col("locked_by", Str(128), false, false),
        col("locked_at", BigInt, false, false),
        col("user_id", Str(128), false, true),
        col("managed_by", Str(128), false, true),
        col("target_type", Str(128), false, false),
        col("target_id", Str(128), false, true),
        col("created_by_run_id", Str(128), false, false),
        col("created_by_session_id", Str(128), false, false),
        col("updated_by_run_id", Str(128), false, false),
        col("updated_by_session_id", Str(128), false, false),
        col("disabled_reason", Str(512), false, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
    ],
    primary_key: "id",
    composite_indexes: &[
        ("enabled_next_run_at", &["enabled", "next_run_at"]),
        (
            "user_id_enabled_next_run_at",
            &["user_id", "enabled", "next_run_at"],
        ),
    ],
    unique: &[],
    partial_unique: &[
        ("uq_user_name", &["user_id", "name"], "user_id IS NOT NULL"),
        ("uq_unowned_name", &["name"], "user_id IS NULL"),
    ],
    foreign_key: None,
    own_partial: &[],
};

const SCHEDULE_RUNS: TableSpec = TableSpec {
    columns: &[
        col("id", Str(128), true, false),
        col("schedule_id", Str(128), true, true),
        col("attempt", BigInt, true, false),
        col("triggered_at", BigInt, false, false),
        col("completed_at", BigInt, false, false),
        col("status", Str(50), true, true),
        col("status_code", BigInt, false, false),
        col("run_id", Str(128), false, false),
        col("session_id", Str(128), false, false),
        col("error", LongText, false, false),
        col("input", Json, false, false),
        col("output", Json, false, false),
        col("requirements", Json, false, false),
        col("user_id", Str(128), false, true),
        col("created_at", BigInt, true, true),
    ],
    primary_key: "id",
    composite_indexes: &[],
    unique: &[],
    partial_unique: &[],
    foreign_key: Some(("schedule_id", Table::Schedules, "id")),
    own_partial: &[],
};

const JOBS: TableSpec = TableSpec {
    columns: &[
        col("id", Str(128), true, false),
        col("component_type", Str(20), true, false),
        col("job_type", Str(20), true, false),
        col("deployment_id", Str(128), false, false),
        col("component_id", Str(128), true, true),
        col("session_id", Str(128), true, true),
        col("user_id", Str(128), false, false),
        col("payload", Json, true, false),
        col("status", Str(20), true, true),
        col("attempt", BigInt, true, false),
        col("max_attempts", BigInt, true, false),
        col("idempotency_key", Str(512), false, false),
        col("available_at", BigInt, true, false),
        col("locked_by", Str(128), false, false),
        col("locked_at", BigInt, false, false),
        col("error", LongText, false, false),
        col("created_at", BigInt, true, true),
        col("updated_at", BigInt, false, false),
        col("completed_at", BigInt, false, false),
    ],
    primary_key: "id",
    composite_indexes: &[("status_available_at", &["status", "available_at"])],
    unique: &[],
    partial_unique: &[
        (
            "uq_jobs_idempotency_key",
            &["idempotency_key", "user_id"],
            "idempotency_key IS NOT NULL",
        ),
        (
            "uq_jobs_idempotency_key_anon",
            &["idempotency_key"],
            "idempotency_key IS NOT NULL AND user_id IS NULL",
        ),
    ],
    foreign_key: None,
    // Claims walk the live jobs in claim order; finished ones leave the index, so a claim
    // costs the same however many finished jobs the table keeps.
    own_partial: &[(
        "claim",
        &["created_at", "id"],
        "status IN ('queued', 'running')",
    )],
};

/// The layout of `t`. SQL keeps no `Table::Meta` (it is not in [`TABLES`], so nothing
/// creates or reads it); it shares the versions table's layout so this lookup is total.
pub(crate) fn spec(t: Table) -> &'static TableSpec {
    match t {
        Table::Sessions => &SESSIONS,
        Table::Runs => &RUNS,
        Table::Memories => &MEMORIES,
        Table::Metrics => &METRICS,
        Table::Evals => &EVALS,
        Table::Knowledge => &KNOWLEDGE,
        Table::Schedules => &SCHEDULES,
        Table::ScheduleRuns => &SCHEDULE_RUNS,
        Table::Learnings => &LEARNINGS,
        Table::Jobs => &JOBS,
        Table::Versions | Table::Meta => &VERSIONS,
    }
}

/// The columns of `t` that a table created by an older agno lacks and the migration adds
/// (agno 3.0.0's `user_id` and schedule provenance columns, 2.3.0's memory `created_at` and
/// `feedback`): a table missing only these has a migration pending. Every other column of
/// [`spec`] exists in every agno release that has the table, so a table missing one is
/// damaged (or was made outside agno), and no migration repairs it.
pub(crate) fn migration_added_columns(t: Table) -> &'static [&'static str] {
    match t {
        Table::Memories => &["created_at", "feedback"],
        Table::Metrics | Table::Evals | Table::Knowledge | Table::ScheduleRuns => &["user_id"],
        Table::Schedules => &[
            "user_id",
            "managed_by",
            "target_type",
            "target_id",
            "created_by_run_id",
            "created_by_session_id",
            "updated_by_run_id",
            "updated_by_session_id",
            "disabled_reason",
        ],
        Table::Sessions
        | Table::Runs
        | Table::Learnings
        | Table::Jobs
        | Table::Versions
        | Table::Meta => &[],
    }
}

/// What agno's MySQLDb does differently, and what MySQL lacks.
#[cfg(feature = "mysql")]
#[derive(Default)]
pub(crate) struct MySqlSpec {
    /// Physical column order, where agno's MySQL schema differs from the others.
    pub(crate) order: Option<&'static [&'static str]>,
    /// Indexes (column or declared composite name) agno's MySQL schema does not declare.
    pub(crate) skip_indexes: &'static [&'static str],
    /// MySQL has no partial indexes: these unique keys (`{table}_{declared}`) replace
    /// `partial_unique`, over [`OWNER_KEY`] so the unowned rows form one bucket too.
    pub(crate) owner_unique: &'static [(&'static str, &'static [&'static str])],
}

/// A stored generated column `COALESCE(user_id, '')` on MySQL tables with per-owner unique
/// keys (NULLs never collide in a MySQL unique index).
pub(crate) const OWNER_KEY: &str = "owner_key";

#[cfg(feature = "mysql")]
pub(crate) fn mysql_spec(t: Table) -> MySqlSpec {
    match t {
        Table::Evals => MySqlSpec {
            order: Some(&[
                "run_id",
                "eval_type",
                "eval_data",
                "eval_input",
                "name",
                "agent_id",
                "team_id",
                "workflow_id",
                "model_id",
                "model_provider",
                "evaluated_component_name",
                "created_at",
                "updated_at",
                "user_id",
            ]),
            ..Default::default()
        },
        Table::Knowledge => MySqlSpec {
            order: Some(&[
                "id",
                "name",
                "description",
                "metadata",
                "type",
                "size",
                "linked_to",
                "access_count",
                "created_at",
                "updated_at",
                "status",
                "status_message",
                "external_id",
                "user_id",
            ]),
            skip_indexes: &["user_id_linked_to"],
            ..Default::default()
        },
        Table::Metrics => MySqlSpec {
            skip_indexes: &["aggregation_period"],
            ..Default::default()
        },
        Table::Schedules => MySqlSpec {
            owner_unique: &[("uq_user_name", &[OWNER_KEY, "name"])],
            ..Default::default()
        },
        Table::Jobs => MySqlSpec {
            owner_unique: &[("uq_jobs_idempotency_key", &["idempotency_key", OWNER_KEY])],
            ..Default::default()
        },
        _ => MySqlSpec::default(),
    }
}

/// Renders DDL for one database: a dialect, an optional schema and the table names.
pub(crate) struct Ddl<'a> {
    pub(crate) dialect: &'static dyn Dialect,
    pub(crate) schema: Option<&'a str>,
    pub(crate) names: &'a TableNames,
}

impl Ddl<'_> {
    /// The qualified, quoted table reference.
    pub(crate) fn table(&self, t: Table) -> String {
        self.qualify(self.names.get(t))
    }

    pub(crate) fn qualify(&self, name: &str) -> String {
        match self.schema {
            Some(schema) => format!(
                "{}.{}",
                self.dialect.quote(schema),
                self.dialect.quote(name)
            ),
            None => self.dialect.quote(name),
        }
    }

    pub(crate) fn column_def(&self, c: &Column) -> String {
        format!(
            "{} {}{}",
            self.dialect.quote(c.name),
            self.dialect.col_type(c.ty),
            if c.not_null { " NOT NULL" } else { "" }
        )
    }

    /// The columns of a table in the dialect's physical order.
    fn columns(&self, t: Table) -> Vec<&'static Column> {
        let s = spec(t);
        match self.dialect.column_order(t) {
            Some(order) => order
                .iter()
                .filter_map(|name| s.columns.iter().find(|c| c.name == *name))
                .collect(),
            None => s.columns.iter().collect(),
        }
    }

    /// The generated owner column of a table with per-owner unique keys, where the dialect
    /// replaces partial unique indexes with them ([`Dialect::owner_unique_keys`]).
    pub(crate) fn owner_key_def(&self, t: Table) -> Option<String> {
        self.dialect
            .owner_unique_keys(t)
            .is_some_and(|keys| !keys.is_empty())
            .then(|| {
                format!(
                    "{} VARCHAR(128) GENERATED ALWAYS AS (COALESCE({}, '')) STORED",
                    self.dialect.quote(OWNER_KEY),
                    self.dialect.quote("user_id")
                )
            })
    }

    pub(crate) fn create_table(&self, t: Table) -> String {
        let s = spec(t);
        let name = self.names.get(t).to_owned();
        let q = |c: &str| self.dialect.quote(c);
        let mut parts: Vec<String> = self
            .columns(t)
            .into_iter()
            .map(|c| self.column_def(c))
            .collect();
        parts.extend(self.owner_key_def(t));
        parts.push(format!("PRIMARY KEY ({})", q(s.primary_key)));
        for (declared, cols) in s.unique {
            parts.push(format!(
                "CONSTRAINT {} UNIQUE ({})",
                q(&format!("{name}_{declared}")),
                cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
            ));
        }
        if let Some((column, parent, parent_col)) = s.foreign_key {
            parts.push(format!(
                "FOREIGN KEY({}) REFERENCES {} ({}) ON DELETE CASCADE",
                q(column),
                self.table(parent),
                q(parent_col)
            ));
        }
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n    {}\n)",
            self.table(t),
            parts.join(",\n    ")
        )
    }

    /// `(name, CREATE INDEX)` for every index of the table whose columns all exist.
    /// SQLite and PostgreSQL say `IF NOT EXISTS`; MySQL cannot, so the caller checks the
    /// name first. Composite names: `idx_{table}_{cols}` (SQLite, PostgreSQL) or
    /// `{table}_{declared}` (MySQL), as agno names them.
    pub(crate) fn create_indexes(&self, t: Table, existing: &[String]) -> Vec<(String, String)> {
        let s = spec(t);
        let name = self.names.get(t).to_owned();
        let q = |c: &str| self.dialect.quote(c);
        let has = |c: &str| existing.iter().any(|e| e == c);
        let if_not_exists = self.dialect.if_not_exists();
        let mut out = Vec::new();
        for c in s
            .columns
            .iter()
            .filter(|c| c.index && has(c.name) && self.dialect.declares_index(t, c.name))
        {
            let index = format!("idx_{name}_{}", c.name);
            let sql = format!(
                "CREATE INDEX {if_not_exists}{} ON {} ({})",
                q(&index),
                self.table(t),
                q(c.name)
            );
            out.push((index, sql));
        }
        for (declared, cols) in s.composite_indexes.iter().filter(|(declared, cols)| {
            cols.iter().all(|c| has(c)) && self.dialect.declares_index(t, declared)
        }) {
            let index = self.dialect.composite_index_name(&name, declared, cols);
            let sql = format!(
                "CREATE INDEX {if_not_exists}{} ON {} ({})",
                q(&index),
                self.table(t),
                cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
            );
            out.push((index, sql));
        }
        if self.dialect.has_partial_indexes() {
            for (declared, cols, filter) in s
                .own_partial
                .iter()
                .filter(|(_, cols, _)| cols.iter().all(|c| has(c)))
            {
                let index = format!("ix_{name}_{declared}");
                let sql = format!(
                    "CREATE INDEX {if_not_exists}{} ON {} ({}) WHERE {filter}",
                    q(&index),
                    self.table(t),
                    cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
                );
                out.push((index, sql));
            }
        }
        out
    }

    /// The partial unique indexes (`{table}_{declared}`), as separate statements so a
    /// duplicate can be reported per index; where the dialect has none, the unique keys over
    /// the owner column that replace them, once `existing` columns include it (it arrives
    /// with the migration).
    pub(crate) fn partial_unique_indexes(
        &self,
        t: Table,
        existing: &[String],
    ) -> Vec<(String, String)> {
        let name = self.names.get(t).to_owned();
        let q = |c: &str| self.dialect.quote(c);
        if let Some(keys) = self.dialect.owner_unique_keys(t) {
            if !existing.iter().any(|c| c == OWNER_KEY) {
                return Vec::new();
            }
            return keys
                .iter()
                .map(|(declared, cols)| {
                    let index = format!("{name}_{declared}");
                    let sql = format!(
                        "CREATE UNIQUE INDEX {} ON {} ({})",
                        q(&index),
                        self.table(t),
                        cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
                    );
                    (index, sql)
                })
                .collect();
        }
        spec(t)
            .partial_unique
            .iter()
            .map(|(declared, cols, filter)| {
                let index = format!("{name}_{declared}");
                let sql = format!(
                    "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({}) WHERE {filter}",
                    q(&index),
                    self.table(t),
                    cols.iter().map(|c| q(c)).collect::<Vec<_>>().join(", ")
                );
                (index, sql)
            })
            .collect()
    }
}

/// Refuses an identifier that is not 1-63 ASCII letters, digits or `_` (not starting with a
/// digit), naming what was wrong.
pub(crate) fn validate_identifier(what: &str, name: &str) -> agno_storage_core::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit());
    if ok {
        Ok(())
    } else {
        Err(agno_storage_core::Error::invalid_input(format!(
            "invalid {what} {name:?}: use 1 to 63 ASCII letters, digits or underscores, not starting with a digit"
        )))
    }
}
