//! Sessions: one row per agent, team or workflow conversation.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::pagination::{Page, Pagination, Sort};
use crate::run_json::RunJson;
use crate::run_view::{RunView, SharedRunView};

/// The kind of component a session belongs to. Stored lowercase (`agent`, `team`, `workflow`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SessionType {
    /// An agent session (`agent_id`, `agent_data`).
    Agent,
    /// A team session (`team_id`, `team_data`).
    Team,
    /// A workflow session (`workflow_id`, `workflow_data`).
    Workflow,
}

impl SessionType {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SessionType::Agent => "agent",
            SessionType::Team => "team",
            SessionType::Workflow => "workflow",
        }
    }

    /// Parses a stored name; anything else is an `InvalidInput` error.
    pub fn parse(value: &str) -> Result<Self> {
        match value {
            "agent" => Ok(SessionType::Agent),
            "team" => Ok(SessionType::Team),
            "workflow" => Ok(SessionType::Workflow),
            other => Err(Error::invalid_input(format!(
                "Invalid session type: {other} (expected agent, team or workflow)"
            ))),
        }
    }
}

/// A session as agno 3.1.10 stores it. Timestamps are epoch seconds.
///
/// `runs` is filled on read (runs store merged with any legacy blob) and ignored on write:
/// runs are written one at a time through [`crate::RunStore::upsert_run`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Primary key.
    pub session_id: String,
    /// Agent, team or workflow.
    pub session_type: SessionType,
    /// Set on agent sessions.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Set on team sessions.
    #[serde(default)]
    pub team_id: Option<String>,
    /// Set on workflow sessions.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// Owner; `None` is an unowned session that the first user to write it claims.
    #[serde(default)]
    pub user_id: Option<String>,
    /// `session_name`, `session_state`, `session_metrics`, …
    #[serde(default)]
    pub session_data: Option<Value>,
    /// Agent configuration snapshot (agent sessions).
    #[serde(default)]
    pub agent_data: Option<Value>,
    /// Team configuration snapshot (team sessions).
    #[serde(default)]
    pub team_data: Option<Value>,
    /// Workflow configuration snapshot (workflow sessions).
    #[serde(default)]
    pub workflow_data: Option<Value>,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// `{"summary", "topics"?, "updated_at"?}`.
    #[serde(default)]
    pub summary: Option<Value>,
    /// Runs as run dicts, filled on read; `None` when runs were not requested. SQL stores
    /// hand them over as unparsed JSON text (see [`RunJson`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<RunJson>>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl Session {
    /// A new session of `session_type` for component `component_id`, created now.
    pub fn new(
        session_id: impl Into<String>,
        session_type: SessionType,
        component_id: impl Into<String>,
    ) -> Self {
        let component_id = Some(component_id.into());
        let (agent_id, team_id, workflow_id) = match session_type {
            SessionType::Agent => (component_id, None, None),
            SessionType::Team => (None, component_id, None),
            SessionType::Workflow => (None, None, component_id),
        };
        Session {
            session_id: session_id.into(),
            session_type,
            agent_id,
            team_id,
            workflow_id,
            user_id: None,
            session_data: None,
            agent_data: None,
            team_data: None,
            workflow_data: None,
            metadata: None,
            summary: None,
            runs: None,
            created_at: crate::now_epoch_seconds(),
            updated_at: None,
        }
    }

    /// Every run dict of [`Session::runs`], parsed (empty when runs were not read); a long
    /// session's runs (over 1 MiB of text) are parsed on every core.
    pub fn run_values(&self) -> Result<Vec<Value>> {
        crate::run_json::values_of(self.runs.as_deref().unwrap_or_default(), RunJson::to_value)
    }

    /// [`Session::run_values`], each run parsed at most once and shared
    /// ([`RunJson::shared_value`]): reading a session again from a store that keeps recent
    /// reads (SQL) gives its unchanged runs parsed already, so a conversation that re-reads
    /// and parses its session every turn parses each run once.
    pub fn shared_run_values(&self) -> Result<Vec<Arc<Value>>> {
        crate::run_json::values_of(
            self.runs.as_deref().unwrap_or_default(),
            RunJson::shared_value,
        )
    }

    /// The fields applications read of every run of [`Session::runs`] ([`RunView`]),
    /// borrowed from the runs (empty when runs were not read): the whole of each run is
    /// checked, only those fields are built, so this costs a fraction of
    /// [`Session::run_values`]. A long session's runs (over 1 MiB of text) are read on every
    /// core. Nothing is kept: each call reads the runs again (see
    /// [`Session::shared_run_views`] for views read once and shared).
    pub fn run_views(&self) -> Result<Vec<RunView<'_>>> {
        crate::run_json::values_of(self.runs.as_deref().unwrap_or_default(), RunJson::view)
    }

    /// [`Session::run_views`], each run's view read at most once and shared
    /// ([`RunJson::shared_view`]): reading a session again from a store that keeps recent
    /// reads (SQL) gives its unchanged runs' views read already, so a conversation that
    /// re-reads its session every turn reads each run once.
    pub fn shared_run_views(&self) -> Result<Vec<SharedRunView>> {
        crate::run_json::values_of(
            self.runs.as_deref().unwrap_or_default(),
            RunJson::shared_view,
        )
    }

    /// Sets the owner.
    pub fn with_user(mut self, user_id: impl Into<String>) -> Self {
        self.user_id = Some(user_id.into());
        self
    }

    /// The component id matching the session type.
    pub fn component_id(&self) -> Option<&str> {
        match self.session_type {
            SessionType::Agent => self.agent_id.as_deref(),
            SessionType::Team => self.team_id.as_deref(),
            SessionType::Workflow => self.workflow_id.as_deref(),
        }
    }

    /// `session_data.session_name`, if set.
    pub fn session_name(&self) -> Option<&str> {
        self.session_data
            .as_ref()
            .and_then(|d| d.get("session_name"))
            .and_then(Value::as_str)
    }

    /// Sets `session_data.session_name`, creating `session_data` when needed.
    pub fn set_session_name(&mut self, name: &str) {
        let data = self
            .session_data
            .get_or_insert_with(|| Value::Object(Default::default()));
        if !data.is_object() {
            *data = Value::Object(Default::default());
        }
        if let Value::Object(map) = data {
            map.insert("session_name".into(), Value::String(name.into()));
        }
    }

    /// Columns accepted by [`Sort::sort_by`] on sessions.
    pub const SORTABLE: &'static [&'static str] = &[
        "session_id",
        "session_type",
        "agent_id",
        "team_id",
        "workflow_id",
        "user_id",
        "created_at",
        "updated_at",
    ];
}

