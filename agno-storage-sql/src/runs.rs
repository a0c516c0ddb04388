//! Runs (`agno_runs`): one row per run, `run_index` assigned atomically per session.

use agno_storage_core::legacy::{
    decode_legacy_runs, legacy_runs_list, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, Page, Result,
    RunQuery, RunRecord, RunStore, RunType,
};
use serde_json::Value;
#[cfg(feature = "sqlite")]
use std::sync::Arc;

use crate::dialect::{like_pattern, Dialect};
use crate::schema::Tbl;
use crate::store::{in_list, limit_offset, order_by, SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

fn run_type(s: &str) -> Result<RunType> {
    match s {
        "agent" => Ok(RunType::Agent),
        "team" => Ok(RunType::Team),
        "workflow" => Ok(RunType::Workflow),
        other => Err(Error::new(
            ErrorKind::Serialization,
            format!("Invalid run type: {other}"),
        )),
    }
}

pub(crate) fn run_from_row(mut row: Row) -> Result<RunRecord> {
    let run_type = run_type(&row.str("run_type")?)?;
    Ok(RunRecord {
        run_id: row.take_str("run_id")?,
        session_id: row.take_str("session_id")?,
        run_type,
        run_index: row.opt_i64("run_index")?,
        user_id: row.take_opt_str("user_id")?,
        agent_id: row.take_opt_str("agent_id")?,
        team_id: row.take_opt_str("team_id")?,
        workflow_id: row.take_opt_str("workflow_id")?,
        parent_run_id: row.take_opt_str("parent_run_id")?,
        status: row.take_opt_str("status")?,
        run_data: row.take_json("run_data")?.unwrap_or(Value::Null),
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

const RUN_COLUMNS: &str =
    "run_id, session_id, run_type, agent_id, team_id, workflow_id, user_id, parent_run_id, status, run_index, run_data, created_at, updated_at";

/// The columns an upsert hands back (everything but `run_data`, which the caller has).
const RETURNED: &str =
    "session_id, run_type, agent_id, team_id, workflow_id, user_id, parent_run_id, status, run_index, created_at, updated_at";

fn run_params(run: &RunRecord) -> Vec<SqlValue> {
    vec![
        SqlValue::text(&run.run_id),
        SqlValue::text(&run.session_id),
        SqlValue::text(run.run_type.as_str()),
        SqlValue::opt_text(run.agent_id.as_deref()),
        SqlValue::opt_text(run.team_id.as_deref()),
        SqlValue::opt_text(run.workflow_id.as_deref()),
        SqlValue::opt_text(run.user_id.as_deref()),
        SqlValue::opt_text(run.parent_run_id.as_deref()),
        SqlValue::opt_text(run.status.as_deref()),
        SqlValue::Int(run.run_index),
    ]
}

/// Rows per multi-row `INSERT` of the legacy-runs copy: 13 parameters each, far under
/// SQLite's 32,766, PostgreSQL's 65,535 and MySQL's 65,535.
const INSERT_CHUNK: usize = 200;

/// [`run_params`] with the writer's `user_id` after `session_id`, for the owner check of
/// the `writable_session` subquery.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn writable_run_params(run: &RunRecord) -> Vec<SqlValue> {
    let mut params = run_params(run);
    params.insert(2, SqlValue::opt_text(run.user_id.as_deref()));
    params
}

#[async_trait]
impl RunStore for SqlStore {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.check(Tbl::Runs)?;
        let now = now_epoch_seconds();
        let d = self.dialect;
        let statement = self
            .upsert_run_sql
            .get_or_init(|| self.upsert_run_statement());
        let sql = statement.sql.as_str();
        let tail = [
            SqlValue::json_for(d, &run.run_data),
            SqlValue::int(run.created_at),
            SqlValue::int(now),
        ];
        let result = match d {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                let mut params = writable_run_params(&run);
                params.push(SqlValue::text(&run.session_id));
                params.extend(tail);
                match self.exec.execute_noting(sql, params).await {
                    // The owner guard kept the stored row.
                    Ok((0, _)) => Ok(Vec::new()),
                    Ok((_, notes)) => {
                        let note = |tag: &str| notes.iter().find(|n| n.tag == tag);
                        match note(NOTE_UPDATED) {
                            Some(updated) => Ok(vec![Row {
                                columns: statement.noted.clone(),
                                values: updated.values.clone(),
                            }]),
                            // Inserted: the row is the input with its run_index and update
                            // time.
                            None => {
                                let assigned = note(NOTE_INDEX)
                                    .and_then(|n| n.values.first())
                                    .and_then(|v| match v {
                                        SqlValue::Int(i) => *i,
                                        _ => None,
                                    });
                                return Ok(RunRecord {
                                    run_index: run.run_index.or(assigned),
                                    updated_at: Some(now),
                                    ..run
                                });
                            }
                        }
                    }
                    Err(e) => Err(e),
                }
            }
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let mut params = writable_run_params(&run);
                params.push(SqlValue::text(&run.session_id));
                params.extend(tail);
                if run.run_index.is_some() {
                    // An explicit run_index needs no lock: the statement is atomic on its own.
                    self.exec.query(sql, params).await
                } else {
                    // agno's lock: concurrent appends to one session read MAX(run_index) one
                    // at a time.
                    self.exec
                        .transaction(vec![
                            (
                                "SELECT pg_advisory_xact_lock(hashtext('agno_run_index'), hashtext(?)) AS locked".into(),
                                vec![SqlValue::text(&run.session_id)],
                            ),
                            (sql.to_owned(), params),
                        ])
                        .await
                        .map(|mut r| r.pop().unwrap_or_default())
                }
            }
            #[cfg(feature = "mysql")]
            Dialect::MySql => {
                self.upsert_run_mysql(&run, sql, &statement.next_index, tail)
                    .await
            }
        };
        let rows = match result {
            Ok(rows) => rows,
            // A missing or foreign session surfaces as a constraint error; say which.
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::InvalidInput) => {
                run.check_session(
                    self.session_owner(&run.session_id)
                        .await?
                        .as_ref()
                        .map(Option::as_deref),
                )?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        // The stored row is the input with the columns the upsert keeps or assigns; it is
        // rebuilt from them rather than by decoding `run_data` again.
        let mut row = rows
            .into_iter()
            .next()
            .ok_or_else(|| owned_by_another_user("run", &run.run_id))?;
        Ok(RunRecord {
            session_id: row.take_str("session_id")?,
            agent_id: row.take_opt_str("agent_id")?,
            team_id: row.take_opt_str("team_id")?,
            workflow_id: row.take_opt_str("workflow_id")?,
            user_id: row.take_opt_str("user_id")?,
            parent_run_id: row.take_opt_str("parent_run_id")?,
            status: row.take_opt_str("status")?,
            run_index: row.opt_i64("run_index")?,
            created_at: row.i64("created_at")?,
            updated_at: row.opt_i64("updated_at")?,
            run_type: run_type(&row.str("run_type")?)?,
            ..run
        })
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        self.check(Tbl::Runs)?;
        let mut w = Where::default();
        w.eq("run_id", Some(run_id));
        w.eq("user_id", user_id);
        let sql = format!("SELECT * FROM {}{}", self.t(Tbl::Runs), w.sql());
        self.exec
            .query_json(&sql, w.params)
            .await?
            .into_iter()
            .next()
            .map(run_from_row)
            .transpose()
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        self.check(Tbl::Runs)?;
        let paging = limit_offset(&query.pagination)?;
        let order = order_by(self.dialect, &query.sort, RunRecord::SORTABLE)?
            .map(|o| format!("{o}, run_id ASC"))
            .unwrap_or_else(|| "run_index ASC, created_at ASC, run_id ASC".into());
        let mut w = Where::default();
        w.eq("session_id", query.session_id.as_deref());
        w.eq("user_id", query.user_id.as_deref());
        w.eq("agent_id", query.agent_id.as_deref());
        w.eq("team_id", query.team_id.as_deref());
        w.eq("workflow_id", query.workflow_id.as_deref());
        w.eq("status", query.status.as_deref());
        let from = format!("FROM {}{}", self.t(Tbl::Runs), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query_json(
                &format!("SELECT * {from} ORDER BY {order}{paging}"),
                w.params,
            )
            .await?;
        // A run that cannot be decoded is named in `unreadable`; its neighbours still list.
        Ok(Page::from_decoded(
            rows.into_iter().map(|row| {
                let id = row.str("run_id").unwrap_or_default();
                (id, run_from_row(row))
            }),
            total,
        ))
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.check(Tbl::Runs)?;
        if run_ids.is_empty() {
            return Ok(0);
        }
        let (list, ids) = in_list(run_ids);
        let mut w = Where::default();
        w.push(format!("run_id IN {list}"), ids);
        w.eq("user_id", user_id);
        let deleted = self
            .exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Tbl::Runs), w.sql()),
                w.params,
            )
            .await?;
        if self.has_legacy_runs_column() {
            self.scrub_legacy_blobs(run_ids, user_id).await?;
        }
        Ok(deleted)
    }
}

