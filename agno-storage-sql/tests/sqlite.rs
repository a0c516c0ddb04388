//! The conformance suite against SQLite, one fresh database file per case.

mod common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::json::to_python_json;
use agno_storage_core::{AgnoDb, Capabilities, Error, ErrorKind, Result, Session};
use agno_storage_sql::{SqlDb, TableNames};
use conformance_tests::{async_trait, Harness, LegacyDb, LegacyWriter, RawRunWriter, RawRunsDb};
use serde_json::Value;

struct Sqlite {
    dir: PathBuf,
}

impl Sqlite {
    fn path(&self, case: &str) -> PathBuf {
        self.dir.join(format!("{}.db", common::slug(case)))
    }
}

/// Writes sessions as agno 2.9.0's SqliteDb did: JSON columns double-encoded.
struct Writer {
    path: PathBuf,
}

fn double_encoded(v: &Option<Value>) -> String {
    match v {
        None => "null".into(),
        Some(v) => to_python_json(&Value::String(to_python_json(v))),
    }
}

fn sqlite_err(e: rusqlite::Error) -> Error {
    Error::new(ErrorKind::Unexpected, e.to_string())
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        let runs = match runs_blob {
            Value::String(encoded) => to_python_json(&Value::String(encoded)),
            other => double_encoded(&Some(other)),
        };
        let conn = rusqlite::Connection::open(&self.path).map_err(sqlite_err)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(sqlite_err)?;
        conn.execute(
            "INSERT INTO agno_sessions (session_id, session_type, agent_id, team_id, workflow_id, user_id, session_data, agent_data, \
             team_data, workflow_data, metadata, runs, summary, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)",
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
impl Harness for Sqlite {
    fn name(&self) -> &str {
        "sqlite"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(SqlDb::open_sqlite(self.path(case), TableNames::default())
            .await?
            .agno_db())
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let path = self.path(case);
        {
            let conn = rusqlite::Connection::open(&path).map_err(sqlite_err)?;
            for ddl in common::legacy_ddl("JSON", "VARCHAR", "") {
                conn.execute(&ddl, []).map_err(sqlite_err)?;
            }
        }
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await?
            .agno_db();
        Ok(LegacyDb {
            db,
            writer: Arc::new(Writer { path }),
        })
    }

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_with_raw_runs(&self, case: &str) -> Result<RawRunsDb> {
        let path = self.path(case);
        let db = SqlDb::open_sqlite(&path, TableNames::default())
            .await?
            .agno_db();
        Ok(RawRunsDb {
            db,
            writer: Arc::new(Writer { path }),
        })
    }
}

#[async_trait]
impl RawRunWriter for Writer {
    /// A lone surrogate escape in the run's JSON text, as agno writes one.
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        let conn = rusqlite::Connection::open(&self.path).map_err(sqlite_err)?;
        conn.execute(
            "UPDATE agno_runs SET run_data = replace(run_data, 'output of', ?1) WHERE run_id = ?2",
            [r"caf\udce9", run_id],
        )
        .map_err(sqlite_err)?;
        Ok(())
    }
}

fn main() -> ExitCode {
    let dir = std::env::var_os("AGNO_TEST_SQLITE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("agno-storage-tests"));
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    conformance_tests::main(Sqlite { dir })
}
