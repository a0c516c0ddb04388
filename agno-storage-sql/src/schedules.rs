//! Schedules (`agno_schedules`) and schedule runs (`agno_schedule_runs`).

use agno_storage_core::{
    async_trait, now_epoch_seconds, Error, ErrorKind, Page, Pagination, Result, Schedule,
    ScheduleRun, ScheduleStore, ScheduleUpdate,
};
use serde_json::Value;

use crate::dialect::{Claim, ColType};
use crate::schema::{spec, Table};
use crate::store::{limit_offset, SqlStore, Where};
use crate::value::{Row, SqlValue};

const SCHEDULE_COLUMNS: [&str; 26] = [
    "id",
    "name",
    "description",
    "method",
    "endpoint",
    "payload",
    "cron_expr",
    "timezone",
    "timeout_seconds",
    "max_retries",
    "retry_delay_seconds",
    "enabled",
    "next_run_at",
    "locked_by",
    "locked_at",
    "user_id",
    "managed_by",
    "target_type",
    "target_id",
    "created_by_run_id",
    "created_by_session_id",
    "updated_by_run_id",
    "updated_by_session_id",
    "disabled_reason",
    "created_at",
    "updated_at",
];

fn schedule_from_row(row: &Row) -> Result<Schedule> {
    Ok(Schedule {
        id: row.str("id")?,
        name: row.str("name")?,
        description: row.opt_str("description")?,
        method: row.str("method")?,
        endpoint: row.str("endpoint")?,
        payload: row.json("payload")?,
        cron_expr: row.opt_str("cron_expr")?.unwrap_or_default(),
        timezone: row.str("timezone")?,
        timeout_seconds: row.i64("timeout_seconds")?,
        max_retries: row.i64("max_retries")?,
        retry_delay_seconds: row.i64("retry_delay_seconds")?,
        enabled: row.bool("enabled")?,
        next_run_at: row.opt_i64("next_run_at")?,
        locked_by: row.opt_str("locked_by")?,
        locked_at: row.opt_i64("locked_at")?,
        user_id: row.opt_str("user_id")?,
        managed_by: row.opt_str("managed_by")?,
        target_type: row.opt_str("target_type")?,
        target_id: row.opt_str("target_id")?,
        created_by_run_id: row.opt_str("created_by_run_id")?,
        created_by_session_id: row.opt_str("created_by_session_id")?,
        updated_by_run_id: row.opt_str("updated_by_run_id")?,
        updated_by_session_id: row.opt_str("updated_by_session_id")?,
        disabled_reason: row.opt_str("disabled_reason")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

fn schedule_run_from_row(row: &Row) -> Result<ScheduleRun> {
    Ok(ScheduleRun {
        id: row.str("id")?,
        schedule_id: row.str("schedule_id")?,
        attempt: row.i64("attempt")?,
        triggered_at: row.opt_i64("triggered_at")?,
        completed_at: row.opt_i64("completed_at")?,
        status: row.str("status")?,
        status_code: row.opt_i64("status_code")?,
        run_id: row.opt_str("run_id")?,
        session_id: row.opt_str("session_id")?,
        error: row.opt_str("error")?,
        input: row.json("input")?,
        output: row.json("output")?,
        requirements: row.json("requirements")?,
        user_id: row.opt_str("user_id")?,
        created_at: row.i64("created_at")?,
    })
}

/// A JSON value as a parameter of a schedule column, checked against the column's type.
fn column_value(column: &str, value: &Value) -> Result<SqlValue> {
    let ty = spec(Table::Schedules)
        .columns
        .iter()
        .find(|c| c.name == column)
        .map(|c| c.ty)
        .ok_or_else(|| Error::invalid_input(format!("update_schedule: unknown column {column}")))?;
    let wrong = || {
        Error::invalid_input(format!(
            "update_schedule: column {column} cannot hold {value}"
        ))
    };
    Ok(match (ty, value) {
        (ColType::Json, v) => SqlValue::Json((!v.is_null()).then(|| v.clone())),
        (ColType::BigInt, Value::Null) => SqlValue::Int(None),
        (ColType::BigInt, v) => SqlValue::Int(Some(v.as_i64().ok_or_else(wrong)?)),
        (ColType::Bool, Value::Bool(b)) => SqlValue::Bool(Some(*b)),
        (ColType::Str(_) | ColType::LongText, Value::Null) => SqlValue::Text(None),
        (ColType::Str(_) | ColType::LongText, Value::String(s)) => SqlValue::text(s),
        _ => return Err(wrong()),
    })
}

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

fn schedule_params(s: &Schedule) -> Vec<SqlValue> {
    vec![
        SqlValue::text(&s.id),
        SqlValue::text(&s.name),
        SqlValue::opt_text(s.description.as_deref()),
        SqlValue::text(&s.method),
        SqlValue::text(&s.endpoint),
        SqlValue::json(s.payload.as_ref()),
        SqlValue::text(&s.cron_expr),
        SqlValue::text(&s.timezone),
        SqlValue::int(s.timeout_seconds),
        SqlValue::int(s.max_retries),
        SqlValue::int(s.retry_delay_seconds),
        SqlValue::Bool(Some(s.enabled)),
        SqlValue::Int(s.next_run_at),
        SqlValue::opt_text(s.locked_by.as_deref()),
        SqlValue::Int(s.locked_at),
        SqlValue::opt_text(s.user_id.as_deref()),
        SqlValue::opt_text(s.managed_by.as_deref()),
        SqlValue::opt_text(s.target_type.as_deref()),
        SqlValue::opt_text(s.target_id.as_deref()),
        SqlValue::opt_text(s.created_by_run_id.as_deref()),
        SqlValue::opt_text(s.created_by_session_id.as_deref()),
        SqlValue::opt_text(s.updated_by_run_id.as_deref()),
        SqlValue::opt_text(s.updated_by_session_id.as_deref()),
        SqlValue::opt_text(s.disabled_reason.as_deref()),
        SqlValue::int(s.created_at),
        SqlValue::Int(s.updated_at),
    ]
}

impl SqlStore {
    fn due_predicate(&self) -> &'static str {
        "enabled = ? AND next_run_at <= ? AND (locked_by IS NULL OR locked_at <= ?)"
    }
}

#[async_trait]
impl ScheduleStore for SqlStore {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        self.check(Table::Schedules)?;
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            self.t(Table::Schedules),
            SCHEDULE_COLUMNS.join(", "),
            vec!["?"; SCHEDULE_COLUMNS.len()].join(", ")
        );
        let read = self.select_by(Table::Schedules, "id", &schedule.id);
        match self
            .write_returning((sql, schedule_params(&schedule)), read)
            .await
        {
            Ok(rows) => rows
                .first()
                .map(schedule_from_row)
                .transpose()?
                .ok_or_else(|| Error::not_found("schedule not returned after insert")),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                if self.get_schedule(&schedule.id, None).await?.is_some() {
                    Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("schedule {} already exists", schedule.id),
                    ))
                } else {
                    Err(name_taken(&schedule.name))
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        self.check(Table::Schedules)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Schedules), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(schedule_from_row)
            .transpose()
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        self.check(Table::Schedules)?;
        let mut w = Where::default();
        w.eq("name", Some(name));
        match user_id {
            Some(u) => w.eq("user_id", Some(u)),
            None => w.push("user_id IS NULL", []),
        }
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Schedules), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(schedule_from_row)
            .transpose()
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        self.check(Table::Schedules)?;
        let paging = limit_offset(&pagination)?;
        let mut w = Where::default();
        if let Some(e) = enabled {
            w.push("enabled = ?", [SqlValue::Bool(Some(e))]);
        }
        w.eq("user_id", user_id);
        let from = format!("FROM {}{}", self.t(Table::Schedules), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query(
                &format!("SELECT * {from} ORDER BY created_at DESC, id DESC{paging}"),
                w.params,
            )
            .await?;
        Ok(Page::new(
            rows.iter().map(schedule_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        self.check(Table::Schedules)?;
        let mut sets = Vec::new();
        let mut params = Vec::new();
        for (column, value) in update.columns() {
            sets.push(format!("{} = ?", self.q(column)));
            params.push(column_value(column, value)?);
        }
        sets.push("updated_at = ?".into());
        params.push(SqlValue::int(now_epoch_seconds()));
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET {}{}",
            self.t(Table::Schedules),
            sets.join(", "),
            w.sql()
        );
        params.extend(w.params);
        let read = self.select_by(Table::Schedules, "id", id);
        match self.write_returning((sql, params), read).await {
            Ok(rows) => rows.first().map(schedule_from_row).transpose(),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let name = update
                    .columns()
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                Err(name_taken(name))
            }
            Err(e) => Err(e),
        }
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Schedules)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        let runs = format!(
            "DELETE FROM {} WHERE schedule_id IN (SELECT id FROM {}{})",
            self.t(Table::ScheduleRuns),
            self.t(Table::Schedules),
            w.sql()
        );
        let schedule = format!("DELETE FROM {}{}", self.t(Table::Schedules), w.sql());
        Ok(self
            .transaction_count(vec![(runs, w.params.clone()), (schedule, w.params)])
            .await?
            > 0)
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        self.check(Table::Schedules)?;
        let now = now_epoch_seconds();
        let claim = Claim {
            table: Table::Schedules,
            predicate: (
                self.due_predicate(),
                vec![
                    SqlValue::Bool(Some(true)),
                    SqlValue::int(now),
                    SqlValue::int(now - lock_grace_seconds),
                ],
            ),
            order: "next_run_at ASC, id ASC",
            set: (
                "locked_by = ?, locked_at = ?",
                vec![SqlValue::text(worker_id), SqlValue::int(now)],
            ),
            limit: 1,
            candidate_filter: None,
        };
        self.dialect
            .claim(self, claim)
            .await?
            .first()
            .map(schedule_from_row)
            .transpose()
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        self.check(Table::Schedules)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("locked_by", Some(worker_id));
        if let Some(t) = locked_at {
            w.push("locked_at = ?", [SqlValue::int(t)]);
        }
        let sql = format!(
            "UPDATE {} SET locked_by = NULL, locked_at = NULL, updated_at = ?, \
             next_run_at = CASE WHEN cron_expr = '' THEN NULL ELSE COALESCE(?, next_run_at) END{}",
            self.t(Table::Schedules),
            w.sql()
        );
        let mut params = vec![
            SqlValue::int(now_epoch_seconds()),
            SqlValue::Int(next_run_at),
        ];
        params.extend(w.params);
        Ok(self.exec.execute(&sql, params).await? > 0)
    }

    async fn create_schedule_run(&self, run: ScheduleRun) -> Result<ScheduleRun> {
        self.check(Table::ScheduleRuns)?;
        // The owner is copied from the schedule in the same statement.
        let sql = format!(
            "INSERT INTO {} (id, schedule_id, attempt, triggered_at, completed_at, status, status_code, run_id, session_id, \
             error, input, output, requirements, created_at, user_id) \
             SELECT ?, id, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, user_id FROM {} WHERE id = ?",
            self.t(Table::ScheduleRuns),
            self.t(Table::Schedules)
        );
        let params = vec![
            SqlValue::text(&run.id),
            SqlValue::int(run.attempt),
            SqlValue::Int(run.triggered_at),
            SqlValue::Int(run.completed_at),
            SqlValue::text(&run.status),
            SqlValue::Int(run.status_code),
            SqlValue::opt_text(run.run_id.as_deref()),
            SqlValue::opt_text(run.session_id.as_deref()),
            SqlValue::opt_text(run.error.as_deref()),
            SqlValue::json(run.input.as_ref()),
            SqlValue::json(run.output.as_ref()),
            SqlValue::json(run.requirements.as_ref()),
            SqlValue::int(run.created_at),
            SqlValue::text(&run.schedule_id),
        ];
        let read = self.select_by(Table::ScheduleRuns, "id", &run.id);
        let rows = self
            .write_returning((sql, params), read)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::AlreadyExists => Error::new(
                    ErrorKind::AlreadyExists,
                    format!("schedule run {} already exists", run.id),
                ),
                _ => e,
            })?;
        match rows.first() {
            Some(row) => schedule_run_from_row(row),
            None => Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            ))),
        }
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        self.check(Table::ScheduleRuns)?;
        let mut w = Where::default();
        w.eq("id", Some(&run.id));
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET attempt = ?, triggered_at = ?, completed_at = ?, status = ?, status_code = ?, run_id = ?, \
             session_id = ?, error = ?, input = ?, output = ?, requirements = ?{}",
            self.t(Table::ScheduleRuns),
            w.sql()
        );
        let mut params = vec![
            SqlValue::int(run.attempt),
            SqlValue::Int(run.triggered_at),
            SqlValue::Int(run.completed_at),
            SqlValue::text(&run.status),
            SqlValue::Int(run.status_code),
            SqlValue::opt_text(run.run_id.as_deref()),
            SqlValue::opt_text(run.session_id.as_deref()),
            SqlValue::opt_text(run.error.as_deref()),
            SqlValue::json(run.input.as_ref()),
            SqlValue::json(run.output.as_ref()),
            SqlValue::json(run.requirements.as_ref()),
        ];
        params.extend(w.params);
        let read = self.select_by(Table::ScheduleRuns, "id", &run.id);
        self.write_returning((sql, params), read)
            .await?
            .first()
            .map(schedule_run_from_row)
            .transpose()
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        self.check(Table::ScheduleRuns)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::ScheduleRuns), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(schedule_run_from_row)
            .transpose()
    }

    async fn delete_schedule_runs(
        &self,
        schedule_id: &str,
        before: i64,
        user_id: Option<&str>,
    ) -> Result<u64> {
        self.check(Table::ScheduleRuns)?;
        let mut w = Where::default();
        w.eq("schedule_id", Some(schedule_id));
        w.eq("user_id", user_id);
        w.push(
            "completed_at IS NOT NULL AND completed_at < ?",
            [SqlValue::int(before)],
        );
        let sql = format!("DELETE FROM {}{}", self.t(Table::ScheduleRuns), w.sql());
        self.exec.execute(&sql, w.params).await
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        self.check(Table::ScheduleRuns)?;
        let paging = limit_offset(&pagination)?;
        let mut w = Where::default();
        w.eq("schedule_id", Some(schedule_id));
        w.eq("user_id", user_id);
        let from = format!("FROM {}{}", self.t(Table::ScheduleRuns), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query(
                &format!("SELECT * {from} ORDER BY created_at DESC, id DESC{paging}"),
                w.params,
            )
            .await?;
        Ok(Page::new(
            rows.iter()
                .map(schedule_run_from_row)
                .collect::<Result<_>>()?,
            total,
        ))
    }
}
