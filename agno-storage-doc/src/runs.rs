//! Runs (`agno_runs`): one document per run, document id = [`DocBackend::doc_id`] of
//! `run_id`, agno's `build_single_run_row` shape.
//!
//! A run appended without a `run_index` gets one past the session's highest through a
//! per-session counter document in the meta collection ([`run_counter_id`]); writing a run
//! is [`DocBackend::write_run`]: by default [`write_run_cas`], overridden where the backend
//! has its own atomic counter.

use agno_storage_core::legacy::{legacy_runs_list, InsertedRuns, SessionRun};
use agno_storage_core::{
    async_trait, json, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Error,
    ErrorKind, Page, Result, RunJson, RunQuery, RunRecord, RunStore, Unreadable,
};
use serde_json::Value;

use crate::backend::given;
use crate::{
    backoff, digest_id, opt, Commit, DocBackend, Docs, Pre, Stored, Table, CAS_ATTEMPTS,
    LEGACY_RUNS,
};

/// The next free `run_index` of each session among `rows` (one past its highest given
/// index): where a legacy-run copy raises the sessions' counters before it writes, so an
/// append racing the copy cannot take an index a copied run is about to hold.
pub fn next_indexes_after(rows: &[RunRecord]) -> Vec<(&str, i64)> {
    let mut next: Vec<(&str, i64)> = Vec::new();
    for row in rows {
        let Some(index) = row.run_index else { continue };
        match next.iter_mut().find(|(sid, _)| *sid == row.session_id) {
            Some((_, top)) => *top = (*top).max(index + 1),
            None => next.push((&row.session_id, index + 1)),
        }
    }
    next
}

/// The meta document holding `session_id`'s next `run_index`.
pub fn run_counter_id(session_id: &str) -> String {
    digest_id("run_index", &[Some(session_id)])
}

impl<B: DocBackend> Docs<B> {
    /// Every run document of `session_id`.
    pub(crate) async fn session_run_docs(&self, session_id: &str) -> Result<Vec<Stored<B>>> {
        self.query(
            self.collection(Table::Runs),
            &[("session_id", opt(Some(session_id)))],
        )
        .await
    }

    /// Every run of `session_id` as a session read hands it over, in session order: a run
    /// this code cannot decode comes as its `run_data` text (see [`RunJson`]), so it does
    /// not fail the read.
    pub async fn session_runs(&self, session_id: &str) -> Result<Vec<SessionRun>> {
        let mut runs = Vec::new();
        for doc in self.session_run_docs(session_id).await? {
            runs.push(match decode_run(&doc) {
                Ok(run) => SessionRun::from(run),
                Err(e) => undecoded_session_run(&doc).ok_or(e)?,
            });
        }
        Ok(runs)
    }

    /// One past the highest `run_index` stored for `session_id` (0 for none), read from the
    /// documents without decoding them.
    pub async fn next_stored_run_index(&self, session_id: &str) -> Result<i64> {
        Ok(self
            .session_run_docs(session_id)
            .await?
            .iter()
            .filter_map(|d| d.fields.get("run_index").and_then(Value::as_i64))
            .max()
            .map_or(0, |top| top + 1))
    }
}

/// The `run_data` JSON text a backend that stores it as text could not parse: it hands
/// that text over as a string in place of the dict (see [`DocBackend::get`]).
fn unparsed_run_data(data: &Value) -> Option<&str> {
    data.as_str().filter(|t| t.trim_start().starts_with('{'))
}

/// A run document as a record: an error naming the run when its fields do not decode, its
/// `run_data` is text that does not parse, or it is nested deeper than [`json::MAX_DEPTH`]
/// (what agno's Python reads).
pub(crate) fn decode_run<B: DocBackend>(doc: &Stored<B>) -> Result<RunRecord> {
    if let Some(data) = doc.fields.get("run_data") {
        if let Some(text) = unparsed_run_data(data) {
            let why = json::from_str::<Value>(text)
                .err()
                .map_or_else(|| "not a JSON object".to_owned(), |e| e.to_string());
            return Err(Error::new(
                ErrorKind::Serialization,
                format!("cannot decode run {}'s run_data: {why}", doc.id),
            )
            .with_backend(B::BACKEND));
        }
        json::check_depth("run_data", data, json::MAX_DEPTH).map_err(|e| {
            Error::new(
                ErrorKind::Serialization,
                format!("cannot decode run {}: {}", doc.id, e.message()),
            )
            .with_backend(B::BACKEND)
        })?;
    }
    doc.decode("a run")
}

