//! Per-table schema versions and the migration manager.
//!
//! Versions are stamped per physical table. An unstamped table is pre-v3 (`2.0.0`).
//! [`MigrationManager::up`] walks every registered step of every table in order, holds the
//! backend's migration lock, stamps a table only after all its steps succeeded, stops at the
//! first failure (reporting what was applied) and refuses a database newer than the code.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorKind, Result};
use crate::learning::{rekey_user_entity_learnings, LearningStore};
use crate::legacy::{copy_legacy_runs, LegacyRunsStore};

/// A `major.minor.patch` schema version, stamped as text without a `v` (e.g. `3.0.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SchemaVersion {
    /// Major.
    pub major: u32,
    /// Minor.
    pub minor: u32,
    /// Patch.
    pub patch: u32,
}

impl SchemaVersion {
    /// `2.0.0`: what an unstamped table is assumed to be.
    pub const UNSTAMPED: SchemaVersion = SchemaVersion::new(2, 0, 0);
    /// `3.0.0`: the version this code writes (agno 3.1.10's latest).
    pub const LATEST: SchemaVersion = SchemaVersion::new(3, 0, 0);

    /// A version.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        SchemaVersion {
            major,
            minor,
            patch,
        }
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for SchemaVersion {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let trimmed = s.trim().trim_start_matches('v');
        let parts: Vec<&str> = trimmed.split('.').collect();
        let bad = || {
            Error::new(
                ErrorKind::SchemaMismatch,
                format!(
                    "invalid schema version stamp {s:?}: expected major.minor.patch such as 3.0.0"
                ),
            )
        };
        if parts.is_empty() || parts.len() > 3 {
            return Err(bad());
        }
        let num = |i: usize| -> Result<u32> {
            parts.get(i).map_or(Ok(0), |p| p.parse().map_err(|_| bad()))
        };
        Ok(SchemaVersion::new(num(0)?, num(1)?, num(2)?))
    }
}

impl TryFrom<String> for SchemaVersion {
    type Error = Error;
    fn try_from(s: String) -> Result<Self> {
        s.parse()
    }
}

impl From<SchemaVersion> for String {
    fn from(v: SchemaVersion) -> String {
        v.to_string()
    }
}

/// The logical tables the migration manager walks, in agno's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableType {
    /// `agno_memories`
    Memories,
    /// `agno_sessions` (its step also fills the runs table)
    Sessions,
    /// `agno_metrics`
    Metrics,
    /// `agno_eval_runs`
    Evals,
    /// `agno_knowledge`
    Knowledge,
    /// `agno_schedules`
    Schedules,
    /// `agno_schedule_runs`
    ScheduleRuns,
    /// `agno_learnings`
    Learnings,
}

impl TableType {
    /// Every migrated table type, in migration order.
    pub const ALL: [TableType; 8] = [
        TableType::Memories,
        TableType::Sessions,
        TableType::Metrics,
        TableType::Evals,
        TableType::Knowledge,
        TableType::Schedules,
        TableType::ScheduleRuns,
        TableType::Learnings,
    ];

    /// The snake_case name (`schedule_runs`).
    pub fn as_str(self) -> &'static str {
        match self {
            TableType::Memories => "memories",
            TableType::Sessions => "sessions",
            TableType::Metrics => "metrics",
            TableType::Evals => "evals",
            TableType::Knowledge => "knowledge",
            TableType::Schedules => "schedules",
            TableType::ScheduleRuns => "schedule_runs",
            TableType::Learnings => "learnings",
        }
    }

    /// agno's default physical name.
    pub fn default_name(self) -> &'static str {
        crate::Table::from(self).default_name()
    }
}

/// A logical table and its physical name in one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableRef {
    /// Logical type.
    pub table_type: TableType,
    /// Physical name (table, collection, key segment, file stem).
    pub name: String,
}

/// Where a backend keeps its per-table stamps.
#[async_trait]
pub trait SchemaVersionStore: Send + Sync {
    /// The stamp of `table_name`, or `None` when unstamped.
    async fn get_schema_version(&self, table_name: &str) -> Result<Option<SchemaVersion>>;

    /// Stamps `table_name` with `version`.
    async fn set_schema_version(&self, table_name: &str, version: SchemaVersion) -> Result<()>;
}

/// What a step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepOutcome {
    /// It changed data or layout.
    Applied,
    /// There was nothing to change.
    NothingToDo,
}

