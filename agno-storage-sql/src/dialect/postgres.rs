//! PostgreSQL: `RETURNING`, `SKIP LOCKED`, JSONB, schemas, agno's advisory lock per session.

use agno_storage_core::json::to_python_json;
use agno_storage_core::migration::StepOutcome;
use std::collections::HashSet;

use agno_storage_core::{async_trait, ErrorKind, JobCompletion, Result, RunRecord};
use serde_json::Value;

use super::{like_pattern, ColType, Dialect, RowVersioning, SessionLock};
use crate::exec::Statement;
use crate::migrate::{drop_unfinished_metrics, rekey_metrics};
use crate::named::NamedSql;
use crate::runs::{run_param, RunWrite, RETURNED};
use crate::schema::Table;
use crate::store::SqlStore;
use crate::value::SqlValue;

/// The PostgreSQL dialect.
pub(crate) struct Postgres;

#[async_trait]
impl Dialect for Postgres {
    fn name(&self) -> &'static str {
        "postgres"
    }

    /// `ARRAY(subquery)` is evaluated once, so a locking `LIMIT n` subquery never
    /// yields more than `n` rows however the join is planned.
    fn id_among(&self, subquery: &str) -> String {
        format!("id = ANY(ARRAY({subquery}))")
    }

    /// One statement whatever the batch's size (so one prepared statement serves every
    /// batch): the completions are four array parameters (ids, attempts, statuses, errors)
    /// read by `unnest`, and the finished ids come back as one JSON array.
    async fn finish_jobs(
        &self,
        s: &SqlStore,
        worker_id: &str,
        completions: &[JobCompletion],
        now: i64,
    ) -> Result<HashSet<String>> {
        if completions.is_empty() {
            return Ok(HashSet::new());
        }
        for c in completions {
            // Bound as text on the other paths: refused alike, not stripped.
            crate::postgres::refuse_nul(&c.id)?;
            crate::postgres::refuse_nul(c.error.as_deref().unwrap_or_default())?;
        }
        let sql = format!(
            "WITH done AS (UPDATE {} AS j SET status = v.status, error = v.error, locked_by = NULL, \
             locked_at = NULL, completed_at = CASE WHEN v.status = 'paused' THEN NULL ELSE ? END, \
             updated_at = ? \
             FROM unnest(?::text[], ?::bigint[], ?::text[], ?::text[]) AS v(id, attempt, status, error) \
             WHERE j.id = v.id AND j.attempt = v.attempt AND j.locked_by = ? AND j.status = 'running' \
             RETURNING j.id) SELECT COALESCE(json_agg(id), '[]') AS ids FROM done",
            s.t(Table::Jobs)
        );
        let params = vec![
            SqlValue::int(now),
            SqlValue::int(now),
            SqlValue::text(array_literal(
                completions.iter().map(|c| Some(c.id.as_str())),
            )),
            SqlValue::text(format!(
                "{{{}}}",
                completions
                    .iter()
                    .map(|c| c.attempt.to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            SqlValue::text(array_literal(
                completions.iter().map(|c| Some(c.status.as_str())),
            )),
            SqlValue::text(array_literal(
                completions.iter().map(|c| c.error.as_deref()),
            )),
            SqlValue::text(worker_id),
        ];
        let rows = s.exec.query(&sql, params).await?;
        let ids = match rows.first().map(|r| r.json("ids")).transpose()?.flatten() {
            Some(Value::Array(ids)) => ids,
            other => {
                return Err(agno_storage_core::Error::new(
                    ErrorKind::Serialization,
                    format!("finishing jobs returned {other:?}, not an array of ids"),
                ))
            }
        };
        Ok(ids
            .into_iter()
            .filter_map(|id| match id {
                Value::String(id) => Some(id),
                _ => None,
            })
            .collect())
    }

    /// 512 keeps any id of 4-byte characters under a B-tree entry's 2,704-byte limit.
    fn max_id_chars(&self) -> Option<usize> {
        Some(512)
    }

    fn col_type(&self, t: ColType) -> String {
        match t {
            ColType::Str(_) => "VARCHAR",
            ColType::LongText => "TEXT",
            ColType::BigInt => "BIGINT",
            ColType::Json => "JSONB",
            ColType::Bool => "BOOLEAN",
            ColType::Date => "DATE",
        }
        .into()
    }

    fn ilike(&self, expr: &str) -> String {
        format!("{expr} ILIKE ? ESCAPE '\\'")
    }

    fn json_field_text(&self, column: &str, field: &str) -> String {
        format!("COALESCE({column}->>'{field}', '')")
    }

    fn json_field_is_true(&self, column: &str, field: &str) -> String {
        format!("COALESCE({column}->'{field}' = 'true'::jsonb, FALSE)")
    }

    /// agno's `_session_seq_sql`.
    fn json_field_int(&self, column: &str, field: &str) -> String {
        format!("COALESCE(CAST({column}->>'{field}' AS BIGINT), 0)")
    }

    fn json_with_int(&self, json: &str, field: &str, value: &str) -> String {
        format!(
            "jsonb_set(CAST({json} AS JSONB), '{{{field}}}', to_jsonb(CAST({value} AS BIGINT)))"
        )
    }

    fn wake_workers(&self, s: &SqlStore) -> Option<Statement> {
        Some((
            "SELECT pg_notify(?, ?) IS NULL AS notified".into(),
            vec![
                SqlValue::text(crate::jobs::WAKE_CHANNEL),
                SqlValue::text(s.table_ref(Table::Jobs)),
            ],
        ))
    }

    /// agno's session lock (see [`session_lock_key`]).
    fn session_lock(&self, s: &SqlStore, session_id: &str) -> Option<SessionLock> {
        Some(SessionLock::Statement((
            "SELECT pg_advisory_xact_lock(?) AS locked".into(),
            vec![SqlValue::int(session_lock_key(
                &s.table_ref(Table::Jobs),
                session_id,
            ))],
        )))
    }

    /// JSONB: a copy of the value, bound as JSON.
    fn json_param(&self, v: &Value) -> SqlValue {
        SqlValue::Json(Some(agno_storage_core::json::clone_deep(v)))
    }

    fn text_holds_nul(&self) -> bool {
        false
    }

    /// `xmin`, the writing transaction.
    fn row_versioning(&self, alias: &str, key: &str) -> Option<RowVersioning> {
        let version = format!("CAST({alias}.xmin AS TEXT)");
        // A 64-bit hash per row, seeded by the one `?`, summed: order-free, and it changes
        // when any row is added, removed or rewritten (but for a 2^-64 chance).
        let digest = format!(
            "CAST(count(*) AS TEXT) || ':' || CAST(COALESCE(sum(hashtextextended(                     {alias}.{key} || ':' || {version}, ?)), 0) AS TEXT)"
        );
        Some(RowVersioning { version, digest })
    }

    fn topic_filter(&self, topic: &str) -> (String, SqlValue) {
        (
            "topics @> ?".into(),
            SqlValue::Json(Some(Value::from(vec![topic.to_owned()]))),
        )
    }

    fn memory_search(&self, search: &str) -> (String, SqlValue) {
        (
            "(memory #>> '{}') ILIKE ? ESCAPE '\\'".into(),
            SqlValue::text(like_pattern(search)),
        )
    }

    fn columns_query(&self, schema: Option<&str>, table: &str) -> Statement {
        (
            "SELECT column_name::text AS column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position".into(),
            vec![SqlValue::opt_text(schema), SqlValue::text(table)],
        )
    }

    async fn create_schema(&self, s: &SqlStore, schema: &str) -> Result<()> {
        let sql = format!("CREATE SCHEMA IF NOT EXISTS {}", s.q(schema));
        match s.exec.execute(&sql, vec![]).await {
            // Two processes creating the schema at once: the loser sees a duplicate.
            Err(e) if e.kind() != ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }

    fn run_upsert(&self, s: &SqlStore) -> NamedSql {
        let run_index = format!("COALESCE(:run_index, {})", s.next_run_index());
        let sql = s.run_upsert_sql(&s.writable_session(), &run_index, s.run_upsert_set());
        NamedSql::new(&format!("{sql} RETURNING {RETURNED}"))
    }

    async fn upsert_run(
        &self,
        s: &SqlStore,
        statement: &NamedSql,
        run: &RunRecord,
        now: i64,
    ) -> Result<RunWrite> {
        let params = statement.bind(|name| run_param(self, run, Some(now), name))?;
        let rows = if run.run_index.is_some() {
            // An explicit run_index needs no lock: the statement is atomic on its own.
            s.exec.query(statement.sql(), params).await?
        } else {
            // agno's lock: concurrent appends to one session read MAX(run_index) one at a
            // time.
            let lock = (
                "SELECT pg_advisory_xact_lock(hashtext('agno_run_index'), hashtext(?)) AS locked"
                    .into(),
                vec![SqlValue::text(&run.session_id)],
            );
            s.exec
                .transaction(vec![lock, (statement.sql().to_owned(), params)])
                .await?
                .pop()
                .unwrap_or_default()
        };
        Ok(rows
            .into_iter()
            .next()
            .map_or(RunWrite::Refused, RunWrite::Stored))
    }

    /// A new column and key in one transaction.
    async fn migrate_metrics(&self, s: &SqlStore, existing: &[String]) -> Result<StepOutcome> {
        if existing.iter().any(|c| c == "user_id") {
            return Ok(StepOutcome::NothingToDo);
        }
        let name = s.names.get(Table::Metrics).to_owned();
        let table = s.t(Table::Metrics);
        let statements = vec![
            (format!("ALTER TABLE {table} ADD COLUMN IF NOT EXISTS user_id VARCHAR NOT NULL DEFAULT ''"), vec![]),
            (format!("ALTER TABLE {table} ALTER COLUMN user_id DROP DEFAULT"), vec![]),
            (
                format!(
                    "ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {}",
                    s.q(&format!("{name}_uq_metrics_date_period"))
                ),
                vec![],
            ),
            (
                format!(
                    "ALTER TABLE {table} ADD CONSTRAINT {} UNIQUE (user_id, date, aggregation_period)",
                    s.q(&format!("{name}_uq_metrics_user_date_period"))
                ),
                vec![],
            ),
            drop_unfinished_metrics(s),
        ];
        rekey_metrics(s, statements).await
    }
}

/// agno's `session_claim_lock_key`: the first 8 bytes, signed big-endian, of the SHA-256 of
/// `json.dumps((table.fullname, session_id), separators=(",", ":"))`.
fn session_lock_key(table: &str, session_id: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let text = format!(
        "[{},{}]",
        to_python_json(&Value::from(table)),
        to_python_json(&Value::from(session_id))
    );
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// A one-dimensional `text[]` literal of `items` (`NULL` for `None`), each element quoted
/// with `"` and `\\` escaped, as PostgreSQL's array input reads it.
fn array_literal<'a>(items: impl Iterator<Item = Option<&'a str>>) -> String {
    let mut out = String::from("{");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        match item {
            None => out.push_str("NULL"),
            Some(text) => {
                out.push('"');
                for c in text.chars() {
                    if c == '"' || c == '\\' {
                        out.push('\\');
                    }
                    out.push(c);
                }
                out.push('"');
            }
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    /// Values from agno 3.1.10's `session_claim_lock_key`.
    #[test]
    fn session_lock_key_is_agnos() {
        assert_eq!(
            super::session_lock_key("ai.agno_jobs", "s-\u{fc}\"1"),
            3746004142734091467
        );
        assert_eq!(
            super::session_lock_key("agno_jobs", "abc"),
            -6910573386768629482
        );
    }
}
