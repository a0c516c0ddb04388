//! Live coordination over Redis or Valkey for agno-storage workers: run event streams and
//! cross-replica cancellation ([`Coordination`], which implements the core's [`RunEvents`]
//! and [`RunCancellations`]). It needs no storage adapter: the jobs may live in any store.
//!
//! Redis here is a transport, never the truth: jobs and run results live in a durable store
//! (a SQL store's job queue, say). Every call fails open — when Redis is slow or down,
//! `publish_event` and `request_cancel` return `false`, `read_events` returns nothing and
//! `is_cancelled` returns `false`, and the [`RunEvents`] calls return `Unavailable` — so a
//! Redis fault degrades the live view and can neither lose nor corrupt a job. The
//! connection is made lazily and remade after a fault, so the live view recovers on its
//! own.
//!
//! The layout is agno 3.1.10's (`os/event_streams/redis.py`,
//! `run/cancellation_management/redis_cancellation_manager.py`), so agno's AgentOS tails
//! the events our workers publish and the other way round: per run,
//! `{prefix}:os:events:{run_id}:1:events` (a stream of `idx` + `sse` entries and
//! `terminal` sentinels), `…:status`, `…:idx` (the index counter) and `…:gen` (the writer
//! generation, fenced with agno's scripts), all expiring 1,800 s after the last write; and
//! `{prefix}:run:cancellation:{run_id}` (`"1"` once cancelled). agno's default `prefix`
//! is `agno`.
//!
//! ```no_run
//! # async fn demo() -> agno_storage_core::Result<()> {
//! use agno_storage_core::run_events::RunEvents;
//! use agno_storage_redis_events::Coordination;
//! let events = Coordination::new("redis://127.0.0.1:6379", "agno")?;
//! events.begin_attempt("run-1", 1).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

use std::collections::VecDeque;
use std::time::Duration;