/// One migration step of one version, for the tables it applies to.
#[async_trait]
pub trait MigrationStep: Send + Sync {
    /// The version this step brings a table to.
    fn version(&self) -> SchemaVersion;
    /// One line saying what it does, for plans and reports.
    fn description(&self) -> String;
    /// Whether it applies to `table`.
    fn applies_to(&self, table: TableType) -> bool;
    /// Migrates `table` up. Must be idempotent and keep legacy data as a backup.
    async fn up(&self, table: &TableRef) -> Result<StepOutcome>;
    /// Reverts `table`, or refuses with `Unsupported` and the reason.
    async fn down(&self, table: &TableRef) -> Result<StepOutcome>;
}

/// A migration lock while it is held.
#[async_trait]
pub trait HeldLock: Send + Sync {
    /// Frees the lock and returns once it is free, so the next migration (in this or
    /// another process) can take it at once. The manager calls it on every exit of
    /// `up()`/`down()`. Dropping a lock without releasing it (a panic, a cancelled future)
    /// must still free it eventually: best effort on drop, or a stale-lock timeout.
    async fn release(self: Box<Self>) -> Result<()>;
}

/// Held while a migration runs; see [`HeldLock`].
pub type MigrationLock = Box<dyn HeldLock>;

/// A lock that dropping frees at once (a file lock, a connection-scoped advisory lock, an
/// in-process mutex guard): `release` just drops it.
pub struct ReleasedOnDrop<T>(pub T);

#[async_trait]
impl<T: Send + Sync> HeldLock for ReleasedOnDrop<T> {
    async fn release(self: Box<Self>) -> Result<()> {
        drop(self);
        Ok(())
    }
}

/// A database the manager can migrate: its tables, stamps, steps and lock.
#[async_trait]
pub trait MigrationTarget: Send + Sync {
    /// The tables to walk, in order.
    fn tables(&self) -> Vec<TableRef>;
    /// Where stamps live.
    fn versions(&self) -> &dyn SchemaVersionStore;
    /// Every registered step (any order; the manager orders them by version, stably).
    fn steps(&self) -> Vec<Arc<dyn MigrationStep>>;
    /// Serializes concurrent migrations (across processes where the backend allows).
    async fn lock(&self) -> Result<MigrationLock>;
    /// Damage found in `table` that no migration repairs (a column every agno release
    /// creates is missing): a `SchemaMismatch` naming it and the repair. `None` when the
    /// table is sound, or the backend cannot tell. [`MigrationManager::up`] refuses to run
    /// (or report "nothing to migrate") over it, and the CLI's `status` reports it.
    fn damage(&self, table: &TableRef) -> Option<Error> {
        let _ = table;
        None
    }
}

/// One step that ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppliedStep {
    /// Physical table.
    pub table: String,
    /// Step version.
    pub version: SchemaVersion,
    /// What it did.
    pub outcome: StepOutcome,
}

/// What `up()`/`down()` did (or, in a [`MigrationFailure`], did before failing).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct MigrationReport {
    /// Steps that ran, in order.
    pub applied: Vec<AppliedStep>,
    /// Tables stamped, with their new version.
    pub stamped: Vec<(String, SchemaVersion)>,
}

/// A failed `up()`/`down()`: the error and what had been applied before it.
#[derive(Debug)]
pub struct MigrationFailure {
    /// The cause; its message names the table and step.
    pub error: Error,
    /// Steps applied and tables stamped before the failure; the failing table is not stamped.
    pub report: MigrationReport,
}

impl fmt::Display for MigrationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.error)?;
        if !self.report.applied.is_empty() {
            let steps: Vec<String> = self
                .report
                .applied
                .iter()
                .map(|s| format!("{} {}", s.table, s.version))
                .collect();
            write!(f, " (applied before the failure: {})", steps.join(", "))?;
        }
        Ok(())
    }
}

impl std::error::Error for MigrationFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<MigrationFailure> for Error {
    fn from(failure: MigrationFailure) -> Error {
        let message = failure.to_string();
        Error::new(failure.error.kind(), message).with_source(failure)
    }
}

/// A table's pending work, from [`MigrationManager::plan`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlannedTable {
    /// Logical type.
    pub table_type: TableType,
    /// Physical name.
    pub table: String,
    /// Stamp now (`None`: unstamped, treated as 2.0.0).
    pub current: Option<SchemaVersion>,
    /// Stamp after `up()`.
    pub target: SchemaVersion,
    /// Steps `up()` would run: version and description.
    pub steps: Vec<(SchemaVersion, String)>,
}

/// Runs a [`MigrationTarget`]'s steps.
pub struct MigrationManager<'a> {
    target: &'a dyn MigrationTarget,
    latest: SchemaVersion,
}

