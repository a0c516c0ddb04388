//! Eval runs (`agno_eval_runs.json`): `EvalRunRecord.model_dump()` plus timestamps and the
//! owner. Unlike agno, which appends a duplicate row, re-creating a `run_id` is refused.

use agno_storage_core::eval::{EvalQuery, EvalRun, EvalStore};
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, Page, Result,
    };
use serde_json::Value;

use crate::doc::{fields, find, from_row, position, put, shape, text, Doc, Nulls};
use crate::files::{Step, Table};
use crate::store::JsonStore;

const EVAL_KEYS: &[&str] = &[
    "agent_id",
    "model_id",
    "model_provider",
    "team_id",
    "workflow_id",
    "name",
    "evaluated_component_name",
    "run_id",
    "eval_type",
    "eval_data",
    "eval_input",
    "created_at",
    "updated_at",
];

impl Doc for EvalRun {
    const TABLE: Table = Table::Evals;
    const KEY: &'static str = "run_id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Evals, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape(fields(self)?, EVAL_KEYS, Nulls::Keep, existing))
    }
}

#[async_trait]
impl EvalStore for JsonStore {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        self.files
            .modify(Table::Evals, |rows| {
                if position(rows, EvalRun::KEY, &run.run_id).is_some() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!(
                            "eval run {} already exists: every eval run needs its own run_id",
                            run.run_id
                        ),
                    ));
                }
                put(rows, None, &run)?;
                Ok(Step::Write(run.clone()))
            })
            .await
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        Ok(self
            .get::<EvalRun>(run_id)
            .await?
            .filter(|r| visible_to(r.user_id.as_deref(), user_id)))
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let rows: Vec<EvalRun> = self
            .all::<EvalRun>()
            .await?
            .into_iter()
            .filter(|r| query.matches(r))
            .collect();
        query.page(rows)
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Evals, |rows| {
                let Some((index, mut run)) = find::<EvalRun>(rows, run_id)? else {
                    return Ok(Step::Keep(None));
                };
                if !visible_to(run.user_id.as_deref(), user_id) {
                    return Ok(Step::Keep(None));
                }
                run.name = Some(name.to_owned());
                run.updated_at = Some(now);
                put(rows, Some(index), &run)?;
                Ok(Step::Write(Some(run)))
            })
            .await
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.files
            .modify(Table::Evals, |rows| {
                let before = rows.len();
                rows.retain(|r| {
                    !(text(r, "run_id").is_some_and(|id| run_ids.iter().any(|w| w == id))
                        && visible_to(text(r, "user_id"), user_id))
                });
                let deleted = (before - rows.len()) as u64;
                Ok(if deleted == 0 {
                    Step::Keep(0)
                } else {
                    Step::Write(deleted)
                })
            })
            .await
    }
}
