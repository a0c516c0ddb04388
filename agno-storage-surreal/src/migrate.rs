//! Schema stamps (`agno_schema_versions`, record id = table name), the v3.0.0 steps and
//! the migration lock.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, HeldLock, MigrationLock, MigrationStep, MigrationTarget,
    RekeyLearningsStep, SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Error, ErrorKind, Result};
use serde_json::{json, Value};

use crate::doc::{Commit, Fields, Pre};
use crate::SurrealDb;

/// A lock older than this is taken to be left by a crashed migration and is broken.
const STALE_LOCK_SECONDS: i64 = 15 * 60;
/// How long `lock()` waits for another migration before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(60);
const LOCK_ID: &str = "migration_lock";

#[async_trait]
impl SchemaVersionStore for SurrealDb {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        let stamp = self.get(&self.inner.names.versions, table_name).await?;
        match stamp.as_ref().and_then(|d| d.str("version")) {
            Some(v) if !v.is_empty() => Ok(Some(v.parse()?)),
            _ => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        // agno's `upsert_schema_version`: record id = table name.
        let fields = object(json!({
            "table_name": table_name,
            "version": version.to_string(),
            "updated_at": now_epoch_seconds(),
        }));
        let write = self.put(&self.inner.names.versions, table_name, &fields, Pre::Any);
        self.commit_all("set schema version", vec![write]).await
    }
}

pub(crate) fn object(value: Value) -> Fields {
    match value {
        Value::Object(m) => m,
        _ => Fields::new(),
    }
}

/// Held while a migration runs: a record in the meta table, deleted on drop.
struct LockGuard {
    db: SurrealDb,
    holder: String,
}

#[async_trait]
impl HeldLock for LockGuard {
    /// Deletes the lock record if this holder still owns it.
    async fn release(mut self: Box<Self>) -> Result<()> {
        let holder = std::mem::take(&mut self.holder);
        let meta = self.db.inner.names.meta.clone();
        if let Some(lock) = self.db.get(&meta, LOCK_ID).await? {
            if lock.str("holder") == Some(holder.as_str()) {
                self.db
                    .commit(
                        "migration unlock",
                        vec![self.db.delete(&meta, LOCK_ID, lock.unchanged())],
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.holder.is_empty() {
            return; // released
        }
        let db = self.db.clone();
        let holder = std::mem::take(&mut self.holder);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                // Best effort: a lock that is not released goes stale and is broken later.
                let meta = db.inner.names.meta.clone();
                if let Ok(Some(lock)) = db.get(&meta, LOCK_ID).await {
                    if lock.str("holder") == Some(holder.as_str()) {
                        let _ = db
                            .commit(
                                "migration unlock",
                                vec![db.delete(&meta, LOCK_ID, lock.unchanged())],
                            )
                            .await;
                    }
                }
            });
        }
    }
}

#[async_trait]
impl MigrationTarget for SurrealDb {
    fn tables(&self) -> Vec<TableRef> {
        TableType::ALL
            .iter()
            .map(|t| TableRef {
                table_type: *t,
                name: self.inner.names.of(*t).to_owned(),
            })
            .collect()
    }

    fn versions(&self) -> &dyn SchemaVersionStore {
        self
    }

    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        let me = Arc::new(self.clone());
        vec![
            Arc::new(CopyLegacyRunsStep::new(me.clone())),
            Arc::new(RekeyLearningsStep::new(me)),
        ]
    }

    async fn lock(&self) -> Result<MigrationLock> {
        let meta = &self.inner.names.meta;
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            let now = now_epoch_seconds();
            let fields = object(json!({"holder": holder, "locked_at": now}));
            let write = self.put(meta, LOCK_ID, &fields, Pre::Absent);
            if let Commit::Done = self.commit("migration lock", vec![write]).await? {
                return Ok(Box::new(LockGuard {
                    db: self.clone(),
                    holder,
                }));
            }
            if let Some(lock) = self.get(meta, LOCK_ID).await? {
                let locked_at = lock.fields.get("locked_at").and_then(Value::as_i64);
                if locked_at.is_some_and(|t| t < now - STALE_LOCK_SECONDS) {
                    self.commit(
                        "migration lock",
                        vec![self.delete(meta, LOCK_ID, lock.unchanged())],
                    )
                    .await?;
                    continue;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock (record {meta}:{LOCK_ID}); wait for it to finish, or \
                         delete that record if its process is gone"
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
