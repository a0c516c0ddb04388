//! Schema stamps on opening (`agno_schema_versions.json`: `{table_name, version, updated_at}`
//! rows, as agno 3.1.10's `upsert_schema_version` writes them): a table with no file yet is
//! new and stamped at the latest version; an existing unstamped file is pre-v3, left for
//! the migration manager (the engine's steps, under [`JsonFiles`]'s migration lock).

use std::collections::HashSet;

use agno_storage_core::migration::{SchemaVersion, TableType};
use agno_storage_core::{now_epoch_seconds, Result};
use serde_json::{json, Value};

use crate::backend::JsonFiles;
use crate::files::{Step, Table, TableFile};
use crate::rows::text;

/// Whether `rows` stamp `table_name` (a row without a version does not).
fn stamped(rows: &[Value], table_name: &str) -> bool {
    rows.iter()
        .find(|r| text(r, "table_name") == Some(table_name))
        .and_then(|r| text(r, "version"))
        .is_some_and(|v| !v.is_empty())
}

impl JsonFiles {
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
                    if !stamped(rows, name) {
                        rows.retain(|r| text(r, "table_name") != Some(*name));
                        rows.push(json!({
                            "table_name": name,
                            "version": SchemaVersion::LATEST.to_string(),
                            "updated_at": now_epoch_seconds(),
                        }));
                        changed = true;
                    }
                }
                Ok(Step::when(changed, ()))
            })
            .await
    }
}
