//! The SQLite executor: rusqlite, one connection per database handle.
//!
//! Every connection runs `PRAGMA journal_mode=WAL`, `PRAGMA foreign_keys=ON` and a busy
//! timeout. Calls queue for the handle's one connection and are committed together (group
//! commit): the leader, whoever holds the connection, takes every call waiting in the
//! queue, runs them in one `BEGIN IMMEDIATE … COMMIT` (a multi-statement call in its own
//! savepoint) and answers every caller once the commit made its write durable.
//!
//! - A lone caller that finds the connection free leads its own call on its own thread, with
//!   no hop to another thread and back: on a tokio worker inside `block_in_place` (other
//!   tasks move to another worker), elsewhere in a runtime on the blocking pool, and
//!   outside any runtime inline.
//! - Under concurrent writers (more than one around the last commit) a committer on the
//!   blocking pool serves them: it runs each call as soon as it is queued and, before
//!   committing, waits (at most as long as the last commit took) for the writers it expects,
//!   running their calls as they come, so they share one fsync instead of splitting into
//!   alternating groups; it stops when none comes. A caller that led its own batch and
//!   finds others queued hands them to such a committer instead of serving them.
//!
//! The writer lock is taken up front, so concurrent writers in one process or several wait
//! for each other (busy timeout) instead of failing with `database is locked`. Parameters
//! (JSON included) are encoded by the caller before queueing, so only SQLite's own work is
//! serialized.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use agno_storage_core::json::{parse_value, to_python_json};
use agno_storage_core::migration::{MigrationLock, ReleasedOnDrop};
use agno_storage_core::{async_trait, Error, ErrorKind, OpenMode, Result};
use rusqlite::types::{Value as SqliteValue, ValueRef};
use rusqlite::{Connection, ErrorCode};

use crate::exec::{DataVersion, Executor, Note, RowWatch, Statement, Versioned, VersionedRead};
use crate::row_log::RowLogs;
use crate::value::{Row, SqlValue, PARALLEL_JSON_BYTES};

const BACKEND: &str = "sqlite";

pub(crate) struct SqliteExecutor {
    shared: Arc<Shared>,
    path: Option<PathBuf>,
    memory_lock: Arc<tokio::sync::Mutex<()>>,
}

/// The calls waiting for the connection, and the connection (held by the current leader).
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a call is queued while a leader waits for more writers.
    arrived: Condvar,
    conn: Mutex<Conn>,
    /// How many callers were writing concurrently around the last commit (see
    /// [`Shared::next_batch`]).
    writers: AtomicUsize,
    /// How long the last `COMMIT` took, in microseconds: a leader waits at most that long
    /// for concurrent writers.
    commit_micros: AtomicU64,
}

/// The handle's connection, with the column layout of the statements it has run.
struct Conn {
    db: Connection,
    /// Statement text to its columns ([`run_query`]), at most [`MAX_SHAPES`] of them.
    shapes: RefCell<HashMap<String, Shape>>,
    /// What `agno_note` saw since [`Executor::execute_noting`] last took it.
    notes: Arc<Mutex<Vec<Note>>>,
    /// The rows this connection changed in the watched tables.
    row_logs: RowLogs,
}

impl Deref for Conn {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.db
    }
}

/// The columns of a statement's rows: their names, and which are declared `JSON`.
#[derive(Clone)]
struct Shape {
    columns: Arc<[String]>,
    json: Arc<[bool]>,
}

/// Statement layouts a connection keeps; past that it forgets them all and starts over
/// (texts with `IN` lists of every length would otherwise grow it without bound).
const MAX_SHAPES: usize = 512;

impl Conn {
    /// The columns of `stmt` (the statement `sql`, stepped at least once): the kept layout
    /// while its names still match (a schema change can change what `SELECT *` returns),
    /// else read afresh.
    fn shape(&self, sql: &str, stmt: &rusqlite::Statement<'_>) -> Shape {
        let mut shapes = self.shapes.borrow_mut();
        if let Some(shape) = shapes.get(sql) {
            let same = shape.columns.len() == stmt.column_count()
                && shape
                    .columns
                    .iter()
                    .enumerate()
                    .all(|(i, name)| stmt.column_name(i).is_ok_and(|n| n == name));
            if same {
                return shape.clone();
            }
        }
        let columns = stmt.columns();
        let shape = Shape {
            columns: columns.iter().map(|c| c.name().to_owned()).collect(),
            json: columns
                .iter()
                .map(|c| {
                    c.decl_type()
                        .is_some_and(|t| t.eq_ignore_ascii_case("JSON"))
                })
                .collect(),
        };
        if shapes.len() >= MAX_SHAPES {
            shapes.clear();
        }
        shapes.insert(sql.to_owned(), shape.clone());
        shape
    }
}

/// Queued calls, with the number of them that write.
#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    writes: usize,
    /// A leader is waiting on [`Shared::arrived`].
    waiting: bool,
}

impl Queue {
    fn push(&mut self, job: Job) {
        self.writes += usize::from(job.writes);
        self.jobs.push_back(job);
    }

    fn take(&mut self, max: usize) -> Vec<Job> {
        let n = self.jobs.len().min(max);
        let batch: Vec<Job> = self.jobs.drain(..n).collect();
        self.writes -= batch.iter().filter(|j| j.writes).count();
        batch
    }
}

/// A queued call. `run` gets the connection (or the error that kept the batch from
/// starting), reports how it failed (`None`: it succeeded), and returns how to deliver its
/// outcome once the batch has committed.
struct Job {
    writes: bool,
    /// Several statements that must commit together (a `transaction()` call).
    atomic: bool,
    run: Run,
}

/// A job's work: runs on the connection (or sees why the batch could not start).
type Run = Box<
    dyn FnOnce(std::result::Result<&Conn, &rusqlite::Error>) -> (Option<Failure>, Delivery) + Send,
>;

/// Sends a job's result, or why its batch failed (which a call that failed itself does not
/// need: it keeps its own error), to its caller.
type Delivery = Box<dyn FnOnce(Option<&Failure>) + Send>;