use agno_storage_core::run_events::{
    event_object, format_sse, EventTail, RunCancellations, RunEvent, RunEvents, StreamStatus,
};
use agno_storage_core::{async_trait, Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;
use serde_json::Value;

/// Event streams live this long after their last event (agno: 1800 s).
const EVENTS_TTL_SECONDS: i64 = 1800;
/// Cancellation flags live this long (agno: 86400 s).
const CANCEL_TTL_SECONDS: i64 = 86_400;

/// Fail-open coordination helpers on one Redis or Valkey server.
pub struct Coordination {
    client: redis::Client,
    conn: tokio::sync::Mutex<Option<MultiplexedConnection>>,
    prefix: String,
    timeout: Duration,
    tail_block: Duration,
}

impl std::fmt::Debug for Coordination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordination")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Coordination {
    /// Helpers on the server at `url` under key prefix `prefix` (agno's `key_prefix`, default
    /// `agno`). No I/O happens here; a bad URL is the only error.
    pub fn new(url: &str, prefix: &str) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| {
            Error::new(ErrorKind::InvalidInput, format!("invalid Redis URL: {e}")).with_source(e)
        })?;
        Ok(Coordination {
            client,
            conn: tokio::sync::Mutex::new(None),
            prefix: prefix.to_owned(),
            timeout: Duration::from_millis(500),
            tail_block: TAIL_BLOCK,
        })
    }

    /// How long a tail waits for new events before it checks whether the run ended or its
    /// producer died (agno's `block_ms`; default 15 s). Shorter ends tails of dead runs
    /// sooner at the cost of more status reads.
    pub fn with_tail_block(mut self, block: Duration) -> Self {
        self.tail_block = block;
        self
    }

    /// Runs `cmd`, connecting first if needed; `None` on any fault or timeout (the cached
    /// connection is then dropped, so the next call reconnects).
    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Option<T> {
        let mut slot = self.conn.lock().await;
        if slot.is_none() {
            let connect = self.client.get_multiplexed_async_connection();
            *slot = tokio::time::timeout(self.timeout, connect).await.ok()?.ok();
        }
        let conn = slot.as_mut()?;
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(conn)).await {
            Ok(Ok(value)) => Some(value),
            _ => {
                *slot = None;
                None
            }
        }
    }

    async fn run_pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Option<T> {
        let mut slot = self.conn.lock().await;
        let conn = slot.as_mut()?;
        match tokio::time::timeout(self.timeout, pipe.query_async::<T>(conn)).await {
            Ok(Ok(value)) => Some(value),
            _ => {
                *slot = None;
                None
            }
        }
    }

    fn events_key(&self, run_id: &str) -> String {
        format!("{}:os:events:{run_id}:1:events", self.prefix)
    }

    /// agno's per-run keys: the stream, its status, its index counter and its writer
    /// generation.
    fn run_keys(&self, run_id: &str) -> [String; 4] {
        let base = format!("{}:os:events:{run_id}", self.prefix);
        [
            format!("{base}:1:events"),
            format!("{base}:status"),
            format!("{base}:idx"),
            format!("{base}:gen"),
        ]
    }

    fn cancel_key(&self, run_id: &str) -> String {
        format!("{}:run:cancellation:{run_id}", self.prefix)
    }

    /// Appends `event` to the run's live stream, unfenced (agno's layout: an index from
    /// the run's counter and the SSE text); `false` when Redis is unavailable or `event` is
    /// not an object.
    pub async fn publish_event(&self, run_id: &str, event: &Value) -> bool {
        matches!(self.add_event(run_id, event, None).await, Ok(Some(_)))
    }

    /// The run's events after stream id `after` (all when `None`), oldest first, as
    /// `(stream id, event data)`; empty when Redis is unavailable.
    pub async fn read_events(&self, run_id: &str, after: Option<&str>) -> Vec<(String, Value)> {
        let start = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let entries: Option<Vec<Entry>> = self
            .run(
                redis::cmd("XRANGE")
                    .arg(self.events_key(run_id))
                    .arg(start)
                    .arg("+"),
            )
            .await;
        entries
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(id, fields)| {
                let event = stream_event(&fields)?;
                Some((id, event.data().ok()?))
            })
            .collect()
    }

    /// Flags the run as cancelled for every replica; `false` when Redis is unavailable (the
    /// durable store's cancellation still applies).
    pub async fn request_cancel(&self, run_id: &str) -> bool {
        let set: Option<String> = self
            .run(
                redis::cmd("SET")
                    .arg(self.cancel_key(run_id))
                    .arg("1")
                    .arg("EX")
                    .arg(CANCEL_TTL_SECONDS),
            )
            .await;
        set.is_some()
    }

    /// Whether cancellation was requested; `false` (fail open) when Redis is unavailable.
    pub async fn is_cancelled(&self, run_id: &str) -> bool {
        let flag: Option<Option<String>> = self
            .run(redis::cmd("GET").arg(self.cancel_key(run_id)))
            .await;
        matches!(flag, Some(Some(v)) if v == "1")
    }
}

/// One stream entry: its id and its fields, flat (`[name, value, ...]`).
type Entry = (String, Vec<String>);

/// How many events a run's stream keeps, about (agno's `maxlen`, `XADD MAXLEN ~`).
const EVENTS_MAXLEN: i64 = 10_000;
/// How long a tail blocks on `XREAD` before it checks the run's status (agno: 15 s).
const TAIL_BLOCK: Duration = Duration::from_secs(15);

/// agno's `_FENCED_INCR_LUA`: refuse (-1) when the stored generation is newer, record it
/// when absent or older, then take the next index.
const FENCED_INCR: &str = r"
local gen = redis.call('GET', KEYS[1])
if gen == false then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
elseif tonumber(gen) > tonumber(ARGV[1]) then
  return -1
elseif tonumber(gen) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[2]))
end
return redis.call('INCR', KEYS[2])
";

/// agno's `_FENCED_XADD_LUA`: append unless a newer generation began since the index.
const FENCED_XADD: &str = r"
local gen = redis.call('GET', KEYS[1])
if gen ~= false and tonumber(gen) > tonumber(ARGV[1]) then
  return 0
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[2], '*', 'idx', ARGV[3], 'sse', ARGV[4])
return 1
";

