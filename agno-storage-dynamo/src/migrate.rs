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

use std::sync::{Arc, Mutex};
use std::time::Duration;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, HeldLock, MigrationLock, MigrationStep, MigrationTarget,
    RekeyLearningsStep, SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Error, ErrorKind, Result};

use crate::codec::{err, n, nv, s, sv, Item};
use crate::db::{Cond, Tbl};
use crate::DynamoDb;

const LOCK_KEY: &str = "migration_lock";
/// The migration lock's lease unless [`crate::DynamoOptions::migration_lock_lease`] (or
/// [`DynamoDb::with_migration_lock_lease`]) sets another: a migration whose process died is
/// taken over this long after its last heartbeat.
pub const DEFAULT_MIGRATION_LOCK_LEASE: Duration = Duration::from_secs(30);
/// The shortest lease accepted.
pub(crate) const MIN_MIGRATION_LOCK_LEASE: Duration = Duration::from_secs(1);
/// A lock item without `lease_until` (from a version without heartbeats) is taken over once
/// its `locked_at` is this old, as that version broke stale locks.
const LEGACY_STALE_LOCK_SECONDS: i64 = 600;
/// How long `lock` waits for another migration (at least two leases).
const LOCK_WAIT: Duration = Duration::from_secs(60);

/// Now, in epoch milliseconds.
fn now_epoch_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

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

/// Why a holder lost its lock, set by the heartbeat task.
type Lost = Arc<Mutex<Option<String>>>;

fn record_loss(lost: &Lost, why: &str) {
    let mut slot = lost.lock().unwrap_or_else(|p| p.into_inner());
    slot.get_or_insert_with(|| why.to_owned());
}

fn loss(lost: &Lost) -> Option<String> {
    lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Whether the lock item `lock` may be taken over at `now_ms`: its lease has passed, or (an
/// item without a lease) its `locked_at` is [`LEGACY_STALE_LOCK_SECONDS`] old, or it has
/// neither attribute (no version writes such an item).
fn expired(lock: &Item, now_ms: i64) -> bool {
    match n(lock, "lease_until") {
        Some(until) => until <= now_ms,
        None => {
            n(lock, "locked_at").is_none_or(|at| at < now_ms / 1000 - LEGACY_STALE_LOCK_SECONDS)
        }
    }
}

/// Renews `holder`'s lease every `lease / 3` (sooner after a failed round trip) until it is
/// aborted, or until the renewal's condition fails: then the lock was taken over or deleted,
/// the loss is recorded in `lost` and the task ends without writing the lock back.
fn spawn_heartbeat(
    db: DynamoDb,
    holder: String,
    lease: Duration,
    lost: Lost,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let key = db.lock_key();
        let mut pause = lease / 3;
        loop {
            tokio::time::sleep(pause).await;
            let item = db.lock_item(&key, &holder, now_epoch_millis(), lease);
            let renewed = db
                .put(
                    Tbl::Meta,
                    item,
                    Some(Cond::default().eq("holder", sv(&holder))),
                )
                .await;
            match renewed {
                Ok(true) => pause = lease / 3,
                Ok(false) => {
                    record_loss(
                        &lost,
                        "a heartbeat found the lock taken over by another migrator (its lease had \
                         passed) or deleted",
                    );
                    return;
                }
                // A failed round trip: retry soon. If the lease passes meanwhile and another
                // migrator takes the lock over, the next renewal's condition fails.
                Err(_) => pause = lease / 10,
            }
        }
    })
}

/// Held while a migration runs: the lock item, renewed by a heartbeat task until it is
/// released (or dropped: the task stops and the item is deleted, best effort).
struct LockGuard {
    db: DynamoDb,
    holder: String,
    heartbeat: tokio::task::JoinHandle<()>,
    lost: Lost,
}

#[async_trait]
impl HeldLock for LockGuard {
    /// Stops the heartbeat and deletes the lock item if this holder still owns it.
    /// `Conflict` when the lock was lost while held (taken over after the lease passed, or
    /// deleted): the migration may have overlapped with another.
    async fn release(mut self: Box<Self>) -> Result<()> {
        self.heartbeat.abort();
        let holder = std::mem::take(&mut self.holder);
        let key = self.db.lock_key();
        if let Some(why) = loss(&self.lost) {
            return Err(self.db.lost_error(&key, &why));
        }
        let deleted = self
            .db
            .delete(
                Tbl::Meta,
                &key,
                Some(Cond::default().eq("holder", sv(&holder))),
            )
            .await?;
        if !deleted {
            return Err(self.db.lost_error(
                &key,
                "at release it was held by another migrator (its lease had passed) or deleted",
            ));
        }
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if self.holder.is_empty() {
            return; // released
        }
        let db = self.db.clone();
        let holder = std::mem::take(&mut self.holder);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                // Best effort: a lock that is not released is taken over once its lease passes.
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

    /// The guard of a lock `holder` just took.
    fn hold(&self, holder: String) -> MigrationLock {
        let lost = Lost::default();
        let heartbeat = spawn_heartbeat(
            self.clone(),
            holder.clone(),
            self.inner.lock_lease,
            lost.clone(),
        );
        Box::new(LockGuard {
            db: self.clone(),
            holder,
            heartbeat,
            lost,
        })
    }

    /// The error `release` returns when the lease was lost while the migration ran.
    fn lost_error(&self, key: &str, why: &str) -> Error {
        err(
            ErrorKind::Conflict,
            format!(
                "the migration lock (item pk {key:?} in {}) was lost while the migration ran: {why}; another \
                 migration may have run at the same time. The steps are idempotent: run the migration again to \
                 make sure every table is migrated",
                self.inner.names.meta
            ),
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
        let me = Arc::new(self.clone());
        vec![
            Arc::new(CopyLegacyRunsStep::new(me.clone())),
            Arc::new(RekeyLearningsStep::new(me)),
        ]
    }

    /// Takes the migration lock (see the module docs): puts the lock item if absent, or
    /// takes over one whose lease has passed, retrying every 100 ms. `Conflict` after a
    /// minute (or two leases, if longer) while a live holder keeps renewing it.
    async fn lock(&self) -> Result<MigrationLock> {
        let key = self.lock_key();
        let lease = self.inner.lock_lease;
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT.max(lease * 2);
        loop {
            let now_ms = now_epoch_millis();
            let item = self.lock_item(&key, &holder, now_ms, lease);
            if self
                .put(Tbl::Meta, item.clone(), Some(Cond::absent("pk")))
                .await?
            {
                return Ok(self.hold(holder));
            }
            match self.get(Tbl::Meta, &key).await? {
                // Released meanwhile: put again at once.
                None => continue,
                Some(current) if expired(&current, now_ms) => {
                    if self.cas(Tbl::Meta, Some(&current), item).await? {
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