/// A run that does not decode, as a session read hands it over: its `run_data` as text,
/// when its id and data can be read at all.
fn undecoded_session_run<B: DocBackend>(doc: &Stored<B>) -> Option<SessionRun> {
    let run_id = doc.str("run_id")?.to_owned();
    let data = doc.fields.get("run_data")?;
    let text = match unparsed_run_data(data) {
        Some(text) => text.to_owned(),
        None => serde_json::to_string(data).ok()?,
    };
    let number = |name: &str| doc.fields.get(name).and_then(Value::as_i64);
    Some(SessionRun {
        run_id,
        run_index: number("run_index"),
        created_at: number("created_at").unwrap_or_default(),
        run: RunJson::from_stored_text(text).ok()?,
    })
}

#[async_trait]
impl<B: DocBackend> RunStore for Docs<B> {
    async fn upsert_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.write_run(run).await
    }

    async fn get_run(&self, run_id: &str, user_id: Option<&str>) -> Result<Option<RunRecord>> {
        let Some(stored) = self
            .get(self.collection(Table::Runs), &self.doc_id(run_id))
            .await?
        else {
            return Ok(None);
        };
        let run = decode_run(&stored)?;
        Ok((run.run_id == run_id && visible_to(run.user_id.as_deref(), user_id)).then_some(run))
    }

    async fn get_runs(&self, query: RunQuery) -> Result<Page<RunRecord>> {
        query.pagination.validate()?;
        let eq = given(&[
            ("session_id", query.session_id.as_deref()),
            ("user_id", query.user_id.as_deref()),
        ]);
        let docs = self.query(self.collection(Table::Runs), &eq).await?;
        let (mut rows, mut unreadable) = (Vec::new(), Vec::new());
        for d in &docs {
            match decode_run(d) {
                Ok(r) if query.matches(&r) => rows.push(r),
                Ok(_) => {}
                // A run this code cannot decode is named, not fatal to the list, to a caller
                // who may see it (its owner as far as it can be read, or unscoped).
                Err(e) if visible_to(d.str("user_id"), query.user_id.as_deref()) => unreadable
                    .push(Unreadable {
                        id: d.str("run_id").unwrap_or(&d.id).to_owned(),
                        error: e.to_string(),
                    }),
                Err(_) => {}
            }
        }
        let mut page = query.page(rows)?;
        page.unreadable = unreadable;
        Ok(page)
    }

    async fn delete_runs(&self, run_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        // Owners are read from the fields, not decoded: a run this code cannot decode can
        // still be deleted by its owner.
        let deleted = self
            .delete_all_visible(Table::Runs, "run_id", run_ids, user_id, "delete runs")
            .await?;
        // Scrub the legacy blobs of sessions the caller may see, by compare-and-set, so a merge
        // cannot resurrect the runs (agno's `FirestoreDb` scrubs a document id that does not
        // exist, its `SurrealDb` by a read-then-write that can lose a concurrent update).
        let scrub: std::collections::HashSet<&str> = run_ids.iter().map(String::as_str).collect();
        for stored in self.0.legacy_sessions(user_id).await? {
            if stored.fields.get(LEGACY_RUNS).is_none_or(Value::is_null) {
                continue;
            }
            // A session still contended after every attempt is left as it is.
            self.rewrite_session(stored, "delete runs", |current| {
                let (s, legacy) = self.decode_session(current)?;
                if !visible_to(s.user_id.as_deref(), user_id) {
                    return Ok(None);
                }
                let list = legacy_runs_list(legacy.as_ref());
                let kept: Vec<Value> = list
                    .iter()
                    .filter(|r| {
                        r.get("run_id")
                            .and_then(Value::as_str)
                            .is_none_or(|id| !scrub.contains(id))
                    })
                    .cloned()
                    .collect();
                if kept.len() == list.len() {
                    return Ok(None);
                }
                let mut fields = current.fields.clone();
                fields.insert(LEGACY_RUNS.into(), Value::Array(kept));
                Ok(Some(fields))
            })
            .await?;
        }
        Ok(deleted)
    }
}

/// `current` updated by an upsert of `run` at `now` (status, data, owner when given, parent);
/// `run_index` is left to the caller. `PermissionDenied` when `run` is another user's write.
pub fn updated_run(mut current: RunRecord, run: &RunRecord, now: i64) -> Result<RunRecord> {
    if !writable_by(current.user_id.as_deref(), run.user_id.as_deref()) {
        return Err(owned_by_another_user("run", &run.run_id));
    }
    current.status = run.status.clone();
    current.run_data = run.run_data.clone();
    if run.user_id.is_some() {
        current.user_id = run.user_id.clone();
    }
    current.parent_run_id = run.parent_run_id.clone();
    current.updated_at = Some(now);
    Ok(current)
}