/// agno's fenced lifecycle writes (a WATCH/MULTI there, one script here): refuse (0) when
/// the stored generation is newer than ARGV[1] (empty: unfenced), record a newer one, then
/// `status` sets the status, `complete` also appends the terminal sentinel, `reset` drops
/// the events, `begin` only records the generation. KEYS: stream, status, counter, gen.
const FENCED_LIFECYCLE: &str = r"
local ttl = tonumber(ARGV[2])
if ARGV[1] ~= '' then
  local gen = redis.call('GET', KEYS[4])
  if gen ~= false and tonumber(gen) > tonumber(ARGV[1]) then
    if ARGV[3] == 'begin' then redis.call('EXPIRE', KEYS[4], ttl) end
    return 0
  end
  if gen == false or tonumber(gen) < tonumber(ARGV[1]) then
    redis.call('SET', KEYS[4], ARGV[1], 'EX', ttl)
  elseif ARGV[3] == 'begin' then
    redis.call('EXPIRE', KEYS[4], ttl)
  end
end
if ARGV[3] == 'status' or ARGV[3] == 'complete' then
  redis.call('SET', KEYS[2], ARGV[4], 'EX', ttl)
end
if ARGV[3] == 'complete' then
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[5], '*', 'terminal', ARGV[4])
  redis.call('EXPIRE', KEYS[1], ttl)
  redis.call('EXPIRE', KEYS[3], ttl)
end
if ARGV[3] == 'reset' then
  redis.call('DEL', KEYS[1])
end
return 1
";

/// agno's `reopen_run` (a WATCH/MULTI there, one script here): refuse (0) unless the status
/// is missing or one of ARGV[3..] (the reopenable ones), else set it `PENDING`, raise the
/// counter to at least ARGV[2] + 1 when ARGV[2] is not empty, and append a `reopen` marker
/// that voids the pause's sentinel for tails. KEYS: stream, status, counter. ARGV[1]: the
/// expiry, then the stream's length, the floor, the reopenable statuses.
const REOPEN: &str = r"
local ttl = tonumber(ARGV[1])
local current = redis.call('GET', KEYS[2])
if current ~= false then
  local reopenable = false
  for i = 4, #ARGV do
    if ARGV[i] == current then reopenable = true end
  end
  if not reopenable then return 0 end
end
redis.call('SET', KEYS[2], 'PENDING', 'EX', ttl)
if ARGV[3] ~= '' then
  local counter = tonumber(redis.call('GET', KEYS[3]) or '0')
  if tonumber(ARGV[3]) + 1 > counter then
    redis.call('SET', KEYS[3], tonumber(ARGV[3]) + 1, 'EX', ttl)
  end
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', 'reopen', '1')
redis.call('EXPIRE', KEYS[1], ttl)
redis.call('EXPIRE', KEYS[3], ttl)
return 1
";

/// The event an entry holds (`idx` and `sse`), if it is one (not a sentinel or marker).
fn stream_event(fields: &[String]) -> Option<RunEvent> {
    let field = |name: &str| {
        fields
            .chunks(2)
            .find(|kv| kv.first().is_some_and(|k| k == name))
            .and_then(|kv| kv.get(1))
    };
    Some(RunEvent {
        index: field("idx")?.parse().ok()?,
        sse: field("sse")?.clone(),
    })
}

fn is_terminal_sentinel(fields: &[String]) -> bool {
    fields
        .chunks(2)
        .any(|kv| kv.first().is_some_and(|k| k == "terminal"))
}

fn unavailable(operation: &str) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("{operation}: Redis did not answer (the event stream fails open; retry)"),
    )
    .with_backend("redis")
    .set_temporary(true)
}

impl Coordination {
    async fn script<T: redis::FromRedisValue>(
        &self,
        operation: &str,
        script: &redis::Script,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        let mut slot = self.conn.lock().await;
        if slot.is_none() {
            let connect = self.client.get_multiplexed_async_connection();
            *slot = tokio::time::timeout(self.timeout, connect)
                .await
                .ok()
                .and_then(|c| c.ok());
        }
        let conn = slot.as_mut().ok_or_else(|| unavailable(operation))?;
        let mut call = script.prepare_invoke();
        for key in keys {
            call.key(*key);
        }
        for arg in args {
            call.arg(arg);
        }
        match tokio::time::timeout(self.timeout, call.invoke_async::<T>(conn)).await {
            Ok(Ok(value)) => Ok(value),
            _ => {
                *slot = None;
                Err(unavailable(operation))
            }
        }
    }

