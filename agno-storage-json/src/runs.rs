//! The engine's hooks whose default commits span tables, as JSON files do them: one
//! read-modify-write of `agno_runs.json` per run write or legacy copy (the session's next
//! `run_index` is one past the highest in the file, read in the same cycle, so no counter
//! document is kept and runs agno writes are counted too), and a session's delete as two
//! file writes, the session, then its runs, as agno's `JsonDb` deletes them.

use std::collections::HashSet;

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::{now_epoch_seconds, visible_to, Result, RunRecord};
use agno_storage_doc::{updated_run, DocBackend};
use serde_json::Value;

use crate::backend::JsonFiles;
use crate::files::{undecodable, undecodable_field, undecodable_raw_field, Step, Table};
use crate::rows::{layout, text};

/// The row of run `run_id` (one kept undecoded included).
fn run_position(rows: &[Value], run_id: &str) -> Option<usize> {
    rows.iter().position(|r| {
        text(r, "run_id") == Some(run_id)
            || (undecodable(r).is_some()
                && undecodable_field(r, "run_id").as_deref() == Some(run_id))
    })
}

/// One past the highest `run_index` of `session_id` in `rows` (0 for none).
fn next_index(rows: &[Value], session_id: &str) -> i64 {
    rows.iter()
        .filter_map(|r| match undecodable(r) {
            None => (text(r, "session_id") == Some(session_id))
                .then(|| r.get("run_index").and_then(Value::as_i64))
                .flatten(),
            // A row kept undecoded still holds its place in the session.
            Some(_) => (undecodable_field(r, "session_id").as_deref() == Some(session_id))
                .then(|| undecodable_raw_field(r, "run_index")?.parse().ok())
                .flatten(),
        })
        .max()
        .map_or(0, |m| m + 1)
}

/// A run as its row, over the row it replaces.
fn run_row(db: &JsonFiles, run: &RunRecord, existing: Option<&Value>) -> Result<Value> {
    Ok(layout(Table::Runs, db.to_fields(run, "a run")?, existing))
}

/// [`DocBackend::write_run`]: the session's owner is checked, then the run is written in
/// one cycle of the runs file, its `run_index` one past the session's highest.
pub(crate) async fn write_run(db: &JsonFiles, run: RunRecord) -> Result<RunRecord> {
    let sessions = db.files.load(Table::Sessions).await?;
    let owner = sessions
        .iter()
        .find(|r| text(r, "session_id") == Some(run.session_id.as_str()))
        .map(|r| text(r, "user_id"));
    run.check_session(owner)?;
    let now = now_epoch_seconds();
    db.files
        .modify(Table::Runs, |rows| {
            let (next, at) = match run_position(rows, &run.run_id) {
                Some(i) => {
                    let stored: RunRecord = db
                        .decode_fields(crate::rows::view(Table::Runs, rows[i].clone())?, "a run")?;
                    let mut current = updated_run(stored, &run, now)?;
                    current.run_index = current.run_index.or(run.run_index);
                    (current, Some(i))
                }
                None => {
                    let mut new = run.clone();
                    new.run_index = new
                        .run_index
                        .or_else(|| Some(next_index(rows, &run.session_id)));
                    new.updated_at = Some(now);
                    (new, None)
                }
            };
            match at {
                Some(i) => rows[i] = run_row(db, &next, Some(&rows[i]))?,
                None => rows.push(run_row(db, &next, None)?),
            }
            Ok(Step::Write(next))
        })
        .await
}

/// [`DocBackend::copy_legacy_runs`]: every run not yet stored, appended in one cycle of the
/// runs file (a stored run, newer than its legacy copy, is kept).
pub(crate) async fn copy_runs(db: &JsonFiles, runs: Vec<RunRecord>) -> Result<InsertedRuns> {
    db.files
        .modify(Table::Runs, |rows| {
            let mut stored: HashSet<String> = rows
                .iter()
                .filter_map(|r| text(r, "run_id").map(str::to_owned))
                .collect();
            let mut outcome = InsertedRuns::default();
            for run in &runs {
                if stored.insert(run.run_id.clone()) {
                    rows.push(run_row(db, run, None)?);
                    outcome.inserted += 1;
                }
                outcome.present += 1;
            }
            Ok(Step::when(outcome.inserted > 0, outcome))
        })
        .await
}

/// [`DocBackend::delete_session`]: the session's row when `user_id` may see it, then its
/// runs.
pub(crate) async fn delete_session(
    db: &JsonFiles,
    session_id: &str,
    user_id: Option<&str>,
) -> Result<bool> {
    let deleted = db
        .files
        .modify(Table::Sessions, |rows| {
            let before = rows.len();
            rows.retain(|r| {
                !(text(r, "session_id") == Some(session_id)
                    && visible_to(text(r, "user_id"), user_id))
            });
            let deleted = rows.len() != before;
            Ok(Step::when(deleted, deleted))
        })
        .await?;
    if deleted {
        db.files
            .modify(Table::Runs, |rows| {
                let before = rows.len();
                rows.retain(|r| text(r, "session_id") != Some(session_id));
                Ok(Step::when(rows.len() != before, ()))
            })
            .await?;
    }
    Ok(deleted)
}
