//! Crash during migration on SQLite, PostgreSQL and MySQL/MariaDB: a child process migrating
//! a large agno 2.x database is killed with SIGKILL at random points, and the database must
//! recover (see `agno_storage_testkit::crash`).
//!
//! SQLite always runs (files under `AGNO_TEST_SQLITE_DIR` or the temp dir); PostgreSQL and
//! MySQL need `AGNO_TEST_POSTGRES_URL` / `AGNO_TEST_MYSQL_URL` and are skipped without them,
//! except under `CI=true`, where a missing server fails. Every migration lock here dies with
//! its holder (a `flock` on SQLite, a session advisory lock on PostgreSQL, `GET_LOCK` on
//! MySQL), so no `after_child` hook is needed.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Error, ErrorKind, Result, Session};
use agno_storage_sql::{SqlDb, TableNames};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use conformance_tests::async_trait;
use conformance_tests::LegacyWriter;
use serde_json::Value;

/// `agno_ct_<epoch>_crash_<random>`: the other suites drop such leftovers after three hours.
fn fresh_name() -> String {
    format!("agno_ct_{}_{}", now_epoch_seconds(), common::slug("crash"))
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use agno_storage_core::json::to_python_json;
    use std::path::PathBuf;
    use std::sync::Mutex;

    pub struct Sqlite {
        pub dir: PathBuf,
    }

    fn sqlite_err(e: rusqlite::Error) -> Error {
        Error::new(ErrorKind::Unexpected, e.to_string())
    }

    fn double_encoded(v: &Option<Value>) -> String {
        match v {
            None => "null".into(),
            Some(v) => to_python_json(&Value::String(to_python_json(v))),
        }
    }

    /// Writes sessions as agno 2.9.0's SqliteDb did: JSON columns double-encoded.
    struct Writer {
        conn: Mutex<rusqlite::Connection>,
    }

    #[async_trait]
    impl LegacyWriter for Writer {
        async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
            let runs = match runs_blob {
                Value::String(encoded) => to_python_json(&Value::String(encoded)),
                other => double_encoded(&Some(other)),
            };
            let conn = self
                .conn
                .lock()
                .map_err(|_| Error::new(ErrorKind::Unexpected, "writer poisoned"))?;
            conn.execute(
                "INSERT INTO agno_sessions (session_id, session_type, agent_id, team_id, workflow_id, user_id, session_data, \
                 agent_data, team_data, workflow_data, metadata, runs, summary, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
                rusqlite::params![
                    s.session_id,
                    s.session_type.as_str(),
                    s.agent_id,
                    s.team_id,
                    s.workflow_id,
                    s.user_id,
                    double_encoded(&s.session_data),
                    double_encoded(&s.agent_data),
                    double_encoded(&s.team_data),
                    double_encoded(&s.workflow_data),
                    double_encoded(&s.metadata),
                    runs,
                    double_encoded(&s.summary),
                    s.created_at,
                    s.updated_at,
                ],
            )
            .map_err(sqlite_err)?;
            Ok(())
        }
    }

    #[async_trait]
    impl CrashBackend for Sqlite {
        fn name(&self) -> &str {
            "sqlite"
        }

        async fn create(&self) -> Result<CrashDb> {
            let path = self.dir.join(format!("{}.db", fresh_name()));
            let conn = rusqlite::Connection::open(&path).map_err(sqlite_err)?;
            // agno 2.x left its databases in rollback-journal mode; the seeding needs no
            // durability (a crash here is a harness failure, not a trial).
            conn.execute_batch("PRAGMA synchronous = OFF")
                .map_err(sqlite_err)?;
            for ddl in common::legacy_ddl("JSON", "VARCHAR", "") {
                conn.execute(&ddl, []).map_err(sqlite_err)?;
            }
            Ok(CrashDb {
                locator: path.display().to_string(),
                writer: Arc::new(Writer {
                    conn: Mutex::new(conn),
                }),
            })
        }

        async fn open(&self, locator: &str) -> Result<AgnoDb> {
            Ok(SqlDb::open_sqlite(locator, TableNames::default())
                .await?
                .agno_db())
        }

        async fn destroy(&self, locator: &str) -> Result<()> {
            for suffix in ["", "-wal", "-shm", "-journal", ".migrate.lock"] {
                let _ = std::fs::remove_file(format!("{locator}{suffix}"));
            }
            Ok(())
        }
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use sqlx::postgres::PgPoolOptions;
    use sqlx::PgPool;

    pub struct Postgres {
        pub url: String,
    }

    use crate::common::legacy_writers::{server_err as pg_err, PgLegacyWriter};

    impl Postgres {
        async fn pool(&self) -> Result<PgPool> {
            PgPoolOptions::new()
                .max_connections(4)
                .connect(&self.url)
                .await
                .map_err(pg_err)
        }
    }

    #[async_trait]
    impl CrashBackend for Postgres {
        fn name(&self) -> &str {
            "postgres"
        }

        fn default_sessions(&self) -> usize {
            // One round trip per statement makes a server migration several times slower
            // than SQLite's; 1,000 runs keep the 20 trials within the time budget.
            100
        }

        async fn create(&self) -> Result<CrashDb> {
            let schema = fresh_name();
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
            Ok(CrashDb {
                locator: schema.clone(),
                writer: Arc::new(PgLegacyWriter { pool, schema }),
            })
        }

        async fn open(&self, locator: &str) -> Result<AgnoDb> {
            Ok(
                SqlDb::connect_postgres(&self.url, locator, TableNames::default())
                    .await?
                    .agno_db(),
            )
        }

        async fn destroy(&self, locator: &str) -> Result<()> {
            let pool = self.pool().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS \"{locator}\" CASCADE"
            )))
            .execute(&pool)
            .await
            .map_err(pg_err)?;
            pool.close().await;
            Ok(())
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use sqlx::mysql::MySqlPoolOptions;
    use sqlx::MySqlPool;

    pub struct MySql {
        pub url: String,
    }

    use crate::common::legacy_writers::{server_err as my_err, MySqlLegacyWriter};

    impl MySql {
        async fn pool(&self) -> Result<MySqlPool> {
            MySqlPoolOptions::new()
                .max_connections(4)
                .connect(&self.url)
                .await
                .map_err(my_err)
        }
    }

    #[async_trait]
    impl CrashBackend for MySql {
        fn name(&self) -> &str {
            "mysql"
        }

        fn default_sessions(&self) -> usize {
            // One round trip per statement makes a server migration several times slower
            // than SQLite's; 1,000 runs keep the 20 trials within the time budget.
            100
        }

        async fn create(&self) -> Result<CrashDb> {
            let database = fresh_name();
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
            Ok(CrashDb {
                locator: database.clone(),
                writer: Arc::new(MySqlLegacyWriter { pool, database }),
            })
        }

        async fn open(&self, locator: &str) -> Result<AgnoDb> {
            Ok(
                SqlDb::connect_mysql(&self.url, locator, TableNames::default())
                    .await?
                    .agno_db(),
            )
        }

        async fn destroy(&self, locator: &str) -> Result<()> {
            let pool = self.pool().await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS `{locator}`"
            )))
            .execute(&pool)
            .await
            .map_err(my_err)?;
            pool.close().await;
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    let mut targets = Vec::new();
    #[cfg(feature = "sqlite")]
    {
        let dir = std::env::var_os("AGNO_TEST_SQLITE_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("agno-storage-tests"));
        if let Err(e) = std::fs::create_dir_all(&dir) {
            eprintln!("error: cannot create {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
        targets.push(Target::ready(sqlite::Sqlite { dir }));
    }
    #[cfg(feature = "postgres")]
    targets.push(match std::env::var("AGNO_TEST_POSTGRES_URL") {
        Ok(url) => Target::ready(postgres::Postgres { url }),
        Err(_) => Target::missing("postgres", "AGNO_TEST_POSTGRES_URL"),
    });
    #[cfg(feature = "mysql")]
    targets.push(match std::env::var("AGNO_TEST_MYSQL_URL") {
        Ok(url) => Target::ready(mysql::MySql { url }),
        Err(_) => Target::missing("mysql", "AGNO_TEST_MYSQL_URL"),
    });
    agno_storage_testkit::crash::main(targets)
}