    async fn lifecycle(
        &self,
        run_id: &str,
        op: &str,
        status: Option<StreamStatus>,
        generation: Option<i64>,
    ) -> Result<bool> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(FENCED_LIFECYCLE));
        let keys = self.run_keys(run_id);
        let args = [
            generation.map(|g| g.to_string()).unwrap_or_default(),
            EVENTS_TTL_SECONDS.to_string(),
            op.to_owned(),
            status.map(StreamStatus::as_str).unwrap_or("").to_owned(),
            EVENTS_MAXLEN.to_string(),
        ];
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let applied: i64 = self.script(op, script, &keys, &args).await?;
        Ok(applied == 1)
    }
}

#[async_trait]
impl RunEvents for Coordination {
    async fn begin_attempt(&self, run_id: &str, generation: i64) -> Result<()> {
        self.lifecycle(run_id, "begin", None, Some(generation))
            .await
            .map(drop)
    }

    async fn set_run_status(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool> {
        self.lifecycle(run_id, "status", Some(status), generation)
            .await
    }

    async fn get_run_status(&self, run_id: &str) -> Result<Option<StreamStatus>> {
        let [_, status, _, _] = self.run_keys(run_id);
        let value: Option<String> = self
            .run(redis::cmd("GET").arg(status))
            .await
            .ok_or_else(|| unavailable("get_run_status"))?;
        // An unknown value is a newer agno's status: treated as running, as agno does.
        Ok(value.map(|v| StreamStatus::parse(&v).unwrap_or(StreamStatus::Running)))
    }

    async fn add_event(
        &self,
        run_id: &str,
        event: &Value,
        generation: Option<i64>,
    ) -> Result<Option<i64>> {
        static INCR: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        static XADD: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let event = event_object(event)?;
        let [stream, status, counter, gen] = self.run_keys(run_id);
        let ttl = EVENTS_TTL_SECONDS.to_string();
        let next: i64 = match generation {
            Some(g) => {
                let incr = INCR.get_or_init(|| redis::Script::new(FENCED_INCR));
                self.script(
                    "add_event",
                    incr,
                    &[&gen, &counter],
                    &[g.to_string(), ttl.clone()],
                )
                .await?
            }
            None => self
                .run(redis::cmd("INCR").arg(&counter))
                .await
                .ok_or_else(|| unavailable("add_event"))?,
        };
        if next == -1 {
            return Ok(None);
        }
        let index = next - 1;
        let sse = format_sse(run_id, event, index);
        let appended = match generation {
            Some(g) => {
                let xadd = XADD.get_or_init(|| redis::Script::new(FENCED_XADD));
                let args = [
                    g.to_string(),
                    EVENTS_MAXLEN.to_string(),
                    index.to_string(),
                    sse,
                ];
                self.script::<i64>("add_event", xadd, &[&gen, &stream], &args)
                    .await?
                    == 1
            }
            None => self
                .run::<String>(
                    redis::cmd("XADD")
                        .arg(&stream)
                        .arg("MAXLEN")
                        .arg("~")
                        .arg(EVENTS_MAXLEN)
                        .arg("*")
                        .arg("idx")
                        .arg(index)
                        .arg("sse")
                        .arg(&sse),
                )
                .await
                .is_some(),
        };
        // Keep the run's keys alive while it writes (agno refreshes them on a timer).
        let mut expire = redis::pipe();
        for key in [&stream, &status, &counter, &gen] {
            expire
                .cmd("EXPIRE")
                .arg(key)
                .arg(EVENTS_TTL_SECONDS)
                .ignore();
        }
        let _: Option<()> = self.run_pipe(&expire).await;
        Ok(appended.then_some(index))
    }

    async fn complete_run(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool> {
        let status = status.terminal();
        self.lifecycle(run_id, "complete", Some(status), generation)
            .await
    }

    async fn reset_run_events(&self, run_id: &str, generation: Option<i64>) -> Result<bool> {
        self.lifecycle(run_id, "reset", None, generation).await
    }

    async fn reopen_run(
        &self,
        run_id: &str,
        include_error: bool,
        floor: Option<i64>,
    ) -> Result<bool> {
        static SCRIPT: std::sync::OnceLock<redis::Script> = std::sync::OnceLock::new();
        let script = SCRIPT.get_or_init(|| redis::Script::new(REOPEN));
        let [stream, status, counter, _] = self.run_keys(run_id);
        let mut args = vec![
            EVENTS_TTL_SECONDS.to_string(),
            EVENTS_MAXLEN.to_string(),
            floor.map(|f| f.to_string()).unwrap_or_default(),
        ];
        args.extend(
            [
                StreamStatus::Paused,
                StreamStatus::Pending,
                StreamStatus::Error,
            ]
            .into_iter()
            .filter(|s| s.reopenable(include_error))
            .map(|s| s.as_str().to_owned()),
        );
        let keys = [stream.as_str(), status.as_str(), counter.as_str()];
        let reopened: i64 = self.script("reopen_run", script, &keys, &args).await?;
        Ok(reopened == 1)
    }

    async fn tail(&self, run_id: &str, after: Option<i64>) -> Result<Box<dyn EventTail>> {
        let connect = self.client.get_multiplexed_async_connection();
        let conn = tokio::time::timeout(self.timeout, connect)
            .await
            .ok()
            .and_then(|c| c.ok())
            .ok_or_else(|| unavailable("tail"))?;
        let [stream, status, _, _] = self.run_keys(run_id);
        Ok(Box::new(RedisTail {
            conn,
            stream,
            status,
            from_id: None,
            last: after.unwrap_or(-1),
            ready: VecDeque::new(),
            ended: false,
            failures: 0,
            block_ms: self.tail_block.as_millis().max(1) as u64,
        }))
    }

    /// `EXPIRE` of each running run's four keys, in one pipeline; the runs whose status is
    /// gone or ends tails are left to expire (as agno's refresher leaves them).
    async fn keep_alive(&self, run_ids: &[String]) -> Result<()> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let statuses: Vec<String> = run_ids
            .iter()
            .map(|id| self.run_keys(id)[1].clone())
            .collect();
        let current: Vec<Option<String>> = self
            .run(redis::cmd("MGET").arg(&statuses))
            .await
            .ok_or_else(|| unavailable("keep_alive"))?;
        let mut expire = redis::pipe();
        for (id, status) in run_ids.iter().zip(current) {
            let live = status
                .as_deref()
                .is_some_and(|s| !StreamStatus::parse(s).is_some_and(StreamStatus::ends_tails));
            if live {
                for key in self.run_keys(id) {
                    expire
                        .cmd("EXPIRE")
                        .arg(key)
                        .arg(EVENTS_TTL_SECONDS)
                        .ignore();
                }
            }
        }
        self.run_pipe::<()>(&expire)
            .await
            .ok_or_else(|| unavailable("keep_alive"))
    }

    async fn cleanup_run(&self, run_id: &str) -> Result<()> {
        let keys = self.run_keys(run_id);
        self.run::<i64>(redis::cmd("DEL").arg(&keys[..]))
            .await
            .map(drop)
            .ok_or_else(|| unavailable("cleanup_run"))
    }
}

#[async_trait]
impl RunCancellations for Coordination {
    async fn request_cancel(&self, run_id: &str) -> Result<bool> {
        Ok(Coordination::request_cancel(self, run_id).await)
    }

