//! Schema stamps and the migration target (shared v3.0.0 steps plus an index step; the
//! rebuild itself is `crate::indexing`'s).
//!
//! Stamps live where agno 3.1.10 keeps them: `{prefix}:agno_schema_versions:{table}`, the
//! version as text, no TTL. agno 2.x wrote no stamps and none of our indexes, so the
//! index step rebuilds every table's indexes from a `SCAN` before the shared steps copy
//! legacy runs and re-key learnings. A scan error fails the step, so the table is not
//! stamped (agno's `RedisDb` swallows it and stamps anyway).
//!
//! The migration lock is a lease: the key `{prefix}:agno_migration_lock`, set with
//! `SET NX PX <lease>` to a random token per `lock()` call. While the lock is held, a
//! background task renews the key's TTL every lease/3 with a Lua script that runs `PEXPIRE`
//! only while the key still holds the holder's token; when the script finds another token
//! or no key, the lock was taken over (after it expired) or deleted: the task stops without
//! writing the lock back, and `release` reports the loss. A holder that dies stops renewing,
//! the server expires the key once the lease passes, and the next `lock()`'s `SET NX` takes
//! it; expiry runs on the server's clock, so clients' clocks do not matter.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::lease::{hold_lease, LeaseRecord};

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, RekeyLearningsStep, StepOutcome, TableRef,
};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MigrationTarget, Result, SchemaVersion, SchemaVersionStore,
    TableType,
};

use crate::store::{glob_escape, KvStore};

pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
/// How long `lock()` waits for another migration to finish (at least two leases).
const LOCK_WAIT: Duration = Duration::from_secs(300);

impl KvStore {
    fn version_key(&self, table_name: &str) -> String {
        format!("{}:agno_schema_versions:{table_name}", self.prefix)
    }

    fn lock_key(&self) -> String {
        format!("{}:agno_migration_lock", self.prefix)
    }

    /// Whether any key lives under the prefix (a stamp first, then a `SCAN`); reads only.
    pub(crate) async fn holds_anything(&self) -> Result<bool> {
        let mut pipe = redis::pipe();
        for t in TableType::ALL {
            pipe.cmd("EXISTS").arg(self.version_key(t.default_name()));
        }
        let stamped: Vec<i64> = self.pipe(&pipe).await?;
        if stamped.iter().any(|n| *n > 0) {
            return Ok(true);
        }
        let pattern = format!("{}:*", glob_escape(&self.prefix));
        Ok(!self.scan_keys(&pattern, true).await?.is_empty())
    }

    /// Stamps every table `3.0.0` when nothing lives under the prefix yet (a new database);
    /// leaves an unstamped prefix with data alone (agno 2.x data awaiting migration).
    pub(crate) async fn stamp_if_new(&self) -> Result<()> {
        if self.holds_anything().await? {
            return Ok(());
        }
        for t in TableType::ALL {
            self.set_schema_version(t.default_name(), SchemaVersion::LATEST)
                .await?;
        }
        Ok(())
    }
}

#[async_trait]
impl SchemaVersionStore for KvStore {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        match self.get(&self.version_key(table_name)).await? {
            Some(v) => v.parse().map(Some),
            None => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        self.query::<()>(
            redis::cmd("SET")
                .arg(self.version_key(table_name))
                .arg(version.to_string()),
        )
        .await
    }
}

/// The Redis-specific v3.0.0 step: builds our indexes from a scan of the table, so data
/// agno wrote (2.x or 3.x) lists like data we wrote. Runs before the shared steps.
struct IndexStep {
    store: Arc<KvStore>,
}

#[async_trait]
impl MigrationStep for IndexStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::LATEST
    }
    fn description(&self) -> String {
        "index every record for listing without SCAN (agno 2.x kept no such indexes)".into()
    }
    fn applies_to(&self, _table: TableType) -> bool {
        true
    }
    async fn up(&self, table: &TableRef) -> Result<StepOutcome> {
        Ok(match self.store.reindex(table.table_type).await? {
            0 => StepOutcome::NothingToDo,
            _ => StepOutcome::Applied,
        })
    }
    async fn down(&self, _table: &TableRef) -> Result<StepOutcome> {
        // agno 2.x ignores the indexes; they stay valid for a later up().
        Ok(StepOutcome::NothingToDo)
    }
}