/// Why a call, or the batch it ran in, failed: what its callers are told.
struct Failure {
    kind: ErrorKind,
    temporary: bool,
    message: String,
}

impl Failure {
    fn of(e: &Error) -> Self {
        Failure {
            kind: e.kind(),
            temporary: e.is_temporary(),
            message: e.message().to_owned(),
        }
    }

    /// The `COMMIT` of a batch failed.
    fn commit(e: &rusqlite::Error) -> Self {
        let (kind, temporary) = classify_batch(e);
        Failure {
            kind,
            temporary,
            message: format!("SQLite commit failed: {e}"),
        }
    }

    /// What the other calls of a batch are told when this call's failure rolled back the
    /// batch's whole transaction: a fault of the database (a full disk, an I/O error) keeps
    /// its kind, so every caller sees one kind for one fault; a fault of the call itself is
    /// none of theirs, and they may retry at once.
    fn for_batch(&self) -> Self {
        let (kind, temporary) = match self.kind {
            ErrorKind::Unavailable | ErrorKind::Unexpected => (self.kind, self.temporary),
            _ => (ErrorKind::Unavailable, true),
        };
        Failure {
            kind,
            temporary,
            message: format!(
                "SQLite rolled back the transaction this call shared with others (group \
                 commit), so nothing of it was written, because one of them failed: {}",
                self.message
            ),
        }
    }

    fn error(&self) -> Error {
        Error::new(self.kind, self.message.clone())
            .with_backend(BACKEND)
            .set_temporary(self.temporary)
    }
}

/// At most this many calls share one transaction.
const MAX_BATCH: usize = 256;

/// The longest a leader waits for concurrent writers to join a batch.
const MAX_COMMIT_DELAY: Duration = Duration::from_millis(1);

/// Runs a fixed transaction-control statement through the statement cache.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// A lock whose holder panicked is still usable here: every call ends its own savepoint or
/// transaction, and a half-run call's transaction is rolled back by the next `BEGIN` failing.
fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    /// The connection, if no other leader holds it.
    fn try_conn(&self) -> Option<MutexGuard<'_, Conn>> {
        match self.conn.try_lock() {
            Ok(conn) => Some(conn),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    /// Leads if the connection is free (see [`Shared::lead_with`]); returns at once when
    /// another leader holds it.
    fn lead(self: &Arc<Self>) {
        if let Some(conn) = self.try_conn() {
            self.lead_with(conn, false);
        }
    }

    /// Whether callers were writing concurrently around the last commit.
    fn concurrent(&self) -> bool {
        self.writers.load(Ordering::Relaxed) > 1
    }

    /// Runs batches on `conn` while calls come. `caller` is true when the leader is a
    /// caller whose own call is queued (it is in the first batch): once that is answered,
    /// the caller cannot queue another until the leader returns, so such a leader serves
    /// one batch and then, when more calls are queued, hands them to a committer on the
    /// blocking pool (inside a runtime), which serves concurrent writers for as long as
    /// they keep coming. After letting go of the connection the leader re-checks the
    /// queue, so a call queued by a caller that found the connection taken is never
    /// stranded.
    fn lead_with<'a>(self: &'a Arc<Self>, mut conn: MutexGuard<'a, Conn>, caller: bool) {
        let mut answered = false;
        loop {
            loop {
                if answered && !locked(&self.queue).jobs.is_empty() {
                    if let Ok(handle) = tokio::runtime::Handle::try_current() {
                        // Let go first: the committer may start before this returns.
                        drop(conn);
                        let shared = self.clone();
                        handle.spawn_blocking(move || shared.lead());
                        return;
                    }
                }
                let expected = self.expected_writers(answered);
                let Some(batch) = self.next_batch(expected, answered) else {
                    break;
                };
                let writes = self.run_batch(&conn, batch, expected);
                if writes > 0 {
                    // Writers of this batch, those that queued meanwhile, and the leader's
                    // caller if it was answered before.
                    let queued = locked(&self.queue).writes;
                    self.writers
                        .store(writes + queued + usize::from(answered), Ordering::Relaxed);
                }
                answered = caller;
            }
            drop(conn);
            if locked(&self.queue).jobs.is_empty() {
                return;
            }
            match self.try_conn() {
                Some(again) => conn = again,
                None => return,
            }
        }
    }

    /// The writers a leader waits for: those seen around the last commit, less the
    /// leader's own caller once `answered` (it cannot queue while its leader runs).
    fn expected_writers(&self, answered: bool) -> usize {
        self.writers
            .load(Ordering::Relaxed)
            .saturating_sub(usize::from(answered))
    }

    /// The last commit's duration, at most [`MAX_COMMIT_DELAY`]: how long a leader waits
    /// for concurrent writers. A writer that comes later waits for the next commit, so
    /// waiting longer than a commit takes would not serve it sooner.
    fn commit_delay(&self) -> Duration {
        Duration::from_micros(self.commit_micros.load(Ordering::Relaxed)).min(MAX_COMMIT_DELAY)
    }

    /// The next batch, `None` when no call comes. A committer (a leader that is not a
    /// caller) expecting concurrent writers waits for the first of them, up to
    /// [`Shared::commit_delay`]: they are usually building their next call. When nobody
    /// comes, the concurrent writers are gone.
    fn next_batch(&self, expected: usize, answered: bool) -> Option<Vec<Job>> {
        let wait = expected > 1 && !answered;
        let batch = self.arrivals(
            wait.then(|| Instant::now() + self.commit_delay()),
            MAX_BATCH,
        );
        if batch.is_none() && wait {
            self.writers.store(0, Ordering::Relaxed);
        }
        batch
    }

    /// Up to `max` queued calls; when none is queued, waits for one until `deadline`
    /// (not at all without one). `None` if none came.
    fn arrivals(&self, deadline: Option<Instant>, max: usize) -> Option<Vec<Job>> {
        let mut queue = locked(&self.queue);
        if let Some(deadline) = deadline {
            while queue.jobs.is_empty() {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                queue.waiting = true;
                queue = match self.arrived.wait_timeout(queue, deadline - now) {
                    Ok((queue, _)) => queue,
                    Err(poisoned) => poisoned.into_inner().0,
                };
                queue.waiting = false;
            }
        }
        let batch = queue.take(max);
        (!batch.is_empty()).then_some(batch)
    }

    /// Runs one batch and returns how many of its calls write. Reads, and a lone
    /// single-statement write when no other writer is expected, run in autocommit (one
    /// statement is atomic and durable on its own). Otherwise one writer transaction: each
    /// call runs as soon as it is taken (a multi-statement call in its own savepoint, so a
    /// failing call rolls back alone); while fewer than `expected` writers have joined,
    /// calls that arrive meanwhile, up to [`Shared::commit_delay`] after the batch began,
    /// run in the same transaction, so the waiting overlaps their work. It commits once,
    /// before any caller is answered.
    fn run_batch(&self, conn: &Conn, batch: Vec<Job>, expected: usize) -> usize {
        let mut writes = batch.iter().filter(|j| j.writes).count();
        if writes == 0 || (batch.len() == 1 && !batch[0].atomic && expected <= 1) {
            for job in batch {
                let (_, deliver) = (job.run)(Ok(conn));
                deliver(None);
            }
            return writes;
        }
        let mut begin_error = control(conn, "BEGIN IMMEDIATE").err();
        let deadline = Instant::now() + self.commit_delay();
        let mut deliveries = Vec::with_capacity(batch.len().max(expected));
        let mut taken = 0;
        let mut jobs = batch;
        loop {
            for job in jobs {
                taken += 1;
                if let Some(e) = &begin_error {
                    let (_, deliver) = (job.run)(Err(e));
                    deliver(None);
                    continue;
                }
                let (failure, deliver) = run_in_transaction(conn, job);
                deliveries.push(deliver);
                if conn.is_autocommit() {
                    // The call's error rolled back the whole transaction (SQLite does on a
                    // full disk or an I/O error): its calls so far are told now, and the
                    // calls after it get a transaction of their own (they must not run in
                    // autocommit and be told the COMMIT failed after all).
                    let cause = match failure {
                        Some(failure) => failure.for_batch(),
                        None => Failure {
                            kind: ErrorKind::Unavailable,
                            temporary: true,
                            message: "SQLite rolled back the transaction this call shared \
                                      with others (group commit); nothing of it was written"
                                .into(),
                        },
                    };
                    for deliver in deliveries.drain(..) {
                        deliver(Some(&cause));
                    }
                    begin_error = control(conn, "BEGIN IMMEDIATE").err();
                }
            }
            if begin_error.is_some() || writes >= expected || taken >= MAX_BATCH {
                break;
            }
            match self.arrivals(Some(deadline), MAX_BATCH - taken) {
                Some(more) => {
                    writes += more.iter().filter(|j| j.writes).count();
                    jobs = more;
                }
                None => break,
            }
        }
        if begin_error.is_some() {
            // Every call was answered; no transaction is open.
            return writes;
        }
        let started = Instant::now();
        let committed = control(conn, "COMMIT");
        let took = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.commit_micros.store(took, Ordering::Relaxed);
        let failure = committed.as_ref().err().map(Failure::commit);
        if committed.is_err() && !conn.is_autocommit() {
            let _ = control(conn, "ROLLBACK");
        }
        for deliver in deliveries {
            deliver(failure.as_ref());
        }
        writes
    }
}

