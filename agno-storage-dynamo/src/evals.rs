//! Eval runs (`agno_eval_runs`): agno's item plus what agno drops (`eval_input`,
//! `user_id`), timestamps as `N`.

use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, ErrorKind, EvalQuery, EvalRun, EvalStore, Page,
    Result,
};

use crate::codec::{err, record, record_item, sv};
use crate::db::{contention, Cond, Table, MAX_ATTEMPTS};
use crate::DynamoDb;

const EVAL_JSON: &[&str] = &["eval_data", "eval_input"];

#[async_trait]
impl EvalStore for DynamoDb {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        let item = record_item(&run, "an eval run")?;
        if !self
            .put(Table::Evals, item, Some(Cond::absent("run_id")))
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
        match self.get(Table::Evals, run_id).await? {
            Some(item) => {
                let r: EvalRun = record(&item, EVAL_JSON, "an eval run")?;
                Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
            }
            None => Ok(None),
        }
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let mut rows = Vec::new();
        for item in self.scan(Table::Evals).await? {
            let r: EvalRun = record(&item, EVAL_JSON, "an eval run")?;
            if query.matches(&r) {
                rows.push(r);
            }
        }
        query.page(rows)
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Evals, run_id).await? else {
                return Ok(None);
            };
            let mut r: EvalRun = record(&old, EVAL_JSON, "an eval run")?;
            if !visible_to(r.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            r.name = Some(name.to_owned());
            r.updated_at = Some(now_epoch_seconds());
            if self
                .cas(Table::Evals, Some(&old), record_item(&r, "an eval run")?)
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
            if self.delete(Table::Evals, id, cond).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
