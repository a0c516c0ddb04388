//! MySQL and MariaDB: no `RETURNING` (rows are read back in the same transaction), no
//! partial indexes (unique keys over a generated owner column), agno's named lock per
//! session, and DDL that commits on its own.

use std::collections::HashSet;

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::migration::StepOutcome;
use agno_storage_core::{async_trait, ErrorKind, JobCompletion, JobStatus, Result, RunRecord};
use serde_json::Value;

use super::{count_of, like_pattern, Claim, ColType, Dialect, InsertChunk, SessionLock};
use crate::exec::{NamedLock, Statement};
use crate::named::NamedSql;
use crate::runs::{run_param, RunWrite, RETURNED};
use crate::schema::{mysql_spec, Table};
use crate::store::{in_list, owned_by_other, SqlStore, Upsert};
use crate::value::{Row, SqlValue};

/// The MySQL dialect.
pub(crate) struct MySql;

/// The index names of a table (MySQL has no `CREATE INDEX IF NOT EXISTS`).
async fn index_names(s: &SqlStore, t: Table) -> Result<Vec<String>> {
    s.exec
        .query(
            "SELECT DISTINCT index_name AS index_name FROM information_schema.statistics WHERE table_schema = ? AND table_name = ?",
            vec![
                SqlValue::opt_text(s.schema.as_deref()),
                SqlValue::text(s.names.get(t).to_owned()),
            ],
        )
        .await?
        .iter()
        .map(|r| r.str("index_name"))
        .collect()
}

