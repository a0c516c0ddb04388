//! Schema versions (`agno_schema_versions`: `{table_name S, version S, updated_at N}`, as
//! agno 3.1.10 writes them), the migration target with the shared steps, and the
//! migration lock.
//!
//! The migration lock is a lease: one item `{pk = "migration_lock#<versions table>", holder S,
//! locked_at N, lease_until N}` in the meta table. `holder` is a random token per `lock()`
//! call, `lease_until` the epoch milliseconds until which the lease holds and `locked_at` the
//! epoch seconds of the last heartbeat (the attribute a version without heartbeats wrote and
//! read). While the lock is held, a background task renews it every lease/3 with a put
//! conditioned on the holder's token; when the condition fails, another migrator took the
//! lock over (or it was deleted): the task stops without writing the lock back, and
//! `release` reports the loss. A lock whose lease has passed is taken over by the next
//! `lock()` with a put conditioned on the exact item it read (token and heartbeat), so of
//! several waiters one wins and a holder that renewed in between keeps its lock. An item
//! without `lease_until` (written by a version without heartbeats, which never renews) is
//! taken over once its `locked_at` is 10 minutes old, as that version did; that version
//! breaks our lock only after the same 10 minutes without a heartbeat.
//!
//! Expiry compares the holder's clock (which wrote `lease_until`) with the waiter's: clocks
//! of the processes that migrate one database must agree to well within a lease.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::lease::{hold_lease, lease_expired, millis, now_epoch_millis, LeaseRecord};

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, MigrationTarget, RekeyLearningsStep,
    SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, ErrorKind, Result};

use crate::codec::{err, n, nv, s, sv, Item};
use crate::db::{Cond, Table};
use crate::DynamoDb;

const LOCK_KEY: &str = "migration_lock";
pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
/// A lock item without `lease_until` (from a version without heartbeats) is taken over once
/// its `locked_at` is this old, as that version broke stale locks.
const LEGACY_STALE_LOCK_SECONDS: i64 = 600;

#[async_trait]
impl SchemaVersionStore for DynamoDb {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        match self.get(Table::Versions, table_name).await? {
            Some(item) => s(&item, "version").map(str::parse).transpose(),
            None => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        let mut item = Item::new();
        item.insert("table_name".into(), sv(table_name));
        item.insert("version".into(), sv(&version.to_string()));
        item.insert("updated_at".into(), nv(now_epoch_seconds()));
        self.put(Table::Versions, item, None).await?;
        Ok(())
    }
}

/// Whether the lock item `lock` may be taken over at `now_ms`: its lease has passed, or (an
/// item without a lease) its `locked_at` is [`LEGACY_STALE_LOCK_SECONDS`] old, or it has
/// neither attribute (no version writes such an item).
fn expired(lock: &Item, now_ms: i64) -> bool {
    lease_expired(
        n(lock, "lease_until"),
        n(lock, "locked_at"),
        now_ms,
        LEGACY_STALE_LOCK_SECONDS,
    )
}

/// The lock item as the lease's heartbeat and release see it.
struct DynamoLease {
    db: DynamoDb,
}

#[async_trait]
impl LeaseRecord for DynamoLease {
    async fn renew(&self, holder: &str, lease: Duration) -> Result<bool> {
        let key = self.db.lock_key();
        let item = self.db.lock_item(&key, holder, now_epoch_millis(), lease);
        self.db
            .put(
                Table::Meta,
                item,
                Some(Cond::default().eq("holder", sv(holder))),
            )
            .await
    }

    async fn remove(&self, holder: &str) -> Result<bool> {
        self.db
            .delete(
                Table::Meta,
                &self.db.lock_key(),
                Some(Cond::default().eq("holder", sv(holder))),
            )
            .await
    }

    fn location(&self) -> String {
        format!(
            "item pk {:?} in {}",
            self.db.lock_key(),
            self.db.inner.names.meta
        )
    }

    fn backend(&self) -> &'static str {
        crate::codec::BACKEND
    }
}

impl DynamoDb {
    pub(crate) fn lock_key(&self) -> String {
        format!("{LOCK_KEY}#{}", self.inner.names.versions)
    }

    /// The lock item of `holder`, its lease running `lease` from `now_ms`.
    fn lock_item(&self, key: &str, holder: &str, now_ms: i64, lease: Duration) -> Item {
        let mut item = Item::new();
        item.insert("pk".into(), sv(key));
        item.insert("holder".into(), sv(holder));
        item.insert("locked_at".into(), nv(now_ms / 1000));
        item.insert(
            "lease_until".into(),
            nv(now_ms.saturating_add(millis(lease))),
        );
        item
    }

    /// The guard of a lock `holder` just took: renewed by a heartbeat until released.
    fn hold(&self, holder: String) -> MigrationLock {
        hold_lease(
            DynamoLease { db: self.clone() },
            holder,
            self.inner.lock_lease,
        )
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
        let docs = Arc::new(agno_storage_doc::Docs(self.clone()));
        vec![
            Arc::new(CopyLegacyRunsStep::new(docs.clone())),
            Arc::new(RekeyLearningsStep::new(docs)),
        ]
    }

    /// Takes the migration lock (see the module docs): puts the lock item if absent, or
    /// takes over one whose lease has passed, retrying every 100 ms. `Conflict` after a
    /// minute (or two leases, if longer) while a live holder keeps renewing it.
    async fn lock(&self) -> Result<MigrationLock> {
        let key = self.lock_key();
        let lease = self.inner.lock_lease;
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + agno_storage_core::lease::lock_wait(lease);
        loop {
            let now_ms = now_epoch_millis();
            let item = self.lock_item(&key, &holder, now_ms, lease);
            if self
                .put(Table::Meta, item.clone(), Some(Cond::absent("pk")))
                .await?
            {
                return Ok(self.hold(holder));
            }
            match self.get(Table::Meta, &key).await? {
                // Released meanwhile: put again at once.
                None => continue,
                Some(current) if expired(&current, now_ms) => {
                    if self.cas(Table::Meta, Some(&current), item).await? {
                        return Ok(self.hold(holder));
                    }
                }
                Some(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(err(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock (item pk {key:?} in {}); wait for it to finish. A lock \
                         whose holder died is taken over once its lease ({} s from the last heartbeat) passes",
                        self.inner.names.meta,
                        lease.as_secs_f64()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
