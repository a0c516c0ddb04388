//! What the SQL test targets share: agno 2.9.0's table layout, for legacy databases.

#![allow(dead_code)]

/// agno 2.9.0's tables (sessions with the `runs` column, metrics without `user_id`, evals,
/// knowledge, schedules and schedule runs without owners), with `{J}` for the JSON type,
/// `{T}` for long text and `{S}` for the schema prefix.
pub const LEGACY_DDL: &[&str] = &[
    "CREATE TABLE {S}agno_sessions (session_id VARCHAR NOT NULL, session_type VARCHAR NOT NULL, agent_id VARCHAR, team_id VARCHAR, \
     workflow_id VARCHAR, user_id VARCHAR, session_data {J}, agent_data {J}, team_data {J}, workflow_data {J}, metadata {J}, \
     runs {J}, summary {J}, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (session_id))",
    "CREATE TABLE {S}agno_memories (memory_id VARCHAR NOT NULL, memory {J} NOT NULL, input {T}, agent_id VARCHAR, team_id VARCHAR, \
     user_id VARCHAR, topics {J}, feedback {T}, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (memory_id))",
    "CREATE TABLE {S}agno_metrics (id VARCHAR NOT NULL, agent_runs_count BIGINT NOT NULL, team_runs_count BIGINT NOT NULL, \
     workflow_runs_count BIGINT NOT NULL, agent_sessions_count BIGINT NOT NULL, team_sessions_count BIGINT NOT NULL, \
     workflow_sessions_count BIGINT NOT NULL, users_count BIGINT NOT NULL, token_metrics {J} NOT NULL, model_metrics {J} NOT NULL, \
     date DATE NOT NULL, aggregation_period VARCHAR NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT, completed BOOLEAN NOT NULL, \
     PRIMARY KEY (id), CONSTRAINT agno_metrics_uq_metrics_date_period UNIQUE (date, aggregation_period))",
    "CREATE TABLE {S}agno_eval_runs (run_id VARCHAR NOT NULL, eval_type VARCHAR NOT NULL, eval_data {J} NOT NULL, eval_input {J} NOT NULL, \
     name VARCHAR, agent_id VARCHAR, team_id VARCHAR, workflow_id VARCHAR, model_id VARCHAR, model_provider VARCHAR, \
     evaluated_component_name VARCHAR, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (run_id))",
    "CREATE TABLE {S}agno_knowledge (id VARCHAR NOT NULL, name VARCHAR NOT NULL, description {T} NOT NULL, metadata {J}, type VARCHAR, \
     size BIGINT, linked_to VARCHAR, access_count BIGINT, status VARCHAR, status_message {T}, created_at BIGINT, updated_at BIGINT, \
     external_id VARCHAR, PRIMARY KEY (id))",
    "CREATE TABLE {S}agno_schedules (id VARCHAR NOT NULL, name VARCHAR NOT NULL, description {T}, method VARCHAR NOT NULL, \
     endpoint VARCHAR NOT NULL, payload {J}, cron_expr VARCHAR NOT NULL, timezone VARCHAR NOT NULL, timeout_seconds BIGINT NOT NULL, \
     max_retries BIGINT NOT NULL, retry_delay_seconds BIGINT NOT NULL, enabled BOOLEAN NOT NULL, next_run_at BIGINT, locked_by VARCHAR, \
     locked_at BIGINT, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (id))",
    "CREATE TABLE {S}agno_schedule_runs (id VARCHAR NOT NULL, schedule_id VARCHAR NOT NULL, attempt BIGINT NOT NULL, triggered_at BIGINT, \
     completed_at BIGINT, status VARCHAR NOT NULL, status_code BIGINT, run_id VARCHAR, session_id VARCHAR, error {T}, input {J}, \
     output {J}, requirements {J}, created_at BIGINT NOT NULL, PRIMARY KEY (id), \
     FOREIGN KEY(schedule_id) REFERENCES {S}agno_schedules (id) ON DELETE CASCADE)",
    "CREATE TABLE {S}agno_learnings (learning_id VARCHAR NOT NULL, learning_type VARCHAR NOT NULL, namespace VARCHAR, user_id VARCHAR, \
     agent_id VARCHAR, team_id VARCHAR, workflow_id VARCHAR, session_id VARCHAR, entity_id VARCHAR, entity_type VARCHAR, \
     content {J} NOT NULL, metadata {J}, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (learning_id))",
];

/// The legacy DDL for one dialect.
pub fn legacy_ddl(json: &str, text: &str, schema_prefix: &str) -> Vec<String> {
    LEGACY_DDL
        .iter()
        .map(|s| {
            s.replace("{J}", json)
                .replace("{T}", text)
                .replace("{S}", schema_prefix)
        })
        .collect()
}