#[async_trait]
impl Dialect for MySql {
    fn name(&self) -> &'static str {
        "mysql"
    }

    /// agno's key columns are `VARCHAR(128)`.
    fn max_id_chars(&self) -> Option<usize> {
        Some(128)
    }

    fn quote(&self, ident: &str) -> String {
        format!("`{}`", ident.replace('`', "``"))
    }

    fn col_type(&self, t: ColType) -> String {
        match t {
            ColType::Str(n) => return format!("VARCHAR({n})"),
            ColType::LongText => "TEXT",
            ColType::BigInt => "BIGINT",
            ColType::Json => "JSON",
            ColType::Bool => "BOOL",
            ColType::Date => "DATE",
        }
        .into()
    }

    /// MySQL's JSON text compares case-sensitively, so both sides are lowered.
    fn ilike(&self, expr: &str) -> String {
        format!("LOWER({expr}) LIKE LOWER(?) ESCAPE '\\'")
    }

    fn excluded(&self, column: &str) -> String {
        format!("VALUES({})", self.quote(column))
    }

    fn stored(&self, column: &str) -> String {
        self.quote(column)
    }

    /// The default collation ignores case: owners are compared as bytes.
    fn same(&self, a: &str, b: &str) -> String {
        format!("CAST({a} AS BINARY) = CAST({b} AS BINARY)")
    }

    fn json_field_is_true(&self, column: &str, field: &str) -> String {
        format!(
            "COALESCE(JSON_TYPE(JSON_EXTRACT({column}, '$.{field}')) = 'BOOLEAN' \
             AND JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{field}')) = 'true', FALSE)"
        )
    }

    fn json_field_int(&self, column: &str, field: &str) -> String {
        format!("COALESCE(CAST(JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{field}')) AS SIGNED), 0)")
    }

    fn json_with_int(&self, json: &str, field: &str, value: &str) -> String {
        format!("JSON_SET({json}, '$.{field}', {value})")
    }

    fn id_before(&self, a: &str, b: &str) -> String {
        format!("CAST({a} AS BINARY) < CAST({b} AS BINARY)")
    }

    fn json_field_text(&self, column: &str, field: &str) -> String {
        format!("COALESCE(JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{field}')), '')")
    }

    fn json_as_text(&self, column: &str) -> String {
        format!("CAST({column} AS CHAR)")
    }

    fn topic_filter(&self, topic: &str) -> (String, SqlValue) {
        (
            "JSON_CONTAINS(topics, ?)".into(),
            SqlValue::Json(Some(Value::String(topic.to_owned()))),
        )
    }

    fn memory_search(&self, search: &str) -> (String, SqlValue) {
        (
            self.ilike("JSON_UNQUOTE(memory)"),
            SqlValue::text(like_pattern(search)),
        )
    }

    fn columns_query(&self, schema: Option<&str>, table: &str) -> Statement {
        (
            "SELECT column_name AS column_name FROM information_schema.columns WHERE table_schema = ? AND table_name = ? ORDER BY ordinal_position".into(),
            vec![SqlValue::opt_text(schema), SqlValue::text(table)],
        )
    }

    fn column_order(&self, t: Table) -> Option<&'static [&'static str]> {
        mysql_spec(t).order
    }

    fn declares_index(&self, t: Table, name: &str) -> bool {
        !mysql_spec(t).skip_indexes.contains(&name)
    }

    fn composite_index_name(&self, table: &str, declared: &str, _columns: &[&str]) -> String {
        format!("{table}_{declared}")
    }

    fn if_not_exists(&self) -> &'static str {
        ""
    }

    fn has_partial_indexes(&self) -> bool {
        false
    }

    fn owner_unique_keys(
        &self,
        t: Table,
    ) -> Option<&'static [(&'static str, &'static [&'static str])]> {
        Some(mysql_spec(t).owner_unique)
    }

    /// A MySQL schema is a database, as agno's `create_schema` makes it; an existing one
    /// needs no CREATE privilege.
    async fn create_schema(&self, s: &SqlStore, schema: &str) -> Result<()> {
        let exists = s
            .exec
            .query(
                "SELECT 1 AS present FROM information_schema.schemata WHERE schema_name = ?",
                vec![SqlValue::text(schema)],
            )
            .await?;
        if exists.is_empty() {
            let sql = format!("CREATE DATABASE IF NOT EXISTS {}", s.q(schema));
            s.exec.execute(&sql, vec![]).await?;
        }
        Ok(())
    }

    /// Existing names are skipped, and an index another process created meanwhile counts
    /// as created.
    async fn create_indexes(
        &self,
        s: &SqlStore,
        t: Table,
        indexes: Vec<(String, String)>,
    ) -> Result<()> {
        let present = index_names(s, t).await?;
        for (name, sql) in indexes.into_iter().filter(|(n, _)| !present.contains(n)) {
            match s.exec.execute(&sql, vec![]).await {
                Err(e)
                    if e.kind() == ErrorKind::AlreadyExists
                        && index_names(s, t).await?.contains(&name) => {}
                other => {
                    other?;
                }
            }
        }
        Ok(())
    }

    /// `INSERT … ON DUPLICATE KEY UPDATE col = IF(guard, new, col)`: MySQL updates on
    /// whichever unique key collides, tests the guard in every assignment and assigns
    /// `user_id` last, so the guard reads the stored owner throughout (MySQL assigns left
    /// to right, each seeing the ones before).
    fn upsert_sql(&self, table: &str, u: &Upsert<'_>) -> String {
        let mut set: Vec<&(&str, String)> = u.set.iter().collect();
        set.sort_by_key(|(c, _)| *c == "user_id");
        let set: Vec<String> = set
            .into_iter()
            .map(|(c, e)| match &u.guard {
                Some(g) => format!("{0} = IF({g}, {e}, {0})", self.quote(c)),
                None => format!("{} = {e}", self.quote(c)),
            })
            .collect();
        format!(
            "INSERT INTO {table} ({}) VALUES {} ON DUPLICATE KEY UPDATE {}",
            self.quote_list(u.columns),
            u.values,
            set.join(", ")
        )
    }

    async fn upsert_returning(
        &self,
        s: &SqlStore,
        table: Table,
        (sql, params): Statement,
        returning: &str,
        key: (&str, SqlValue),
        refused: &(dyn for<'r> Fn(&'r Row) -> Result<bool> + Sync),
    ) -> Result<Option<Row>> {
        let read = format!(
            "SELECT {returning} FROM {} WHERE {} = ?",
            s.t(table),
            s.q(key.0)
        );
        let mut tx = s.exec.begin(None).await?;
        tx.execute(&sql, params).await?;
        let row = tx.query(&read, vec![key.1]).await?.into_iter().next();
        tx.commit().await?;
        match row {
            Some(row) if !refused(&row)? => Ok(Some(row)),
            _ => Ok(None),
        }
    }

    async fn write_returning(
        &self,
        s: &SqlStore,
        write: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        let mut tx = s.exec.begin(None).await?;
        let rows = if tx.execute(&write.0, write.1).await? > 0 {
            tx.query(&read.0, read.1).await?
        } else {
            Vec::new()
        };
        tx.commit().await?;
        Ok(rows)
    }

    async fn writes_returning(
        &self,
        s: &SqlStore,
        writes: Vec<(Statement, Statement)>,
    ) -> Result<Vec<Row>> {
        let mut tx = s.exec.begin(None).await?;
        let mut out = Vec::with_capacity(writes.len());
        for ((sql, params), (read, key)) in writes {
            tx.execute(&sql, params).await?;
            out.extend(tx.query(&read, key).await?);
        }
        tx.commit().await?;
        Ok(out)
    }

    /// A key collision is an error here (no `DO NOTHING`): it reads as no row inserted.
    /// A named lock per jobs table and session: without it, two enqueues of one session
    /// read the same `MAX(session_seq)` (the sequence subquery takes no lock) and share a
    /// place.
    fn session_lock(&self, s: &SqlStore, session_id: &str) -> Option<SessionLock> {
        Some(SessionLock::Named(NamedLock::job_session(
            &s.table_ref(Table::Jobs),
            session_id,
        )))
    }

    async fn insert_if_absent(
        &self,
        s: &SqlStore,
        insert: Statement,
        read: Statement,
    ) -> Result<Vec<Row>> {
        match self.write_returning(s, insert, read).await {
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(Vec::new()),
            other => other,
        }
    }

    async fn transaction_count(&self, s: &SqlStore, statements: Vec<Statement>) -> Result<u64> {
        let mut tx = s.exec.begin(None).await?;
        let mut last = 0;
        for (sql, params) in statements {
            last = tx.execute(&sql, params).await?;
        }
        tx.commit().await?;
        Ok(last)
    }

    /// MySQL cannot name the updated table in the UPDATE's subquery: the candidates are
    /// locked first, then updated and read back, in one transaction.
    async fn claim(&self, s: &SqlStore, c: Claim<'_>) -> Result<Vec<Row>> {
        if c.limit == 0 {
            return Ok(Vec::new());
        }
        let table = s.t(c.table);
        let (candidates, candidate_params) = c.candidates(&table, self.skip_locked());
        let mut tx = s.exec.begin(None).await?;
        let ids = tx
            .query(&candidates, candidate_params)
            .await?
            .iter()
            .map(|r| r.str("id"))
            .collect::<Result<Vec<_>>>()?;
        if ids.is_empty() {
            tx.commit().await?;
            return Ok(Vec::new());
        }
        let (list, id_params) = in_list(&ids);
        let (set, mut params) = c.set;
        params.extend(id_params.iter().cloned());
        tx.execute(
            &format!("UPDATE {table} SET {set} WHERE id IN {list}"),
            params,
        )
        .await?;
        let rows = tx
            .query(
                &format!("SELECT * FROM {table} WHERE id IN {list}"),
                id_params,
            )
            .await?;
        tx.commit().await?;
        Ok(rows)
    }

    /// MySQL has no `UPDATE … FROM (VALUES …)`: the held rows are locked and read, then the
    /// fenced ones updated with one `UPDATE … WHERE id IN (…)` per distinct (status, error)
    /// (a worker's batch is mostly one), in one transaction.
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
        let table = s.t(Table::Jobs);
        let ids: Vec<String> = completions.iter().map(|c| c.id.clone()).collect();
        let (list, mut params) = in_list(&ids);
        params.push(SqlValue::text(worker_id));
        let mut tx = s.exec.begin(None).await?;
        let held = tx
            .query(
                &format!("SELECT id, attempt FROM {table} WHERE id IN {list} AND locked_by = ? AND status = 'running' FOR UPDATE"),
                params,
            )
            .await?
            .iter()
            .map(|r| Ok((r.str("id")?, r.i64("attempt")?)))
            .collect::<Result<HashSet<_>>>()?;
        // The held completions grouped by what they write, in first-seen order.
        let mut groups: Vec<(JobStatus, Option<&str>, Vec<String>)> = Vec::new();
        for c in completions {
            if !held.contains(&(c.id.clone(), c.attempt)) {
                continue;
            }
            let error = c.error.as_deref();
            match groups
                .iter_mut()
                .find(|(s, e, _)| *s == c.status && *e == error)
            {
                Some((_, _, ids)) => ids.push(c.id.clone()),
                None => groups.push((c.status, error, vec![c.id.clone()])),
            }
        }
        let mut finished = HashSet::new();
        for (status, error, ids) in groups {
            let (list, id_params) = in_list(&ids);
            let completed_at = (status != JobStatus::Paused).then_some(now);
            let mut params = vec![
                SqlValue::text(status.as_str()),
                SqlValue::opt_text(error),
                SqlValue::Int(completed_at),
                SqlValue::int(now),
            ];
            params.extend(id_params);
            tx.execute(
                &format!("UPDATE {table} SET status = ?, error = ?, locked_by = NULL, locked_at = NULL, completed_at = ?, updated_at = ? WHERE id IN {list}"),
                params,
            )
            .await?;
            finished.extend(ids);
        }
        tx.commit().await?;
        Ok(finished)
    }

    /// A no-op update keeps a stored row; with found-rows counting MySQL reports it like
    /// an insert, so the rows present before and after are counted instead.
    async fn insert_absent(
        &self,
        s: &SqlStore,
        insert: &str,
        key: &str,
        chunks: Vec<InsertChunk>,
    ) -> Result<InsertedRuns> {
        let mut tx = s.exec.begin(None).await?;
        let mut outcome = InsertedRuns::default();
        for chunk in chunks {
            let (count, id_params) = chunk.count;
            let before = count_of(&tx.query(&count, id_params.clone()).await?)?;
            tx.execute(
                &format!(
                    "{insert} {} ON DUPLICATE KEY UPDATE {key} = {key}",
                    chunk.values
                ),
                chunk.params,
            )
            .await?;
            let present = count_of(&tx.query(&count, id_params).await?)?;
            outcome.inserted += present.saturating_sub(before);
            outcome.present += present;
        }
        tx.commit().await?;
        Ok(outcome)
    }

    /// MySQL cannot read the table it inserts into: the index is computed first, by
    /// [`Dialect::upsert_run`].
    fn run_upsert(&self, s: &SqlStore) -> NamedSql {
        NamedSql::new(&s.run_upsert_sql(":session_id", ":run_index", s.run_upsert_set()))
    }

    /// Without a run_index, agno's named lock of the session is held while the next index
    /// is read and the row written (as agno's MySQLDb does, so Rust and Python writers
    /// serialize); the session's owner is read share-locked and the row read back in the
    /// same transaction.
    async fn upsert_run(
        &self,
        s: &SqlStore,
        statement: &NamedSql,
        run: &RunRecord,
        now: i64,
    ) -> Result<RunWrite> {
        let lock = run
            .run_index
            .is_none()
            .then(|| NamedLock::run_index(&run.session_id));
        let mut tx = s.exec.begin(lock).await?;
        // The session row stays share-locked until commit: it cannot be deleted and
        // recreated by another user between this check and the insert.
        let owner = tx
            .query(
                &format!(
                    "SELECT user_id FROM {} WHERE session_id = ? LOCK IN SHARE MODE",
                    s.t(Table::Sessions)
                ),
                vec![SqlValue::text(&run.session_id)],
            )
            .await?
            .first()
            .map(|row| row.opt_str("user_id"))
            .transpose()?;
        run.check_session(owner.as_ref().map(Option::as_deref))?;
        let run_index = match run.run_index {
            Some(given) => given,
            None => {
                let next = NamedSql::new(&format!("SELECT {} AS next", s.next_run_index()));
                let params = next.bind(|name| run_param(self, run, Some(now), name))?;
                tx.query(next.sql(), params)
                    .await?
                    .first()
                    .map(|r| r.opt_i64("next"))
                    .transpose()?
                    .flatten()
                    .unwrap_or(0)
            }
        };
        let params = statement.bind(|name| match name {
            "run_index" => Some(SqlValue::int(run_index)),
            other => run_param(self, run, Some(now), other),
        })?;
        tx.execute(statement.sql(), params).await?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {RETURNED} FROM {} WHERE run_id = ?",
                    s.t(Table::Runs)
                ),
                vec![SqlValue::text(&run.run_id)],
            )
            .await?;
        tx.commit().await?;
        let refused = owned_by_other(run.user_id.as_deref());
        Ok(match rows.into_iter().next() {
            Some(row) if !refused(&row)? => RunWrite::Stored(row),
            _ => RunWrite::Refused,
        })
    }

    /// The metrics step on MySQL, whose DDL commits on its own: every change is checked before
    /// it is made, so a run interrupted anywhere completes on the next one, and the step is
    /// only reported done (and the table stamped) once all of it is. As agno's MySQL step: the
    /// new key goes on before the legacy one comes off, the newest unfinished shared day is
    /// dropped so it is recomputed per user (deleting an unfinished day loses nothing: it is
    /// recomputed anyway), and `user_id` ends without a default.
    async fn migrate_metrics(&self, s: &SqlStore, existing: &[String]) -> Result<StepOutcome> {
        let name = s.names.get(Table::Metrics).to_owned();
        let table = s.t(Table::Metrics);
        let mut changed = false;
        if !existing.iter().any(|c| c == "user_id") {
            s.exec
                .execute(
                    &format!(
                        "ALTER TABLE {table} ADD COLUMN `user_id` VARCHAR(128) NOT NULL DEFAULT ''"
                    ),
                    vec![],
                )
                .await?;
            changed = true;
        }
        // Unique keys by their column sets.
        let keys = s
            .exec
            .query(
                "SELECT index_name AS index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index SEPARATOR ',') AS cols \
                 FROM information_schema.statistics WHERE table_schema = ? AND table_name = ? AND non_unique = 0 \
                 GROUP BY index_name",
                vec![SqlValue::opt_text(s.schema.as_deref()), SqlValue::text(&name)],
            )
            .await?;
        let mut has_new = false;
        let mut legacy = Vec::new();
        for key in &keys {
            let cols = key.str("cols")?;
            match cols.as_str() {
                "user_id,date,aggregation_period" => has_new = true,
                "date,aggregation_period" | "aggregation_period,date" => {
                    legacy.push(key.str("index_name")?)
                }
                _ => {}
            }
        }
        if !has_new {
            let unique = format!("{name}_uq_metrics_user_date_period");
            let added = s
                .exec
                .execute(
                    &format!(
                        "ALTER TABLE {table} ADD CONSTRAINT {} UNIQUE (`user_id`, `date`, `aggregation_period`)",
                        s.q(&unique)
                    ),
                    vec![],
                )
                .await;
            match added {
                Err(e)
                    if e.kind() == ErrorKind::AlreadyExists
                        && index_names(s, Table::Metrics).await?.contains(&unique) => {}
                other => {
                    other?;
                }
            }
            changed = true;
        }
        if !legacy.is_empty() {
            // Separate reads: MySQL cannot subquery the table a DELETE targets.
            let mut dates = Vec::new();
            for filter in ["", " WHERE completed = TRUE"] {
                let rows = s
                    .exec
                    .query(
                        &format!("SELECT MAX(date) AS d FROM {table}{filter}"),
                        vec![],
                    )
                    .await?;
                dates.push(rows.first().map(|r| r.opt_date("d")).transpose()?.flatten());
            }
            let (newest, last_completed) = (dates[0], dates[1]);
            if let Some(newest) = newest.filter(|n| last_completed.is_none_or(|c| n > &c)) {
                s.exec
                    .execute(
                        &format!(
                            "DELETE FROM {table} WHERE completed = FALSE AND user_id = '' AND date = ?"
                        ),
                        vec![SqlValue::Date(Some(newest))],
                    )
                    .await?;
            }
            for index in legacy {
                s.exec
                    .execute(&format!("DROP INDEX {} ON {table}", s.q(&index)), vec![])
                    .await?;
            }
            changed = true;
        }
        let default = s
            .exec
            .query(
                "SELECT column_default AS d FROM information_schema.columns WHERE table_schema = ? AND table_name = ? AND column_name = 'user_id'",
                vec![SqlValue::opt_text(s.schema.as_deref()), SqlValue::text(&name)],
            )
            .await?;
        if default
            .first()
            .map(|r| r.opt_str("d"))
            .transpose()?
            .flatten()
            .is_some()
        {
            s.exec
                .execute(
                    &format!("ALTER TABLE {table} MODIFY COLUMN `user_id` VARCHAR(128) NOT NULL"),
                    vec![],
                )
                .await?;
            changed = true;
        }
        s.refresh(Table::Metrics).await?;
        Ok(if changed {
            StepOutcome::Applied
        } else {
            StepOutcome::NothingToDo
        })
    }
}