/// Runs one call inside the batch's open transaction and returns how to answer it.
fn run_in_transaction(conn: &Conn, job: Job) -> (Option<Failure>, Delivery) {
    if !job.atomic {
        // One statement: a failing statement undoes only itself (SQLite's statement
        // journal); an error that rolls back the whole transaction is seen by the caller
        // (`Shared::run_batch`), which tells every call of the batch. No savepoint needed.
        return (job.run)(Ok(conn));
    }
    let opened = control(conn, "SAVEPOINT agno_call");
    let (failure, deliver) = match &opened {
        Ok(()) => (job.run)(Ok(conn)),
        Err(e) => (job.run)(Err(e)),
    };
    if opened.is_ok() && !conn.is_autocommit() {
        if failure.is_some() {
            let _ = control(conn, "ROLLBACK TO agno_call");
        }
        let _ = control(conn, "RELEASE agno_call");
    }
    (failure, deliver)
}

/// Whether this thread is a worker (or blocking-pool) thread of a multi-thread tokio
/// runtime, where `block_in_place` is allowed. Tokio has no public test for it; the default
/// names of its threads (`tokio-rt-worker` in current releases, `tokio-runtime-worker` in older ones)
/// are the sign. Anywhere else (a current-thread runtime, a `LocalSet`, the thread of
/// `Runtime::block_on`, a runtime with custom thread names) the leader runs on the blocking
/// pool instead: one hop more, never a panic and never a blocked scheduler.
fn on_runtime_worker() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        && matches!(
            std::thread::current().name(),
            Some("tokio-rt-worker" | "tokio-runtime-worker")
        )
}

/// The kind of a SQLite error and whether retrying at once may help ([`Error::is_temporary`]).
///
/// A full disk or database (`SQLITE_FULL`: the file system is out of space, or the file
/// reached `PRAGMA max_page_count`) is [`ErrorKind::Unavailable`], *not* temporary: the
/// database refuses writes until an operator frees space, so an immediate retry fails the
/// same way, but the fault is the environment's, not the call's, and the same call succeeds
/// once space is freed. It is this kind whether the write ran alone or inside a group
/// commit, where the whole batch is told (`Shared::run_batch`).
fn classify(e: &rusqlite::Error) -> (ErrorKind, bool) {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => match (f.code, f.extended_code) {
            (ErrorCode::ConstraintViolation, 1555 | 2067) => (ErrorKind::AlreadyExists, false),
            (ErrorCode::ConstraintViolation, 787) => (ErrorKind::NotFound, false),
            (ErrorCode::ConstraintViolation, _) => (ErrorKind::InvalidInput, false),
            (ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked, _) => {
                (ErrorKind::Unavailable, true)
            }
            (
                ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::ReadOnly
                | ErrorCode::DiskFull,
                _,
            ) => (ErrorKind::Unavailable, false),
            _ => (ErrorKind::Unexpected, false),
        },
        _ => (ErrorKind::Unexpected, false),
    }
}