impl<'a> MigrationManager<'a> {
    /// A manager migrating to [`SchemaVersion::LATEST`].
    pub fn new(target: &'a dyn MigrationTarget) -> Self {
        MigrationManager {
            target,
            latest: SchemaVersion::LATEST,
        }
    }

    fn ordered_steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        let mut steps = self.target.steps();
        steps.sort_by_key(|s| s.version());
        steps
    }

    async fn current(&self, table: &TableRef) -> Result<Option<SchemaVersion>> {
        let current = self
            .target
            .versions()
            .get_schema_version(&table.name)
            .await?;
        if let Some(v) = current.filter(|v| *v > self.latest) {
            return Err(Error::new(
                ErrorKind::SchemaMismatch,
                format!(
                    "{} is stamped {v}, newer than the {} this code knows: it was written by a newer Agno or agno-storage. \
                     Upgrade agno-storage; refusing to touch it.",
                    table.name, self.latest
                ),
            ));
        }
        Ok(current)
    }

    /// What `up()` would do, per table, without changing anything.
    pub async fn plan(&self) -> Result<Vec<PlannedTable>> {
        let steps = self.ordered_steps();
        let mut plan = Vec::new();
        for table in self.target.tables() {
            let current = self.current(&table).await?;
            let from = current.unwrap_or(SchemaVersion::UNSTAMPED);
            if from >= self.latest {
                continue;
            }
            plan.push(PlannedTable {
                table_type: table.table_type,
                table: table.name.clone(),
                current,
                target: self.latest,
                steps: steps
                    .iter()
                    .filter(|s| {
                        s.applies_to(table.table_type)
                            && s.version() > from
                            && s.version() <= self.latest
                    })
                    .map(|s| (s.version(), s.description()))
                    .collect(),
            });
        }
        Ok(plan)
    }

    /// Migrates every table to the latest version. Idempotent: a second call changes nothing.
    /// The lock is released before it returns, whatever the outcome.
    pub async fn up(&self) -> Result<MigrationReport, MigrationFailure> {
        let mut report = MigrationReport::default();
        let lock = match self.target.lock().await {
            Ok(lock) => lock,
            Err(error) => return Err(MigrationFailure { error, report }),
        };
        let outcome = self.up_locked(&mut report).await;
        finish(outcome, lock.release().await, report)
    }

    async fn up_locked(&self, report: &mut MigrationReport) -> Result<()> {
        let steps = self.ordered_steps();
        // Damage first: migrating around it, or calling the database current, would only
        // send the caller back and forth between `migrate` and the damaged table's error.
        if let Some(damage) = self
            .target
            .tables()
            .iter()
            .find_map(|t| self.target.damage(t))
        {
            return Err(damage);
        }
        for table in self.target.tables() {
            let from = self
                .current(&table)
                .await?
                .unwrap_or(SchemaVersion::UNSTAMPED);
            if from >= self.latest {
                continue;
            }
            for step in steps.iter().filter(|s| {
                s.applies_to(table.table_type) && s.version() > from && s.version() <= self.latest
            }) {
                let outcome = step.up(&table).await.map_err(|e| {
                    let message = format!(
                        "migration step {} ({}) failed on {}: {}; {} was not stamped",
                        step.version(),
                        step.description(),
                        table.name,
                        e.message(),
                        table.name
                    );
                    Error::new(e.kind(), message).with_source(e)
                })?;
                report.applied.push(AppliedStep {
                    table: table.name.clone(),
                    version: step.version(),
                    outcome,
                });
            }
            self.target
                .versions()
                .set_schema_version(&table.name, self.latest)
                .await?;
            report.stamped.push((table.name.clone(), self.latest));
        }
        Ok(())
    }

    /// Reverts every table above `target` (only `table` when given) by running the steps
    /// between, newest first. A step that cannot be reverted (the learnings re-key) stops it
    /// with `Unsupported`, leaving that table's stamp unchanged. The lock is released before
    /// it returns.
    pub async fn down(
        &self,
        target: SchemaVersion,
        table: Option<TableType>,
    ) -> Result<MigrationReport, MigrationFailure> {
        let mut report = MigrationReport::default();
        let lock = match self.target.lock().await {
            Ok(lock) => lock,
            Err(error) => return Err(MigrationFailure { error, report }),
        };
        let outcome = self.down_locked(target, table, &mut report).await;
        finish(outcome, lock.release().await, report)
    }

    async fn down_locked(
        &self,
        target: SchemaVersion,
        only: Option<TableType>,
        report: &mut MigrationReport,
    ) -> Result<()> {
        let mut steps = self.ordered_steps();
        steps.reverse();
        for table in self
            .target
            .tables()
            .into_iter()
            .filter(|t| only.is_none_or(|o| o == t.table_type))
        {
            let from = self
                .current(&table)
                .await?
                .unwrap_or(SchemaVersion::UNSTAMPED);
            if from <= target {
                continue;
            }
            for step in steps.iter().filter(|s| {
                s.applies_to(table.table_type) && s.version() > target && s.version() <= from
            }) {
                let outcome = step.down(&table).await?;
                report.applied.push(AppliedStep {
                    table: table.name.clone(),
                    version: step.version(),
                    outcome,
                });
            }
            self.target
                .versions()
                .set_schema_version(&table.name, target)
                .await?;
            report.stamped.push((table.name.clone(), target));
        }
        Ok(())
    }
}

