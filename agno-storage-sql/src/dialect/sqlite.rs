//! SQLite: `RETURNING`, no row locks (writers are serialized), JSON as text.

use std::sync::{Arc, LazyLock};

use agno_storage_core::json::to_python_json;
use agno_storage_core::migration::StepOutcome;
use agno_storage_core::{async_trait, Result, RunRecord};
use serde_json::Value;

use super::{like_pattern, ColType, Dialect};
use crate::exec::Statement;
use crate::migrate::{drop_unfinished_metrics, rekey_metrics};
use crate::named::NamedSql;
use crate::runs::{run_param, RunWrite, RETURNED};
use crate::schema::{spec, Table};
use crate::store::SqlStore;
use crate::value::{Row, SqlValue};

/// The SQLite dialect.
pub(crate) struct Sqlite;

/// SQLite's note of the `run_index` an insert computed.
const NOTE_INDEX: &str = "index";
/// SQLite's note of the row an update stored (columns [`noted_columns`]).
const NOTE_UPDATED: &str = "updated";

/// The columns of an update's [`NOTE_UPDATED`] note, in order: `updated_at`, then the rest
/// of what an upsert hands back.
fn noted_columns() -> &'static Arc<[String]> {
    static NOTED: LazyLock<Arc<[String]>> = LazyLock::new(|| {
        std::iter::once("updated_at")
            .chain(RETURNED.split(", ").filter(|c| *c != "updated_at"))
            .map(str::to_owned)
            .collect()
    });
    &NOTED
}

/// The text of a JSON string as agno's SQLite column stores it (ASCII escapes, no quotes).
fn escaped_text(s: &str) -> String {
    let quoted = to_python_json(&Value::String(s.to_owned()));
    quoted[1..quoted.len() - 1].to_owned()
}

