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
        }
    }

    /// Whether the named flag is set (names as the field names). Unknown names are false.
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
