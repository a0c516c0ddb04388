//! The conformance suite against PostgreSQL, one fresh schema per case.
//!
//! The server comes from `AGNO_TEST_POSTGRES_URL`. Without it the suite is skipped, except
//! under `CI=true`, where a missing or unreachable server fails the run.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Capabilities, Result};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::servers::{self, Backend};
use conformance_tests::{async_trait, Harness, LegacyDb, RawRunWriter, RawRunsDb};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use common::legacy_writers::{server_err as pg_err, PgLegacyWriter};

const SCHEMA_PREFIX: &str = "agno_ct_";

struct Postgres {
    url: String,
}

impl Postgres {
    /// `agno_ct_<epoch>_<case>`: the epoch lets a later run drop schemas left behind.
    fn schema(case: &str) -> String {
        format!(
            "{SCHEMA_PREFIX}{}_{}",
            now_epoch_seconds(),
            common::slug(case)
        )
        .to_lowercase()
    }

    async fn pool(&self) -> Result<PgPool> {
        PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .map_err(pg_err)
    }
}

#[async_trait]
impl Harness for Postgres {
    fn name(&self) -> &str {
        "postgres"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(
            SqlDb::connect_postgres(&self.url, &Self::schema(case), TableNames::default())
                .await?
                .agno_db(),
        )
    }

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_with_raw_runs(&self, case: &str) -> Result<RawRunsDb> {
        let schema = Self::schema(case);
        let db = SqlDb::connect_postgres(&self.url, &schema, TableNames::default())
            .await?
            .agno_db();
        let pool = self.pool().await?;
        Ok(RawRunsDb {
            db,
            writer: Arc::new(PgRaw { pool, schema }),
        })
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let schema = Self::schema(case);
        let pool = self.pool().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE SCHEMA \"{schema}\"")))
            .execute(&pool)
            .await
            .map_err(pg_err)?;
        for ddl in common::legacy_ddl("JSONB", "TEXT", &format!("\"{schema}\".")) {
            sqlx::query(sqlx::AssertSqlSafe(ddl))
                .execute(&pool)
                .await
                .map_err(pg_err)?;
        }
        let db = SqlDb::connect_postgres(&self.url, &schema, TableNames::default())
            .await?
            .agno_db();
        Ok(LegacyDb {
            db,
            writer: Arc::new(PgLegacyWriter { pool, schema }),
        })
    }
}

/// Drops schemas earlier runs left behind (older than three hours), never a running one's.
async fn drop_stale_schemas(url: &str) -> std::result::Result<(), sqlx::Error> {
    let pool = PgPoolOptions::new().max_connections(1).connect(url).await?;
    let schemas: Vec<(String,)> =
        sqlx::query_as("SELECT nspname::text FROM pg_namespace WHERE nspname LIKE 'agno\\_ct\\_%'")
            .fetch_all(&pool)
            .await?;
    let cutoff = now_epoch_seconds() - 3 * 3600;
    for (schema,) in schemas {
        let epoch = schema
            .trim_start_matches(SCHEMA_PREFIX)
            .split('_')
            .next()
            .and_then(|e| e.parse::<i64>().ok());
        if epoch.is_some_and(|e| e < cutoff) {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
            )))
            .execute(&pool)
            .await?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let url = match servers::url_for_suite(Backend::Postgres) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let checked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(drop_stale_schemas(&url)));
    match checked {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("error: PostgreSQL at AGNO_TEST_POSTGRES_URL is unreachable: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    }
    let code = conformance_tests::main(Postgres { url });
    servers::stop_all();
    code
}

/// Rewrites runs of one schema past the adapter.
struct PgRaw {
    pool: PgPool,
    schema: String,
}

#[async_trait]
impl RawRunWriter for PgRaw {
    /// JSONB holds no lone surrogate: the run's content becomes a value nested 1,001
    /// levels deep, which PostgreSQL stores and this code refuses to decode.
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        let deep = format!("{{\"content\": {}{}}}", "[".repeat(1001), "]".repeat(1001));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE \"{}\".agno_runs SET run_data = $1::jsonb WHERE run_id = $2",
            self.schema
        )))
        .bind(deep)
        .bind(run_id)
        .execute(&self.pool)
        .await
        .map_err(pg_err)?;
        Ok(())
    }
}