/// `upsert_run`'s statement.
pub(crate) struct RunUpsert {
    /// The upsert: PostgreSQL's says `RETURNING`, SQLite's notes what it stored
    /// (`agno_note`), MySQL's row is read back.
    sql: String,
    /// The subquery computing a session's next `run_index` (MySQL runs it first).
    #[cfg(feature = "mysql")]
    next_index: String,
    /// SQLite: the columns an update's [`NOTE_UPDATED`] note holds, in order.
    #[cfg(feature = "sqlite")]
    noted: Arc<[String]>,
}

/// `set` with its `updated_at` value noted with the row the update stores, columns
/// `noted` after `updated_at`: each the set value or the kept one (the set expressions see
/// the row before the update).
#[cfg(feature = "sqlite")]
fn noting_update<'a>(
    d: Dialect,
    mut set: Vec<(&'a str, String)>,
    noted: &[String],
) -> Vec<(&'a str, String)> {
    let after: Vec<String> = noted
        .iter()
        .map(|c| {
            set.iter()
                .find(|(column, _)| column == c)
                .map_or_else(|| d.stored(c), |(_, e)| e.clone())
        })
        .collect();
    if let Some((_, updated_at)) = set.iter_mut().find(|(c, _)| *c == "updated_at") {
        *updated_at = format!(
            "agno_note({updated_at}, '{NOTE_UPDATED}', {})",
            after.join(", ")
        );
    }
    set
}