/// How a batch-level failure (`BEGIN` or `COMMIT` of a group commit) is classified: as
/// [`classify`] says when it knows the cause, else as a retryable `Unavailable` (the call
/// itself did not fail, its batch did).
fn classify_batch(e: &rusqlite::Error) -> (ErrorKind, bool) {
    match classify(e) {
        (ErrorKind::Unexpected, _) => (ErrorKind::Unavailable, true),
        known => known,
    }
}

pub(crate) fn map_err(e: rusqlite::Error) -> Error {
    let (kind, temporary) = classify(&e);
    Error::new(kind, e.to_string())
        .with_backend(BACKEND)
        .set_temporary(temporary)
        .with_source(e)
}

fn to_sqlite(v: SqlValue) -> SqliteValue {
    match v {
        SqlValue::Int(Some(i)) => SqliteValue::Integer(i),
        SqlValue::Float(Some(f)) => SqliteValue::Real(f),
        SqlValue::Text(Some(s)) => SqliteValue::Text(s),
        SqlValue::Bool(Some(b)) => SqliteValue::Integer(i64::from(b)),
        SqlValue::Json(Some(v)) => SqliteValue::Text(to_python_json(&v)),
        SqlValue::Date(Some(d)) => SqliteValue::Text(d.format("%Y-%m-%d").to_string()),
        _ => SqliteValue::Null,
    }
}

fn from_sqlite(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Null => SqlValue::Text(None),
        ValueRef::Integer(i) => SqlValue::Int(Some(i)),
        ValueRef::Real(f) => SqlValue::Float(Some(f)),
        ValueRef::Text(t) | ValueRef::Blob(t) => {
            SqlValue::Text(Some(match std::str::from_utf8(t) {
                Ok(text) => text.to_owned(),
                Err(_) => String::from_utf8_lossy(t).into_owned(),
            }))
        }
    }
}

/// A cell of a column declared JSON, decoded from SQLite's buffer; text that is not JSON
/// stays text (the caller reports it).
fn json_from_sqlite(v: ValueRef<'_>) -> SqlValue {
    match v {
        ValueRef::Text(t) | ValueRef::Blob(t) => json_from_text(t),
        other => from_sqlite(other),
    }
}

fn json_from_text(t: &[u8]) -> SqlValue {
    match parse_value(t) {
        Ok(value) => SqlValue::Json(Some(value)),
        Err(_) => from_sqlite(ValueRef::Text(t)),
    }
}

/// Encodes parameters for SQLite (JSON as agno's text), before the call is queued.
fn encode(params: Vec<SqlValue>) -> Vec<SqliteValue> {
    params.into_iter().map(to_sqlite).collect()
}

/// Rows of a query; with `decode_json`, cells of columns declared `JSON` arrive decoded.
///
/// A large JSON result (more than [`PARALLEL_JSON_BYTES`]) is decoded by two threads: this
/// one keeps stepping SQLite and copies each text cell out into a chunk's buffer, a second
/// decodes the chunks alongside, and both decode what is left once the rows are read. Parsing is most
/// of the cost of reading a long session, and it no longer waits for SQLite's step.
fn run_query(
    conn: &Conn,
    sql: &str,
    params: Vec<SqliteValue>,
    decode_json: bool,
) -> rusqlite::Result<Vec<Row>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
    // The layout comes from the statement as the first row left it: SQLite recompiles a
    // statement for a schema change (made anywhere) only when it steps.
    let Some(first) = rows.next()? else {
        return Ok(Vec::new());
    };
    let Shape { columns, json } = conn.shape(sql, first.as_ref());
    let is_json = |i: usize| decode_json && json.get(i) == Some(&true);
    let mut json_bytes = 0;
    let decode = |row: &rusqlite::Row<'_>, json_bytes: &mut usize| -> rusqlite::Result<Row> {
        let mut values = Vec::with_capacity(columns.len());
        for i in 0..columns.len() {
            let cell = row.get_ref(i)?;
            values.push(if is_json(i) {
                *json_bytes += cell.as_bytes().map_or(0, <[u8]>::len);
                json_from_sqlite(cell)
            } else {
                from_sqlite(cell)
            });
        }
        Ok(Row {
            columns: columns.clone(),
            values,
        })
    };
    let mut out = vec![decode(first, &mut json_bytes)?];
    while json_bytes <= PARALLEL_JSON_BYTES {
        let Some(row) = rows.next()? else {
            return Ok(out);
        };
        out.push(decode(row, &mut json_bytes)?);
    }
    let parsed = parse_alongside(|chunks| {
        let mut chunk = Chunk::default();
        while let Some(row) = rows.next()? {
            let mut values = Vec::with_capacity(columns.len());
            let mut text = Vec::new();
            for i in 0..columns.len() {
                let cell = row.get_ref(i)?;
                match cell {
                    ValueRef::Text(t) | ValueRef::Blob(t) => {
                        let start = chunk.text.len();
                        chunk.text.extend_from_slice(t);
                        text.push((i, start..chunk.text.len(), is_json(i)));
                        values.push(SqlValue::Text(None));
                    }
                    _ => values.push(from_sqlite(cell)),
                }
            }
            chunk.rows.push((values, text));
            if chunk.rows.len() == ROWS_PER_CHUNK {
                let sized = Chunk {
                    rows: Vec::with_capacity(ROWS_PER_CHUNK),
                    text: Vec::with_capacity(chunk.text.len()),
                };
                chunks.push(std::mem::replace(&mut chunk, sized));
            }
        }
        chunks.push(chunk);
        Ok(())
    })?;
    out.extend(parsed.into_iter().map(|values| Row {
        columns: columns.clone(),
        values,
    }));
    Ok(out)
}

/// Rows per chunk handed to the parsing thread.
const ROWS_PER_CHUNK: usize = 64;

/// A row read but not yet decoded: its cells, and where each text cell lies in its chunk's
/// text and whether it is JSON (the cell holds a placeholder until it is decoded), so the
/// reading thread copies bytes and allocates nothing per cell.
type Unparsed = (Vec<SqlValue>, Vec<(usize, std::ops::Range<usize>, bool)>);

