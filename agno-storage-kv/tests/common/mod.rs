//! What the Redis and Valkey test targets share: the conformance harness (a fresh key
//! prefix per case), agno 2.9.0's session layout for legacy databases, and clean-up.

#![allow(dead_code)]

mod keys;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::json::to_python_json;
use agno_storage_core::{
    now_epoch_seconds, AgnoDb, Capabilities, Error, ErrorKind, Result, Session, SessionType,
};
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_testkit::default_paths::DefaultPathsOf;
use agno_storage_testkit::servers::{self, Backend, TEST_STEM};
use conformance_tests::{async_trait, Harness, LegacyDb, LegacyWriter, RawRunWriter, RawRunsDb};
use redis::AsyncCommands;
use serde_json::{json, Value};

/// How old a leftover test prefix is before a run drops it.
pub const STALE_AFTER: i64 = 3 * 3600;

/// A key-safe name for a case.
pub fn slug(case: &str) -> String {
    case.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(32)
        .collect()
}

pub use agno_storage_testkit::servers::run_stem;

fn kv_err(e: redis::RedisError) -> Error {
    Error::new(ErrorKind::Unavailable, e.to_string())
}

pub async fn connection(url: &str) -> Result<redis::aio::ConnectionManager> {
    let client = redis::Client::open(url).map_err(kv_err)?;
    client.get_connection_manager().await.map_err(kv_err)
}

/// Deletes every key matching `pattern` (a SCAN glob). Returns how many went.
pub async fn delete_matching(
    conn: &mut redis::aio::ConnectionManager,
    pattern: &str,
) -> Result<u64> {
    keys::delete_matching(conn, pattern).await.map_err(kv_err)
}

/// Drops the keys of test prefixes older than [`STALE_AFTER`] (left by crashed runs).
pub async fn drop_stale_prefixes(conn: &mut redis::aio::ConnectionManager) -> Result<u64> {
    let cutoff = now_epoch_seconds() - STALE_AFTER;
    let mut stale = std::collections::BTreeSet::new();
    let mut keys = conn
        .scan_match::<_, String>(format!("{TEST_STEM}*"))
        .await
        .map_err(kv_err)?;
    while let Some(key) = keys.next_item().await {
        let key = key.map_err(kv_err)?;
        let stem = key
            .strip_prefix(TEST_STEM)
            .and_then(|rest| rest.split('_').next());
        if stem
            .and_then(|e| e.parse::<i64>().ok())
            .is_some_and(|e| e < cutoff)
        {
            stale.insert(format!("{TEST_STEM}{}_*", stem.unwrap_or_default()));
        }
    }
    drop(keys);
    let mut deleted = 0;
    for pattern in stale {
        deleted += delete_matching(conn, &pattern).await?;
    }
    Ok(deleted)
}

/// Writes sessions as agno 2.9.0's `RedisDb.upsert_session` did: one JSON record per
/// session with the runs inline (`runs` right after `user_id`), no indexes, no stamps.
pub struct Writer {
    conn: redis::aio::ConnectionManager,
    prefix: String,
}

impl Writer {
    pub fn new(conn: redis::aio::ConnectionManager, prefix: String) -> Self {
        Writer { conn, prefix }
    }
}

/// The record agno 2.9.0 wrote for `s` with `runs` as its runs field.
pub fn legacy_record(s: &Session, runs: Value) -> Value {
    let o = |v: &Option<Value>| v.clone().unwrap_or(Value::Null);
    match s.session_type {
        SessionType::Agent => json!({
            "session_id": s.session_id, "session_type": "agent", "agent_id": s.agent_id,
            "team_id": s.team_id, "workflow_id": s.workflow_id, "user_id": s.user_id, "runs": runs,
            "agent_data": o(&s.agent_data), "team_data": o(&s.team_data), "workflow_data": o(&s.workflow_data),
            "session_data": o(&s.session_data), "summary": o(&s.summary), "metadata": o(&s.metadata),
            "created_at": s.created_at, "updated_at": s.updated_at.unwrap_or(s.created_at),
        }),
        SessionType::Team => json!({
            "session_id": s.session_id, "session_type": "team", "agent_id": null,
            "team_id": s.team_id, "workflow_id": null, "user_id": s.user_id, "runs": runs,
            "team_data": o(&s.team_data), "agent_data": null, "workflow_data": null,
            "session_data": o(&s.session_data), "summary": o(&s.summary), "metadata": o(&s.metadata),
            "created_at": s.created_at, "updated_at": s.updated_at.unwrap_or(s.created_at),
        }),
        SessionType::Workflow => json!({
            "session_id": s.session_id, "session_type": "workflow", "workflow_id": s.workflow_id,
            "user_id": s.user_id, "runs": runs, "workflow_data": o(&s.workflow_data),
            "session_data": o(&s.session_data), "metadata": o(&s.metadata),
            "created_at": s.created_at, "updated_at": s.updated_at.unwrap_or(s.created_at),
            "agent_id": null, "team_id": null, "agent_data": null, "team_data": null, "summary": null,
        }),
    }
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        let key = format!("{}:sessions:{}", self.prefix, session.session_id);
        let record = to_python_json(&legacy_record(&session, runs_blob));
        redis::cmd("SET")
            .arg(key)
            .arg(record)
            .query_async::<()>(&mut self.conn.clone())
            .await
            .map_err(kv_err)
    }
}