/// SQLite's note of the `run_index` an insert computed.
#[cfg(feature = "sqlite")]
const NOTE_INDEX: &str = "index";
/// SQLite's note of the row an update stored (columns [`RunUpsert::noted`]).
#[cfg(feature = "sqlite")]
const NOTE_UPDATED: &str = "updated";

impl SqlStore {
    /// `upsert_run`'s statement (see [`RunUpsert`]).
    fn upsert_run_statement(&self) -> RunUpsert {
        let d = self.dialect;
        let runs = self.t(Tbl::Runs);
        let columns: Vec<&str> = RUN_COLUMNS.split(", ").collect();
        let next_index =
            format!("(SELECT COALESCE(MAX(run_index) + 1, 0) FROM {runs} WHERE session_id = ?)");
        // The session id, but NULL (refused by NOT NULL, also on the conflict path) when the
        // session is missing or belongs to another user: the owner check costs no round trip.
        let writable_session = format!(
            "(SELECT session_id FROM {} WHERE session_id = ? AND (user_id IS NULL OR user_id = ?))",
            self.t(Tbl::Sessions)
        );
        let set = vec![
            ("status", d.excluded("status")),
            ("run_data", d.excluded("run_data")),
            (
                "user_id",
                format!(
                    "COALESCE({}, {})",
                    d.excluded("user_id"),
                    d.stored("user_id")
                ),
            ),
            ("parent_run_id", d.excluded("parent_run_id")),
            (
                "run_index",
                format!(
                    "COALESCE({}, {})",
                    d.stored("run_index"),
                    d.excluded("run_index")
                ),
            ),
            ("updated_at", d.excluded("updated_at")),
        ];
        // SQLite: an update notes the row it stores (`updated_at` first).
        #[cfg(feature = "sqlite")]
        let noted: Vec<String> = std::iter::once("updated_at")
            .chain(RETURNED.split(", ").filter(|c| *c != "updated_at"))
            .map(str::to_owned)
            .collect();
        #[cfg(feature = "sqlite")]
        let set = if d == Dialect::Sqlite {
            noting_update(d, set, &noted[1..])
        } else {
            set
        };
        let values = match d {
            // MySQL cannot read the table it inserts into: it computes the index first.
            #[cfg(feature = "mysql")]
            Dialect::MySql => "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".into(),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!(
                "(?, {writable_session}, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, agno_note({next_index}, '{NOTE_INDEX}')), ?, ?, ?)"
            ),
            #[allow(unreachable_patterns)]
            _ => format!(
                "(?, {writable_session}, ?, ?, ?, ?, ?, ?, ?, COALESCE(?, {next_index}), ?, ?, ?)"
            ),
        };
        let sql = self.upsert_sql(&Upsert {
            table: Tbl::Runs,
            columns: &columns,
            values,
            conflict: "run_id",
            set,
            guard: Some(d.owner_guard()),
        });
        let sql = match d {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("{sql} RETURNING {RETURNED}"),
            #[allow(unreachable_patterns)]
            _ => sql,
        };
        RunUpsert {
            sql,
            #[cfg(feature = "mysql")]
            next_index,
            #[cfg(feature = "sqlite")]
            noted: noted.into(),
        }
    }