const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const REFRESH: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

/// The lock key as the lease's heartbeat and release see it: a token-guarded `PEXPIRE`
/// renews it, a token-guarded `DEL` removes it.
struct KvLease {
    store: Arc<KvStore>,
}

#[async_trait]
impl LeaseRecord for KvLease {
    async fn renew(&self, holder: &str, lease: Duration) -> Result<bool> {
        let kept: i64 = self
            .store
            .query(
                redis::cmd("EVAL")
                    .arg(REFRESH)
                    .arg(1)
                    .arg(self.store.lock_key())
                    .arg(holder)
                    .arg(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX)),
            )
            .await?;
        Ok(kept == 1)
    }

    async fn remove(&self, holder: &str) -> Result<bool> {
        let deleted: i64 = self
            .store
            .query(
                redis::cmd("EVAL")
                    .arg(RELEASE)
                    .arg(1)
                    .arg(self.store.lock_key())
                    .arg(holder),
            )
            .await?;
        Ok(deleted == 1)
    }

    fn location(&self) -> String {
        format!("key {}", self.store.lock_key())
    }

    fn backend(&self) -> &'static str {
        self.store.server
    }
}

/// The migration target of one prefix.
pub(crate) struct KvMigrations {
    pub(crate) store: Arc<KvStore>,
    /// The learnings store (the engine's), for the learnings re-key step.
    pub(crate) learnings: Arc<dyn agno_storage_core::LearningStore>,
    /// The migration lock's lease ([`crate::KvDb::with_migration_lock_lease`]).
    pub(crate) lease: Duration,
}

#[async_trait]
impl MigrationTarget for KvMigrations {
    fn tables(&self) -> Vec<TableRef> {
        TableType::ALL
            .iter()
            .map(|t| TableRef {
                table_type: *t,
                name: t.default_name().to_owned(),
            })
            .collect()
    }

    fn versions(&self) -> &dyn SchemaVersionStore {
        self.store.as_ref()
    }

    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        vec![
            Arc::new(IndexStep {
                store: self.store.clone(),
            }),
            Arc::new(CopyLegacyRunsStep::new(self.store.clone())),
            Arc::new(RekeyLearningsStep::new(self.learnings.clone())),
        ]
    }

    /// Takes the migration lock (see the module docs) with `SET NX PX`, retrying every
    /// 200 ms; `Conflict` after five minutes (or two leases, if longer) while a live holder
    /// keeps renewing it.
    async fn lock(&self) -> Result<MigrationLock> {
        let store = self.store.clone();
        let key = store.lock_key();
        let token = uuid::Uuid::new_v4().to_string();
        let lease = self.lease;
        let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + LOCK_WAIT.max(lease * 2);
        loop {
            let taken: Option<String> = store
                .query(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(lease_ms),
                )
                .await?;
            if taken.is_some() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds {key}; wait for it to finish. A lock whose holder died expires \
                         once its lease passes (its TTL; {} s from the last heartbeat by default)",
                        lease.as_secs_f64()
                    ),
                )
                .with_backend(store.server));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(hold_lease(KvLease { store }, token, lease))
    }
}

#[cfg(test)]
mod tests {
    //! The lease against a live server (`AGNO_TEST_REDIS_URL`, else `AGNO_TEST_VALKEY_URL`);
    //! skipped without one, except under `CI=true`.

    use std::time::{Duration, Instant};

    use agno_storage_core::{AgnoDb, ErrorKind};

    use crate::{KvDb, KvOptions};

    /// The lease these tests use (the default is 30 s).
    const LEASE: Duration = Duration::from_secs(2);

