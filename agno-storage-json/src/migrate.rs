//! Schema stamps (`agno_schema_versions.json`: `{table_name, version, updated_at}` rows, as
//! agno 3.1.10's `upsert_schema_version` writes them) and the migration target: the shared
//! v3.0.0 steps (copy legacy runs, re-key learnings) over this store.

use std::collections::HashSet;
use std::sync::Arc;

use agno_storage_core::migration::{
    CopyLegacyRunsStep, MigrationLock, MigrationStep, MigrationTarget, RekeyLearningsStep,
    ReleasedOnDrop, SchemaVersion, SchemaVersionStore, TableRef, TableType,
};
use agno_storage_core::{async_trait, now_epoch_seconds, Result};
use serde_json::{json, Value};

use crate::doc::text;
use crate::files::{Step, Table, TableFile};
use crate::store::JsonStore;

/// The table file of a migrated table type.
/// The stamp of `table_name` among stamp rows; a row without a version is unstamped.
fn stamp_of(rows: &[Value], table_name: &str) -> Result<Option<SchemaVersion>> {
    match rows
        .iter()
        .find(|r| text(r, "table_name") == Some(table_name))
        .and_then(|r| text(r, "version"))
        .filter(|v| !v.is_empty())
    {
        Some(v) => Ok(Some(v.parse()?)),
        None => Ok(None),
    }
}

/// Replaces the stamp of `table_name` (filter out, then append, as agno does).
fn set_stamp(rows: &mut Vec<Value>, table_name: &str, version: SchemaVersion) {
    rows.retain(|r| text(r, "table_name") != Some(table_name));
    rows.push(json!({
        "table_name": table_name,
        "version": version.to_string(),
        "updated_at": now_epoch_seconds(),
    }));
}

impl JsonStore {
    /// Stamps `3.0.0` on every table that has neither a file nor a stamp: a new table has
    /// nothing to migrate. Existing unstamped files stay pre-v3 for the migration manager.
    pub(crate) async fn stamp_new_tables(&self) -> Result<()> {
        let present: HashSet<String> = self.files.existing_files().await?.into_iter().collect();
        let new: Vec<&'static str> = TableType::ALL
            .iter()
            .map(|t| Table::from(*t))
            .filter(|t| !present.contains(&t.file_name()))
            .map(Table::default_name)
            .collect();
        self.files
            .modify(Table::Versions, |rows| {
                let mut changed = false;
                for name in &new {
                    if stamp_of(rows, name)?.is_none() {
                        set_stamp(rows, name, SchemaVersion::LATEST);
                        changed = true;
                    }
                }
                Ok(if changed {
                    Step::Write(())
                } else {
                    Step::Keep(())
                })
            })
            .await
    }
}

#[async_trait]
impl SchemaVersionStore for JsonStore {
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>> {
        stamp_of(&self.files.load(Table::Versions).await?, table_name)
    }

    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()> {
        self.files
            .modify(Table::Versions, |rows| {
                set_stamp(rows, table_name, version);
                Ok(Step::Write(()))
            })
            .await
    }
}

/// The migration target of one store.
pub(crate) struct JsonMigrations {
    pub(crate) store: Arc<JsonStore>,
}

#[async_trait]
impl MigrationTarget for JsonMigrations {
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
            Arc::new(CopyLegacyRunsStep::new(self.store.clone())),
            Arc::new(RekeyLearningsStep::new(self.store.clone())),
        ]
    }

    /// In-process, a mutex; on a local directory also the lock file `.agno_migrations.lock`
    /// (across processes). On object stores concurrent migrations are safe without one:
    /// the copy never overwrites a stored run and every write is a compare-and-swap.
    async fn lock(&self) -> Result<MigrationLock> {
        let guard = self.store.migration_lock.clone().lock_owned().await;
        #[cfg(feature = "fs")]
        if let Some(dir) = &self.store.dir {
            let file =
                crate::lockfile::LockFile::acquire(dir.join(".agno_migrations.lock")).await?;
            return Ok(Box::new(ReleasedOnDrop((guard, file))));
        }
        Ok(Box::new(ReleasedOnDrop(guard)))
    }
}