    /// The owner of session `session_id`; `None` when there is no such session.
    async fn session_owner(&self, session_id: &str) -> Result<Option<Option<String>>> {
        let sql = format!(
            "SELECT user_id FROM {} WHERE session_id = ?",
            self.t(Tbl::Sessions)
        );
        self.exec
            .query(&sql, vec![SqlValue::text(session_id)])
            .await?
            .first()
            .map(|row| row.opt_str("user_id"))
            .transpose()
    }

    /// MySQL's upsert: without a run_index, agno's named lock of the session is held while
    /// the next index is read and the row written (as agno's MySQLDb does, so Rust and
    /// Python writers serialize); the row is read back in the same transaction.
    #[cfg(feature = "mysql")]
    async fn upsert_run_mysql(
        &self,
        run: &RunRecord,
        sql: &str,
        next_index: &str,
        tail: [SqlValue; 3],
    ) -> Result<Vec<Row>> {
        let lock = run
            .run_index
            .is_none()
            .then(|| crate::exec::NamedLock::run_index(&run.session_id));
        let mut tx = self.exec.begin(lock).await?;
        // The session row stays share-locked until commit: it cannot be deleted and
        // recreated by another user between this check and the insert.
        let owner = tx
            .query(
                &format!(
                    "SELECT user_id FROM {} WHERE session_id = ? LOCK IN SHARE MODE",
                    self.t(Tbl::Sessions)
                ),
                vec![SqlValue::text(&run.session_id)],
            )
            .await?
            .first()
            .map(|row| row.opt_str("user_id"))
            .transpose()?;
        run.check_session(owner.as_ref().map(Option::as_deref))?;
        let mut params = run_params(run);
        if run.run_index.is_none() {
            let next = tx
                .query(
                    &format!("SELECT {next_index} AS next"),
                    vec![SqlValue::text(&run.session_id)],
                )
                .await?
                .first()
                .map(|r| r.opt_i64("next"))
                .transpose()?
                .flatten()
                .unwrap_or(0);
            params[9] = SqlValue::int(next); // run_index, after the nine text columns
        }
        params.extend(tail);
        tx.execute(sql, params).await?;
        let rows = tx
            .query(
                &format!(
                    "SELECT {RETURNED} FROM {} WHERE run_id = ?",
                    self.t(Tbl::Runs)
                ),
                vec![SqlValue::text(&run.run_id)],
            )
            .await?;
        tx.commit().await?;
        let refused = crate::store::owned_by_other(run.user_id.as_deref());
        Ok(match rows.into_iter().next() {
            Some(row) if !refused(&row)? => vec![row],
            _ => Vec::new(),
        })
    }