/// Rows read but not yet decoded, with the JSON text of all of them in one buffer.
#[derive(Default)]
struct Chunk {
    rows: Vec<Unparsed>,
    text: Vec<u8>,
}

/// Chunks of read rows waiting to be parsed, numbered in read order.
#[derive(Default)]
struct ChunkQueue {
    waiting: VecDeque<(usize, Chunk)>,
    pushed: usize,
    /// The reader is done (or failed): no chunk will come.
    closed: bool,
}

/// Where the reader puts chunks; a second thread parses them meanwhile.
struct Chunks<'a> {
    queue: &'a Mutex<ChunkQueue>,
    ready: &'a Condvar,
}

impl Chunks<'_> {
    fn push(&mut self, chunk: Chunk) {
        let mut queue = locked(self.queue);
        let n = queue.pushed;
        queue.pushed += 1;
        queue.waiting.push_back((n, chunk));
        self.ready.notify_one();
    }
}

/// Runs `read` (which pushes chunks of read rows) while a second thread parses the chunks;
/// when `read` is done this thread parses too. Returns the rows' cells in read order.
fn parse_alongside(
    read: impl FnOnce(&mut Chunks<'_>) -> rusqlite::Result<()>,
) -> rusqlite::Result<Vec<Vec<SqlValue>>> {
    let queue = Mutex::new(ChunkQueue::default());
    let ready = Condvar::new();
    let parse_all = |wait: bool| {
        let mut done = Vec::new();
        loop {
            let next = {
                let mut q = locked(&queue);
                loop {
                    if let Some(next) = q.waiting.pop_front() {
                        break Some(next);
                    }
                    if q.closed || !wait {
                        break None;
                    }
                    q = ready
                        .wait(q)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            };
            let Some((n, chunk)) = next else {
                return done;
            };
            let text = chunk.text;
            let rows = chunk.rows.into_iter().map(|row| parse_row(row, &text));
            done.push((n, rows.collect::<Vec<_>>()));
        }
    };
    let (read, parsed) = std::thread::scope(|scope| {
        // Without a second thread (the OS refused one) this thread parses everything.
        let helper = std::thread::Builder::new()
            .name("agno-sqlite-json".into())
            .spawn_scoped(scope, || parse_all(true))
            .ok();
        let read = read(&mut Chunks {
            queue: &queue,
            ready: &ready,
        });
        locked(&queue).closed = true;
        ready.notify_all();
        let mut parsed = parse_all(false);
        match helper.map(|h| h.join()) {
            Some(Ok(theirs)) => parsed.extend(theirs),
            Some(Err(_)) => {
                return (read, Err(()));
            }
            None => {}
        }
        (read, Ok(parsed))
    });
    read?;
    let mut parsed = parsed.map_err(|()| {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_INTERNAL),
            Some("the thread parsing this query's JSON panicked".into()),
        )
    })?;
    parsed.sort_unstable_by_key(|(n, _)| *n);
    Ok(parsed.into_iter().flat_map(|(_, rows)| rows).collect())
}

/// Decodes a row's set-aside text cells (in its chunk's `text`) into their places.
fn parse_row((mut values, cells): Unparsed, text: &[u8]) -> Vec<SqlValue> {
    for (i, range, is_json) in cells {
        if let (Some(cell), Some(t)) = (values.get_mut(i), text.get(range)) {
            *cell = if is_json {
                json_from_text(t)
            } else {
                from_sqlite(ValueRef::Text(t))
            };
        }
    }
    values
}

/// How long a connection waits for another's lock before `database is locked`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Puts the database in WAL mode (persistent in the file; an in-memory database stays in
/// "memory" mode). While another connection switches the same new file, SQLite answers
/// `SQLITE_BUSY` at once, without waiting on the busy handler: wait and try again, for up
/// to [`BUSY_TIMEOUT`].
fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode=WAL", [], |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::DatabaseBusy && Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            done => return done.map(|_mode| ()),
        }
    }
}

/// Registers `agno_note(value, 'tag', more…)` on `conn`: it evaluates to `value` and
/// pushes `tag` with `value, more…` to `notes` (see [`Executor::execute_noting`]). Direct
/// only: a trigger or view in the file cannot call it.
fn register_note(conn: &Connection, notes: Arc<Mutex<Vec<Note>>>) -> rusqlite::Result<()> {
    use rusqlite::functions::FunctionFlags;
    conn.create_scalar_function(
        "agno_note",
        -1,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DIRECTONLY,
        move |ctx| {
            if ctx.len() < 2 {
                return Err(rusqlite::Error::UserFunctionError(
                    "agno_note takes a value, a tag and the values to note with them".into(),
                ));
            }
            let tag = ctx.get::<String>(1)?;
            let values = std::iter::once(0)
                .chain(2..ctx.len())
                .map(|i| from_sqlite(ctx.get_raw(i)))
                .collect();
            locked(&notes).push(Note { tag, values });
            ctx.get::<SqliteValue>(0)
        },
    )
}

fn run_execute(conn: &Connection, sql: &str, params: Vec<SqliteValue>) -> rusqlite::Result<u64> {
    let mut stmt = conn.prepare_cached(sql)?;
    Ok(stmt.execute(rusqlite::params_from_iter(params))? as u64)
}

