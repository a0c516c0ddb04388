//! `migrate`: plans (`--dry-run`) or applies the schema migrations of every table.

use std::fmt::Write as _;
use std::io::IsTerminal as _;

use agno_storage_core::migration::{MigrationFailure, MigrationReport, StepOutcome};
use agno_storage_core::{AgnoDb, MigrationManager, SchemaVersion};
use indicatif::{ProgressBar, ProgressStyle};

use crate::status::table_type_name;
use crate::target::{self, BackendUrl};
use crate::Error;

/// A spinner with elapsed time on stderr while `up()` runs (a migration of a large
/// database takes minutes); hidden when stderr is not a terminal.
fn spinner(message: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// Prints the plan when `dry_run`, otherwise runs `up()` and prints what it did. A dry run
/// opens the database without creating anything (a missing or empty one is an error);
/// `up()` creates what is missing.
pub async fn run(url: &BackendUrl, dry_run: bool) -> Result<String, Error> {
    let db = if dry_run {
        target::open_existing(url).await?
    } else {
        target::open(url).await?
    };
    migrate(&db, &url.to_string(), dry_run).await
}

/// [`run`] on an open database; `url` is only printed.
pub async fn migrate(db: &AgnoDb, url: &str, dry_run: bool) -> Result<String, Error> {
    let migrations = db.migrations()?;
    let manager = MigrationManager::new(migrations);
    let tables = migrations.tables().len();
    let latest = SchemaVersion::LATEST;
    if dry_run {
        let plan = manager.plan().await?;
        if plan.is_empty() {
            return Ok(format!(
                "Nothing to migrate: all {tables} tables of {url} are at {latest}.\n"
            ));
        }
        let mut out = format!("Migration plan for {url} (dry run, nothing changed):\n");
        for table in &plan {
            let current = table.current.map_or_else(
                || format!("unstamped ({})", SchemaVersion::UNSTAMPED),
                |v| v.to_string(),
            );
            let _ = write!(
                out,
                "  {} ({}): {current} -> {}",
                table.table,
                table_type_name(table.table_type),
                table.target
            );
            if table.steps.is_empty() {
                out.push_str(", stamp only\n");
            } else {
                out.push('\n');
                for (version, description) in &table.steps {
                    let _ = writeln!(out, "      step {version}: {description}");
                }
            }
        }
        let current = tables.saturating_sub(plan.len());
        if current > 0 {
            let _ = writeln!(out, "  {current} other table(s) already at {latest}");
        }
        return Ok(out);
    }
    let spinner = spinner(&format!("migrating {tables} tables of {url}"));
    let report = manager.up().await;
    spinner.finish_and_clear();
    let report = report.map_err(failure_message)?;
    if report.applied.is_empty() && report.stamped.is_empty() {
        return Ok(format!(
            "Nothing to migrate: all {tables} tables of {url} are at {latest}.\n"
        ));
    }
    let mut out = format!("Migrated {url} to {latest}:\n");
    for step in &report.applied {
        let outcome = match step.outcome {
            StepOutcome::Applied => "applied",
            StepOutcome::NothingToDo => "nothing to do",
        };
        let _ = writeln!(out, "  step {} on {}: {outcome}", step.version, step.table);
    }
    let _ = writeln!(out, "  stamped {}", stamped(&report));
    Ok(out)
}

/// `a 3.0.0, b 3.0.0`, or `no table`.
fn stamped(report: &MigrationReport) -> String {
    if report.stamped.is_empty() {
        return "no table".to_owned();
    }
    report
        .stamped
        .iter()
        .map(|(table, version)| format!("{table} {version}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line: the cause, the steps applied and the tables stamped before it.
fn failure_message(failure: MigrationFailure) -> Error {
    // MigrationFailure's Display names the error and the steps applied before it.
    let mut message = format!("migration failed: {failure}");
    if !failure.report.stamped.is_empty() {
        let _ = write!(
            message,
            "; stamped before the failure: {}",
            stamped(&failure.report)
        );
    }
    Error::new(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agno_storage_core::migration::AppliedStep;
    use agno_storage_core::{Error as CoreError, ErrorKind, Session, SessionType};
    use agno_storage_doc::InMemoryDb;
    use serde_json::json;

    async fn legacy_db() -> AgnoDb {
        let memory = InMemoryDb::new_legacy();
        let session = Session::new("s1", SessionType::Agent, "a1").with_user("alice");
        memory
            .insert_legacy_session(session, json!([{"run_id": "r1", "agent_id": "a1"}]))
            .await
            .unwrap();
        memory.agno_db()
    }

    #[tokio::test]
    async fn plans_then_applies_then_has_nothing_to_do() {
        let db = legacy_db().await;
        let plan = migrate(&db, "memory://", true).await.unwrap();
        assert!(plan.contains("agno_sessions (sessions): unstamped (2.0.0) -> 3.0.0\n      step 3.0.0: copy legacy"), "{plan}");
        assert!(
            plan.contains("agno_memories (memories): unstamped (2.0.0) -> 3.0.0, stamp only"),
            "{plan}"
        );
        let report = migrate(&db, "memory://", false).await.unwrap();
        assert!(
            report.contains("step 3.0.0 on agno_sessions: applied"),
            "{report}"
        );
        assert!(report.contains("agno_learnings 3.0.0"), "{report}");
        let again = migrate(&db, "memory://", false).await.unwrap();
        assert!(again.starts_with("Nothing to migrate"), "{again}");
    }

    #[test]
    fn failure_is_one_line_with_what_was_applied() {
        let failure = MigrationFailure {
            error: CoreError::new(ErrorKind::Unavailable, "connection reset"),
            report: MigrationReport {
                applied: vec![AppliedStep {
                    table: "agno_sessions".into(),
                    version: SchemaVersion::LATEST,
                    outcome: StepOutcome::Applied,
                }],
                stamped: vec![("agno_memories".into(), SchemaVersion::LATEST)],
            },
        };
        let message = failure_message(failure).to_string();
        assert_eq!(
            message,
            "migration failed: connection reset (applied before the failure: agno_sessions 3.0.0); \
             stamped before the failure: agno_memories 3.0.0"
        );
    }
}