    /// Removes deleted runs from legacy blobs so the merge cannot bring them back.
    async fn scrub_legacy_blobs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<()> {
        let sessions = self.t(Tbl::Sessions);
        let mut w = Where::default();
        w.push("runs IS NOT NULL", []);
        w.eq("user_id", user_id);
        let matches: Vec<String> = run_ids
            .iter()
            .map(|_| format!("{} LIKE ? ESCAPE '\\'", self.dialect.json_as_text("runs")))
            .collect();
        w.push(
            format!("({})", matches.join(" OR ")),
            run_ids.iter().map(|id| SqlValue::text(like_pattern(id))),
        );
        let rows = self
            .exec
            .query(
                &format!("SELECT session_id, runs FROM {sessions}{}", w.sql()),
                w.params,
            )
            .await?;
        for row in rows {
            let list = legacy_runs_list(row.json("runs")?.as_ref());
            let kept: Vec<Value> = list
                .iter()
                .filter(|r| {
                    r.get("run_id")
                        .and_then(Value::as_str)
                        .is_none_or(|id| !run_ids.iter().any(|d| d == id))
                })
                .cloned()
                .collect();
            if kept.len() != list.len() {
                self.exec
                    .execute(
                        &format!("UPDATE {sessions} SET runs = ? WHERE session_id = ?"),
                        vec![
                            SqlValue::Json(Some(Value::Array(kept))),
                            SqlValue::text(row.str("session_id")?),
                        ],
                    )
                    .await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl LegacyRunsStore for SqlStore {
    async fn legacy_runs_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        if !self.has_legacy_runs_column() {
            return Ok(Vec::new());
        }
        let mut w = Where::default();
        w.push("runs IS NOT NULL", []);
        if let Some(a) = after {
            w.push("session_id > ?", [SqlValue::text(a)]);
        }
        let sql = format!(
            "SELECT session_id, user_id, runs FROM {}{} ORDER BY session_id ASC LIMIT {limit}",
            self.t(Tbl::Sessions),
            w.sql()
        );
        self.exec
            .query(&sql, w.params)
            .await?
            .iter()
            .map(|r| {
                // A cell that is not JSON at all is passed on as text, so the migration
                // reports it with its session id instead of failing the whole page.
                let runs = match r.json("runs") {
                    Ok(v) => v.unwrap_or(Value::Null),
                    Err(_) => Value::String(r.opt_str("runs")?.unwrap_or_default()),
                };
                Ok(LegacySessionRuns {
                    session_id: r.str("session_id")?,
                    user_id: r.opt_str("user_id")?,
                    runs,
                })
            })
            .collect()
    }

    async fn insert_runs_if_absent(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        if rows.is_empty() {
            return Ok(InsertedRuns::default());
        }
        let table = self.t(Tbl::Runs);
        let row_values = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
        // Multi-row statements, a chunk at a time: far fewer round trips and statement
        // executions than one per run, and every chunk stays under each dialect's parameter
        // limit (13 per row, plus the chunk's ids in the count).
        let chunks: Vec<&[RunRecord]> = rows.chunks(INSERT_CHUNK).collect();
        let chunk_sql = |chunk: &[RunRecord]| {
            let values = vec![row_values; chunk.len()].join(", ");
            let mut params = Vec::with_capacity(chunk.len() * 13);
            for run in chunk {
                params.extend(run_params(run));
                params.extend([
                    SqlValue::json_for(self.dialect, &run.run_data),
                    SqlValue::int(run.created_at),
                    SqlValue::Int(run.updated_at),
                ]);
            }
            let ids: Vec<String> = chunk.iter().map(|r| r.run_id.clone()).collect();
            let (list, id_params) = in_list(&ids);
            let count = format!("SELECT COUNT(*) AS n FROM {table} WHERE run_id IN {list}");
            (values, params, (count, id_params))
        };
        let n = |rows: &[Row]| -> Result<u64> {
            Ok(rows
                .first()
                .map(|row| row.i64("n"))
                .transpose()?
                .unwrap_or(0)
                .max(0) as u64)
        };
        #[cfg(feature = "mysql")]
        if self.dialect == Dialect::MySql {
            // A no-op update keeps the stored row; with found-rows counting MySQL reports
            // it like an insert, so the rows present before and after are counted instead.
            let mut tx = self.exec.begin(None).await?;
            let mut outcome = InsertedRuns::default();
            for chunk in chunks {
                let (values, params, (count, id_params)) = chunk_sql(chunk);
                let before = n(&tx.query(&count, id_params.clone()).await?)?;
                tx.execute(
                    &format!(
                        "INSERT INTO {table} ({RUN_COLUMNS}) VALUES {values} ON DUPLICATE KEY UPDATE run_id = run_id"
                    ),
                    params,
                )
                .await?;
                let present = n(&tx.query(&count, id_params).await?)?;
                outcome.inserted += present.saturating_sub(before);
                outcome.present += present;
            }
            tx.commit().await?;
            return Ok(outcome);
        }
        let mut statements: Vec<crate::exec::Statement> = Vec::with_capacity(chunks.len() * 2);
        for chunk in chunks {
            let (values, params, count) = chunk_sql(chunk);
            statements.push((
                format!(
                    "INSERT INTO {table} ({RUN_COLUMNS}) VALUES {values} ON CONFLICT (run_id) DO NOTHING RETURNING run_id"
                ),
                params,
            ));
            statements.push(count);
        }
        let results = self.exec.transaction(statements).await?;
        let mut outcome = InsertedRuns::default();
        for pair in results.chunks(2) {
            outcome.inserted += pair.first().map_or(0, |r| r.len() as u64);
            outcome.present += n(pair.get(1).map(Vec::as_slice).unwrap_or_default())?;
        }
        Ok(outcome)
    }

    async fn count_legacy_runs(&self) -> Result<u64> {
        let mut after: Option<String> = None;
        let mut pending = 0;
        loop {
            let page = self.legacy_runs_page(after.as_deref(), 500).await?;
            pending += page
                .iter()
                .filter(|s| decode_legacy_runs(Some(&s.runs)).map_or(true, |runs| !runs.is_empty()))
                .count() as u64;
            match page.last() {
                Some(last) if page.len() == 500 => after = Some(last.session_id.clone()),
                _ => return Ok(pending),
            }
        }
    }

    async fn drop_legacy_runs(&self) -> Result<u64> {
        if !self.has_legacy_runs_column() {
            return Ok(0);
        }
        let sessions = self.t(Tbl::Sessions);
        let had = self
            .count(&format!("FROM {sessions} WHERE runs IS NOT NULL"), vec![])
            .await?;
        self.exec
            .execute(&format!("ALTER TABLE {sessions} DROP COLUMN runs"), vec![])
            .await?;
        self.refresh(Tbl::Sessions).await?;
        Ok(had)
    }
}