impl SqliteExecutor {
    /// Opens the database file, or an in-memory database for `:memory:`, creating it in
    /// [`OpenMode::CreateMissing`]; [`OpenMode::Existing`] creates nothing (no file, no
    /// directory, no change of the journal mode) and answers `NotFound` for a missing or
    /// zero-byte file and `SchemaMismatch` for a file that is not a SQLite database.
    pub(crate) fn open_with_mode(path: &Path, mode: OpenMode) -> Result<Self> {
        let in_memory = path.as_os_str() == ":memory:";
        let conn = if mode.creates() || in_memory {
            Self::connect_creating(path, in_memory)?
        } else {
            Self::connect_existing(path)?
        };
        let notes = Arc::new(Mutex::new(Vec::new()));
        register_note(&conn, notes.clone()).map_err(map_err)?;
        let row_logs = RowLogs::default();
        row_logs.install(&conn).map_err(map_err)?;
        Ok(SqliteExecutor {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                arrived: Condvar::new(),
                conn: Mutex::new(Conn {
                    db: conn,
                    shapes: RefCell::default(),
                    notes,
                    row_logs,
                }),
                writers: AtomicUsize::new(0),
                commit_micros: AtomicU64::new(0),
            }),
            path: (!in_memory).then(|| path.to_path_buf()),
            memory_lock: Arc::new(tokio::sync::Mutex::new(())),
        })
    }

    /// An existing, non-empty SQLite file opened read-write without `SQLITE_OPEN_CREATE`,
    /// checked to be a database by reading its schema before anything else touches it.
    fn connect_existing(path: &Path) -> Result<Connection> {
        let shown = path.display();
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(
                    OpenMode::no_database(shown, "the file does not exist").with_backend(BACKEND)
                );
            }
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot read SQLite database {shown}: {e}"),
                )
                .with_backend(BACKEND)
                .with_source(e));
            }
            Ok(meta) if meta.is_dir() => {
                return Err(
                    OpenMode::no_database(shown, "it is a directory, not a file")
                        .with_backend(BACKEND),
                );
            }
            Ok(meta) if meta.len() == 0 => {
                return Err(
                    OpenMode::no_database(shown, "the file is empty (zero bytes)")
                        .with_backend(BACKEND),
                );
            }
            Ok(_) => {}
        }
        let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
            | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX
            | rusqlite::OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(path, flags).map_err(|e| {
            let err = map_err(e);
            Error::new(
                err.kind(),
                format!("cannot open SQLite database {shown}: {}", err.message()),
            )
            .with_backend(BACKEND)
        })?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(map_err)?;
        // Reading the schema reads page 1: a file that is not a database fails here, before
        // any pragma could write to it.
        if let Err(e) = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
            r.get::<_, i64>(0)
        }) {
            let not_a_database = matches!(
                &e,
                rusqlite::Error::SqliteFailure(f, _)
                    if matches!(f.code, ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
            );
            let err = map_err(e);
            let kind = if not_a_database {
                ErrorKind::SchemaMismatch
            } else {
                err.kind()
            };
            return Err(Error::new(
                kind,
                format!("{shown} is not a usable SQLite database: {}", err.message()),
            )
            .with_backend(BACKEND));
        }
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(map_err)?;
        Ok(conn)
    }

    /// The database file (and its directory) opened, created when missing, in WAL mode.
    fn connect_creating(path: &Path, in_memory: bool) -> Result<Connection> {
        if !in_memory {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(|e| {
                    Error::new(
                        ErrorKind::Unavailable,
                        format!(
                            "cannot create the directory {} for the SQLite database: {e}",
                            parent.display()
                        ),
                    )
                    .with_backend(BACKEND)
                })?;
            }
        }
        let conn = Connection::open(path).map_err(|e| {
            let err = map_err(e);
            Error::new(
                err.kind(),
                format!(
                    "cannot open SQLite database {}: {}",
                    path.display(),
                    err.message()
                ),
            )
            .with_backend(BACKEND)
        })?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(map_err)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(map_err)?;
        enable_wal(&conn).map_err(map_err)?;
        Ok(conn)
    }

    /// Queues `f` for the connection, leads if the connection is free, and waits for its
    /// result; `writes` calls are answered after their batch commits; `atomic` calls
    /// (several statements) always run inside a transaction.
    async fn call<T: Send + 'static>(
        &self,
        writes: bool,
        atomic: bool,
        f: impl FnOnce(&Conn) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = tokio::sync::oneshot::channel::<Result<T>>();
        let run = Box::new(
            move |conn: std::result::Result<&Conn, &rusqlite::Error>| -> (Option<Failure>, Delivery) {
                let outcome = match conn {
                    Ok(conn) => f(conn).map_err(map_err),
                    Err(e) => {
                        let (kind, temporary) = classify_batch(e);
                        Err(Error::new(
                            kind,
                            format!("SQLite could not start a write transaction: {e}"),
                        )
                        .with_backend(BACKEND)
                        .set_temporary(temporary))
                    }
                };
                let failure = outcome.as_ref().err().map(Failure::of);
                let deliver: Delivery = Box::new(move |batch: Option<&Failure>| {
                    let result = match (batch, outcome) {
                        // The batch failed after this call succeeded: nothing of it was
                        // written. A call that failed itself keeps its own error.
                        (Some(batch), Ok(_)) => Err(batch.error()),
                        (_, outcome) => outcome,
                    };
                    let _ = reply.send(result);
                });
                (failure, deliver)
            },
        );
        {
            let mut queue = locked(&self.shared.queue);
            queue.push(Job {
                writes,
                atomic,
                run,
            });
            if queue.waiting {
                self.shared.arrived.notify_one();
            }
        }
        // Lead if the connection is free; otherwise the current leader answers this call
        // (it re-checks the queue after letting go). The connection is tried before any
        // thread hop, so a call that will not lead costs none.
        if let Some(conn) = self.shared.try_conn() {
            match tokio::runtime::Handle::try_current() {
                // Concurrent writers: a committer on the blocking pool serves them all.
                Ok(_) if on_runtime_worker() && !self.shared.concurrent() => {
                    tokio::task::block_in_place(|| self.shared.lead_with(conn, true))
                }
                // Concurrent writers (or no worker to lead on): a committer on the blocking
                // pool serves them all.
                Ok(handle) => {
                    drop(conn);
                    let shared = self.shared.clone();
                    handle.spawn_blocking(move || shared.lead());
                }
                Err(_) => self.shared.lead_with(conn, true),
            }
        }
        answer.await.map_err(|_| {
            Error::new(
                ErrorKind::Unavailable,
                "the SQLite connection dropped a call",
            )
            .with_backend(BACKEND)
        })?
    }
}

