//! Eval runs (`agno_eval_runs`): document id = [`DocBackend::doc_id`] of `run_id`; found by
//! [`DocBackend::find`] on `run_id`.

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, Error, ErrorKind, EvalQuery,
    EvalRun, EvalStore, Page, Result,
};

use crate::backend::given;
use crate::{backoff, Commit, DocBackend, Docs, Pre, Table, CAS_ATTEMPTS};

fn exists(run_id: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("eval run {run_id} already exists: every eval run needs its own run_id"),
    )
}

#[async_trait]
impl<B: DocBackend> EvalStore for Docs<B> {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        let coll = self.collection(Table::Evals);
        if self.find(coll, "run_id", &run.run_id).await?.is_some() {
            return Err(exists(&run.run_id));
        }
        let write = self.put(
            coll,
            &self.doc_id(&run.run_id),
            &self.to_fields(&run, "an eval run")?,
            Pre::Absent,
        );
        match self.commit("create eval run", vec![write]).await? {
            Commit::Done => Ok(run),
            Commit::Conflict => Err(exists(&run.run_id)),
        }
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        let Some(stored) = self
            .find(self.collection(Table::Evals), "run_id", run_id)
            .await?
        else {
            return Ok(None);
        };
        let run: EvalRun = stored.decode("an eval run")?;
        Ok(visible_to(run.user_id.as_deref(), user_id).then_some(run))
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let eq = given(&[("user_id", query.user_id.as_deref())]);
        let coll = self.collection(Table::Evals);
        let sort = query.effective_sort();
        let owner_only = query.agent_id.is_none()
            && query.team_id.is_none()
            && query.workflow_id.is_none()
            && query.model_id.is_none()
            && query.eval_types.is_empty()
            && query.filter_type.is_none();
        if owner_only && sort.sort_by.as_deref() == Some("created_at") {
            let page = self
                .query_page(coll, &eq, "created_at", sort.sort_order, &query.pagination)
                .await?;
            if let Some((docs, total)) = page {
                let items = docs
                    .iter()
                    .map(|d| d.decode("an eval run"))
                    .collect::<Result<Vec<EvalRun>>>()?;
                return Ok(Page::new(items, total));
            }
        }
        let mut rows = Vec::new();
        for d in self.query(coll, &eq).await? {
            let r: EvalRun = d.decode("an eval run")?;
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
        self.change_eval_run(run_id, "rename eval run", |run| {
            if !visible_to(run.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            run.name = Some(name.to_owned());
            run.updated_at = Some(now_epoch_seconds());
            Ok(Some(()))
        })
        .await
    }

    async fn update_eval_run_user_id(&self, run_id: &str, user_id: &str) -> Result<bool> {
        let changed = self
            .change_eval_run(run_id, "update eval run owner", |run| {
                match run.user_id.as_deref() {
                    None => {}
                    Some(owner) if owner == user_id => {}
                    Some(_) => return Err(owned_by_another_user("eval run", run_id)),
                }
                run.user_id = Some(user_id.to_owned());
                Ok(Some(()))
            })
            .await?;
        Ok(changed.is_some())
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.delete_all_visible(Table::Evals, "run_id", run_ids, user_id, "delete eval runs")
            .await
    }
}

impl<B: DocBackend> Docs<B> {
    /// Applies `change` to eval run `run_id` and writes it, conditioned on the version read
    /// (retried on a conflict); `None` when there is no such run or `change` declines.
    async fn change_eval_run(
        &self,
        run_id: &str,
        operation: &'static str,
        change: impl Fn(&mut EvalRun) -> Result<Option<()>> + Send + Sync,
    ) -> Result<Option<EvalRun>> {
        let coll = self.collection(Table::Evals);
        for attempt in 0..CAS_ATTEMPTS {
            let Some(stored) = self.find(coll, "run_id", run_id).await? else {
                return Ok(None);
            };
            let mut run: EvalRun = stored.decode("an eval run")?;
            if change(&mut run)?.is_none() {
                return Ok(None);
            }
            let write = self.rewrite(Table::Evals, &stored, &run, "an eval run")?;
            match self.commit(operation, vec![write]).await? {
                Commit::Done => return Ok(Some(run)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended(operation))
    }
}
