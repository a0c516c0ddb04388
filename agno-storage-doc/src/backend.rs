//! [`DocBackend`]: the document operations the shared stores are written against, and the
//! types they exchange.

use std::time::Duration;

use agno_storage_core::legacy::{InsertedRuns, LegacySessionRuns};
use agno_storage_core::migration::MigrationLock;
use agno_storage_core::{
    async_trait, Error, ErrorKind, Job, JobWakeups, MemoryStats, MetricsRecord, Page, Pagination,
    Result, RunRecord, SessionQuery, SortOrder, Table, UserMemory,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use crate::Docs;

/// How many times a compare-and-set loop re-reads after losing a race.
pub const CAS_ATTEMPTS: usize = 64;

/// A JSON object, the body of a document.
pub type Fields = Map<String, Value>;

/// A stored document: its id, body and the version a compare-and-set writes against.
#[derive(Debug, Clone)]
pub struct Stored<B: DocBackend> {
    /// The document id.
    pub id: String,
    /// The body, in agno's plain JSON shape.
    pub fields: Fields,
    /// The version read.
    pub version: B::Version,
}

impl<B: DocBackend> Stored<B> {
    /// The body as a record.
    pub fn decode<T: DeserializeOwned>(&self, what: &str) -> Result<T> {
        agno_storage_core::json::from_fields(&self.fields)
            .map_err(|e| decode_err(B::BACKEND, what, e))
    }

    /// A string field.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// The precondition that this exact version is still current.
    pub fn unchanged(&self) -> Pre<B> {
        Pre::At(self.version.clone())
    }
}

/// The precondition of one write.
#[derive(Debug, Clone)]
pub enum Pre<B: DocBackend> {
    /// None: create or replace.
    Any,
    /// The document must not exist.
    Absent,
    /// The document must be at this version.
    At(B::Version),
}

/// A uniqueness guard: a meta document whose existence holds a key (a schedule name, a job
/// idempotency key) for the record it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    /// The guard document's id in the meta collection.
    pub id: String,
    /// The field holding the id of the record that holds the key.
    pub holder: &'static str,
}

/// The outcome of a commit whose preconditions may fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    /// Every write applied.
    Done,
    /// A precondition failed (a concurrent writer won); nothing was written.
    Conflict,
}