/// [`Executor::query_versioned`] on the connection. The version and the rows come from one
/// read transaction, so the version is exactly the rows'.
fn versioned_read(
    c: &Conn,
    sql: &str,
    params: Vec<SqliteValue>,
    known: Option<DataVersion>,
    watch: Option<RowWatch>,
) -> rusqlite::Result<Versioned> {
    // Inside a transaction the rows may include writes that are not committed yet: they
    // get no version, so nobody keeps them.
    if !c.is_autocommit() {
        return Ok(Versioned::Rows(None, run_query(c, sql, params, false)?));
    }
    let tx = c.unchecked_transaction()?;
    let pragma = |sql: &str| c.prepare_cached(sql)?.query_row([], |r| r.get::<_, i64>(0));
    let (data, schema) = (
        pragma("PRAGMA data_version")?,
        pragma("PRAGMA schema_version")?,
    );
    let position = match &watch {
        Some(w) => c.row_logs.position(c, &w.table, schema)?,
        None => None,
    };
    let now = DataVersion {
        data,
        schema,
        own_changes: position.unwrap_or_else(|| c.total_changes()),
        watched: position.is_some(),
    };
    let answer = match watch.filter(|_| now.watched) {
        _ if known == Some(now) => Versioned::Unchanged,
        None => Versioned::Rows(Some(now), run_query(c, sql, params, false)?),
        Some(w) => {
            // When nobody else committed since `known` and the log holds every change of
            // this connection since, fetch only the rows it changed and those the caller
            // does not hold.
            let changed = known
                .filter(|k| k.watched && (k.data, k.schema) == (data, schema))
                .and_then(|k| c.row_logs.changed_since(&w.table, k.own_changes));
            match changed {
                Some(changed) => changed_rows(c, &w, params, &changed, now)?,
                None => Versioned::Rows(Some(now), run_query(c, &w.read, params, false)?),
            }
        }
    };
    tx.commit()?;
    Ok(answer)
}