/// The conformance harness for one server.
pub struct Kv {
    pub name: &'static str,
    pub url: String,
    pub stem: String,
    pub durable: bool,
    /// Whether the engine's stores run on its default paths instead of the sorted sets.
    pub default_paths: bool,
}

impl Kv {
    fn prefix(&self, case: &str) -> String {
        format!("{}_{}", self.stem, slug(case))
    }

    /// The stores of `db`, on its native paths or the engine's defaults.
    fn wire(&self, db: &KvDb) -> AgnoDb {
        if self.default_paths {
            db.agno_db_with::<DefaultPathsOf>()
        } else {
            db.agno_db()
        }
    }
}

#[async_trait]
impl Harness for Kv {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            durable: self.durable,
            ..Capabilities::all()
        }
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        let options = KvOptions {
            prefix: self.prefix(case),
            stamp_new: true,
            ..KvOptions::default()
        };
        Ok(self.wire(&KvDb::connect(&self.url, options).await?))
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let prefix = self.prefix(case);
        let options = KvOptions {
            prefix: prefix.clone(),
            stamp_new: false,
            ..KvOptions::default()
        };
        let db = self.wire(&KvDb::connect(&self.url, options).await?);
        let writer = Writer::new(connection(&self.url).await?, prefix);
        Ok(LegacyDb {
            db,
            writer: Arc::new(writer),
        })
    }

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_with_raw_runs(&self, case: &str) -> Result<RawRunsDb> {
        let prefix = self.prefix(case);
        let options = KvOptions {
            prefix: prefix.clone(),
            stamp_new: true,
            ..KvOptions::default()
        };
        let db = self.wire(&KvDb::connect(&self.url, options).await?);
        let conn = connection(&self.url).await?;
        Ok(RawRunsDb {
            db,
            writer: Arc::new(RawRuns { conn, prefix }),
        })
    }
}

/// Rewrites run records under one prefix past the adapter.
struct RawRuns {
    conn: redis::aio::ConnectionManager,
    prefix: String,
}

#[async_trait]
impl RawRunWriter for RawRuns {
    /// A lone surrogate escape in the run's JSON text (another writer's; agno's own Redis
    /// store cannot write one).
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        let mut conn = self.conn.clone();
        let key = format!("{}:runs:{run_id}", self.prefix);
        let stored: String = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .map_err(kv_err)?;
        redis::cmd("SET")
            .arg(&key)
            .arg(stored.replace("output of", r"caf\udce9"))
            .query_async::<()>(&mut conn)
            .await
            .map_err(kv_err)
    }
}

/// Runs the whole suite against `backend` (its `AGNO_TEST_*_URL`, or a container with the
/// `agno-storage-testkit/containers` feature), as harness `name`: drops stale test prefixes
/// first, this run's keys afterwards.
pub fn run_suite(name: &'static str, backend: Backend) -> ExitCode {
    run_suites(&[(name, false)], backend)
}

/// [`run_suite`] once per `(harness name, engine default paths)`, stopping at the first
/// failure.
pub fn run_suites(runs: &[(&'static str, bool)], backend: Backend) -> ExitCode {
    let url = match servers::url_for_suite(backend) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let var = backend.env_var();
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stem = run_stem();
    let durable = match rt.block_on(async {
        let mut conn = connection(&url).await?;
        drop_stale_prefixes(&mut conn).await?;
        let db = KvDb::connect(
            &url,
            KvOptions {
                prefix: format!("{stem}_probe"),
                stamp_new: false,
                ..KvOptions::default()
            },
        )
        .await?;
        Ok::<_, Error>(db.agno_db().capabilities().durable)
    }) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {var}={url} is not reachable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut code = ExitCode::SUCCESS;
    for (name, default_paths) in runs {
        code = conformance_tests::main(Kv {
            name,
            url: url.clone(),
            stem: format!("{stem}{}", if *default_paths { "d" } else { "" }),
            durable,
            default_paths: *default_paths,
        });
        if code != ExitCode::SUCCESS {
            break;
        }
    }
    if std::env::var_os("AGNO_TEST_KEEP_KEYS").is_none() {
        let cleaned = rt.block_on(async {
            let mut conn = connection(&url).await?;
            delete_matching(&mut conn, &format!("{stem}_*")).await
        });
        if let Err(e) = cleaned {
            eprintln!("warning: could not delete this run's keys ({stem}_*): {e}");
        }
    }
    servers::stop_all();
    code
}
