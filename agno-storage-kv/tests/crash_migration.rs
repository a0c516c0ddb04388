//! Crash during migration on Redis and Valkey: a child process migrating a large agno 2.x
//! key space is killed with SIGKILL at random points, and the database must recover (see
//! `conformance_tests::crash`).
//!
//! The servers come from `AGNO_TEST_REDIS_URL` and `AGNO_TEST_VALKEY_URL`; without them a
//! backend is skipped, except under `CI=true`, where it fails.
//!
//! The migration lock is a key with a 60-second TTL (`{prefix}:agno_migration_lock`) that its
//! holder refreshes: a killed holder leaves it behind until it expires, so a recovering
//! `up()` would wait for up to a minute. A holder whose `up()` returned leaves it too when its
//! process exits right away: the guard releases it from a task spawned in `Drop`, which the
//! exiting runtime never runs (a known bug). The `after_child` hook deletes it, as an operator
//! who knows the holder is dead would (the lock's error message says so).

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Error, ErrorKind, Result};
use agno_storage_kv::{KvDb, KvOptions};
use conformance_tests::async_trait;
use conformance_tests::crash::{CrashBackend, CrashDb, Target};

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
        };
        Ok(KvDb::connect(&self.url, options).await?.agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        let mut conn = common::connection(&self.url).await?;
        let deleted = redis::cmd("DEL")
            .arg(format!("{locator}:agno_migration_lock"))
            .query_async::<u64>(&mut conn)
            .await
            .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
        if deleted > 0 && !killed && std::env::var_os("AGNO_CRASH_VERBOSE").is_some() {
            eprintln!(
                "{}: a child whose up() returned left its migration lock behind (released by a task \
                 spawned in LockGuard::drop, which the exiting process never ran)",
                self.name
            );
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
    conformance_tests::crash::main(vec![
        target("redis", "AGNO_TEST_REDIS_URL"),
        target("valkey", "AGNO_TEST_VALKEY_URL"),
    ])
}