/// agno 2.9.0's MySQL tables as its `MySQLDb` created them (`VARCHAR(n)`, `JSON`, `BOOL`), with
/// `{S}` for the database prefix. agno 2.9.0 had no schedules, schedule runs or learnings on
/// MySQL; the last three tables are their 2.9.0 shape from the other adapters in MySQL types,
/// so a legacy database has every table unstamped and the migration of those is exercised
/// too.
pub const LEGACY_MYSQL_DDL: &[&str] = &[
    "CREATE TABLE {S}agno_sessions (session_id VARCHAR(128) NOT NULL, session_type VARCHAR(20) NOT NULL, agent_id VARCHAR(128), \
     team_id VARCHAR(128), workflow_id VARCHAR(128), user_id VARCHAR(128), session_data JSON, agent_data JSON, team_data JSON, \
     workflow_data JSON, metadata JSON, runs JSON, summary JSON, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (session_id))",
    "CREATE INDEX idx_agno_sessions_session_type ON {S}agno_sessions (session_type)",
    "CREATE INDEX idx_agno_sessions_created_at ON {S}agno_sessions (created_at)",
    "CREATE TABLE {S}agno_memories (memory_id VARCHAR(128) NOT NULL, memory JSON NOT NULL, input TEXT, agent_id VARCHAR(128), \
     team_id VARCHAR(128), user_id VARCHAR(128), topics JSON, feedback TEXT, created_at BIGINT NOT NULL, updated_at BIGINT, \
     PRIMARY KEY (memory_id))",
    "CREATE INDEX idx_agno_memories_user_id ON {S}agno_memories (user_id)",
    "CREATE TABLE {S}agno_metrics (id VARCHAR(128) NOT NULL, agent_runs_count BIGINT NOT NULL, team_runs_count BIGINT NOT NULL, \
     workflow_runs_count BIGINT NOT NULL, agent_sessions_count BIGINT NOT NULL, team_sessions_count BIGINT NOT NULL, \
     workflow_sessions_count BIGINT NOT NULL, users_count BIGINT NOT NULL, token_metrics JSON NOT NULL, model_metrics JSON NOT NULL, \
     date DATE NOT NULL, aggregation_period VARCHAR(20) NOT NULL, created_at BIGINT NOT NULL, updated_at BIGINT, completed BOOL NOT NULL, \
     PRIMARY KEY (id), CONSTRAINT agno_metrics_uq_metrics_date_period UNIQUE (date, aggregation_period))",
    "CREATE INDEX idx_agno_metrics_date ON {S}agno_metrics (date)",
    "CREATE TABLE {S}agno_eval_runs (run_id VARCHAR(128) NOT NULL, eval_type VARCHAR(50) NOT NULL, eval_data JSON NOT NULL, \
     eval_input JSON NOT NULL, name VARCHAR(255), agent_id VARCHAR(128), team_id VARCHAR(128), workflow_id VARCHAR(128), \
     model_id VARCHAR(128), model_provider VARCHAR(128), evaluated_component_name VARCHAR(255), created_at BIGINT NOT NULL, \
     updated_at BIGINT, PRIMARY KEY (run_id))",
    "CREATE INDEX idx_agno_eval_runs_created_at ON {S}agno_eval_runs (created_at)",
    "CREATE TABLE {S}agno_knowledge (id VARCHAR(128) NOT NULL, name VARCHAR(255) NOT NULL, description TEXT NOT NULL, metadata JSON, \
     type VARCHAR(50), size BIGINT, linked_to VARCHAR(128), access_count BIGINT, created_at BIGINT, updated_at BIGINT, \
     status VARCHAR(50), status_message TEXT, external_id VARCHAR(128), PRIMARY KEY (id))",
    "CREATE TABLE {S}agno_schedules (id VARCHAR(128) NOT NULL, name VARCHAR(255) NOT NULL, description TEXT, method VARCHAR(10) NOT NULL, \
     endpoint VARCHAR(512) NOT NULL, payload JSON, cron_expr VARCHAR(128) NOT NULL, timezone VARCHAR(64) NOT NULL, \
     timeout_seconds BIGINT NOT NULL, max_retries BIGINT NOT NULL, retry_delay_seconds BIGINT NOT NULL, enabled BOOL NOT NULL, \
     next_run_at BIGINT, locked_by VARCHAR(128), locked_at BIGINT, created_at BIGINT NOT NULL, updated_at BIGINT, PRIMARY KEY (id))",
    "CREATE TABLE {S}agno_schedule_runs (id VARCHAR(128) NOT NULL, schedule_id VARCHAR(128) NOT NULL, attempt BIGINT NOT NULL, \
     triggered_at BIGINT, completed_at BIGINT, status VARCHAR(50) NOT NULL, status_code BIGINT, run_id VARCHAR(128), \
     session_id VARCHAR(128), error TEXT, input JSON, output JSON, requirements JSON, created_at BIGINT NOT NULL, PRIMARY KEY (id), \
     FOREIGN KEY(schedule_id) REFERENCES {S}agno_schedules (id) ON DELETE CASCADE)",
    "CREATE TABLE {S}agno_learnings (learning_id VARCHAR(128) NOT NULL, learning_type VARCHAR(128) NOT NULL, namespace VARCHAR(128), \
     user_id VARCHAR(128), agent_id VARCHAR(128), team_id VARCHAR(128), workflow_id VARCHAR(128), session_id VARCHAR(128), \
     entity_id VARCHAR(128), entity_type VARCHAR(128), content JSON NOT NULL, metadata JSON, created_at BIGINT NOT NULL, \
     updated_at BIGINT, PRIMARY KEY (learning_id))",
];

