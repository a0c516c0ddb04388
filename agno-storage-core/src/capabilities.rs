//! What a backend can do: one flat struct of flags.

use serde::Serialize;

/// Flags a backend fills in with `..Capabilities::default()` for what it lacks.
///
/// A call a backend cannot serve returns [`crate::ErrorKind::Unsupported`]; the conformance
/// suite marks cases needing a missing capability as *ignored*, with the flag's name as reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Capabilities {
    /// Sessions (`SessionStore`).
    pub sessions: bool,
    /// Runs stored one row per run (`RunStore`).
    pub runs: bool,
    /// User memories (`MemoryStore`).
    pub memories: bool,
    /// Daily per-user metrics (`MetricsStore`).
    pub metrics: bool,
    /// Eval runs (`EvalStore`).
    pub evals: bool,
    /// Knowledge contents (`KnowledgeStore`).
    pub knowledge: bool,
    /// Schedules and schedule runs (`ScheduleStore`).
    pub schedules: bool,
    /// Learnings (`LearningStore`).
    pub learnings: bool,
    /// The durable job queue (`JobStore`).
    pub jobs: bool,
    /// Per-table schema versions and the migration manager.
    pub migrations: bool,
    /// Pre-v3 data (legacy runs blobs) can be written for tests and migrated.
    pub legacy_runs: bool,
    /// Writes survive a process restart.
    pub durable: bool,
    /// The longest identifier (in characters) the backend's keys hold, when it has a limit
    /// (e.g. MySQL's `VARCHAR(128)` keys); longer ones are refused with `InvalidInput`.
    pub max_id_chars: Option<usize>,
    /// The deepest JSON nesting the backend stores, when lower than
    /// [`crate::json::MAX_DEPTH`] (a native document format with its own limit).
    pub max_json_depth: Option<usize>,
}

impl Capabilities {
    /// Every flag set.
    pub fn all() -> Self {
        Capabilities {
            sessions: true,
            runs: true,
            memories: true,
            metrics: true,
            evals: true,
            knowledge: true,
            schedules: true,
            learnings: true,
            jobs: true,
            migrations: true,
            legacy_runs: true,
            durable: true,
            max_id_chars: None,
            max_json_depth: None,
        }
    }

    /// The deepest JSON nesting a write may have here: [`crate::json::MAX_DEPTH`], or the
    /// backend's lower limit.
    pub fn json_depth_limit(&self) -> usize {
        self.max_json_depth
            .map_or(crate::json::MAX_DEPTH, |d| d.min(crate::json::MAX_DEPTH))
    }

    /// Whether the named flag is set (names as the field names). Unknown names, and the
    /// limits, are false.
    pub fn has(&self, name: &str) -> bool {
        match name {
            "sessions" => self.sessions,
            "runs" => self.runs,
            "memories" => self.memories,
            "metrics" => self.metrics,
            "evals" => self.evals,
            "knowledge" => self.knowledge,
            "schedules" => self.schedules,
            "learnings" => self.learnings,
            "jobs" => self.jobs,
            "migrations" => self.migrations,
            "legacy_runs" => self.legacy_runs,
            "durable" => self.durable,
            _ => false,
        }
    }
}