/// The result of a locked run: its own error first; otherwise a failed release, which says
/// the work itself is done. (The error type is `up()`'s public one, hence the allow.)
#[allow(clippy::result_large_err)]
fn finish(
    outcome: Result<()>,
    released: Result<()>,
    report: MigrationReport,
) -> Result<MigrationReport, MigrationFailure> {
    match (outcome, released) {
        (Err(error), _) => Err(MigrationFailure { error, report }),
        (Ok(()), Err(e)) => Err(MigrationFailure {
            error: Error::new(
                e.kind(),
                format!(
                    "the migration finished, but its lock could not be released: {}; \
                     the next migration waits until the lock goes stale",
                    e.message()
                ),
            )
            .with_source(e),
            report,
        }),
        (Ok(()), Ok(())) => Ok(report),
    }
}

/// The shared v3.0.0 sessions step: copies legacy runs blobs into the runs store without
/// overwriting newer runs, keeping the blobs as a backup.
pub struct CopyLegacyRunsStep {
    store: Arc<dyn LegacyRunsStore>,
}

impl CopyLegacyRunsStep {
    /// A step over `store`.
    pub fn new(store: Arc<dyn LegacyRunsStore>) -> Self {
        CopyLegacyRunsStep { store }
    }
}

#[async_trait]
impl MigrationStep for CopyLegacyRunsStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::new(3, 0, 0)
    }
    fn description(&self) -> String {
        "copy legacy session runs blobs into the runs table (blobs kept as backup)".into()
    }
    fn applies_to(&self, table: TableType) -> bool {
        table == TableType::Sessions
    }
    async fn up(&self, _table: &TableRef) -> Result<StepOutcome> {
        let (_, inserted) = copy_legacy_runs(self.store.as_ref(), 50).await?;
        Ok(if inserted > 0 {
            StepOutcome::Applied
        } else {
            StepOutcome::NothingToDo
        })
    }
    async fn down(&self, _table: &TableRef) -> Result<StepOutcome> {
        // The blobs were never removed, so the pre-v3 layout is intact; the runs table stays
        // (it may hold runs written since) and a later up() copies without duplicating.
        Ok(StepOutcome::NothingToDo)
    }
}

/// The shared v3.0.0 learnings step: re-keys user entity memories per user.
pub struct RekeyLearningsStep {
    store: Arc<dyn LearningStore>,
}

impl RekeyLearningsStep {
    /// A step over `store`.
    pub fn new(store: Arc<dyn LearningStore>) -> Self {
        RekeyLearningsStep { store }
    }
}

#[async_trait]
impl MigrationStep for RekeyLearningsStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::new(3, 0, 0)
    }
    fn description(&self) -> String {
        "re-key entity memories of namespace 'user' per user".into()
    }
    fn applies_to(&self, table: TableType) -> bool {
        table == TableType::Learnings
    }
    async fn up(&self, _table: &TableRef) -> Result<StepOutcome> {
        let report = rekey_user_entity_learnings(self.store.as_ref()).await?;
        Ok(if report.rekeyed + report.merged + report.quarantined > 0 {
            StepOutcome::Applied
        } else {
            StepOutcome::NothingToDo
        })
    }
    async fn down(&self, table: &TableRef) -> Result<StepOutcome> {
        Err(Error::new(
            ErrorKind::Unsupported,
            format!("The entity_memory re-key on table {} cannot be reverted: the pre-3.0 key is shared across users", table.name),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_order() {
        let v: SchemaVersion = "2.5.6".parse().unwrap();
        assert!(v < SchemaVersion::LATEST);
        assert_eq!(
            "v3.0.0".parse::<SchemaVersion>().unwrap(),
            SchemaVersion::LATEST
        );
        assert!("three".parse::<SchemaVersion>().is_err());
        assert_eq!(SchemaVersion::LATEST.to_string(), "3.0.0");
    }
}
