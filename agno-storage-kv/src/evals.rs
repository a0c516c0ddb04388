//! Eval runs: `{prefix}:evals:{run_id}` records as agno's `create_eval_run` lays them out
//! (`created_at`, `updated_at`, then the record's fields, then the owner), indexed by
//! creation time (all, per owner). A run id is written once.

use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, EvalQuery, EvalRun, EvalStore,
    EvalType, Page, Result,
};
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, json, object, opt_int, opt_json, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "evals";

pub(crate) fn decode(key: &str, raw: &str) -> Result<EvalRun> {
    let map = decode_object(key, raw)?;
    let eval_type: EvalType =
        serde_json::from_value(map.get("eval_type").cloned().unwrap_or_default())
            .map_err(|e| Error::serialization(format!("{key}: eval_type"), e))?;
    Ok(EvalRun {
        run_id: text(&map, "run_id")
            .or_else(|| key.rsplit_once(":evals:").map(|(_, id)| id.to_owned()))
            .unwrap_or_default(),
        eval_type,
        eval_data: json(&map, "eval_data").unwrap_or(Value::Null),
        eval_input: json(&map, "eval_input"),
        name: text(&map, "name"),
        agent_id: text(&map, "agent_id"),
        team_id: text(&map, "team_id"),
        workflow_id: text(&map, "workflow_id"),
        model_id: text(&map, "model_id"),
        model_provider: text(&map, "model_provider"),
        evaluated_component_name: text(&map, "evaluated_component_name"),
        user_id: text(&map, "user_id"),
        created_at: int(&map, "created_at").unwrap_or_default(),
        updated_at: int(&map, "updated_at"),
    })
}

/// The record as agno lays it out: timestamps, `EvalRunRecord.model_dump()`, owner.
pub(crate) fn encode_eval(r: &EvalRun) -> String {
    encode(&object([
        ("created_at", Value::from(r.created_at)),
        ("updated_at", opt_int(r.updated_at)),
        ("agent_id", opt_str(&r.agent_id)),
        ("model_id", opt_str(&r.model_id)),
        ("model_provider", opt_str(&r.model_provider)),
        ("team_id", opt_str(&r.team_id)),
        ("workflow_id", opt_str(&r.workflow_id)),
        ("name", opt_str(&r.name)),
        (
            "evaluated_component_name",
            opt_str(&r.evaluated_component_name),
        ),
        ("run_id", Value::String(r.run_id.clone())),
        (
            "eval_type",
            serde_json::to_value(r.eval_type).unwrap_or(Value::Null),
        ),
        ("eval_data", r.eval_data.clone()),
        ("eval_input", opt_json(&r.eval_input)),
        ("user_id", opt_str(&r.user_id)),
    ]))
}

impl KvStore {
    fn evals_all(&self) -> String {
        self.idx(TABLE, "created:all")
    }

    fn evals_of_user(&self, user: &str) -> String {
        self.idx(TABLE, &format!("created:user:{user}"))
    }

    pub(crate) fn eval_entries(&self, r: &EvalRun) -> Vec<Entry> {
        let score = r.created_at as f64;
        let mut entries = vec![Entry::z(self.evals_all(), &r.run_id, score)];
        if let Some(u) = &r.user_id {
            entries.push(Entry::z(self.evals_of_user(u), &r.run_id, score));
        }
        entries
    }
}

#[async_trait]
impl EvalStore for KvStore {
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
        let key = self.key(TABLE, &run.run_id);
        let cas = Cas::on(&key)
            .expect(None)
            .set(encode_eval(&run))
            .reindex(&[], &self.eval_entries(&run));
        match self.cas(&cas).await? {
            Outcome::Applied => Ok(run),
            _ => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!(
                    "eval run {} already exists: every eval run needs its own run_id",
                    run.run_id
                ),
            )),
        }
    }

    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>> {
        let key = self.key(TABLE, run_id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let r = decode(&key, &raw)?;
        Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
    }

    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
        query.pagination.validate()?;
        let sort = query.effective_sort();
        agno_storage_core::validate_sort(&sort, EvalRun::SORTABLE)?;
        let base = match &query.user_id {
            Some(u) => self.evals_of_user(u),
            None => self.evals_all(),
        };
        let unfiltered = query.agent_id.is_none()
            && query.team_id.is_none()
            && query.workflow_id.is_none()
            && query.model_id.is_none()
            && query.eval_types.is_empty()
            && query.filter_type.is_none();
        if unfiltered && sort.sort_by.as_deref() == Some("created_at") {
            let (items, total) = self
                .page_index(
                    TABLE,
                    &base,
                    ("-inf", "+inf"),
                    sort.sort_order,
                    &query.pagination,
                    |id, raw| {
                        let r = decode(&self.key(TABLE, id), raw)?;
                        Ok(visible_to(r.user_id.as_deref(), query.user_id.as_deref()).then_some(r))
                    },
                )
                .await?;
            return Ok(Page::new(items, total));
        }
        let mut rows = Vec::new();
        for (id, raw) in self.load_index(TABLE, &base, "-inf", "+inf").await? {
            let r = decode(&self.key(TABLE, &id), &raw)?;
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
        let key = self.key(TABLE, run_id);
        self.retry("rename_eval_run", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(None));
            };
            let mut r = decode(&key, &raw)?;
            if !visible_to(r.user_id.as_deref(), user_id) {
                return Ok(Some(None));
            }
            r.name = Some(name.to_owned());
            r.updated_at = Some(now_epoch_seconds());
            let cas = Cas::on(&key).expect(Some(&raw)).set(encode_eval(&r));
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(Some(r)))
        })
        .await
    }

    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        let mut deleted = 0;
        for id in run_ids {
            let key = self.key(TABLE, id);
            let gone = self
                .retry("delete_eval_runs", || async {
                    let Some(raw) = self.get(&key).await? else {
                        return Ok(Some(false));
                    };
                    let r = decode(&key, &raw)?;
                    if !visible_to(r.user_id.as_deref(), user_id) {
                        return Ok(Some(false));
                    }
                    let cas = Cas::on(&key)
                        .expect(Some(&raw))
                        .delete()
                        .reindex(&self.eval_entries(&r), &[]);
                    Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
                })
                .await?;
            if gone {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}