/// [`Versioned::Changed`] at `now`: the `rowid` of every row `w.read` returns, and the rows
/// among them that are `changed` or that the caller does not hold.
fn changed_rows(
    c: &Conn,
    w: &RowWatch,
    params: Vec<SqliteValue>,
    changed: &std::collections::HashSet<i64>,
    now: DataVersion,
) -> rusqlite::Result<Versioned> {
    let row_ids: Vec<i64> = c
        .prepare_cached(&w.row_ids)?
        .query_map(rusqlite::params_from_iter(params), |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let held: std::collections::HashSet<i64> = w.held.iter().copied().collect();
    let wanted: Vec<i64> = row_ids
        .iter()
        .filter(|id| changed.contains(id) || !held.contains(id))
        .copied()
        .collect();
    let rows = if wanted.is_empty() {
        Vec::new()
    } else {
        let ids = serde_json::to_string(&wanted)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
        run_query(c, &w.rows_by_id, vec![SqliteValue::Text(ids)], false)?
    };
    Ok(Versioned::Changed {
        version: now,
        row_ids,
        rows,
    })
}

fn is_read(sql: &str) -> bool {
    sql.trim_start()
        .get(..6)
        .is_some_and(|p| p.eq_ignore_ascii_case("select"))
}

#[async_trait]
impl Executor for SqliteExecutor {
    async fn query(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let writes = !is_read(sql);
        let (sql, params) = (sql.to_owned(), encode(params));
        self.call(writes, false, move |c| run_query(c, &sql, params, false))
            .await
    }

    async fn query_json(&self, sql: &str, params: Vec<SqlValue>) -> Result<Vec<Row>> {
        let writes = !is_read(sql);
        let (sql, params) = (sql.to_owned(), encode(params));
        self.call(writes, false, move |c| run_query(c, &sql, params, true))
            .await
    }

    async fn query_versioned(&self, read: VersionedRead) -> Result<Versioned> {
        let VersionedRead {
            sql,
            params,
            known,
            watch,
        } = read;
        let params = encode(params);
        self.call(false, false, move |c| {
            versioned_read(c, &sql, params, known, watch)
        })
        .await
    }

    async fn execute(&self, sql: &str, params: Vec<SqlValue>) -> Result<u64> {
        let (sql, params) = (sql.to_owned(), encode(params));
        self.call(true, false, move |c| run_execute(c, &sql, params))
            .await
    }

    async fn execute_noting(&self, sql: &str, params: Vec<SqlValue>) -> Result<(u64, Vec<Note>)> {
        let (sql, params) = (sql.to_owned(), encode(params));
        self.call(true, false, move |c| {
            locked(&c.notes).clear();
            let changed = run_execute(c, &sql, params)?;
            Ok((changed, std::mem::take(&mut *locked(&c.notes))))
        })
        .await
    }

    async fn transaction(&self, statements: Vec<Statement>) -> Result<Vec<Vec<Row>>> {
        // The call runs in its own savepoint of the batch's writer transaction: all of its
        // statements commit together or not at all.
        let statements: Vec<(String, Vec<SqliteValue>)> = statements
            .into_iter()
            .map(|(sql, params)| (sql, encode(params)))
            .collect();
        self.call(true, true, move |c| {
            let mut out = Vec::with_capacity(statements.len());
            for (sql, params) in statements {
                out.push(run_query(c, &sql, params, false)?);
            }
            Ok(out)
        })
        .await
    }

    async fn migration_lock(&self) -> Result<MigrationLock> {
        let Some(path) = self.path.clone() else {
            return Ok(Box::new(ReleasedOnDrop(
                self.memory_lock.clone().lock_owned().await,
            )));
        };
        let mut lock_path = path.into_os_string();
        lock_path.push(".migrate.lock");
        let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unexpected,
                format!("migration lock thread failed: {e}"),
            )
        })?
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot take the migration lock file: {e}"),
            )
            .with_backend(BACKEND)
        })?;
        Ok(Box::new(ReleasedOnDrop(file)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Inserts rows of ~3 KB through `exec` until a write fails, and returns that failure.
    async fn fill(exec: Arc<SqliteExecutor>, atomic: bool) -> Error {
        for _ in 0..10_000 {
            let params = vec![SqlValue::text("x".repeat(3_000))];
            let sql = "INSERT INTO t (body) VALUES (?)";
            let outcome = if atomic {
                exec.transaction(vec![(sql.to_owned(), params)])
                    .await
                    .map(|_| ())
            } else {
                exec.execute(sql, params).await.map(|_| ())
            };
            if let Err(e) = outcome {
                return e;
            }
        }
        Error::new(ErrorKind::Unexpected, "the database never filled up")
    }

    async fn raise_limit(exec: &SqliteExecutor, pages: i64) {
        let rows = exec
            .query("PRAGMA page_count", vec![])
            .await
            .expect("page count");
        let count = rows[0].i64("page_count").expect("page_count");
        exec.query(
            &format!("PRAGMA max_page_count = {}", count + pages),
            vec![],
        )
        .await
        .expect("max_page_count");
    }

    /// A full database (`SQLITE_FULL`, here from `PRAGMA max_page_count`) is one kind, with
    /// one retry flag, for a lone writer (autocommit), a lone multi-statement call, and
    /// concurrent writers sharing group commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_database_is_one_kind_alone_and_in_a_group_commit() {
        let dir = std::env::temp_dir().join("agno-storage-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("full_{}.db", uuid::Uuid::new_v4().simple()));
        let exec =
            Arc::new(SqliteExecutor::open_with_mode(&path, OpenMode::CreateMissing).expect("open"));
        exec.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)", vec![])
            .await
            .expect("table");

        let mut failures = Vec::new();
        raise_limit(&exec, 16).await;
        failures.push(("lone writer", fill(exec.clone(), false).await));
        raise_limit(&exec, 16).await;
        failures.push(("lone transaction", fill(exec.clone(), true).await));
        // Several rounds: which writer meets the full disk, and whether SQLite rolls back
        // a whole group's transaction or one statement, varies from run to run.
        for _ in 0..4 {
            raise_limit(&exec, 96).await;
            let writers: Vec<_> = (0..8)
                .map(|i| tokio::spawn(fill(exec.clone(), i % 2 == 1)))
                .collect();
            for writer in writers {
                failures.push(("concurrent writer", writer.await.expect("writer task")));
            }
        }
        for (who, e) in &failures {
            assert_eq!(
                (e.kind(), e.is_temporary()),
                (ErrorKind::Unavailable, false),
                "{who}: {}",
                e.message()
            );
            assert!(e.message().contains("full"), "{who}: {}", e.message());
        }
        drop(exec);
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    /// A watched read ([`RowWatch`]) after the connection's own writes fetches only the
    /// rows that are new or changed, sees its deletes, and reads everything after another
    /// connection's commit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watched_read_fetches_only_what_its_own_connection_changed() {
        let dir = std::env::temp_dir().join("agno-storage-tests");
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join(format!("watch_{}.db", uuid::Uuid::new_v4().simple()));
        let exec = SqliteExecutor::open_with_mode(&path, OpenMode::CreateMissing).expect("open");
        let run = async |sql: &str| exec.execute(sql, vec![]).await.expect(sql);
        run("CREATE TABLE t (id TEXT PRIMARY KEY, s TEXT, v TEXT)").await;
        run("INSERT INTO t VALUES ('a', 's', '1'), ('b', 's', '2'), ('c', 'x', '3')").await;
        let read = |known: Option<DataVersion>, held: &[i64]| VersionedRead {
            sql: "SELECT id, v FROM t WHERE s = ?".into(),
            params: vec![SqlValue::text("s")],
            known,
            watch: Some(RowWatch {
                table: "t".into(),
                read: "SELECT rowid AS row_id, id, v FROM t WHERE s = ?".into(),
                row_ids: "SELECT rowid AS row_id FROM t WHERE s = ?".into(),
                rows_by_id: "SELECT rowid AS row_id, id, v FROM t \
                             WHERE rowid IN (SELECT value FROM json_each(?))"
                    .into(),
                held: Arc::new(held.to_vec()),
            }),
        };
        let ids = |rows: &[Row]| -> Vec<String> {
            let mut ids: Vec<String> = rows.iter().map(|r| r.str("id").expect("id")).collect();
            ids.sort();
            ids
        };
        let Versioned::Rows(Some(v1), rows) = exec.query_versioned(read(None, &[])).await.unwrap()
        else {
            panic!("a first read reads every row, with a version");
        };
        assert!(v1.watched);
        assert_eq!(ids(&rows), ["a", "b"]);
        let held: Vec<i64> = rows
            .iter()
            .map(|r| r.i64("row_id").expect("rowid"))
            .collect();
        assert!(matches!(
            exec.query_versioned(read(Some(v1), &held)).await.unwrap(),
            Versioned::Unchanged
        ));

        run("INSERT INTO t VALUES ('d', 's', '4')").await;
        run("UPDATE t SET v = '5' WHERE id = 'c'").await;
        let Versioned::Changed {
            version: v2,
            row_ids,
            rows,
        } = exec.query_versioned(read(Some(v1), &held)).await.unwrap()
        else {
            panic!("its own insert: only the new row");
        };
        assert_eq!((row_ids.len(), ids(&rows)), (3, vec!["d".to_owned()]));
        run("UPDATE t SET v = '6' WHERE id = 'a'").await;
        run("DELETE FROM t WHERE id = 'b'").await;
        let Versioned::Changed {
            version: v3,
            row_ids: now,
            rows,
        } = exec
            .query_versioned(read(Some(v2), &row_ids))
            .await
            .unwrap()
        else {
            panic!("its own update and delete: only the updated row");
        };
        assert_eq!((now.len(), ids(&rows)), (2, vec!["a".to_owned()]));
        assert_eq!(rows[0].str("v").expect("v"), "6");

        let other = Connection::open(&path).expect("another connection");
        other
            .execute("UPDATE t SET v = '7' WHERE id = 'd'", [])
            .expect("update");
        let Versioned::Rows(Some(_), rows) =
            exec.query_versioned(read(Some(v3), &now)).await.unwrap()
        else {
            panic!("another connection's commit: every row");
        };
        assert_eq!(ids(&rows), ["a", "d"]);
        drop((other, exec));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }
}
