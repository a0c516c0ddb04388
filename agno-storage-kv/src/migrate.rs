//! Schema stamps and the migration target (shared v3.0.0 steps plus an index step; the
//! rebuild itself is `crate::indexing`'s).
//!
//! Stamps live where agno 3.1.10 keeps them: `{prefix}:agno_schema_versions:{table}`, the
//! version as text, no TTL. agno 2.x wrote no stamps and none of our indexes, so the
//! index step rebuilds every table's indexes from a `SCAN` before the shared steps copy
//! legacy runs and re-key learnings. A scan error fails the step, so the table is not
//! stamped (agno's `RedisDb` swallows it and stamps anyway).

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, HeldLock, MigrationLock, MigrationStep, RekeyLearningsStep, StepOutcome,
    TableRef,
};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MigrationTarget, Result, SchemaVersion, SchemaVersionStore,
    TableType,
};

use crate::store::{glob_escape, KvStore};

/// How long a migration lock lives without being refreshed (a crashed holder frees it).
const LOCK_TTL_MS: u64 = 60_000;
/// How long `lock()` waits for another migration to finish.
const LOCK_WAIT: Duration = Duration::from_secs(300);

impl KvStore {
    fn version_key(&self, table_name: &str) -> String {
        format!("{}:agno_schema_versions:{table_name}", self.prefix)
    }

    fn lock_key(&self) -> String {
        format!("{}:agno_migration_lock", self.prefix)
    }

    /// Stamps every table `3.0.0` when nothing lives under the prefix yet (a new database);
    /// leaves an unstamped prefix with data alone (agno 2.x data awaiting migration).
    pub(crate) async fn stamp_if_new(&self) -> Result<()> {
        let mut pipe = redis::pipe();
        for t in TableType::ALL {
            pipe.cmd("EXISTS").arg(self.version_key(t.default_name()));
        }
        let stamped: Vec<i64> = self.pipe(&pipe).await?;
        if stamped.iter().any(|n| *n > 0) {
            return Ok(());
        }
        let pattern = format!("{}:*", glob_escape(&self.prefix));
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<String>) = self
                .query(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&pattern)
                        .arg("COUNT")
                        .arg(1000),
                )
                .await?;
            if !batch.is_empty() {
                return Ok(());
            }
            if next == 0 {
                break;
            }
            cursor = next;
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

/// Held while a migration runs: a `SET NX PX` key refreshed in the background, released
/// (only if still ours) when dropped.
struct LockGuard {
    refresher: tokio::task::JoinHandle<()>,
    store: Arc<KvStore>,
    token: String,
}

const RELEASE: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";
const REFRESH: &str = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) else return 0 end";

#[async_trait]
impl HeldLock for LockGuard {
    /// Stops the refresher and deletes the key if this holder still owns it.
    async fn release(mut self: Box<Self>) -> Result<()> {
        self.refresher.abort();
        let token = std::mem::take(&mut self.token);
        let _: i64 = self
            .store
            .query(
                redis::cmd("EVAL")
                    .arg(RELEASE)
                    .arg(1)
                    .arg(self.store.lock_key())
                    .arg(&token),
            )
            .await?;
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.refresher.abort();
        if self.token.is_empty() {
            return; // released
        }
        let (store, token) = (self.store.clone(), self.token.clone());
        // Without a runtime the key expires on its own after LOCK_TTL_MS.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = redis::Script::new(RELEASE)
                    .key(store.lock_key())
                    .arg(token)
                    .invoke_async::<i64>(&mut store.conn())
                    .await;
            });
        }
    }
}

/// The migration target of one prefix.
pub(crate) struct KvMigrations {
    pub(crate) store: Arc<KvStore>,
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
            Arc::new(RekeyLearningsStep::new(self.store.clone())),
        ]
    }

    async fn lock(&self) -> Result<MigrationLock> {
        let store = self.store.clone();
        let key = store.lock_key();
        let token = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            let taken: Option<String> = store
                .query(
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(LOCK_TTL_MS),
                )
                .await?;
            if taken.is_some() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds {key}; wait for it to finish (or delete the key if its process died)"
                    ),
                )
                .with_backend(store.server));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let refresher = {
            let (store, key, token) = (store.clone(), key.clone(), token.clone());
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(LOCK_TTL_MS / 3)).await;
                    let kept = redis::Script::new(REFRESH)
                        .key(&key)
                        .arg(&token)
                        .arg(LOCK_TTL_MS)
                        .invoke_async::<i64>(&mut store.conn())
                        .await;
                    if !matches!(kept, Ok(1)) {
                        break;
                    }
                }
            })
        };
        Ok(Box::new(LockGuard {
            refresher,
            store,
            token,
        }))
    }
}
