//! Runs: one row per agent, team or workflow run (agno 3's normalized runs table).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::legacy::sort_runs_for_session;
use crate::pagination::{Page, Pagination, Sort};
use crate::{owned_by_another_user, writable_by};

/// The kind of run. Stored lowercase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunType {
    /// An agent run (`RunOutput`).
    Agent,
    /// A team run (`TeamRunOutput`).
    Team,
    /// A workflow run (`WorkflowRunOutput`).
    Workflow,
}

impl RunType {
    /// The type agno 3.1.10's `get_run_type` infers from a run dict: `agent_id` or
    /// `agent_name` → agent, `team_id`/`team_name` → team, else workflow.
    pub fn infer(run_data: &Value) -> RunType {
        let truthy = |key: &str| match run_data.get(key) {
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Null) | None => false,
            Some(_) => true,
        };
        if truthy("agent_id") || truthy("agent_name") {
            RunType::Agent
        } else if truthy("team_id") || truthy("team_name") {
            RunType::Team
        } else {
            RunType::Workflow
        }
    }

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            RunType::Agent => "agent",
            RunType::Team => "team",
            RunType::Workflow => "workflow",
        }
    }
}

/// Statuses left out of a session's context history (`HISTORY_SKIP_STATUSES`).
pub const HISTORY_SKIP_STATUSES: &[&str] = &["PAUSED", "CANCELLED", "ERROR", "REGENERATED"];

/// Statuses of a run still in flight: a session with such a run is not handed to another
/// owner ([`crate::SessionStore::reassign_session_owner`]).
pub const ACTIVE_RUN_STATUSES: &[&str] = &["PENDING", "RUNNING", "PAUSED"];

/// One row of the runs table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Primary key.
    pub run_id: String,
    /// The session the run belongs to.
    pub session_id: String,
    /// Agent, team or workflow.
    pub run_type: RunType,
    /// Position in the session; `None` on write means "append" (assigned atomically).
    #[serde(default)]
    pub run_index: Option<i64>,
    /// Owner (the run's or the session's user).
    #[serde(default)]
    pub user_id: Option<String>,
    /// Agent that produced the run.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Team that produced the run.
    #[serde(default)]
    pub team_id: Option<String>,
    /// Workflow that produced the run.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// Team run a member run belongs to.
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// `RunStatus` value, upper case (`RUNNING`, `COMPLETED`, …).
    #[serde(default)]
    pub status: Option<String>,
    /// The full run dict (`run.to_dict()`).
    pub run_data: Value,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl RunRecord {
    /// Checks that this run may be written into its session, given the session's owner
    /// (`None`: the session does not exist). A run goes only into an existing session
    /// ([`missing_session`](Self::missing_session) otherwise) that is unowned or owned by the
    /// run's `user_id` (`PermissionDenied` otherwise: nobody appends runs to another user's
    /// session).
    pub fn check_session(&self, session_owner: Option<Option<&str>>) -> Result<()> {
        match session_owner {
            None => Err(self.missing_session()),
            Some(owner) if !writable_by(owner, self.user_id.as_deref()) => {
                Err(owned_by_another_user("session", &self.session_id))
            }
            Some(_) => Ok(()),
        }
    }

    /// `NotFound` for a run whose session does not exist.
    pub fn missing_session(&self) -> Error {
        Error::not_found(format!(
            "session {} does not exist: upsert the session before its runs",
            self.session_id
        ))
    }

    /// Builds a row from a run dict as agno's `build_single_run_row` does: ids, status and
    /// parent come from `run_data`, `run_index` from `run_data.run_index` when present,
    /// `created_at` from `run_data.created_at` or now.
    pub fn from_run_data(
        session_id: impl Into<String>,
        user_id: Option<String>,
        run_data: Value,
    ) -> Result<Self> {
        let text = |key: &str| {
            run_data
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
        };
        let run_id = text("run_id").ok_or_else(|| {
            Error::invalid_input(
                "Run must have a run_id: the run dict has no non-empty `run_id` string",
            )
        })?;
        let now = crate::now_epoch_seconds();
        Ok(RunRecord {
            run_id,
            session_id: session_id.into(),
            run_type: RunType::infer(&run_data),
            run_index: run_data.get("run_index").and_then(Value::as_i64),
            user_id,
            agent_id: text("agent_id"),
            team_id: text("team_id"),
            workflow_id: text("workflow_id"),
            parent_run_id: text("parent_run_id"),
            status: text("status"),
            created_at: run_data
                .get("created_at")
                .and_then(Value::as_i64)
                .unwrap_or(now),
            updated_at: Some(now),
            run_data,
        })
    }

    /// True when the run belongs in a session's context history: not a member run and not
    /// in [`HISTORY_SKIP_STATUSES`].
    pub fn is_context_run(run_data: &Value) -> bool {
        let is_member = run_data
            .get("parent_run_id")
            .is_some_and(|p| !p.is_null() && p.as_str() != Some(""));
        let skipped = run_data
            .get("status")
            .and_then(Value::as_str)
            .is_some_and(|s| HISTORY_SKIP_STATUSES.contains(&s));
        !is_member && !skipped
    }

    /// Columns accepted by [`Sort::sort_by`] on runs.
    pub const SORTABLE: &'static [&'static str] = &[
        "run_id",
        "session_id",
        "run_type",
        "run_index",
        "user_id",
        "agent_id",
        "team_id",
        "workflow_id",
        "status",
        "created_at",
        "updated_at",
    ];
}

