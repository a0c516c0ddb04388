//! SurrealDB's run-index counter and the run writes that use it (the rest of the runs store
//! is `agno-storage-doc`'s). Runs are records `agno_runs:⟨run_id⟩`, agno's
//! `build_single_run_row` shape with `datetime` timestamps.
//!
//! A run appended without a `run_index` gets one from a per-session counter record in the
//! meta table, bumped by one atomic `UPDATE … SET next += 1` (O(1); a counter never seeded
//! is seeded once from the runs already stored). Every run write raises a seeded counter
//! past its `run_index`, so explicit indexes and migrated runs are never handed out again.
//! The run itself is written in a transaction that re-checks its session (still there, same owner) and the run record it read.

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::{now_epoch_seconds, Error, ErrorKind, Result, RunRecord};
use agno_storage_doc::{run_counter_id, updated_run, DocBackend, Docs, Table};
use surrealdb::types::{Number, Value as SValue};

use crate::doc::{backoff, rid, Commit, Pre, CAS_ATTEMPTS};
use crate::SurrealDb;

impl SurrealDb {
    /// The next free `run_index` of `session_id`, taken atomically: one `UPDATE` bumping the
    /// session's counter; only a counter never seeded is seeded from the runs stored (one
    /// past the highest `run_index`).
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let counter = rid(self.collection(Table::Meta), &run_counter_id(session_id));
        let next_of = |values: Vec<SValue>| -> Option<i64> {
            let row = match values.into_iter().next()? {
                SValue::Array(a) => a.into_iter().next()?,
                other => other,
            };
            match row {
                SValue::Object(o) => match o.get("next") {
                    Some(SValue::Number(Number::Int(n))) => Some(*n),
                    _ => None,
                },
                _ => None,
            }
        };
        for attempt in 0..CAS_ATTEMPTS {
            let bumped = self
                .run(
                    "next run index",
                    "UPDATE $c SET next += 1 WHERE next != NONE RETURN AFTER;",
                    vec![("c".into(), counter.clone())],
                )
                .await;
            let seeded = match bumped {
                Ok(values) => match next_of(values) {
                    Some(n) => return Ok(n - 1),
                    None => {
                        let floor = Docs::of(self).next_stored_run_index(session_id).await?;
                        self.run(
                            "next run index",
                            "UPSERT ONLY $c SET next = math::max([next OR 0, $floor]) + 1, \
                             session_id = $sid RETURN AFTER;",
                            vec![
                                ("c".into(), counter.clone()),
                                ("floor".into(), SValue::Number(Number::Int(floor))),
                                ("sid".into(), SValue::String(session_id.to_owned())),
                            ],
                        )
                        .await
                    }
                },
                Err(e) => Err(e),
            };
            match seeded {
                Ok(values) => {
                    return next_of(values).map(|n| n - 1).ok_or_else(|| {
                        Error::new(ErrorKind::Unexpected, "run index counter returned no value")
                    })
                }
                Err(e) if e.kind() == ErrorKind::Conflict => backoff(attempt).await,
                Err(e) => return Err(e),
            }
        }
        Err(self.contended("next run index"))
    }

    /// [`DocBackend::write_run`]: one transaction that re-checks the session, touches its
    /// run-index counter and writes the run.
    pub(crate) async fn write_run_checked(&self, run: RunRecord) -> Result<RunRecord> {
        let coll = self.collection(Table::Runs);
        let id = run.run_id.clone();
        let mut index: Option<i64> = None;
        for attempt in 0..CAS_ATTEMPTS {
            // The session is read here and re-checked in the run's transaction: a run goes
            // only into an existing session that is unowned or the writer's.
            let Some(session) = Docs::of(self).find_session(&run.session_id).await? else {
                return Err(run.missing_session());
            };
            run.check_session(Some(session.str("user_id")))?;
            let now = now_epoch_seconds();
            let (next, pre) = match self.get(coll, &id).await? {
                Some(stored) => {
                    let mut current = updated_run(stored.decode("a run")?, &run, now)?;
                    current.run_index = current.run_index.or(run.run_index);
                    (current, stored.unchanged())
                }
                None => {
                    let mut new = run.clone();
                    if new.run_index.is_none() {
                        if index.is_none() {
                            index = Some(self.next_run_index(&run.session_id).await?);
                        }
                        new.run_index = index;
                    }
                    new.updated_at = Some(now);
                    (new, Pre::Absent)
                }
            };
            let writes = vec![
                self.check(
                    self.collection(Table::Sessions),
                    &session.id,
                    session.unchanged(),
                ),
                // Conflicts with a concurrent `delete_sessions`, which deletes the counter.
                self.touch(
                    self.collection(Table::Meta),
                    &run_counter_id(&run.session_id),
                    next.run_index,
                ),
                self.put(coll, &id, &self.to_fields(&next, "a run")?, pre),
            ];
            match self.commit("upsert run", writes).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert run"))
    }

    /// [`DocBackend::copy_legacy_runs`]: each run create-only, in a transaction that touches
    /// its session's run-index counter.
    pub(crate) async fn copy_runs_checked(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        // Create-only writes: a run already stored (newer than its legacy copy) is kept as it
        // is, unlike agno 3.1.10's `UPSERT`, which reverts it. A conflict is "present" only
        // once the run is seen stored; a lost transaction is retried, and an error aborts
        // the step before it is stamped.
        let mut outcome = InsertedRuns::default();
        for row in &rows {
            let fields = self.to_fields(row, "a run")?;
            let mut settled = false;
            for attempt in 0..CAS_ATTEMPTS {
                let writes = vec![
                    self.put(
                        self.collection(Table::Runs),
                        &row.run_id,
                        &fields,
                        Pre::Absent,
                    ),
                    self.touch(
                        self.collection(Table::Meta),
                        &run_counter_id(&row.session_id),
                        row.run_index,
                    ),
                ];
                match self.commit("copy legacy runs", writes).await? {
                    Commit::Done => {
                        outcome.inserted += 1;
                        settled = true;
                    }
                    Commit::Conflict => {
                        if self
                            .get(self.collection(Table::Runs), &row.run_id)
                            .await?
                            .is_some()
                        {
                            settled = true;
                        } else {
                            backoff(attempt).await;
                        }
                    }
                }
                if settled {
                    break;
                }
            }
            if !settled {
                return Err(self.contended("copy legacy runs"));
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }
}
