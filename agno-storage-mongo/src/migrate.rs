//! Schema stamps (`agno_schema_versions`), the v3.0.0 steps and the migration lock.
//!
//! The migration lock is a lease: one document `{_id: "migration_lock", holder, locked_at,
//! lease_until}` in the meta collection. `holder` is a random token per `lock()` call,
//! `lease_until` the epoch milliseconds until which the lease holds and `locked_at` the epoch
//! seconds of the last heartbeat (the field a version without heartbeats wrote and read).
//! While the lock is held, a background task renews it every lease/3 with an update that
//! matches the holder's token; when that update matches nothing, another migrator took the
//! lock over (or it was deleted): the task stops without writing the lock back, and
//! `release` reports the loss. A lock whose lease has passed is taken over by the next
//! `lock()` with a replace that matches the exact record it read (token and heartbeat), so of
//! several waiters one wins and a holder that renewed in between keeps its lock. A record
//! without `lease_until` (written by a version without heartbeats, which never renews) is
//! taken over once its `locked_at` is 15 minutes old, as that version did; that version
//! breaks our lock only after the same 15 minutes without a heartbeat.
//!
//! Expiry compares the holder's clock (which wrote `lease_until`) with the waiter's: clocks
//! of the processes that migrate one database must agree to well within a lease.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::lease::{hold_lease, lease_expired, millis, now_epoch_millis, LeaseRecord};

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, MigrationTarget, RekeyLearningsStep,
    SchemaVersion, SchemaVersionStore, StepOutcome, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Error, ErrorKind, Result};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};

use crate::doc::{db_err, is_duplicate_key};
use crate::schema::{self, UQ_USER_NAME};
use crate::MongoDb;

pub use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;

/// The schedule names stored more than once for one owner in `collection`, as the SQL
/// migration names them: `owner: 'name' xN`, by name.
async fn duplicate_schedule_names(db: &MongoDb, collection: &str) -> Result<Vec<String>> {
    let pipeline = vec![
        doc! {"$group": {"_id": {"user_id": "$user_id", "name": "$name"}, "n": {"$sum": 1}}},
        doc! {"$match": {"n": {"$gt": 1}}},
        doc! {"$sort": {"_id.name": 1}},
    ];
    let groups: Vec<Document> = db
        .coll(collection)
        .aggregate(pipeline)
        .await
        .map_err(db_err("list duplicate schedule names"))?
        .try_collect()
        .await
        .map_err(db_err("list duplicate schedule names"))?;
    Ok(groups
        .iter()
        .map(|g| {
            let key = g.get_document("_id").ok();
            let field = |f: &str| key.and_then(|k| k.get_str(f).ok());
            let n = g.get("n").and_then(crate::runs::as_i64).unwrap_or(0);
            format!(
                "{}: '{}' x{n}",
                field("user_id").unwrap_or("(unowned)"),
                field("name").unwrap_or_default()
            )
        })
        .collect())
}
/// A lock record without `lease_until` (from a version without heartbeats) is taken over
/// once its `locked_at` is this old, as that version broke stale locks.
const LEGACY_STALE_LOCK_SECONDS: i64 = 15 * 60;
const LOCK_ID: &str = "migration_lock";

#[async_trait]
impl SchemaVersionStore for MongoDb {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        let stamp = self
            .coll(&self.inner.names.versions)
            .find_one(doc! {"table_name": table_name})
            .await
            .map_err(db_err("get schema version"))?;
        match stamp.as_ref().and_then(|d| d.get("version")) {
            Some(Bson::String(v)) if !v.is_empty() => Ok(Some(v.parse()?)),
            _ => Ok(None),
        }
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        // agno's `upsert_schema_version`: keyed on table_name, no index, ObjectId `_id`.
        self.coll(&self.inner.names.versions)
            .update_one(
                doc! {"table_name": table_name},
                doc! {"$set": {"table_name": table_name, "version": version.to_string(), "updated_at": now_epoch_seconds()}},
            )
            .upsert(true)
            .await
            .map_err(db_err("set schema version"))?;
        Ok(())
    }
}

/// The Mongo-specific v3.0.0 schedules step (agno's index repair): drop the pre-v3 unique
/// `name` index, create the v3 indexes, and require the per-owner unique `uq_user_name`.
pub struct RepairScheduleIndexesStep {
    db: MongoDb,
}

#[async_trait]
impl MigrationStep for RepairScheduleIndexesStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::new(3, 0, 0)
    }

    fn description(&self) -> String {
        "replace the global unique schedule name index with the per-owner uq_user_name".into()
    }

    fn applies_to(&self, table: TableType) -> bool {
        table == TableType::Schedules
    }

    async fn up(&self, table: &TableRef) -> Result<StepOutcome> {
        let db = &self.db;
        let dropped = db
            .drop_index_if(&table.name, |(keys, _, unique), _| {
                *unique && keys.len() == 1 && keys.contains_key("name")
            })
            .await?;
        db.ensure_indexes(&table.name, &schema::schedules()).await?;
        let has_unique = db
            .list_indexes(&table.name)
            .await?
            .iter()
            .any(|(_, name, _)| name == UQ_USER_NAME);
        if !has_unique {
            let listed = duplicate_schedule_names(db, &table.name).await?;
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "Cannot create the unique (user_id, name) backstop on {}: duplicate schedule names exist within one \
                     owner bucket ({}). Rename or delete the duplicates, then re-run the migration; {} was not stamped.",
                    table.name,
                    listed.join(", "),
                    table.name
                ),
            )
            .set_temporary(false));
        }
        Ok(if dropped > 0 {
            StepOutcome::Applied
        } else {
            StepOutcome::NothingToDo
        })
    }

    async fn down(&self, table: &TableRef) -> Result<StepOutcome> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "The schedule index repair on {} cannot be reverted: a global unique name index would refuse \
                 names that v3 lets two owners share",
                table.name
            ),
        ))
    }
}

