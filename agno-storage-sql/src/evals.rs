//! Eval runs (`agno_eval_runs`): each run its own `run_id`, never overwritten.

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, EvalFilterType,
    EvalQuery, EvalRun, EvalStore, EvalType, Page, Result, Sort, SortOrder,
};
use serde_json::Value;

use crate::schema::Table;
use crate::store::{in_list, limit_offset, order_by, SqlStore, Where};
use crate::value::{Row, SqlValue};

fn eval_type(s: &str) -> Result<EvalType> {
    serde_json::from_value(Value::String(s.to_owned()))
        .map_err(|_| Error::new(ErrorKind::Serialization, format!("unknown eval_type {s:?}")))
}

fn eval_type_name(t: EvalType) -> String {
    serde_json::to_value(t)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn eval_from_row(row: &Row) -> Result<EvalRun> {
    Ok(EvalRun {
        run_id: row.str("run_id")?,
        eval_type: eval_type(&row.str("eval_type")?)?,
        eval_data: row.json("eval_data")?.unwrap_or(Value::Null),
        eval_input: row.json("eval_input")?,
        name: row.opt_str("name")?,
        agent_id: row.opt_str("agent_id")?,
        team_id: row.opt_str("team_id")?,
        workflow_id: row.opt_str("workflow_id")?,
        model_id: row.opt_str("model_id")?,
        model_provider: row.opt_str("model_provider")?,
        evaluated_component_name: row.opt_str("evaluated_component_name")?,
        user_id: row.opt_str("user_id")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

#[async_trait]
impl EvalStore for SqlStore {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        self.check(Table::Evals)?;
        let sql = format!(
            "INSERT INTO {} (run_id, eval_type, eval_data, eval_input, name, agent_id, team_id, workflow_id, model_id, \
             model_provider, evaluated_component_name, user_id, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            self.t(Table::Evals)
        );
        let params = vec![
            SqlValue::text(&run.run_id),
            SqlValue::text(eval_type_name(run.eval_type)),
            SqlValue::json(Some(&run.eval_data)),
            SqlValue::Json(Some(run.eval_input.clone().unwrap_or(Value::Null))),
            SqlValue::opt_text(run.name.as_deref()),
            SqlValue::opt_text(run.agent_id.as_deref()),
            SqlValue::opt_text(run.team_id.as_deref()),
            SqlValue::opt_text(run.workflow_id.as_deref()),
            SqlValue::opt_text(run.model_id.as_deref()),
            SqlValue::opt_text(run.model_provider.as_deref()),
            SqlValue::opt_text(run.evaluated_component_name.as_deref()),
            SqlValue::opt_text(run.user_id.as_deref()),
            SqlValue::int(run.created_at),
            SqlValue::int(run.updated_at.unwrap_or(run.created_at)),
        ];
        let read = self.select_by(Table::Evals, "run_id", &run.run_id);
        let rows = self
            .write_returning((sql, params), read)
            .await
            .map_err(|e| match e.kind() {
                ErrorKind::AlreadyExists => Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "eval run {} already exists: every eval run needs its own run_id",
                        run.run_id
                    ),
                ),
                _ => e,
            })?;
        rows.first()
            .map(eval_from_row)
            .transpose()?
            .ok_or_else(|| Error::not_found("eval run not returned after insert"))
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        self.check(Table::Evals)?;
        let mut w = Where::default();
        w.eq("run_id", Some(run_id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Evals), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(eval_from_row)
            .transpose()
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        self.check(Table::Evals)?;
        let paging = limit_offset(&query.pagination)?;
        let sort = if query.sort.sort_by.is_some() {
            query.sort.clone()
        } else {
            Sort::by("created_at", SortOrder::Desc)
        };
        let order = order_by(self.dialect, &sort, EvalRun::SORTABLE)?.unwrap_or_default();
        let mut w = Where::default();
        w.eq("user_id", query.user_id.as_deref());
        w.eq("agent_id", query.agent_id.as_deref());
        w.eq("team_id", query.team_id.as_deref());
        w.eq("workflow_id", query.workflow_id.as_deref());
        w.eq("model_id", query.model_id.as_deref());
        if !query.eval_types.is_empty() {
            let names: Vec<String> = query
                .eval_types
                .iter()
                .map(|t| eval_type_name(*t))
                .collect();
            let (list, params) = in_list(&names);
            w.push(format!("eval_type IN {list}"), params);
        }
        match query.filter_type {
            Some(EvalFilterType::Agent) => w.push("agent_id IS NOT NULL", []),
            Some(EvalFilterType::Team) => w.push("team_id IS NOT NULL", []),
            Some(EvalFilterType::Workflow) => w.push("workflow_id IS NOT NULL", []),
            None => {}
        }
        let from = format!("FROM {}{}", self.t(Table::Evals), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query(
                &format!("SELECT * {from} ORDER BY {order}, run_id DESC{paging}"),
                w.params,
            )
            .await?;
        Ok(Page::new(
            rows.iter().map(eval_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        self.check(Table::Evals)?;
        let mut w = Where::default();
        w.eq("run_id", Some(run_id));
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET name = ?, updated_at = ?{}",
            self.t(Table::Evals),
            w.sql()
        );
        let mut params = vec![SqlValue::text(name), SqlValue::int(now_epoch_seconds())];
        params.extend(w.params);
        let read = self.select_by(Table::Evals, "run_id", run_id);
        self.write_returning((sql, params), read)
            .await?
            .first()
            .map(eval_from_row)
            .transpose()
    }

    async fn update_eval_run_user_id(&self, run_id: &str, user_id: &str) -> Result<bool> {
        self.check(Table::Evals)?;
        let t = self.t(Table::Evals);
        let set = format!(
            "UPDATE {t} SET user_id = ? WHERE run_id = ? AND (user_id IS NULL OR user_id = ?)"
        );
        let params = vec![
            SqlValue::text(user_id),
            SqlValue::text(run_id),
            SqlValue::text(user_id),
        ];
        if self.exec.execute(&set, params).await? > 0 {
            return Ok(true);
        }
        // Nothing changed: no such run, already this owner's (MySQL counts changed rows
        // only), or another owner's.
        let rows = self
            .exec
            .query(
                &format!("SELECT user_id FROM {t} WHERE run_id = ?"),
                vec![SqlValue::text(run_id)],
            )
            .await?;
        match rows.first() {
            None => Ok(false),
            Some(row) if row.opt_str("user_id")?.as_deref() == Some(user_id) => Ok(true),
            Some(_) => Err(owned_by_another_user("eval run", run_id)),
        }
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.check(Table::Evals)?;
        if run_ids.is_empty() {
            return Ok(0);
        }
        let (list, ids) = in_list(run_ids);
        let mut w = Where::default();
        w.push(format!("run_id IN {list}"), ids);
        w.eq("user_id", user_id);
        self.exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Table::Evals), w.sql()),
                w.params,
            )
            .await
    }
}