/// A SQL string literal (for the few places a name cannot be a bound parameter).
fn quote_literal(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

#[async_trait]
impl Dialect for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn row_id(&self) -> Option<&'static str> {
        Some("rowid")
    }

    fn max_id_chars(&self) -> Option<usize> {
        None
    }

    fn col_type(&self, t: ColType) -> String {
        match t {
            ColType::Str(_) | ColType::LongText => "VARCHAR",
            ColType::BigInt => "BIGINT",
            ColType::Json => "JSON",
            ColType::Bool => "BOOLEAN",
            ColType::Date => "DATE",
        }
        .into()
    }

    fn ilike(&self, expr: &str) -> String {
        format!("{expr} LIKE ? ESCAPE '\\'")
    }

    fn skip_locked(&self) -> &'static str {
        ""
    }

    fn json_field_is_true(&self, column: &str, field: &str) -> String {
        format!("COALESCE(CASE WHEN json_valid({column}) THEN json_type({column}, '$.{field}') END = 'true', 0)")
    }

    fn json_field_int(&self, column: &str, field: &str) -> String {
        format!("COALESCE(CAST(CASE WHEN json_valid({column}) THEN json_extract({column}, '$.{field}') END AS INTEGER), 0)")
    }

    fn json_with_int(&self, json: &str, field: &str, value: &str) -> String {
        format!("json_set({json}, '$.{field}', {value})")
    }

    /// Reads through agno 2.x's double encoding.
    fn json_field_text(&self, column: &str, field: &str) -> String {
        format!(
            "COALESCE(json_extract(CASE WHEN json_valid({column}) AND json_type({column}) = 'text' THEN json_extract({column}, '$') ELSE {column} END, '$.{field}'), '')"
        )
    }

    fn topic_filter(&self, topic: &str) -> (String, SqlValue) {
        (
            "CAST(topics AS TEXT) LIKE ? ESCAPE '\\'".into(),
            SqlValue::text(like_pattern(&to_python_json(&Value::String(
                topic.to_owned(),
            )))),
        )
    }

    fn memory_search(&self, search: &str) -> (String, SqlValue) {
        (
            "memory LIKE ? ESCAPE '\\'".into(),
            SqlValue::text(like_pattern(&escaped_text(search))),
        )
    }

    fn columns_query(&self, _schema: Option<&str>, table: &str) -> Statement {
        (
            format!(
                "SELECT name AS column_name FROM pragma_table_info({})",
                quote_literal(table)
            ),
            vec![],
        )
    }

    /// The insert notes the index it computed and an update the row it stored
    /// (`agno_note`), which costs less than `RETURNING` on SQLite.
    fn run_upsert(&self, s: &SqlStore) -> NamedSql {
        let noted = noted_columns();
        let mut set = s.run_upsert_set();
        // Each noted column after `updated_at`: the set value or the kept one (the set
        // expressions see the row before the update).
        let after: Vec<String> = noted[1..]
            .iter()
            .map(|c| {
                set.iter()
                    .find(|(column, _)| column == c)
                    .map_or_else(|| self.stored(c), |(_, e)| e.clone())
            })
            .collect();
        if let Some((_, updated_at)) = set.iter_mut().find(|(c, _)| *c == "updated_at") {
            *updated_at = format!(
                "agno_note({updated_at}, '{NOTE_UPDATED}', {})",
                after.join(", ")
            );
        }
        let run_index = format!(
            "COALESCE(:run_index, agno_note({}, '{NOTE_INDEX}'))",
            s.next_run_index()
        );
        NamedSql::new(&s.run_upsert_sql(&s.writable_session(), &run_index, set))
    }

    async fn upsert_run(
        &self,
        s: &SqlStore,
        statement: &NamedSql,
        run: &RunRecord,
        now: i64,
    ) -> Result<RunWrite> {
        let params = statement.bind(|name| run_param(self, run, Some(now), name))?;
        let (changed, notes) = s.exec.execute_noting(statement.sql(), params).await?;
        if changed == 0 {
            return Ok(RunWrite::Refused);
        }
        let note = |tag: &str| notes.iter().find(|n| n.tag == tag);
        Ok(match note(NOTE_UPDATED) {
            Some(updated) => RunWrite::Stored(Row {
                columns: noted_columns().clone(),
                values: updated.values.clone(),
            }),
            None => RunWrite::Inserted(note(NOTE_INDEX).and_then(|n| n.values.first()).and_then(
                |v| match v {
                    SqlValue::Int(i) => *i,
                    _ => None,
                },
            )),
        })
    }

    /// A table rebuild in one transaction, as agno does.
    async fn migrate_metrics(&self, s: &SqlStore, existing: &[String]) -> Result<StepOutcome> {
        if existing.iter().any(|c| c == "user_id") {
            return Ok(StepOutcome::NothingToDo);
        }
        let name = s.names.get(Table::Metrics).to_owned();
        let table = s.t(Table::Metrics);
        let backup_name = format!("{name}_pre_v3_0_0");
        let backup = s.ddl().qualify(&backup_name);
        let indexes = s
            .exec
            .query(
                &format!(
                    "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = {} AND sql IS NOT NULL",
                    quote_literal(&name)
                ),
                vec![],
            )
            .await?;
        let carried: Vec<String> = spec(Table::Metrics)
            .columns
            .iter()
            .filter(|c| c.name != "user_id" && existing.iter().any(|e| e == c.name))
            .map(|c| s.q(c.name))
            .collect();
        let mut statements = vec![(
            format!("ALTER TABLE {table} RENAME TO {}", s.q(&backup_name)),
            vec![],
        )];
        for index in indexes {
            statements.push((
                format!("DROP INDEX IF EXISTS {}", s.q(&index.str("name")?)),
                vec![],
            ));
        }
        statements.push((s.ddl().create_table(Table::Metrics), vec![]));
        statements.push((
            format!(
                "INSERT INTO {table} ({0}, user_id) SELECT {0}, '' FROM {backup}",
                carried.join(", ")
            ),
            vec![],
        ));
        statements.push(drop_unfinished_metrics(s));
        statements.push((format!("DROP TABLE {backup}"), vec![]));
        rekey_metrics(s, statements).await
    }
}
