//! Schema versions (`agno_schema_versions`: `{table_name S, version S, updated_at N}`, as
//! agno 3.1.10 writes them), the migration target with the shared steps, and the
//! migration lock (an item in the meta table, broken when stale).

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, HeldLock, MigrationLock, MigrationStep, MigrationTarget,
    RekeyLearningsStep, SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, ErrorKind, Result};

use crate::codec::{err, n, nv, s, sv, Item};
use crate::db::{Cond, Tbl};
use crate::DynamoDb;

const LOCK_KEY: &str = "migration_lock";
/// A lock older than this is from a process that died; it is broken.
const STALE_LOCK_SECONDS: i64 = 600;
/// How long `lock` waits for another migration.
const LOCK_WAIT: Duration = Duration::from_secs(30);

#[async_trait]
impl SchemaVersionStore for DynamoDb {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        match self.get(Tbl::Versions, table_name).await? {
            Some(item) => s(&item, "version").map(str::parse).transpose(),
            None => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        let mut item = Item::new();
        item.insert("table_name".into(), sv(table_name));
        item.insert("version".into(), sv(&version.to_string()));
        item.insert("updated_at".into(), nv(now_epoch_seconds()));
        self.put(Tbl::Versions, item, None).await?;
        Ok(())
    }
}

/// Held while a migration runs: deleted on drop (best effort; a lock left behind goes
/// stale and is broken by the next migration).
struct LockGuard {
    db: DynamoDb,
    holder: String,
}

#[async_trait]
impl HeldLock for LockGuard {
    /// Deletes the lock item if this holder still owns it.
    async fn release(mut self: Box<Self>) -> Result<()> {
        let holder = std::mem::take(&mut self.holder);
        let key = self.db.lock_key();
        // `false` when another holder took it over after it went stale: nothing to free.
        self.db
            .delete(
                Tbl::Meta,
                &key,
                Some(Cond::default().eq("holder", sv(&holder))),
            )
            .await
            .map(|_| ())
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
                let key = db.lock_key();
                let _ = db
                    .delete(
                        Tbl::Meta,
                        &key,
                        Some(Cond::default().eq("holder", sv(&holder))),
                    )
                    .await;
            });
        }
    }
}

impl DynamoDb {
    fn lock_key(&self) -> String {
        format!("{LOCK_KEY}#{}", self.inner.names.versions)
    }
}

#[async_trait]
impl MigrationTarget for DynamoDb {
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
        let key = self.lock_key();
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            let now = now_epoch_seconds();
            let mut item = Item::new();
            item.insert("pk".into(), sv(&key));
            item.insert("holder".into(), sv(&holder));
            item.insert("locked_at".into(), nv(now));
            if self.put(Tbl::Meta, item, Some(Cond::absent("pk"))).await? {
                return Ok(Box::new(LockGuard {
                    db: self.clone(),
                    holder,
                }));
            }
            if let Some(current) = self.get(Tbl::Meta, &key).await? {
                if n(&current, "locked_at").is_some_and(|t| t < now - STALE_LOCK_SECONDS) {
                    let cond = Cond::unchanged(Tbl::Meta, Some(&current), &current);
                    self.delete(Tbl::Meta, &key, Some(cond)).await?;
                    continue;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(err(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock (item pk {key:?} in {}); wait for it to finish, or delete \
                         that item if its process is gone",
                        self.inner.names.meta
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