/// Filters of [`RunStore::get_runs`]. Default order: `run_index, created_at, run_id` ascending.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    /// Only runs of this session.
    pub session_id: Option<String>,
    /// Only runs of this owner.
    pub user_id: Option<String>,
    /// Only runs of this agent.
    pub agent_id: Option<String>,
    /// Only runs of this team.
    pub team_id: Option<String>,
    /// Only runs of this workflow.
    pub workflow_id: Option<String>,
    /// Only runs with this status (upper case, e.g. `COMPLETED`).
    pub status: Option<String>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction.
    pub sort: Sort,
}

impl RunQuery {
    /// Whether `run` passes the filters: in `session_id` when set, visible to `user_id`, and
    /// equal on every agent, team, workflow and status filter that is set.
    pub fn matches(&self, run: &RunRecord) -> bool {
        use crate::same;
        self.session_id
            .as_deref()
            .is_none_or(|s| s == run.session_id)
            && crate::visible_to(run.user_id.as_deref(), self.user_id.as_deref())
            && same(&self.agent_id, &run.agent_id)
            && same(&self.team_id, &run.team_id)
            && same(&self.workflow_id, &run.workflow_id)
            && same(&self.status, &run.status)
    }

    /// Sorts `rows` (already filtered by [`RunQuery::matches`]) in session order
    /// ([`sort_runs_for_session`]), then stably by `sort` when it names a column, then cuts
    /// out the page; `total` counts every row.
    pub fn page(&self, mut rows: Vec<RunRecord>) -> Result<Page<RunRecord>> {
        sort_runs_for_session(&mut rows);
        Page::sorted(rows, &self.sort, RunRecord::SORTABLE, &self.pagination)
    }
}

/// The runs table.
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Writes one run row; never rewrites its session.
    ///
    /// The session must exist (`NotFound` otherwise). A `None` `run_index` is assigned
    /// atomically as one past the session's highest. On an existing `run_id` only `status`,
    /// `run_data`, `user_id`, `parent_run_id` and `updated_at` change, and a stored
    /// `run_index` is kept. A row owned by another user is refused with `PermissionDenied`.
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord>;

    /// The run, or `None` when absent or owned by someone other than `user_id`.
    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>>;

    /// Runs matching `query`, with the count before paging.
    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>>;

    /// Deletes the runs among `run_ids` visible to `user_id` (all when `None`), and scrubs them
    /// from legacy runs blobs so a merge cannot resurrect them. Returns how many rows went.
    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64>;
}