/// Filters of [`SessionStore::get_sessions`].
#[derive(Debug, Clone, Default)]
pub struct SessionQuery {
    /// Only sessions of this type.
    pub session_type: Option<SessionType>,
    /// Only sessions of this owner.
    pub user_id: Option<String>,
    /// Only sessions of this component (agent, team or workflow id per `session_type`; any when unset).
    pub component_id: Option<String>,
    /// Case-insensitive substring of `session_data.session_name`.
    pub session_name: Option<String>,
    /// `created_at >= start_timestamp`.
    pub start_timestamp: Option<i64>,
    /// `created_at <= end_timestamp`.
    pub end_timestamp: Option<i64>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction; unsorted (storage order) by default, as agno.
    pub sort: Sort,
    /// Attach each session's merged runs.
    pub include_runs: bool,
}

impl SessionQuery {
    /// A test of whether a session passes the filters: type, owner (see
    /// [`crate::visible_to`]), component (the `session_type`'s id column, any of the three
    /// without a type), case-insensitive `session_name` substring and the `created_at` range.
    pub fn matcher(&self) -> impl Fn(&Session) -> bool + '_ {
        let name = self.session_name.as_ref().map(|n| n.to_lowercase());
        move |s| {
            self.session_type.is_none_or(|t| t == s.session_type)
                && crate::visible_to(s.user_id.as_deref(), self.user_id.as_deref())
                && self
                    .component_id
                    .as_deref()
                    .is_none_or(|c| match self.session_type {
                        Some(_) => s.component_id() == Some(c),
                        None => [&s.agent_id, &s.team_id, &s.workflow_id]
                            .iter()
                            .any(|id| id.as_deref() == Some(c)),
                    })
                && name.as_deref().is_none_or(|n| {
                    s.session_name()
                        .is_some_and(|sn| sn.to_lowercase().contains(n))
                })
                && self.start_timestamp.is_none_or(|t| s.created_at >= t)
                && self.end_timestamp.is_none_or(|t| s.created_at <= t)
        }
    }

    /// Sorts `sessions` (already filtered by [`SessionQuery::matcher`]) by `sort`, then cuts
    /// out the page; `total` counts every session.
    pub fn page(&self, sessions: Vec<Session>) -> Result<Page<Session>> {
        Page::sorted(sessions, &self.sort, Session::SORTABLE, &self.pagination)
    }
}

