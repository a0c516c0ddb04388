//! The conformance suite against MySQL/MariaDB, one fresh database per case.
//!
//! The server comes from `AGNO_TEST_MYSQL_URL` (e.g. `mysql://root@127.0.0.1:3306`). Without
//! it the suite is skipped, except under `CI=true`, where a missing or unreachable server
//! fails the run.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Capabilities, Result};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::servers::{self, Backend};
use conformance_tests::{async_trait, Harness, LegacyDb};
use sqlx::mysql::MySqlPoolOptions;
use sqlx::MySqlPool;

use common::legacy_writers::{server_err as my_err, MySqlLegacyWriter};

const DATABASE_PREFIX: &str = "agno_ct_";

struct MySql {
    url: String,
}

impl MySql {
    /// `agno_ct_<epoch>_<case>`: the epoch lets a later run drop databases left behind.
    fn database(case: &str) -> String {
        format!(
            "{DATABASE_PREFIX}{}_{}",
            now_epoch_seconds(),
            common::slug(case)
        )
        .to_lowercase()
    }

    async fn pool(&self) -> Result<MySqlPool> {
        MySqlPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await
            .map_err(my_err)
    }
}

#[async_trait]
impl Harness for MySql {
    fn name(&self) -> &str {
        "mysql"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(
            SqlDb::connect_mysql(&self.url, &Self::database(case), TableNames::default())
                .await?
                .agno_db(),
        )
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let database = Self::database(case);
        let pool = self.pool().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE `{database}`")))
            .execute(&pool)
            .await
            .map_err(my_err)?;
        for ddl in common::legacy_mysql_ddl(&format!("`{database}`.")) {
            sqlx::query(sqlx::AssertSqlSafe(ddl))
                .execute(&pool)
                .await
                .map_err(my_err)?;
        }
        let db = SqlDb::connect_mysql(&self.url, &database, TableNames::default())
            .await?
            .agno_db();
        Ok(LegacyDb {
            db,
            writer: Arc::new(MySqlLegacyWriter { pool, database }),
        })
    }
}

/// Drops databases earlier runs left behind (older than three hours), never a running one's.
async fn drop_stale_databases(url: &str) -> std::result::Result<(), sqlx::Error> {
    let pool = MySqlPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await?;
    let databases: Vec<(String,)> = sqlx::query_as(
        "SELECT CAST(schema_name AS CHAR) FROM information_schema.schemata WHERE schema_name LIKE 'agno\\_ct\\_%'",
    )
    .fetch_all(&pool)
    .await?;
    let cutoff = now_epoch_seconds() - 3 * 3600;
    for (database,) in databases {
        let epoch = database
            .trim_start_matches(DATABASE_PREFIX)
            .split('_')
            .next()
            .and_then(|e| e.parse::<i64>().ok());
        if epoch.is_some_and(|e| e < cutoff) {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS `{database}`"
            )))
            .execute(&pool)
            .await?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let url = match servers::url_for_suite(Backend::MySql) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let checked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(drop_stale_databases(&url)));
    match checked {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            eprintln!("error: MySQL at AGNO_TEST_MYSQL_URL is unreachable: {e}");
            return ExitCode::FAILURE;
        }
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    }
    let code = conformance_tests::main(MySql { url });
    servers::stop_all();
    code
}