/// A document database as the shared stores use it: keyed documents of JSON fields, equality
/// queries, and atomic commits of writes that carry compare-and-set preconditions. The
/// provided hooks are where backends' layouts or strategies differ.
#[async_trait]
pub trait DocBackend: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The backend's name, carried by errors.
    const BACKEND: &'static str;
    /// What one stored item is called in messages (`document`, `record`).
    const ITEM: &'static str;
    /// Whether a schedule's `(user_id, name)` is held by a guard document in the meta
    /// collection, written in the schedule's commits; `false` where the backend enforces the
    /// uniqueness itself (a failed commit is then a [`Commit::Conflict`]).
    const SCHEDULE_NAME_GUARDS: bool;
    /// Whether a job's `(user_id, idempotency_key)` is held by a guard document in the meta
    /// collection, written in the enqueue's commit (default); `false` where the backend
    /// enforces the uniqueness itself (a commit that would store a second job with the key
    /// is then a [`Commit::Conflict`]).
    const JOB_KEY_GUARDS: bool = true;
    /// Whether each job session with serialized tickets has a guard document in the meta
    /// collection ([`DocBackend::job_session_guard`]) that every enqueue, requeue and
    /// claim of one of its tickets commits with the version it read (default), so two of
    /// them in one session conflict rather than both act on one view of it (two tickets
    /// taking one `session_seq`, two claimers each seeing a different head); `false` where
    /// one commit already covers every ticket (a backend whose jobs are one object).
    const JOB_SESSION_GUARDS: bool = true;
    /// The longest identifier, in characters, the backend's document ids and indexed
    /// fields hold (`None`: no limit); see `agno_storage_core::Capabilities::max_id_chars`.
    const MAX_ID_CHARS: Option<usize>;
    /// The deepest JSON nesting a document field holds, when the backend's own limit is
    /// below `agno_storage_core::json::MAX_DEPTH`.
    const MAX_JSON_DEPTH: Option<usize>;
    /// Whether an acknowledged write survives a restart of the process and the server
    /// (`agno_storage_core::Capabilities::durable`).
    const DURABLE: bool = true;

    /// How old, in seconds, the `locked_at` of a migration lock document without a lease
    /// (written by a version without heartbeats) must be before the lock is taken over: the
    /// age at which that version broke stale locks.
    const LEGACY_LOCK_STALE_SECONDS: i64 = 15 * 60;

    /// The most writes one [`DocBackend::commit`] takes (at least 1; default: no limit):
    /// [`DocBackend::commit_all`] splits longer lists.
    const MAX_COMMIT_WRITES: usize = usize::MAX;

    /// What a compare-and-set compares (an update time, the record as read).
    type Version: Clone + std::fmt::Debug + Send + Sync;
    /// One write of a commit.
    type Write: Send;

    /// The physical name of a collection.
    fn collection(&self, which: Table) -> &str;

    /// The document id of a record key (default: the key itself).
    fn doc_id(&self, key: &str) -> String {
        key.to_owned()
    }

    /// Sets document `id` of `collection` to `fields` (a full replace) under `pre`.
    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> Self::Write;

    /// Deletes document `id` of `collection` under `pre`.
    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> Self::Write;

    /// Commits `writes` atomically; [`Commit::Conflict`] when a precondition failed.
    async fn commit(&self, operation: &'static str, writes: Vec<Self::Write>) -> Result<Commit>;

    /// Commits each of `commits` on its own, as [`DocBackend::commit`] commits one, and
    /// reports each in order: one that fails or conflicts leaves the others as they went
    /// (default: one commit after another). Override it where one request carries many
    /// commits (Redis/Valkey: a pipeline of scripts). An error for the whole call means it
    /// is unknown which applied.
    async fn commit_each(
        &self,
        operation: &'static str,
        commits: Vec<Vec<Self::Write>>,
    ) -> Result<Vec<Result<Commit>>> {
        let mut outcomes = Vec::with_capacity(commits.len());
        for writes in commits {
            outcomes.push(self.commit(operation, writes).await);
        }
        Ok(outcomes)
    }

    /// Commits `writes` in order, in commits of at most [`DocBackend::MAX_COMMIT_WRITES`]
    /// (always at least one, even of none); a failed precondition is a `Conflict` error and
    /// leaves the earlier commits applied.
    async fn commit_all(
        &self,
        operation: &'static str,
        mut writes: Vec<Self::Write>,
    ) -> Result<()> {
        loop {
            let rest = writes.split_off(writes.len().min(Self::MAX_COMMIT_WRITES));
            if self.commit(operation, writes).await? == Commit::Conflict {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!(
                        "{operation}: a concurrent writer changed the {} first; retry",
                        Self::ITEM
                    ),
                )
                .with_backend(Self::BACKEND)
                .set_temporary(true));
            }
            if rest.is_empty() {
                return Ok(());
            }
            writes = rest;
        }
    }

    /// Document `id` of `collection`, if it exists. A backend that stores a run's
    /// `run_data` as JSON text hands text it cannot parse over as a string (the engine then
    /// reports the run as undecodable and session reads pass the text on).
    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>>;

    /// Documents `ids` of `collection`, in order, `None` where one does not exist
    /// (default: [`get_one_by_one`]). Override it where one request reads many.
    async fn get_each(
        &self,
        collection: &str,
        ids: &[String],
    ) -> Result<Vec<Option<Stored<Self>>>> {
        get_one_by_one(self, collection, ids).await
    }

    /// Every document of `collection` whose fields equal `eq` (a null matches a null or
    /// missing field).
    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>>;

    /// Whether `collection` holds any document.
    async fn any_doc(&self, collection: &str) -> Result<bool>;

    /// One page of the documents of `collection` whose fields equal `eq`, ordered by the
    /// numeric field `sort_by` in `order` (ties in any order), and how many documents match
    /// in all; `None` (the default) when the backend keeps no index for it, and the engine
    /// then pages the result of [`DocBackend::query`] in memory. Override it where an index
    /// answers in O(log n + page) (Redis/Valkey sorted sets).
    async fn query_page(
        &self,
        _collection: &str,
        _eq: &[(&str, Value)],
        _sort_by: &str,
        _order: SortOrder,
        _page: &Pagination,
    ) -> Result<Option<(Vec<Stored<Self>>, u64)>> {
        Ok(None)
    }

    /// The document of `collection` whose `key_field` is `key` (default: document
    /// [`DocBackend::doc_id`] of the key, checked to carry it).
    async fn find(
        &self,
        collection: &str,
        key_field: &str,
        key: &str,
    ) -> Result<Option<Stored<Self>>> {
        Ok(self
            .get(collection, &self.doc_id(key))
            .await?
            .filter(|s| s.str(key_field) == Some(key)))
    }

    /// The meta document that holds a schedule's `(user_id, name)` where
    /// [`DocBackend::SCHEDULE_NAME_GUARDS`] (default: a digest id, holder field
    /// `schedule_id`).
    fn schedule_name_guard(&self, user_id: Option<&str>, name: &str) -> Guard {
        Guard {
            id: digest_id("schedule_name", &[user_id, Some(name)]),
            holder: "schedule_id",
        }
    }

    /// The meta document that holds a job's idempotency key for its owner (default: a
    /// digest id, holder field `job_id`).
    fn job_key_guard(&self, user_id: Option<&str>, key: &str) -> Guard {
        Guard {
            id: digest_id("job_key", &[user_id, Some(key)]),
            holder: "job_id",
        }
    }

    /// The meta document id of job session `session_id`'s guard (see
    /// [`DocBackend::JOB_SESSION_GUARDS`]; default: a digest id).
    fn job_session_guard(&self, session_id: &str) -> String {
        digest_id("job_session", &[Some(session_id)])
    }

    /// The document id of a metrics row (agno's, which differ per backend): of the stored
    /// row of `record`'s `(date, owner, period)` when there is one.
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String>;

    /// Whether a stored metrics row predates per-user buckets (default: never).
    fn is_legacy_metric(&self, _fields: &Fields) -> bool {
        false
    }

    /// [`agno_storage_core::MemoryStore::get_memory_stats`] from counts the backend keeps
    /// per user (default `None`: the engine reads every visible memory and counts them).
    async fn memory_stats(
        &self,
        _user_id: Option<&str>,
        _pagination: &Pagination,
    ) -> Result<Option<Page<MemoryStats>>> {
        Ok(None)
    }

    /// The schedules that may be due at `now`: at least every enabled schedule whose
    /// `next_run_at` has passed and that is unlocked or locked at or before
    /// `now - lock_grace_seconds` (default: every enabled schedule; the engine checks each
    /// with `Schedule::is_due`). Override it where an index holds the due ones.
    async fn due_schedules(
        &self,
        _now: i64,
        _lock_grace_seconds: i64,
    ) -> Result<Vec<Stored<Self>>> {
        self.query(
            self.collection(Table::Schedules),
            &[("enabled", true.into())],
        )
        .await
    }

    /// How many jobs are queued, for `enqueue_job`'s `max_depth` (default: the queued jobs
    /// read and counted).
    async fn count_queued_jobs(&self) -> Result<u64> {
        let queued = opt(Some(agno_storage_core::JobStatus::Queued.as_str()));
        Ok(self
            .query(self.collection(Table::Jobs), &[("status", queued)])
            .await?
            .len() as u64)
    }

    /// The clock claims and leases are decided by, in epoch seconds (default: this host's; a backend
    /// with a server clock every writer shares may use it).
    async fn now(&self) -> Result<i64> {
        Ok(agno_storage_core::now_epoch_seconds())
    }

    /// One page of [`agno_storage_core::SessionStore::get_sessions`] from the backend's own
    /// indexes: the page's session documents in order and how many match in all; `None`
    /// (the default) when it keeps none for `query`, and the engine reads the owner's
    /// sessions and pages them in memory.
    async fn session_page(
        &self,
        _query: &SessionQuery,
    ) -> Result<Option<(Vec<Stored<Self>>, u64)>> {
        Ok(None)
    }

    /// The sessions visible to `user_id` that may keep agno 2.x's legacy `runs` field (a
    /// run deleted is scrubbed from them); default: every session visible to `user_id`.
    async fn legacy_sessions(&self, user_id: Option<&str>) -> Result<Vec<Stored<Self>>> {
        let eq = given(&[("user_id", user_id)]);
        self.query(self.collection(Table::Sessions), &eq).await
    }

    /// A memory as its document body (default: the record's fields).
    fn encode_memory(&self, memory: &UserMemory) -> Result<Fields> {
        self.to_fields(memory, "a memory")
    }

    /// The jobs of session `session_id`, at least its live serialized tickets, for per-session
    /// ordering ([`Job::session_blocker`]; default: the session's jobs by an equality query).
    async fn session_jobs(&self, session_id: &str) -> Result<Vec<Job>> {
        Ok(self
            .query(
                self.collection(Table::Jobs),
                &[("session_id", opt(Some(session_id)))],
            )
            .await?
            .iter()
            // One that does not decode is failed by the claim that meets it.
            .filter_map(|d| d.decode("a job").ok())
            .collect())
    }

    /// Tells idle workers that jobs may have become claimable (after an enqueue, a
    /// release, a requeue or a continue); best effort (default: nothing, workers poll).
    async fn wake_workers(&self) {}

    /// [`agno_storage_core::JobStore::job_wakeups`]: what [`DocBackend::wake_workers`]
    /// sends, received (default `None`).
    async fn job_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        Ok(None)
    }

    /// [`agno_storage_core::JobStore::claim_job`] (default:
    /// [`crate::claim_oldest_job`]).
    async fn claim_next_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        crate::jobs::claim_oldest_job(self, worker_id, lock_grace_seconds, deployment_id).await
    }

    /// [`agno_storage_core::JobStore::claim_jobs`]: up to `limit` claims, each as
    /// [`DocBackend::claim_next_job`] makes one (default: that call until it has `limit` or
    /// none is left; an error after the first claim ends the batch early). Override it
    /// where one look at the queue can serve many claims.
    async fn claim_next_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        agno_storage_core::job::claim_one_by_one(limit, || {
            self.claim_next_job(worker_id, lock_grace_seconds, deployment_id)
        })
        .await
    }

    /// [`agno_storage_core::RunStore::upsert_run`] (default: [`crate::write_run_cas`], a
    /// run-index counter document written by compare-and-set in the run's commit).
    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        crate::write_run_cas(self, run).await
    }

    /// [`agno_storage_core::LegacyRunsStore::insert_runs_if_absent`]: create-only writes
    /// that keep the run-index counters ahead of the copied indexes (default:
    /// [`crate::copy_runs_cas`]).
    async fn copy_legacy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        crate::copy_runs_cas(self, rows).await
    }

    /// [`agno_storage_core::legacy::LegacyRunsStore::legacy_runs_page`]: the next sessions
    /// after `after` that keep agno 2.x's `runs` field (default:
    /// [`crate::legacy_page_by_id`], every session read and ordered by id per page;
    /// override it where the database pages natively).
    async fn legacy_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        crate::legacy_page_by_id(self, after, limit).await
    }

    /// Deletes session `session_id` (when `user_id` may see it), its runs and its run-index
    /// counter; whether it was deleted (default: [`crate::delete_session_cas`], one commit).
    async fn delete_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        crate::delete_session_cas(self, session_id, user_id).await
    }

    /// One write that deletes every run of session `session_id`, for
    /// [`crate::delete_session_cas`] (default `None`: the runs are queried and each deleted
    /// as read).
    fn delete_session_runs(&self, _session_id: &str) -> Option<Self::Write> {
        None
    }

    /// [`MigrationTarget::lock`](agno_storage_core::migration::MigrationTarget::lock)
    /// (default: a lock document in the meta collection, taken and renewed by
    /// compare-and-set under [`DocBackend::lock_lease`]; override it where the backend has
    /// a lock of its own).
    async fn migration_lock(&self) -> Result<MigrationLock> {
        Docs::of(self).take_lock().await
    }

    /// The migration lock document's id in the meta collection (default `migration_lock`).
    fn lock_id(&self) -> String {
        "migration_lock".to_owned()
    }

    /// The migration lock's lease (default
    /// [`DEFAULT_MIGRATION_LOCK_LEASE`](agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE),
    /// 30 s).
    fn lock_lease(&self) -> Duration {
        agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE
    }

    /// Where the migration lock lives, for messages.
    fn lock_location(&self) -> String;

    /// A record as a document body (serde field names, `None` as null).
    fn to_fields<T: Serialize + ?Sized>(&self, record: &T, what: &str) -> Result<Fields> {
        match serde_json::to_value(record).map_err(|e| encode_err(Self::BACKEND, what, e))? {
            Value::Object(map) => Ok(map),
            other => Err(encode_err(
                Self::BACKEND,
                what,
                format!("not an object: {other}"),
            )),
        }
    }

    /// A document body as a record, ignoring fields the record does not know.
    fn decode_fields<T: DeserializeOwned>(&self, fields: Fields, what: &str) -> Result<T> {
        decode(Self::BACKEND, fields, what)
    }

    /// A lost compare-and-set race after every retry.
    fn contended(&self, operation: &str) -> Error {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "{operation}: too much contention on one {}; retry later",
                Self::ITEM
            ),
        )
        .with_backend(Self::BACKEND)
        .set_temporary(true)
    }
}

