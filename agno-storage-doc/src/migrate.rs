//! Schema stamps (`agno_schema_versions`, document id = [`DocBackend::doc_id`] of the table
//! name), the v3.0.0 steps and
//! the migration lock.
//!
//! The migration lock is a lease: one document `migration_lock` `{holder, locked_at,
//! lease_until}` in the meta collection. `holder` is a random token per `lock()` call,
//! `lease_until` the epoch milliseconds until which the lease holds and `locked_at` the epoch
//! seconds of the last heartbeat (the field a version without heartbeats wrote and read).
//! While the lock is held, a background task renews it every lease/3: it reads the document
//! and, if it still carries the holder's token, rewrites it under the precondition that it
//! is still the version read (a compare-and-set). When the document is gone or carries another token,
//! another migrator took the lock over (or it was deleted): the task stops without writing
//! the lock back, and `release` reports the loss. A lock whose lease has passed is taken
//! over by the next `lock()` with a write conditioned on the exact version it read, so of several waiters one wins and a holder that renewed in between
//! keeps its lock. A document without `lease_until` (written by a version without
//! heartbeats, which never renews) is taken over once its `locked_at` is 15 minutes old, as
//! that version did; that version breaks our lock only after the same 15 minutes without a
//! heartbeat.
//!
//! Expiry compares the holder's clock (which wrote `lease_until`) with the waiter's: clocks
//! of the processes that migrate one database must agree to well within a lease.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::lease::{hold_lease, lease_expired, millis, now_epoch_millis, LeaseRecord};

use agno_storage_core::legacy::LegacyRunsStore;
use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, RekeyLearningsStep, SchemaVersion,
    SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Error, ErrorKind, LearningStore, Result};
use serde_json::json;

use crate::{backoff, object, Commit, DocBackend, Docs, Fields, Pre, Stored, Table};

/// Compare-and-set attempts of one renewal or release before it counts as failed.
const LOCK_CAS_ATTEMPTS: usize = 5;

#[async_trait]
impl<B: DocBackend> SchemaVersionStore for Docs<B> {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        let stamp = self
            .get(self.collection(Table::Versions), &self.doc_id(table_name))
            .await?;
        match stamp.as_ref().and_then(|d| d.str("version")) {
            Some(v) if !v.is_empty() => Ok(Some(v.parse()?)),
            _ => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        let fields = version_fields(table_name, version);
        let write = self.put(
            self.collection(Table::Versions),
            &self.doc_id(table_name),
            &fields,
            Pre::Any,
        );
        self.commit_all("set schema version", vec![write]).await
    }
}

/// A schema stamp's body, as agno's `upsert_schema_version` writes it (document id = table
/// name).
pub(crate) fn version_fields(table_name: &str, version: SchemaVersion) -> Fields {
    object(json!({
        "table_name": table_name,
        "version": version.to_string(),
        "updated_at": now_epoch_seconds(),
    }))
}

/// The lock document's body for `holder`, its lease running `lease` from `now_ms`.
fn lock_fields(holder: &str, now_ms: i64, lease: Duration) -> Fields {
    object(json!({
        "holder": holder,
        "locked_at": now_ms / 1000,
        "lease_until": now_ms.saturating_add(millis(lease)),
    }))
}

fn number<B: DocBackend>(lock: &Stored<B>, field: &str) -> Option<i64> {
    let v = lock.fields.get(field)?;
    v.as_i64().or_else(|| v.as_f64().map(|f| f as i64))
}

/// Whether the lock `lock` may be taken over at `now_ms`: its lease has passed, or (a
/// document without a lease) its `locked_at` is [`DocBackend::LEGACY_LOCK_STALE_SECONDS`] old, or it has
/// neither field (no version writes such a document).
fn expired<B: DocBackend>(lock: &Stored<B>, now_ms: i64) -> bool {
    lease_expired(
        number(lock, "lease_until"),
        number(lock, "locked_at"),
        now_ms,
        B::LEGACY_LOCK_STALE_SECONDS,
    )
}

impl<B: DocBackend> Docs<B> {
    /// Writes `write` over the lock document while `holder` holds it, by compare-and-set
    /// (a conflict: a heartbeat or release in flight changed it meanwhile; read it again):
    /// `false` when it is gone or carries another token.
    async fn on_held_lock(
        &self,
        holder: &str,
        operation: &'static str,
        write: impl Fn(&Stored<B>) -> B::Write,
    ) -> Result<bool> {
        let meta = self.collection(Table::Meta);
        for attempt in 0..LOCK_CAS_ATTEMPTS {
            let Some(lock) = self.get(meta, &self.lock_id()).await? else {
                return Ok(false);
            };
            if lock.str("holder") != Some(holder) {
                return Ok(false);
            }
            if let Commit::Done = self.commit(operation, vec![write(&lock)]).await? {
                return Ok(true);
            }
            backoff(attempt).await;
        }
        Err(self.contended(operation))
    }

