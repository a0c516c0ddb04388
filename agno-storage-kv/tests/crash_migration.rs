//! Crash during migration on Redis and Valkey: a child process migrating a large agno 2.x
//! key space is killed with SIGKILL at random points, and the database must recover (see
//! `agno_storage_testkit::crash`).
//!
//! The servers come from `AGNO_TEST_REDIS_URL` and `AGNO_TEST_VALKEY_URL`; without them a
//! backend is skipped, except under `CI=true`, where it fails.
//!
//! The migration lock is a lease: a key (`{prefix}:agno_migration_lock`) whose TTL its holder
//! renews every lease/3; the trial's children and parent use a 2-second lease (the default
//! is 30 s), so after a kill the key expires within 2 seconds and the recovering `up()` takes
//! the lock: nothing clears it by hand. A holder whose `up()` returned must leave no lock:
//! `up()` awaits `HeldLock::release`, and the `after_child` hook fails the trial when a
//! finished child left its lock.

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{AgnoDb, Error, ErrorKind, Result};
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use conformance_tests::async_trait;

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);

struct Crashable {
    name: &'static str,
    url: String,
    stem: String,
}

#[async_trait]
impl CrashBackend for Crashable {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self) -> Result<CrashDb> {
        let prefix = format!(
            "{}_crash_{}",
            self.stem,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let writer = common::Writer::new(common::connection(&self.url).await?, prefix.clone());
        Ok(CrashDb {
            locator: prefix,
            writer: Arc::new(writer),
        })
    }

    fn default_sessions(&self) -> usize {
        // Several round trips per session: 1,000 runs keep the 20 trials within the budget.
        100
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        let options = KvOptions {
            prefix: locator.to_owned(),
            stamp_new: false,
            ..Default::default()
        };
        Ok(KvDb::connect(&self.url, options)
            .await?
            .with_migration_lock_lease(LEASE)?
            .agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        if killed {
            // The dead child's key stays: it expires after the lease and up() takes it.
            return Ok(());
        }
        let mut conn = common::connection(&self.url).await?;
        let held = redis::cmd("EXISTS")
            .arg(format!("{locator}:agno_migration_lock"))
            .query_async::<u64>(&mut conn)
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        if held > 0 {
            return Err(Error::new(
                ErrorKind::Conflict,
                "a child whose up() returned left its migration lock behind: up() must release it",
            ));
        }
        Ok(())
    }

    async fn destroy(&self, locator: &str) -> Result<()> {
        let mut conn = common::connection(&self.url).await?;
        common::delete_matching(&mut conn, &format!("{locator}:*")).await?;
        Ok(())
    }
}

fn target(name: &'static str, var: &str) -> Target {
    match std::env::var(var) {
        Ok(url) if !url.is_empty() => Target::ready(Crashable {
            name,
            url,
            stem: common::run_stem(),
        }),
        _ => Target::missing(name, var),
    }
}

fn main() -> ExitCode {
    agno_storage_testkit::crash::main(vec![
        target("redis", "AGNO_TEST_REDIS_URL"),
        target("valkey", "AGNO_TEST_VALKEY_URL"),
    ])
}
