//! Eval runs: results of accuracy, performance, reliability and judge evals.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Result;
use crate::pagination::{Page, Pagination, Sort, SortOrder};

/// The kind of eval. Stored as agno's `EvalType` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvalType {
    /// `accuracy`
    Accuracy,
    /// `agent_as_judge`
    AgentAsJudge,
    /// `performance`
    Performance,
    /// `reliability`
    Reliability,
}

/// One eval run (`agno_eval_runs`). Every run has its own `run_id`, so re-running an eval
/// adds a row instead of overwriting the previous result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRun {
    /// Primary key: this run's id.
    pub run_id: String,
    /// Kind of eval.
    pub eval_type: EvalType,
    /// The results.
    pub eval_data: Value,
    /// The inputs (may be absent).
    #[serde(default)]
    pub eval_input: Option<Value>,
    /// Display name.
    #[serde(default)]
    pub name: Option<String>,
    /// Evaluated agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Evaluated team.
    #[serde(default)]
    pub team_id: Option<String>,
    /// Evaluated workflow.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// Model used.
    #[serde(default)]
    pub model_id: Option<String>,
    /// Model provider.
    #[serde(default)]
    pub model_provider: Option<String>,
    /// Name of the evaluated component.
    #[serde(default)]
    pub evaluated_component_name: Option<String>,
    /// Owner.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl EvalRun {
    /// The fields of agno's `EvalRunRecord`, in its order (without the owner and the
    /// timestamps, which each agno store places differently).
    pub const RECORD_FIELDS: &'static [&'static str] = &[
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
    ];

    /// Columns accepted by [`Sort::sort_by`] on eval runs.
    pub const SORTABLE: &'static [&'static str] = &[
        "run_id",
        "eval_type",
        "name",
        "agent_id",
        "team_id",
        "workflow_id",
        "model_id",
        "user_id",
        "created_at",
        "updated_at",
    ];
}

/// Which component column must be set (agno's `filter_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalFilterType {
    /// `agent_id IS NOT NULL`
    Agent,
    /// `team_id IS NOT NULL`
    Team,
    /// `workflow_id IS NOT NULL`
    Workflow,
}

/// Filters of [`EvalStore::get_eval_runs`]. Default order: `created_at` descending.
#[derive(Debug, Clone, Default)]
pub struct EvalQuery {
    /// Only this owner's runs.
    pub user_id: Option<String>,
    /// Only runs of this agent.
    pub agent_id: Option<String>,
    /// Only runs of this team.
    pub team_id: Option<String>,
    /// Only runs of this workflow.
    pub workflow_id: Option<String>,
    /// Only runs with this model.
    pub model_id: Option<String>,
    /// Only runs of these types (any when empty).
    pub eval_types: Vec<EvalType>,
    /// Only runs whose component column of this kind is set.
    pub filter_type: Option<EvalFilterType>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction.
    pub sort: Sort,
}

impl EvalQuery {
    /// Whether `run` passes the filters: visible to `user_id`, equal on every id filter that
    /// is set, of one of `eval_types` (any when empty), and with `filter_type`'s column set.
    pub fn matches(&self, run: &EvalRun) -> bool {
        use crate::same;
        crate::visible_to(run.user_id.as_deref(), self.user_id.as_deref())
            && same(&self.agent_id, &run.agent_id)
            && same(&self.team_id, &run.team_id)
            && same(&self.workflow_id, &run.workflow_id)
            && same(&self.model_id, &run.model_id)
            && (self.eval_types.is_empty() || self.eval_types.contains(&run.eval_type))
            && match self.filter_type {
                Some(EvalFilterType::Agent) => run.agent_id.is_some(),
                Some(EvalFilterType::Team) => run.team_id.is_some(),
                Some(EvalFilterType::Workflow) => run.workflow_id.is_some(),
                None => true,
            }
    }

    /// The order to list in: `sort`, or `created_at` descending when it names no column.
    pub fn effective_sort(&self) -> Sort {
        match &self.sort.sort_by {
            Some(_) => self.sort.clone(),
            None => Sort::by("created_at", SortOrder::Desc),
        }
    }

    /// Sorts `rows` (already filtered by [`EvalQuery::matches`]) by
    /// [`EvalQuery::effective_sort`], then cuts out the page; `total` counts every row.
    pub fn page(&self, rows: Vec<EvalRun>) -> Result<Page<EvalRun>> {
        Page::sorted(
            rows,
            &self.effective_sort(),
            EvalRun::SORTABLE,
            &self.pagination,
        )
    }
}

/// Eval runs.
#[async_trait]
pub trait EvalStore: Send + Sync {
    /// Inserts a new eval run; an existing `run_id` is `AlreadyExists` (never overwritten).
    async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun>;

    /// The run, or `None` when absent or not owned by `user_id`.
    async fn get_eval_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<EvalRun>>;

    /// Runs matching `query`, with the count before paging.
    async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>>;

    /// Renames a run; `None` when absent or not owned by `user_id`.
    async fn rename_eval_run(
        &self,
        run_id: &str,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<EvalRun>>;

    /// Deletes the runs among `run_ids` owned by `user_id` (any when `None`).
    async fn delete_eval_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64>;

    /// Gives eval run `run_id` its owner, as AgentOS's `update_eval_run_user_id` does right
    /// after creating a run (agno's eval records carry no owner): true when the run now has
    /// `user_id` as its owner, false when there is no such run. A run another user already
    /// owns is refused with `PermissionDenied` and left as it is (agno overwrites any owner).
    async fn update_eval_run_user_id(&self, run_id: &str, user_id: &str) -> Result<bool>;
}