/// A session's run-index counter as read, and the write that moves it to `next`.
struct Counter<B: DocBackend> {
    next: Option<i64>,
    pre: Pre<B>,
}

impl<B: DocBackend> Docs<B> {
    async fn run_counter(&self, session_id: &str) -> Result<Counter<B>> {
        let stored = self
            .get(self.collection(Table::Meta), &run_counter_id(session_id))
            .await?;
        Ok(match stored {
            Some(s) => Counter {
                next: s.fields.get("next").and_then(Value::as_i64),
                pre: s.unchanged(),
            },
            None => Counter {
                next: None,
                pre: Pre::Absent,
            },
        })
    }

    fn counter_write(&self, session_id: &str, next: i64, pre: Pre<B>) -> B::Write {
        let mut fields = crate::Fields::new();
        fields.insert("next".into(), Value::from(next));
        fields.insert("session_id".into(), Value::from(session_id));
        self.put(
            self.collection(Table::Meta),
            &run_counter_id(session_id),
            &fields,
            pre,
        )
    }
}

/// [`DocBackend::write_run`] by compare-and-set: one commit writes the run, re-checks its
/// session (rewritten unchanged under its version, so a concurrent delete or owner change
/// conflicts) and moves the session's run-index counter past the run's index (seeded once
/// from the stored runs when missing).
pub async fn write_run_cas<B: DocBackend>(db: &B, run: RunRecord) -> Result<RunRecord> {
    let docs = Docs::of(db);
    let runs = db.collection(Table::Runs);
    let id = db.doc_id(&run.run_id);
    for attempt in 0..CAS_ATTEMPTS {
        let Some(session) = docs.find_session(&run.session_id).await? else {
            return Err(run.missing_session());
        };
        run.check_session(Some(session.str("user_id")))?;
        let counter = docs.run_counter(&run.session_id).await?;
        let now = now_epoch_seconds();
        let (next, pre) = match db.get(runs, &id).await? {
            Some(stored) => {
                let mut current = updated_run(stored.decode("a run")?, &run, now)?;
                current.run_index = current.run_index.or(run.run_index);
                (current, stored.unchanged())
            }
            None => {
                let mut new = run.clone();
                if new.run_index.is_none() {
                    new.run_index = Some(match counter.next {
                        Some(n) => n,
                        None => docs.next_stored_run_index(&run.session_id).await?,
                    });
                }
                new.updated_at = Some(now);
                (new, Pre::Absent)
            }
        };
        let floor = next.run_index.map_or(0, |i| i + 1);
        let mut writes = vec![
            docs.rewrite_fields(Table::Sessions, &session, &session.fields),
            db.put(runs, &id, &db.to_fields(&next, "a run")?, pre),
        ];
        if counter.next.is_none_or(|n| n < floor) {
            writes.push(docs.counter_write(&run.session_id, floor, counter.pre));
        }
        match db.commit("upsert run", writes).await? {
            Commit::Done => return Ok(next),
            Commit::Conflict => backoff(attempt).await,
        }
    }
    Err(db.contended("upsert run"))
}

/// [`DocBackend::copy_legacy_runs`] by compare-and-set: each run create-only, in a commit
/// that moves its session's run-index counter past the copied index. A run already stored
/// (newer than its legacy copy) is kept as it is.
pub async fn copy_runs_cas<B: DocBackend>(db: &B, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
    let docs = Docs::of(db);
    let runs = db.collection(Table::Runs);
    let mut outcome = InsertedRuns::default();
    for row in &rows {
        let id = db.doc_id(&row.run_id);
        let fields = db.to_fields(row, "a run")?;
        let mut settled = false;
        for attempt in 0..CAS_ATTEMPTS {
            if db.get(runs, &id).await?.is_some() {
                settled = true;
                break;
            }
            let counter = docs.run_counter(&row.session_id).await?;
            let mut writes = vec![db.put(runs, &id, &fields, Pre::Absent)];
            // A missing counter is seeded from the stored runs (this one included) later.
            if let (Some(next), Some(index)) = (counter.next, row.run_index) {
                if next <= index {
                    writes.push(docs.counter_write(&row.session_id, index + 1, counter.pre));
                }
            }
            match db.commit("copy legacy runs", writes).await? {
                Commit::Done => {
                    outcome.inserted += 1;
                    settled = true;
                    break;
                }
                Commit::Conflict => backoff(attempt).await,
            }
        }
        if !settled {
            return Err(db.contended("copy legacy runs"));
        }
        outcome.present += 1;
    }
    Ok(outcome)
}