    /// One `MGET` of agno's flags (`"1"` = cancelled).
    async fn cancelled(&self, run_ids: &[String]) -> Result<Vec<String>> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        let keys: Vec<String> = run_ids.iter().map(|id| self.cancel_key(id)).collect();
        let flags: Vec<Option<String>> = self
            .run(redis::cmd("MGET").arg(&keys))
            .await
            .ok_or_else(|| unavailable("cancelled"))?;
        Ok(run_ids
            .iter()
            .zip(flags)
            .filter(|(_, flag)| flag.as_deref() == Some("1"))
            .map(|(id, _)| id.clone())
            .collect())
    }
}

/// A tail on its own connection (`XREAD BLOCK` holds it): the buffered prefix by
/// `XRANGE`, then `XREAD` from the exact entry the prefix ended at, so nothing arriving in
/// between is missed or repeated.
struct RedisTail {
    conn: MultiplexedConnection,
    stream: String,
    status: String,
    /// The last entry read; `None` before the prefix was.
    from_id: Option<String>,
    /// The last index yielded.
    last: i64,
    ready: VecDeque<RunEvent>,
    /// A terminal sentinel with nothing after it was read, or the run ended.
    ended: bool,
    /// Consecutive Redis faults: the pause between tries grows with them.
    failures: u32,
    /// How long one `XREAD` blocks before the run's status is checked.
    block_ms: u64,
}