fn encode_err(backend: &'static str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("cannot encode {what}: {e}"),
    )
    .with_backend(backend)
}

fn decode<T: DeserializeOwned>(backend: &'static str, fields: Fields, what: &str) -> Result<T> {
    agno_storage_core::json::from_value(Value::Object(fields))
        .map_err(|e| decode_err(backend, what, e))
}

fn decode_err(backend: &'static str, what: &str, e: serde_json::Error) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("cannot decode {what}: {e}"),
    )
    .with_backend(backend)
    .with_source(e)
}

/// Whether `fields` equal `eq`, as [`DocBackend::query`] matches (a null matches a null or
/// missing field): for backends that filter documents themselves.
pub fn matches_eq(fields: &Fields, eq: &[(&str, Value)]) -> bool {
    eq.iter().all(|(k, want)| match fields.get(*k) {
        Some(have) => have == want,
        None => want.is_null(),
    })
}

/// An optional string as JSON.
pub fn opt(value: Option<&str>) -> Value {
    value.map_or(Value::Null, |v| Value::String(v.to_owned()))
}

/// Equality filters on the fields of `pairs` that have a value, in order.
pub(crate) fn given<'a>(pairs: &[(&'a str, Option<&str>)]) -> Vec<(&'a str, Value)> {
    pairs
        .iter()
        .filter_map(|&(field, value)| Some((field, opt(Some(value?)))))
        .collect()
}

