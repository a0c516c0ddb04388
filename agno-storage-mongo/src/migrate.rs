//! Schema stamps (`agno_schema_versions`), the v3.0.0 steps and the migration lock.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, HeldLock, MigrationLock, MigrationStep, MigrationTarget,
    RekeyLearningsStep, SchemaVersion, SchemaVersionStore, StepOutcome, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Error, ErrorKind, Result};
use mongodb::bson::{doc, Bson};

use crate::doc::{db_err, is_duplicate_key};
use crate::schema::{self, UQ_USER_NAME};
use crate::MongoDb;

/// A lock older than this is taken to be left by a crashed migration and is broken.
const STALE_LOCK_SECONDS: i64 = 15 * 60;
/// How long `lock()` waits for another migration before giving up.
const LOCK_WAIT: Duration = Duration::from_secs(60);
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
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "Cannot create the unique (user_id, name) backstop on {}: duplicate schedule names exist within one \
                     owner bucket. Resolve the duplicates, then re-run the migration.",
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

/// Held while a migration runs: a document in the meta collection, deleted on drop.
struct LockGuard {
    db: MongoDb,
    holder: String,
}

#[async_trait]
impl HeldLock for LockGuard {
    /// Deletes the lock document if this holder still owns it.
    async fn release(mut self: Box<Self>) -> Result<()> {
        let holder = std::mem::take(&mut self.holder);
        self.db
            .coll(&self.db.inner.names.meta)
            .delete_one(doc! {"_id": LOCK_ID, "holder": holder})
            .await
            .map_err(db_err("release the migration lock"))?;
        Ok(())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.holder.is_empty() {
            return; // released
        }
        let coll = self.db.coll(&self.db.inner.names.meta);
        let holder = std::mem::take(&mut self.holder);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                // Best effort: a lock that is not released goes stale and is broken later.
                let _ = coll
                    .delete_one(doc! {"_id": LOCK_ID, "holder": holder})
                    .await;
            });
        }
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

    async fn lock(&self) -> Result<MigrationLock> {
        let coll = self.coll(&self.inner.names.meta);
        let holder = uuid::Uuid::new_v4().to_string();
        let deadline = tokio::time::Instant::now() + LOCK_WAIT;
        loop {
            let now = now_epoch_seconds();
            match coll
                .insert_one(doc! {"_id": LOCK_ID, "holder": &holder, "locked_at": now})
                .await
            {
                Ok(_) => {
                    return Ok(Box::new(LockGuard {
                        db: self.clone(),
                        holder,
                    }))
                }
                Err(e) if is_duplicate_key(&e) => {
                    coll.delete_one(
                        doc! {"_id": LOCK_ID, "locked_at": {"$lt": now - STALE_LOCK_SECONDS}},
                    )
                    .await
                    .map_err(db_err("migration lock"))?;
                }
                Err(e) => return Err(db_err("migration lock")(e)),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "another migration holds the lock (document _id {LOCK_ID:?} in {}); wait for it to finish, or \
                         delete that document if its process is gone",
                        self.inner.names.meta
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
