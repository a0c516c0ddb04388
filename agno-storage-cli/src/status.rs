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
    let mut damaged = Vec::new();
    for table in migrations.tables() {
        let version = migrations
            .versions()
            .get_schema_version(&table.name)
            .await?;
        if let Some(damage) = migrations.damage(&table) {
            damaged.push((table.name.clone(), damage.message().to_owned()));
        }
        rows.push((table, version));
    }
    let out = report(url, db.backend(), &rows, &damaged, json)?;
    match damaged.first() {
        None => Ok(out),
        // The versions are printed; the damage, which no migration repairs, fails the command.
        Some((_, first)) => {
            print!("{out}");
            Err(Error::new(format!(
                "{} table(s) damaged, which `migrate` does not repair: {first}",
                damaged.len()
            )))
        }
    }
}

/// The status as text or JSON.
fn report(
    url: &BackendUrl,
    backend: &str,
    rows: &[(
        agno_storage_core::migration::TableRef,
        Option<agno_storage_core::SchemaVersion>,
    )],
    damaged: &[(String, String)],
    json: bool,
) -> Result<String, Error> {
    let damage_of = |name: &str| {
        damaged
            .iter()
            .find(|(table, _)| table == name)
            .map(|(_, message)| message.clone())
    };
    if json {
        let array: Vec<Value> = rows
            .iter()
            .map(|(table, version)| {
                json!({
                    "table": table.name,
                    "table_type": table_type_name(table.table_type),
                    "version": version.map(|v| v.to_string()),
                    "damage": damage_of(&table.name),
                })
            })
            .collect();
        let text = serde_json::to_string_pretty(&array)
            .map_err(|e| Error::new(format!("cannot encode the status as JSON: {e}")))?;
        return Ok(text + "\n");
    }
    let mut out = format!("Schema versions of {url} ({backend}):\n");
    let width = rows.iter().map(|(t, _)| t.name.len()).max().unwrap_or(0);
    for (table, version) in rows {
        let version = version.map_or_else(|| "unstamped".to_owned(), |v| v.to_string());
        let damage = if damage_of(&table.name).is_some() {
            "  DAMAGED (see the error)"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "  {:width$}  {:14}  {version}{damage}",
            table.name,
            table_type_name(table.table_type)
        );
    }
    Ok(out)
}
