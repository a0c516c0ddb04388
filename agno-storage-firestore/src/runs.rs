//! Firestore's run-index counter and the run writes that use it (the rest of the runs store
//! is `agno-storage-doc`'s).
//!
//! A run appended without a `run_index` gets one past the session's highest through a
//! per-session counter document: one server-side `increment` whose result is the index (a
//! single-document atomic transform, so concurrent appends never share an index and never
//! contend on a lock). The counter is seeded from the runs already stored only when it is
//! missing, so an append's cost does not grow with the session's history.

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::{now_epoch_seconds, Error, ErrorKind, Result, RunRecord};
use agno_storage_doc::{run_counter_id, updated_run, DocBackend, Docs, Table};
use firestore::gcloud_sdk::google::firestore::v1::document_transform::field_transform::TransformType;
use serde_json::Value;

use crate::doc::{backoff, from_pb, to_pb, Commit, Pre, CAS_ATTEMPTS};
use crate::FirestoreDb;

impl FirestoreDb {
    /// The next free `run_index` of `session_id`, taken atomically: one server-side
    /// `increment` of the session's counter document (a single-document atomic transform,
    /// so concurrent appends never share an index and never contend on a lock), whose
    /// result is the index. The write requires the counter to exist, so an append costs one
    /// write whatever the number of runs stored.
    ///
    /// Only a missing counter is seeded, once, from the highest index among the session's
    /// stored runs (a server-side `maximum`, so racing seeders agree). Indexes this crate
    /// writes without the counter (explicit `run_index`, the v3 migration's copies) raise an
    /// existing counter ([`FirestoreDb::raise_run_counter`]); runs another writer (agno
    /// itself) adds to a session whose counter exists do not move it. agno numbers runs by
    /// their position in the session, so such a mix may share an index; reads order equal
    /// indexes by `created_at`.
    async fn next_run_index(&self, session_id: &str) -> Result<i64> {
        let meta = self.collection(Table::Meta);
        let id = run_counter_id(session_id);
        for attempt in 0..CAS_ATTEMPTS {
            let bump = self.transform_if(
                meta,
                &id,
                vec![("next", TransformType::Increment(to_pb(&Value::from(1))))],
                Pre::At(None),
            );
            if let Some(results) = self.commit_results("next run index", vec![bump]).await? {
                return results
                    .into_iter()
                    .next()
                    .and_then(|r| r.transform_results.into_iter().next())
                    .map(from_pb)
                    .and_then(|v| v.as_i64())
                    .map(|n| n - 1)
                    .ok_or_else(|| {
                        Error::new(ErrorKind::Unexpected, "run index counter returned no value")
                    });
            }
            // No counter yet: seed it from the stored runs, then take an index.
            let highest = Docs::of(self).next_stored_run_index(session_id).await? - 1;
            let seed = self.transform_if(
                meta,
                &id,
                vec![(
                    "next",
                    TransformType::Maximum(to_pb(&Value::from(highest + 1))),
                )],
                Pre::Any,
            );
            self.commit_all("next run index", vec![seed]).await?;
            if attempt > 0 {
                backoff(attempt).await;
            }
        }
        Err(self.contended("next run index"))
    }

    /// Moves the counter of `session_id` to at least `next` when it exists (a server-side
    /// `maximum`; a missing counter is seeded from the stored runs on the next append,
    /// which sees these): for indexes this crate writes without taking them from the counter.
    pub(crate) async fn raise_run_counter(&self, session_id: &str, next: i64) -> Result<()> {
        let raise = self.transform_if(
            self.collection(Table::Meta),
            &run_counter_id(session_id),
            vec![("next", TransformType::Maximum(to_pb(&Value::from(next))))],
            Pre::At(None),
        );
        // `Conflict` here is the missing counter: nothing to raise.
        self.commit("raise run index counter", vec![raise]).await?;
        Ok(())
    }

    /// [`DocBackend::write_run`]: an explicit `run_index` raises the counter first, a
    /// missing one is taken from it.
    pub(crate) async fn write_run_counted(&self, run: RunRecord) -> Result<RunRecord> {
        let session = Docs::of(self).find_session(&run.session_id).await?;
        run.check_session(
            session
                .as_ref()
                .map(|s| s.fields.get("user_id").and_then(Value::as_str)),
        )?;
        let coll = self.collection(Table::Runs);
        let id = self.doc_id(&run.run_id);
        let mut index: Option<i64> = None;
        for attempt in 0..CAS_ATTEMPTS {
            let now = now_epoch_seconds();
            let (next, pre) = match self.get(coll, &id).await? {
                Some(stored) => {
                    let mut current = updated_run(stored.decode("a run")?, &run, now)?;
                    if let (None, Some(given)) = (current.run_index, run.run_index) {
                        self.raise_run_counter(&current.session_id, given + 1)
                            .await?;
                        current.run_index = Some(given);
                    }
                    (current, stored.unchanged())
                }
                None => {
                    let mut new = run.clone();
                    match new.run_index {
                        Some(given) => self.raise_run_counter(&run.session_id, given + 1).await?,
                        None => {
                            if index.is_none() {
                                index = Some(self.next_run_index(&run.session_id).await?);
                            }
                            new.run_index = index;
                        }
                    }
                    new.updated_at = Some(now);
                    (new, Pre::Absent)
                }
            };
            let write = self.put(coll, &id, &self.to_fields(&next, "a run")?, pre);
            match self.commit("upsert run", vec![write]).await? {
                Commit::Done => return Ok(next),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("upsert run"))
    }

    /// [`DocBackend::copy_legacy_runs`]: raises the counters past the copied indexes, then
    /// writes each run create-only.
    pub(crate) async fn copy_runs_counted(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        // Raise the sessions' run counters first, so an append racing the copy cannot take
        // an index a copied run is about to hold.
        for (session_id, next) in agno_storage_doc::next_indexes_after(&rows) {
            self.raise_run_counter(session_id, next).await?;
        }
        // Create-only writes: a run already stored (newer than its legacy copy) is kept as it
        // is, unlike agno 3.1.10's `batch.set`, which reverts it.
        let mut outcome = InsertedRuns::default();
        for row in &rows {
            let write = self.put(
                self.collection(Table::Runs),
                &self.doc_id(&row.run_id),
                &self.to_fields(row, "a run")?,
                Pre::Absent,
            );
            if let Commit::Done = self.commit("copy legacy runs", vec![write]).await? {
                outcome.inserted += 1;
            }
            outcome.present += 1;
        }
        Ok(outcome)
    }
}