impl RedisTail {
    /// Takes a batch of entries; `peek_after_sentinel` says whether a sentinel closing the
    /// batch needs a look past it (a count-bounded `XREAD` batch can end on a stale one).
    async fn take(&mut self, entries: Vec<Entry>, bounded: bool) {
        let n = entries.len();
        for (i, (id, fields)) in entries.into_iter().enumerate() {
            self.from_id = Some(id.clone());
            if is_terminal_sentinel(&fields) {
                // A sentinel ends the tail only when nothing follows it in the stream.
                if i + 1 == n {
                    let following: Option<Vec<Entry>> = if bounded {
                        redis::cmd("XRANGE")
                            .arg(&self.stream)
                            .arg(format!("({id}"))
                            .arg("+")
                            .arg("COUNT")
                            .arg(1)
                            .query_async(&mut self.conn)
                            .await
                            .ok()
                    } else {
                        Some(Vec::new())
                    };
                    if following.is_some_and(|f| f.is_empty()) {
                        self.ended = true;
                    }
                }
                continue;
            }
            if let Some(event) = stream_event(&fields) {
                if event.index > self.last {
                    self.last = event.index;
                    self.ready.push_back(event);
                }
            }
        }
    }

    async fn pause(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let wait =
            Duration::from_millis(100 * (1 << self.failures.min(6))).min(Duration::from_secs(5));
        tokio::time::sleep(wait).await;
    }
}

#[async_trait]
impl EventTail for RedisTail {
    async fn next(&mut self) -> Option<Result<RunEvent>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Some(Ok(event));
            }
            if self.ended {
                return None;
            }
            let Some(from) = self.from_id.clone() else {
                let prefix: redis::RedisResult<Vec<Entry>> = redis::cmd("XRANGE")
                    .arg(&self.stream)
                    .arg("-")
                    .arg("+")
                    .query_async(&mut self.conn)
                    .await;
                match prefix {
                    Ok(entries) => {
                        self.failures = 0;
                        self.from_id = Some("0-0".into());
                        self.take(entries, false).await;
                    }
                    Err(_) => self.pause().await,
                }
                continue;
            };
            let read: redis::RedisResult<Option<Vec<(String, Vec<Entry>)>>> = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(self.block_ms)
                .arg("COUNT")
                .arg(100)
                .arg("STREAMS")
                .arg(&self.stream)
                .arg(&from)
                .query_async(&mut self.conn)
                .await;
            match read {
                Ok(Some(streams)) if !streams.is_empty() => {
                    self.failures = 0;
                    for (_, entries) in streams {
                        self.take(entries, true).await;
                    }
                }
                Ok(_) => {
                    // Idle: the writer may have died without a sentinel; never wait forever.
                    let status: redis::RedisResult<Option<String>> = redis::cmd("GET")
                        .arg(&self.status)
                        .query_async(&mut self.conn)
                        .await;
                    match status {
                        Ok(None) => return None,
                        Ok(Some(s))
                            if StreamStatus::parse(&s).is_some_and(StreamStatus::ends_tails) =>
                        {
                            return None
                        }
                        Ok(Some(s)) if StreamStatus::parse(&s) == Some(StreamStatus::Running) => {
                            self.failures = 0;
                            // The producer refreshes the keys every third of their expiry
                            // (`keep_alive`): less than that left means it missed two
                            // refreshes and is gone (agno's dead-producer bound).
                            let left: redis::RedisResult<i64> = redis::cmd("TTL")
                                .arg(&self.status)
                                .query_async(&mut self.conn)
                                .await;
                            if left.is_ok_and(|t| (0..EVENTS_TTL_SECONDS / 3).contains(&t)) {
                                return None;
                            }
                        }
                        Ok(Some(_)) => self.failures = 0,
                        Err(_) => self.pause().await,
                    }
                }
                Err(_) => self.pause().await,
            }
        }
    }
}
