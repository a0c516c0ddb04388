//! Eval runs (`agno_eval_runs`): agno's item plus what agno drops (`eval_input`,
//! `user_id`), timestamps as `N`.

use agno_storage_core::{
    async_trait, now_epoch_seconds, sort_records, visible_to, ErrorKind, EvalFilterType, EvalQuery,
    EvalRun, EvalStore, Page, Result, Sort, SortOrder,
};

use crate::codec::{err, record, record_item, sv};
use crate::db::{contention, Cond, Tbl, MAX_ATTEMPTS};
use crate::DynamoDb;

const EVAL_JSON: &[&str] = &["eval_data", "eval_input"];

#[async_trait]
impl EvalStore for DynamoDb {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        let item = record_item(&run, "an eval run")?;
        if !self
            .put(Tbl::Evals, item, Some(Cond::absent("run_id")))
            .await?
        {
            return Err(err(
                ErrorKind::AlreadyExists,
                format!(
                    "eval run {} already exists: every eval run needs its own run_id",
                    run.run_id
                ),
            ));
        }
        Ok(run)
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        match self.get(Tbl::Evals, run_id).await? {
            Some(item) => {
                let r: EvalRun = record(&item, EVAL_JSON, "an eval run")?;
                Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
            }
            None => Ok(None),
        }
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let eq = |want: &Option<String>, have: &Option<String>| want.is_none() || want == have;
        let mut rows = Vec::new();
        for item in self.scan(Tbl::Evals).await? {
            let r: EvalRun = record(&item, EVAL_JSON, "an eval run")?;
            let keep = visible_to(r.user_id.as_deref(), query.user_id.as_deref())
                && eq(&query.agent_id, &r.agent_id)
                && eq(&query.team_id, &r.team_id)
                && eq(&query.workflow_id, &r.workflow_id)
                && eq(&query.model_id, &r.model_id)
                && (query.eval_types.is_empty() || query.eval_types.contains(&r.eval_type))
                && match query.filter_type {
                    Some(EvalFilterType::Agent) => r.agent_id.is_some(),
                    Some(EvalFilterType::Team) => r.team_id.is_some(),
                    Some(EvalFilterType::Workflow) => r.workflow_id.is_some(),
                    None => true,
                };
            if keep {
                rows.push(r);
            }
        }
        let sort = match &query.sort.sort_by {
            Some(_) => query.sort.clone(),
            None => Sort::by("created_at", SortOrder::Desc),
        };
        sort_records(&mut rows, &sort, EvalRun::SORTABLE)?;
        Page::paginate(rows, &query.pagination)
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Tbl::Evals, run_id).await? else {
                return Ok(None);
            };
            let mut r: EvalRun = record(&old, EVAL_JSON, "an eval run")?;
            if !visible_to(r.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            r.name = Some(name.to_owned());
            r.updated_at = Some(now_epoch_seconds());
            if self
                .cas(Tbl::Evals, Some(&old), record_item(&r, "an eval run")?)
                .await?
            {
                return Ok(Some(r));
            }
        }
        Err(contention("rename_eval_run"))
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in run_ids {
            let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
            if self.delete(Tbl::Evals, id, cond).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
