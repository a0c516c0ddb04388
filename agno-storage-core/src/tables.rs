//! [`Table`], every table (collection, key space) agno-storage writes, and [`TableNames`],
//! their physical names with agno 3.1.10's defaults.

use crate::migration::TableType;

/// Every table agno-storage writes: agno's, ours for the domains agno keeps elsewhere
/// (schedules, learnings, jobs on some backends) and our bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Table {
    /// Sessions.
    Sessions,
    /// Runs, one row per run.
    Runs,
    /// User memories.
    Memories,
    /// Daily metrics.
    Metrics,
    /// Eval runs.
    Evals,
    /// Knowledge contents.
    Knowledge,
    /// Schedules.
    Schedules,
    /// Schedule runs.
    ScheduleRuns,
    /// Learnings.
    Learnings,
    /// The job queue.
    Jobs,
    /// Per-table schema stamps.
    Versions,
    /// Our bookkeeping: run-index counters, uniqueness guards, the migration lock (agno
    /// never reads it).
    Meta,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 12] = [
        Table::Sessions,
        Table::Runs,
        Table::Memories,
        Table::Metrics,
        Table::Evals,
        Table::Knowledge,
        Table::Schedules,
        Table::ScheduleRuns,
        Table::Learnings,
        Table::Jobs,
        Table::Versions,
        Table::Meta,
    ];

    /// agno 3.1.10's default name (`agno_sessions`, ...; `agno_storage_meta` for ours).
    pub const fn default_name(self) -> &'static str {
        match self {
            Table::Sessions => "agno_sessions",
            Table::Runs => "agno_runs",
            Table::Memories => "agno_memories",
            Table::Metrics => "agno_metrics",
            Table::Evals => "agno_eval_runs",
            Table::Knowledge => "agno_knowledge",
            Table::Schedules => "agno_schedules",
            Table::ScheduleRuns => "agno_schedule_runs",
            Table::Learnings => "agno_learnings",
            Table::Jobs => "agno_jobs",
            Table::Versions => "agno_schema_versions",
            Table::Meta => "agno_storage_meta",
        }
    }

    /// The field that identifies a row in agno's layout (`session_id`, `run_id`, ...;
    /// `table_name` for the stamps, `id` for ours and the rest).
    pub const fn key_field(self) -> &'static str {
        match self {
            Table::Sessions => "session_id",
            Table::Runs | Table::Evals => "run_id",
            Table::Memories => "memory_id",
            Table::Learnings => "learning_id",
            Table::Versions => "table_name",
            Table::Metrics
            | Table::Knowledge
            | Table::Schedules
            | Table::ScheduleRuns
            | Table::Jobs
            | Table::Meta => "id",
        }
    }
}

impl From<TableType> for Table {
    fn from(table: TableType) -> Self {
        match table {
            TableType::Memories => Table::Memories,
            TableType::Sessions => Table::Sessions,
            TableType::Metrics => Table::Metrics,
            TableType::Evals => Table::Evals,
            TableType::Knowledge => Table::Knowledge,
            TableType::Schedules => Table::Schedules,
            TableType::ScheduleRuns => Table::ScheduleRuns,
            TableType::Learnings => Table::Learnings,
        }
    }
}

/// The physical name of every [`Table`]; the defaults are agno 3.1.10's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    /// Sessions (`agno_sessions`).
    pub sessions: String,
    /// Runs, one row per run (`agno_runs`).
    pub runs: String,
    /// User memories (`agno_memories`).
    pub memories: String,
    /// Daily metrics (`agno_metrics`).
    pub metrics: String,
    /// Eval runs (`agno_eval_runs`).
    pub evals: String,
    /// Knowledge contents (`agno_knowledge`).
    pub knowledge: String,
    /// Schedules (`agno_schedules`).
    pub schedules: String,
    /// Schedule runs (`agno_schedule_runs`).
    pub schedule_runs: String,
    /// Learnings (`agno_learnings`).
    pub learnings: String,
    /// The job queue (`agno_jobs`).
    pub jobs: String,
    /// Per-table schema stamps (`agno_schema_versions`).
    pub versions: String,
    /// Our bookkeeping (`agno_storage_meta`; agno never reads it).
    pub meta: String,
}

impl Default for TableNames {
    fn default() -> Self {
        TableNames::with_prefix("")
    }
}

impl TableNames {
    /// Default names with `prefix` in front of each (`{prefix}agno_sessions`, ...): several
    /// independent databases side by side.
    pub fn with_prefix(prefix: &str) -> Self {
        let n = |t: Table| format!("{prefix}{}", t.default_name());
        TableNames {
            sessions: n(Table::Sessions),
            runs: n(Table::Runs),
            memories: n(Table::Memories),
            metrics: n(Table::Metrics),
            evals: n(Table::Evals),
            knowledge: n(Table::Knowledge),
            schedules: n(Table::Schedules),
            schedule_runs: n(Table::ScheduleRuns),
            learnings: n(Table::Learnings),
            jobs: n(Table::Jobs),
            versions: n(Table::Versions),
            meta: n(Table::Meta),
        }
    }

    /// Default names with a custom sessions table; runs follow it as `{sessions}_runs`, as
    /// agno derives them.
    pub fn with_sessions(sessions: impl Into<String>) -> Self {
        let sessions = sessions.into();
        TableNames {
            runs: format!("{sessions}_runs"),
            sessions,
            ..Default::default()
        }
    }

    /// The physical name of `table`.
    pub fn get(&self, table: Table) -> &str {
        match table {
            Table::Sessions => &self.sessions,
            Table::Runs => &self.runs,
            Table::Memories => &self.memories,
            Table::Metrics => &self.metrics,
            Table::Evals => &self.evals,
            Table::Knowledge => &self.knowledge,
            Table::Schedules => &self.schedules,
            Table::ScheduleRuns => &self.schedule_runs,
            Table::Learnings => &self.learnings,
            Table::Jobs => &self.jobs,
            Table::Versions => &self.versions,
            Table::Meta => &self.meta,
        }
    }

    /// The physical name of a migrated table type.
    pub fn of(&self, table: TableType) -> &str {
        self.get(Table::from(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_agnos_and_prefixes_apply_to_every_table() {
        let names = TableNames::default();
        for t in Table::ALL {
            assert_eq!(names.get(t), t.default_name());
        }
        for t in TableType::ALL {
            assert_eq!(names.of(t), t.default_name());
        }
        let prefixed = TableNames::with_prefix("x_");
        for t in Table::ALL {
            assert_eq!(prefixed.get(t), format!("x_{}", t.default_name()));
        }
        let custom = TableNames::with_sessions("chats");
        assert_eq!(
            (custom.sessions.as_str(), custom.runs.as_str()),
            ("chats", "chats_runs")
        );
    }
}
