//! Runs (`agno_runs`): one row per run, `run_index` assigned atomically per session.

use agno_storage_core::legacy::{
    decode_legacy_runs, legacy_runs_list, InsertedRuns, LegacyRunsStore, LegacySessionRuns,
};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, Page, Result,
    RunQuery, RunRecord, RunStore, RunType,
};
use serde_json::Value;

use crate::dialect::{like_pattern, Dialect, InsertChunk};
use crate::schema::Table;
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

pub(crate) const RUN_COLUMNS: &str =
    "run_id, session_id, run_type, agent_id, team_id, workflow_id, user_id, parent_run_id, status, run_index, run_data, created_at, updated_at";

/// A run's value for the parameter `name`, one of [`RUN_COLUMNS`]: `run_data` encoded for
/// the dialect, `updated_at` the one given.
pub(crate) fn run_param(
    d: &dyn Dialect,
    run: &RunRecord,
    updated_at: Option<i64>,
    name: &str,
) -> Option<SqlValue> {
    let text = |v: &Option<String>| SqlValue::opt_text(v.as_deref());
    Some(match name {
        "run_id" => SqlValue::text(&run.run_id),
        "session_id" => SqlValue::text(&run.session_id),
        "run_type" => SqlValue::text(run.run_type.as_str()),
        "agent_id" => text(&run.agent_id),
        "team_id" => text(&run.team_id),
        "workflow_id" => text(&run.workflow_id),
        "user_id" => text(&run.user_id),
        "parent_run_id" => text(&run.parent_run_id),
        "status" => text(&run.status),
        "run_index" => SqlValue::Int(run.run_index),
        "run_data" => d.json_param(&run.run_data),
        "created_at" => SqlValue::int(run.created_at),
        "updated_at" => SqlValue::Int(updated_at),
        _ => return None,
    })
}

/// Rows per multi-row `INSERT` of the legacy-runs copy: 13 parameters each, far under
/// SQLite's 32,766, PostgreSQL's 65,535 and MySQL's 65,535.
const INSERT_CHUNK: usize = 200;

#[async_trait]
impl RunStore for SqlStore {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.check(Table::Runs)?;
        let now = now_epoch_seconds();
        let statement = self
            .upsert_run_sql
            .get_or_init(|| self.dialect.run_upsert(self));
        // Who may write is decided here: the dialect's statement only reports what it found.
        let written = match self.dialect.upsert_run(self, statement, &run, now).await {
            Ok(written) => written,
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
        let mut row = match written {
            RunWrite::Refused => return Err(owned_by_another_user("run", &run.run_id)),
            #[cfg(feature = "sqlite")]
            RunWrite::Inserted(assigned) => {
                return Ok(RunRecord {
                    run_index: run.run_index.or(assigned),
                    updated_at: Some(now),
                    ..run
                })
            }
            RunWrite::Stored(row) => row,
        };
        // The stored row is the input with the columns the upsert keeps or assigns; it is
        // rebuilt from them rather than by decoding `run_data` again.
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
        self.check(Table::Runs)?;
        let mut w = Where::default();
        w.eq("run_id", Some(run_id));
        w.eq("user_id", user_id);
        let sql = format!("SELECT * FROM {}{}", self.t(Table::Runs), w.sql());
        self.exec
            .query_json(&sql, w.params)
            .await?
            .into_iter()
            .next()
            .map(run_from_row)
            .transpose()
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        self.check(Table::Runs)?;
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
        let from = format!("FROM {}{}", self.t(Table::Runs), w.sql());
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
        self.check(Table::Runs)?;
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
                &format!("DELETE FROM {}{}", self.t(Table::Runs), w.sql()),
                w.params,
            )
            .await?;
        if self.has_legacy_runs_column() {
            self.scrub_legacy_blobs(run_ids, user_id).await?;
        }
        Ok(deleted)
    }
}

/// What [`Dialect::upsert_run`] did.
pub(crate) enum RunWrite {
    /// The stored row's columns ([`RETURNED`]) after an insert or update.
    Stored(Row),
    /// Inserted as given, with the `run_index` the database assigned when it had none
    /// (SQLite, which notes the index instead of returning the row).
    #[cfg(feature = "sqlite")]
    Inserted(Option<i64>),
    /// The owner guard kept the stored row: the run belongs to another user.
    Refused,
}

/// The columns an upsert hands back (everything but `run_data`, which the caller has).
pub(crate) const RETURNED: &str =
    "session_id, run_type, agent_id, team_id, workflow_id, user_id, parent_run_id, status, run_index, created_at, updated_at";