    fn url() -> Option<String> {
        let url = ["AGNO_TEST_REDIS_URL", "AGNO_TEST_VALKEY_URL"]
            .iter()
            .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()));
        if url.is_none() {
            let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
            assert!(
                !ci,
                "CI=true but AGNO_TEST_REDIS_URL is not set; run ./scripts/test.sh"
            );
            eprintln!("note: AGNO_TEST_REDIS_URL is not set; skipping");
        }
        url
    }

    fn prefix() -> String {
        format!(
            "agno_lock_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    }

    async fn leased(url: &str, prefix: &str) -> AgnoDb {
        let options = KvOptions {
            prefix: prefix.to_owned(),
            stamp_new: false,
            ..KvOptions::default()
        };
        KvDb::connect(url, options)
            .await
            .expect("connect")
            .with_migration_lock_lease(LEASE)
            .expect("lease")
            .agno_db()
    }

    async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
        redis::Client::open(url)
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connection")
    }

    async fn lock_held(url: &str, prefix: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(format!("{prefix}:agno_migration_lock"))
            .query_async::<i64>(&mut raw(url).await)
            .await
            .expect("EXISTS")
            > 0
    }

    #[test]
    fn a_lease_below_one_second_is_refused() {
        let Some(url) = url() else { return };
        runtime().block_on(async {
            let options = KvOptions {
                prefix: prefix(),
                stamp_new: false,
                ..KvOptions::default()
            };
            let db = KvDb::connect(&url, options).await.expect("connect");
            let err = db
                .with_migration_lock_lease(Duration::from_millis(500))
                .expect_err("too short");
            assert_eq!(err.kind(), ErrorKind::InvalidInput);
        });
    }

    /// A holder killed while it holds the lock (its runtime shut down: no heartbeat, no
    /// release) blocks the next migration only until its lease passes.
    #[test]
    fn a_dead_holders_lock_is_taken_over_once_its_lease_passes() {
        let Some(url) = url() else { return };
        let prefix = prefix();
        let taken_at = {
            let (url, prefix) = (url.clone(), prefix.clone());
            std::thread::spawn(move || {
                let rt = runtime();
                let (lock, taken_at) = rt.block_on(async {
                    let db = leased(&url, &prefix).await;
                    let target = db.migrations().expect("migrations");
                    // Before the lock is written: its lease runs from a moment after this.
                    let taken_at = Instant::now();
                    (target.lock().await.expect("the first lock"), taken_at)
                });
                std::mem::forget(lock);
                drop(rt); // the "kill": the heartbeat task dies with its runtime
                taken_at
            })
            .join()
            .expect("the holder thread")
        };
        runtime().block_on(async {
            assert!(lock_held(&url, &prefix).await, "the dead holder's lock");
            let db = leased(&url, &prefix).await;
            let target = db.migrations().expect("migrations");
            let lock = target
                .lock()
                .await
                .expect("take over the dead holder's lock");
            let waited = taken_at.elapsed();
            assert!(
                waited >= LEASE - Duration::from_millis(200)
                    && waited < LEASE + Duration::from_secs(10),
                "taken over {waited:?} after the dead holder locked (lease {LEASE:?})"
            );
            lock.release().await.expect("release");
            assert!(!lock_held(&url, &prefix).await, "released");
        });
    }

    /// A holder whose heartbeat runs keeps the lock through several leases; once it
    /// releases, the waiter gets the lock at once.
    #[test]
    fn a_live_holders_lock_is_not_taken_over() {
        let Some(url) = url() else { return };
        runtime().block_on(async {
            let db = leased(&url, &prefix()).await;
            let target = db.migrations().expect("migrations");
            let held = target.lock().await.expect("lock");
            let waiting = tokio::time::timeout(LEASE * 3, target.lock()).await;
            assert!(waiting.is_err(), "a live holder's lock was taken over");
            held.release().await.expect("the holder kept its lock");
            let next = tokio::time::timeout(Duration::from_secs(5), target.lock())
                .await
                .expect("the released lock is free at once")
                .expect("lock");
            next.release().await.expect("release");
        });
    }

    /// A holder whose key disappears (here deleted behind its back) notices at its next
    /// heartbeat, does not write the key back, and reports the loss on release.
    #[test]
    fn a_holder_that_lost_its_lock_reports_it() {
        let Some(url) = url() else { return };
        let prefix = prefix();
        runtime().block_on(async {
            let db = leased(&url, &prefix).await;
            let target = db.migrations().expect("migrations");
            let held = target.lock().await.expect("lock");
            redis::cmd("DEL")
                .arg(format!("{prefix}:agno_migration_lock"))
                .query_async::<i64>(&mut raw(&url).await)
                .await
                .expect("DEL");
            tokio::time::sleep(LEASE).await;
            assert!(!lock_held(&url, &prefix).await, "resurrected");
            let err = held.release().await.expect_err("the loss is reported");
            assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        });
    }
}