    /// The guard of a lock `holder` just took: renewed by a heartbeat until released.
    fn hold(&self, holder: String) -> MigrationLock {
        hold_lease(DocLease(self.0.clone()), holder, self.lock_lease())
    }

    /// Every migrated table and its collection.
    pub(crate) fn collections(&self) -> Vec<TableRef> {
        TableType::ALL
            .iter()
            .map(|t| TableRef {
                table_type: *t,
                name: self.collection(Table::from(*t)).to_owned(),
            })
            .collect()
    }

    /// [`MigrationTarget::lock`](agno_storage_core::migration::MigrationTarget::lock): creates the lock document, or takes over one whose lease
    /// has passed (see the module docs), retrying every 100 ms. `Conflict` after a minute (or
    /// two leases, if longer) while a live holder keeps renewing it.
    pub(crate) async fn take_lock(&self) -> Result<MigrationLock> {
        let meta = self.collection(Table::Meta);
        let lease = self.lock_lease();
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + agno_storage_core::lease::lock_wait(lease);
        loop {
            let now_ms = now_epoch_millis();
            let fields = lock_fields(&holder, now_ms, lease);
            let write = self.put(meta, &self.lock_id(), &fields, Pre::Absent);
            if let Commit::Done = self.commit("migration lock", vec![write]).await? {
                return Ok(self.hold(holder));
            }
            match self.get(meta, &self.lock_id()).await? {
                // Released meanwhile: create it again at once.
                None => continue,
                Some(current) if expired(&current, now_ms) => {
                    let write = self.put(meta, &self.lock_id(), &fields, current.unchanged());
                    if let Commit::Done = self.commit("migration lock", vec![write]).await? {
                        return Ok(self.hold(holder));
                    }
                }
                Some(_) => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock ({}); wait for it to finish. A lock whose \
                         holder died is taken over once its lease ({} s from the last heartbeat) passes",
                        self.lock_location(),
                        lease.as_secs_f64()
                    ),
                )
                .with_backend(B::BACKEND));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The lock document as the lease's heartbeat and release see it.
struct DocLease<B>(B);

#[async_trait]
impl<B: DocBackend> LeaseRecord for DocLease<B> {
    async fn renew(&self, holder: &str, lease: Duration) -> Result<bool> {
        let docs = Docs::of(&self.0);
        let meta = docs.collection(Table::Meta);
        docs.on_held_lock(holder, "migration lock heartbeat", |lock| {
            let fields = lock_fields(holder, now_epoch_millis(), lease);
            docs.put(meta, &docs.lock_id(), &fields, lock.unchanged())
        })
        .await
    }

    async fn remove(&self, holder: &str) -> Result<bool> {
        let docs = Docs::of(&self.0);
        docs.on_held_lock(holder, "migration unlock", |lock| {
            docs.delete(
                docs.collection(Table::Meta),
                &docs.lock_id(),
                lock.unchanged(),
            )
        })
        .await
    }

    fn location(&self) -> String {
        self.0.lock_location()
    }

    fn backend(&self) -> &'static str {
        B::BACKEND
    }
}

/// Whether any of agno's collections (the migrated tables, runs, jobs or schema stamps)
/// holds a document; reads only. [`agno_storage_core::OpenMode::Existing`] opens refuse a
/// database where none does.
pub async fn holds_agno_docs<B: DocBackend>(db: &B) -> Result<bool> {
    let others = [Table::Runs, Table::Jobs, Table::Versions];
    for c in TableType::ALL.into_iter().map(Table::from).chain(others) {
        if db.any_doc(db.collection(c)).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Stamps every migrated table at the latest schema version when none of them holds a
/// document (a new database).
pub async fn stamp_new_database<B: DocBackend>(db: &B) -> Result<()> {
    for t in TableType::ALL {
        if db.any_doc(db.collection(Table::from(t))).await? {
            return Ok(());
        }
    }
    for t in TableType::ALL {
        Docs::of(db)
            .set_schema_version(db.collection(Table::from(t)), SchemaVersion::LATEST)
            .await?;
    }
    Ok(())
}

/// The v3.0.0 migration steps over `store`.
pub fn migration_steps<S: LegacyRunsStore + LearningStore + 'static>(
    store: Arc<S>,
) -> Vec<Arc<dyn MigrationStep>> {
    vec![
        Arc::new(CopyLegacyRunsStep::new(store.clone())),
        Arc::new(RekeyLearningsStep::new(store)),
    ]
}