/// Options of [`SessionStore::get_session`].
#[derive(Debug, Clone, Default)]
pub struct SessionRead {
    /// Only return the session if it belongs to this user.
    pub user_id: Option<String>,
    /// Only return the session if it has this type.
    pub session_type: Option<SessionType>,
    /// Keep only the last `n` context runs (no member runs, no paused/cancelled/error/regenerated).
    pub runs_limit: Option<usize>,
}

impl SessionRead {
    /// Read as `user_id`.
    pub fn for_user(user_id: impl Into<String>) -> Self {
        SessionRead {
            user_id: Some(user_id.into()),
            ..Default::default()
        }
    }
}

/// Sessions of every type.
#[async_trait]
pub trait SessionStore: Send + Sync {
    /// Inserts or updates a session (not its runs).
    ///
    /// The owner guard: an existing row is updated only when it is unowned or owned by
    /// `session.user_id`; otherwise nothing is written and the error is
    /// [`crate::ErrorKind::PermissionDenied`]. `created_at` and `session_type` of an existing
    /// row are kept; `updated_at` becomes now. A legacy runs blob on the row is preserved.
    /// Returns the stored session with its merged runs.
    async fn upsert_session(&self, session: Session) -> Result<Session>;

    /// The session with its merged runs, or `None` when absent or not visible to
    /// `read.user_id` (strict equality: unowned sessions are not returned to a user).
    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>>;

    /// Sessions matching `query`, with the count before paging.
    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>>;

    /// Sets `session_data.session_name`, keeping everything else (including a legacy runs
    /// blob). `None` when the session is absent or not visible to `user_id`.
    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>>;

    /// Deletes the sessions among `session_ids` that `user_id` may see (all when `None`),
    /// and the runs of exactly those sessions. Returns how many sessions were deleted.
    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64>;

    /// Hands an idle session from `previous_user_id` to `user_id` (`None`: unowned), as
    /// agno's `reassign_session_owner`: only when the session is owned by
    /// `previous_user_id` and none of its runs is in flight
    /// ([`crate::ACTIVE_RUN_STATUSES`]). Only the session's `user_id` changes: its runs keep
    /// theirs, the record of who ran them, and `updated_at` is kept. Returns whether the
    /// session changed hands.
    async fn reassign_session_owner(
        &self,
        session_id: &str,
        previous_user_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool>;

    /// Writes each session as [`SessionStore::upsert_session`] does, owner check included,
    /// and returns one result per session in order: a session another user owns is refused
    /// alone (`PermissionDenied`, nothing of it written) and the others are written.
    ///
    /// Provided as one call per session; a backend with a bulk write may override it.
    async fn upsert_sessions(&self, sessions: Vec<Session>) -> Result<Vec<Result<Session>>> {
        let mut written = Vec::with_capacity(sessions.len());
        for session in sessions {
            written.push(self.upsert_session(session).await);
        }
        Ok(written)
    }
}