/// The lock document of `holder`, its lease running `lease` from `now_ms`.
fn lock_record(holder: &str, now_ms: i64, lease: Duration) -> Document {
    doc! {
        "_id": LOCK_ID,
        "holder": holder,
        "locked_at": now_ms / 1000,
        "lease_until": now_ms.saturating_add(millis(lease)),
    }
}

fn number(v: Option<&Bson>) -> Option<i64> {
    match v? {
        Bson::Int32(n) => Some(i64::from(*n)),
        Bson::Int64(n) => Some(*n),
        Bson::Double(f) if f.is_finite() => Some(*f as i64),
        _ => None,
    }
}

/// Whether the lock `lock` may be taken over at `now_ms`: its lease has passed, or (a record
/// without a lease) its `locked_at` is [`LEGACY_STALE_LOCK_SECONDS`] old, or it has neither
/// field (no version writes such a record).
fn expired(lock: &Document, now_ms: i64) -> bool {
    lease_expired(
        number(lock.get("lease_until")),
        number(lock.get("locked_at")),
        now_ms,
        LEGACY_STALE_LOCK_SECONDS,
    )
}

/// A filter matching exactly the lock record `lock` (its token and heartbeat).
fn same_record(lock: &Document) -> Document {
    let mut filter = doc! {"_id": LOCK_ID};
    for field in ["holder", "locked_at", "lease_until"] {
        match lock.get(field) {
            Some(v) => filter.insert(field, v.clone()),
            None => filter.insert(field, doc! {"$exists": false}),
        };
    }
    filter
}

/// The lock document as the lease's heartbeat and release see it.
struct MongoLease {
    db: MongoDb,
}

#[async_trait]
impl LeaseRecord for MongoLease {
    async fn renew(&self, holder: &str, lease: Duration) -> Result<bool> {
        let now_ms = now_epoch_millis();
        let renewed = self
            .db
            .coll(&self.db.inner.names.meta)
            .update_one(
                doc! {"_id": LOCK_ID, "holder": holder},
                doc! {"$set": {
                    "locked_at": now_ms / 1000,
                    "lease_until": now_ms.saturating_add(millis(lease)),
                }},
            )
            .await
            .map_err(db_err("renew the migration lock"))?;
        Ok(renewed.matched_count > 0)
    }

    async fn remove(&self, holder: &str) -> Result<bool> {
        let deleted = self
            .db
            .coll(&self.db.inner.names.meta)
            .delete_one(doc! {"_id": LOCK_ID, "holder": holder})
            .await
            .map_err(db_err("release the migration lock"))?;
        Ok(deleted.deleted_count > 0)
    }

    fn location(&self) -> String {
        format!("document _id {LOCK_ID:?} in {}", self.db.inner.names.meta)
    }

    fn backend(&self) -> &'static str {
        crate::doc::BACKEND
    }
}

impl MongoDb {
    /// The guard of a lock `holder` just took: renewed by a heartbeat until released.
    fn hold(&self, holder: String) -> MigrationLock {
        hold_lease(
            MongoLease { db: self.clone() },
            holder,
            self.inner.lock_lease,
        )
    }
}

#[async_trait]
impl MigrationTarget for MongoDb {
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
            Arc::new(RepairScheduleIndexesStep { db: self.clone() }),
            Arc::new(RekeyLearningsStep::new(me)),
        ]
    }

    /// Takes the migration lock (see the module docs): inserts the lock document, or takes
    /// over one whose lease has passed, retrying every 100 ms. `Conflict` after a minute (or
    /// two leases, if longer) while a live holder keeps renewing it.
    async fn lock(&self) -> Result<MigrationLock> {
        let coll = self.coll(&self.inner.names.meta);
        let lease = self.inner.lock_lease;
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + agno_storage_core::lease::lock_wait(lease);
        loop {
            let now_ms = now_epoch_millis();
            let record = lock_record(&holder, now_ms, lease);
            match coll.insert_one(record.clone()).await {
                Ok(_) => return Ok(self.hold(holder)),
                Err(e) if is_duplicate_key(&e) => {
                    let current = coll
                        .find_one(doc! {"_id": LOCK_ID})
                        .await
                        .map_err(db_err("migration lock"))?;
                    match current {
                        // Released meanwhile: insert again at once.
                        None => continue,
                        Some(current) if expired(&current, now_ms) => {
                            let taken = coll
                                .replace_one(same_record(&current), record)
                                .await
                                .map_err(db_err("migration lock"))?;
                            if taken.matched_count > 0 {
                                return Ok(self.hold(holder));
                            }
                        }
                        Some(_) => {}
                    }
                }
                Err(e) => return Err(db_err("migration lock")(e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock (document _id {LOCK_ID:?} in {}); wait for it to \
                         finish. A lock whose holder died is taken over once its lease ({} s from the last \
                         heartbeat) passes",
                        self.inner.names.meta,
                        lease.as_secs_f64()
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