/// A JSON object's fields (empty for anything else).
pub fn object(value: Value) -> Fields {
    match value {
        Value::Object(m) => m,
        _ => Fields::new(),
    }
}

/// A digest id of several parts (guards, counters): `{prefix}_{sha256}`.
pub fn digest_id(prefix: &str, parts: &[Option<&str>]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        match p {
            Some(s) => {
                h.update([1u8]);
                h.update((s.len() as u64).to_be_bytes());
                h.update(s.as_bytes());
            }
            None => h.update([0u8]),
        }
    }
    format!("{prefix}_{}", hex::encode(h.finalize()))
}

/// A short randomised pause before re-reading after a lost race.
pub async fn backoff(attempt: usize) {
    agno_storage_core::guard::record_retry(attempt + 1);
    let jitter = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % 8;
    let ms = (attempt as u64).min(10) * 3 + jitter;
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// [`DocBackend::get_each`]'s default: [`DocBackend::get`] of each id, in order.
pub async fn get_one_by_one<B: DocBackend>(
    db: &B,
    collection: &str,
    ids: &[String],
) -> Result<Vec<Option<Stored<B>>>> {
    let mut found = Vec::with_capacity(ids.len());
    for id in ids {
        found.push(db.get(collection, id).await?);
    }
    Ok(found)
}