impl SqlStore {
    /// The session's next `run_index` (parameter `:session_id`).
    pub(crate) fn next_run_index(&self) -> String {
        format!(
            "(SELECT COALESCE(MAX(run_index) + 1, 0) FROM {} WHERE session_id = :session_id)",
            self.t(Table::Runs)
        )
    }

    /// The session id, but NULL (refused by NOT NULL, also on the conflict path) when the
    /// session is missing or belongs to another user than `:user_id`: the owner check of
    /// the session costs no round trip.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub(crate) fn writable_session(&self) -> String {
        format!(
            "(SELECT session_id FROM {} WHERE session_id = :session_id AND (user_id IS NULL OR user_id = :user_id))",
            self.t(Table::Sessions)
        )
    }

    /// What an update of a stored run sets: agno's columns, the owner kept when the writer
    /// names none, the first `run_index` kept.
    pub(crate) fn run_upsert_set(&self) -> Vec<(&'static str, String)> {
        let d = self.dialect;
        vec![
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
        ]
    }

    /// `upsert_run`'s upsert under agno's owner guard: `session` and `run_index` are the
    /// expressions inserted for those columns, every other column its named parameter.
    pub(crate) fn run_upsert_sql(
        &self,
        session: &str,
        run_index: &str,
        set: Vec<(&str, String)>,
    ) -> String {
        let columns: Vec<&str> = RUN_COLUMNS.split(", ").collect();
        let values: Vec<String> = columns
            .iter()
            .map(|c| match *c {
                "session_id" => session.to_owned(),
                "run_index" => run_index.to_owned(),
                other => format!(":{other}"),
            })
            .collect();
        self.upsert_sql(&Upsert {
            table: Table::Runs,
            columns: &columns,
            values: format!("({})", values.join(", ")),
            conflict: "run_id",
            set,
            guard: Some(self.dialect.owner_guard()),
        })
    }

    /// The owner of session `session_id`; `None` when there is no such session.
    async fn session_owner(&self, session_id: &str) -> Result<Option<Option<String>>> {
        let sql = format!(
            "SELECT user_id FROM {} WHERE session_id = ?",
            self.t(Table::Sessions)
        );
        self.exec
            .query(&sql, vec![SqlValue::text(session_id)])
            .await?
            .first()
            .map(|row| row.opt_str("user_id"))
            .transpose()
    }

    /// Removes deleted runs from legacy blobs so the merge cannot bring them back.
    async fn scrub_legacy_blobs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<()> {
        let sessions = self.t(Table::Sessions);
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
            self.t(Table::Sessions),
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
        let table = self.t(Table::Runs);
        let columns: Vec<&str> = RUN_COLUMNS.split(", ").collect();
        let row_values = format!("({})", vec!["?"; columns.len()].join(", "));
        // Multi-row statements, a chunk at a time: far fewer round trips and statement
        // executions than one per run, and every chunk stays under each dialect's parameter
        // limit (13 per row, plus the chunk's ids in the count).
        let mut chunks = Vec::with_capacity(rows.len().div_ceil(INSERT_CHUNK));
        for chunk in rows.chunks(INSERT_CHUNK) {
            let mut params = Vec::with_capacity(chunk.len() * columns.len());
            for run in chunk {
                for column in &columns {
                    params.extend(run_param(self.dialect, run, run.updated_at, column));
                }
            }
            let ids: Vec<String> = chunk.iter().map(|r| r.run_id.clone()).collect();
            let (list, id_params) = in_list(&ids);
            chunks.push(InsertChunk {
                values: vec![row_values.as_str(); chunk.len()].join(", "),
                params,
                count: (
                    format!("SELECT COUNT(*) AS n FROM {table} WHERE run_id IN {list}"),
                    id_params,
                ),
            });
        }
        self.dialect
            .insert_absent(
                self,
                &format!("INSERT INTO {table} ({RUN_COLUMNS}) VALUES"),
                "run_id",
                chunks,
            )
            .await
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
        let sessions = self.t(Table::Sessions);
        let had = self
            .count(&format!("FROM {sessions} WHERE runs IS NOT NULL"), vec![])
            .await?;
        self.exec
            .execute(&format!("ALTER TABLE {sessions} DROP COLUMN runs"), vec![])
            .await?;
        self.refresh(Table::Sessions).await?;
        Ok(had)
    }
}
