//! `status`: the schema version stamped on every migrated table.

use std::fmt::Write as _;

use agno_storage_core::TableType;
use serde_json::{json, Value};

use crate::target::{self, BackendUrl};
use crate::Error;

/// The stored name of a table type (`memories`, `schedule_runs`, …).
pub fn table_type_name(table_type: TableType) -> String {
    match serde_json::to_value(table_type) {
        Ok(Value::String(name)) => name,
        _ => format!("{table_type:?}"),
    }
}

/// Prints each table with its stamp (or `unstamped`); `json` prints a JSON array of
/// `{"table", "table_type", "version"}` with `version: null` when unstamped. Opens the
/// database without creating anything: a missing or empty one is an error.
pub async fn run(url: &BackendUrl, json: bool) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let migrations = db.migrations()?;
    let mut rows = Vec::new();
    for table in migrations.tables() {
        let version = migrations
            .versions()
            .get_schema_version(&table.name)
            .await?;
        rows.push((table, version));
    }
    if json {
        let array: Vec<Value> = rows
            .iter()
            .map(|(table, version)| {
                json!({
                    "table": table.name,
                    "table_type": table_type_name(table.table_type),
                    "version": version.map(|v| v.to_string()),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&array)
            .map_err(|e| Error::new(format!("cannot encode the status as JSON: {e}")))?;
        return Ok(text + "\n");
    }
    let mut out = format!("Schema versions of {url} ({}):\n", db.backend());
    let width = rows.iter().map(|(t, _)| t.name.len()).max().unwrap_or(0);
    for (table, version) in &rows {
        let version = version.map_or_else(|| "unstamped".to_owned(), |v| v.to_string());
        let _ = writeln!(
            out,
            "  {:width$}  {:14}  {version}",
            table.name,
            table_type_name(table.table_type)
        );
    }
    Ok(out)
}
