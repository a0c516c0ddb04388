//! Eval runs (`agno_eval_runs`): inserted once per `run_id`, never overwritten.

use agno_storage_core::{
    async_trait, now_epoch_seconds, Error, ErrorKind, EvalFilterType, EvalQuery, EvalRun,
    EvalStore, Page, Result,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, is_duplicate_key, scope, to_doc};
use crate::MongoDb;

#[async_trait]
impl EvalStore for MongoDb {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        match self
            .coll(&self.inner.names.evals)
            .insert_one(to_doc(&run, "an eval run")?)
            .await
        {
            Ok(_) => Ok(run),
            Err(e) if is_duplicate_key(&e) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "eval run {} already exists: every eval run needs its own run_id",
                    run.run_id
                ),
            )),
            Err(e) => Err(db_err("create eval run")(e)),
        }
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        let mut filter = doc! {"run_id": run_id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.evals)
            .find_one(filter)
            .await
            .map_err(db_err("get eval run"))?
            .map(|d| from_doc(d, "an eval run"))
            .transpose()
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.effective_sort(), EvalRun::SORTABLE)?;
        let mut filter = Document::new();
        scope(&mut filter, query.user_id.as_deref());
        for (key, value) in [
            ("agent_id", &query.agent_id),
            ("team_id", &query.team_id),
            ("workflow_id", &query.workflow_id),
            ("model_id", &query.model_id),
        ] {
            if let Some(v) = value {
                filter.insert(key, v);
            }
        }
        if !query.eval_types.is_empty() {
            let types: Vec<Bson> = query
                .eval_types
                .iter()
                .map(|t| mongodb::bson::serialize_to_bson(t).unwrap_or(Bson::Null))
                .collect();
            filter.insert("eval_type", doc! {"$in": types});
        }
        if let Some(f) = query.filter_type {
            let key = match f {
                EvalFilterType::Agent => "agent_id",
                EvalFilterType::Team => "team_id",
                EvalFilterType::Workflow => "workflow_id",
            };
            if filter.contains_key(key) {
                // Already an equality on a value, which implies "not null".
            } else {
                filter.insert(key, doc! {"$ne": Bson::Null});
            }
        }
        let rows = self
            .coll(&self.inner.names.evals)
            .find(filter)
            .await
            .map_err(db_err("get eval runs"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get eval runs"))?
            .into_iter()
            .map(|d| from_doc(d, "an eval run"))
            .collect::<Result<Vec<EvalRun>>>()?;
        query.page(rows)
    }

    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>> {
        let mut filter = doc! {"run_id": run_id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.evals)
            .find_one_and_update(
                filter,
                doc! {"$set": {"name": name, "updated_at": now_epoch_seconds()}},
            )
            .return_document(ReturnDocument::After)
            .await
            .map_err(db_err("rename eval run"))?
            .map(|d| from_doc(d, "an eval run"))
            .transpose()
    }

    async fn update_eval_run_user_id(&self, run_id: &str, user_id: &str) -> Result<bool> {
        let coll = self.coll(&self.inner.names.evals);
        let unowned_or_same =
            doc! {"run_id": run_id, "$or": [{"user_id": Bson::Null}, {"user_id": user_id}]};
        let set = coll
            .update_one(unowned_or_same, doc! {"$set": {"user_id": user_id}})
            .await
            .map_err(db_err("update eval run owner"))?;
        if set.matched_count > 0 {
            return Ok(true);
        }
        let exists = coll
            .find_one(doc! {"run_id": run_id})
            .projection(doc! {"_id": 1})
            .await
            .map_err(db_err("update eval run owner"))?
            .is_some();
        match exists {
            true => Err(agno_storage_core::owned_by_another_user("eval run", run_id)),
            false => Ok(false),
        }
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut filter = doc! {"run_id": {"$in": run_ids}};
        scope(&mut filter, user_id);
        Ok(self
            .coll(&self.inner.names.evals)
            .delete_many(filter)
            .await
            .map_err(db_err("delete eval runs"))?
            .deleted_count)
    }
}