/// The legacy MySQL DDL for one database prefix (`` `db`. ``).
pub fn legacy_mysql_ddl(database_prefix: &str) -> Vec<String> {
    LEGACY_MYSQL_DDL
        .iter()
        .map(|s| s.replace("{S}", database_prefix))
        .collect()
}

/// A table/schema-safe name for a case.
pub fn slug(case: &str) -> String {
    let short: String = case
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(24)
        .collect();
    format!(
        "{short}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Whether unreachable servers must fail the run instead of skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Writers of legacy sessions as agno 2.9.0's server databases stored them.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod legacy_writers {
    use agno_storage_core::{Error, ErrorKind, Result, Session};
    use conformance_tests::{async_trait, LegacyWriter};
    use serde_json::Value;

    /// A driver error as the harness reports it.
    pub fn server_err(e: sqlx::Error) -> Error {
        Error::new(ErrorKind::Unavailable, e.to_string())
    }

    /// The columns of agno 2.9.0's `agno_sessions`, in the order the writers bind them.
    const SESSION_COLUMNS: &str =
        "session_id, session_type, agent_id, team_id, workflow_id, user_id, session_data, \
         agent_data, team_data, workflow_data, metadata, runs, summary, created_at, updated_at";

    /// Writes sessions as agno 2.9.0's PostgresDb did: JSONB values, never double-encoded.
    /// A runs string that is not JSON stays a JSON string: a corrupt blob.
    #[cfg(feature = "postgres")]
    pub struct PgLegacyWriter {
        /// The server.
        pub pool: sqlx::PgPool,
        /// The schema holding agno 2.9.0's tables.
        pub schema: String,
    }

    #[cfg(feature = "postgres")]
    #[async_trait]
    impl LegacyWriter for PgLegacyWriter {
        async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
            let runs = conformance_tests::native_runs_blob(runs_blob);
            let json = |v: Option<Value>| sqlx::types::Json(v.unwrap_or(Value::Null));
            let sql = format!(
                "INSERT INTO \"{}\".agno_sessions ({SESSION_COLUMNS}) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
                self.schema
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(s.session_id)
                .bind(s.session_type.as_str())
                .bind(s.agent_id)
                .bind(s.team_id)
                .bind(s.workflow_id)
                .bind(s.user_id)
                .bind(json(s.session_data))
                .bind(json(s.agent_data))
                .bind(json(s.team_data))
                .bind(json(s.workflow_data))
                .bind(json(s.metadata))
                .bind(sqlx::types::Json(runs))
                .bind(json(s.summary))
                .bind(s.created_at)
                .bind(s.updated_at)
                .execute(&self.pool)
                .await
                .map_err(server_err)?;
            Ok(())
        }
    }

    /// Writes sessions as agno 2.9.0's MySQLDb did: JSON text, never double-encoded. A runs
    /// string that is not JSON stays a JSON string: a corrupt blob (MariaDB checks that JSON
    /// columns hold JSON).
    #[cfg(feature = "mysql")]
    pub struct MySqlLegacyWriter {
        /// The server.
        pub pool: sqlx::MySqlPool,
        /// The database holding agno 2.9.0's tables.
        pub database: String,
    }

    #[cfg(feature = "mysql")]
    #[async_trait]
    impl LegacyWriter for MySqlLegacyWriter {
        async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
            use agno_storage_core::json::to_python_json;
            let runs = conformance_tests::native_runs_blob(runs_blob);
            let json = |v: Option<Value>| to_python_json(&v.unwrap_or(Value::Null));
            let sql = format!(
                "INSERT INTO `{}`.agno_sessions ({SESSION_COLUMNS}) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                self.database
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(s.session_id)
                .bind(s.session_type.as_str())
                .bind(s.agent_id)
                .bind(s.team_id)
                .bind(s.workflow_id)
                .bind(s.user_id)
                .bind(json(s.session_data))
                .bind(json(s.agent_data))
                .bind(json(s.team_data))
                .bind(json(s.workflow_data))
                .bind(json(s.metadata))
                .bind(to_python_json(&runs))
                .bind(json(s.summary))
                .bind(s.created_at)
                .bind(s.updated_at)
                .execute(&self.pool)
                .await
                .map_err(server_err)?;
            Ok(())
        }
    }
}
