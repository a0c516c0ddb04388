//! Live coordination over Redis: run event streams and cross-replica cancellation.
//!
//! Redis here is a transport, never the truth: jobs and run results live in a durable store
//! (the SQL adapter's job queue). Every call fails open — when Redis is slow or down,
//! `publish_event` and `request_cancel` return `false`, `read_events` returns nothing and
//! `is_cancelled` returns `false` — so a Redis fault degrades the live view and can neither
//! lose nor corrupt a job. The connection is made lazily and remade after a fault, so the
//! live view recovers on its own. Keys follow agno's coordination layout
//! (`{prefix}:os:events:{run_id}:1:events`, `{prefix}:run:cancellation:{run_id}`).

use std::time::Duration;

use agno_storage_core::{Error, ErrorKind, Result};
use redis::aio::MultiplexedConnection;
use serde_json::Value;

use crate::codec::encode;

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
        })
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

    fn events_key(&self, run_id: &str) -> String {
        format!("{}:os:events:{run_id}:1:events", self.prefix)
    }

    fn cancel_key(&self, run_id: &str) -> String {
        format!("{}:run:cancellation:{run_id}", self.prefix)
    }

    /// Appends `event` to the run's live stream; `false` when Redis is unavailable.
    pub async fn publish_event(&self, run_id: &str, event: &Value) -> bool {
        let key = self.events_key(run_id);
        let added: Option<String> = self
            .run(
                redis::cmd("XADD")
                    .arg(&key)
                    .arg("*")
                    .arg("event")
                    .arg(encode(event)),
            )
            .await;
        if added.is_none() {
            return false;
        }
        self.run::<i64>(redis::cmd("EXPIRE").arg(&key).arg(EVENTS_TTL_SECONDS))
            .await
            .is_some()
    }

    /// The run's events after stream id `after` (all when `None`), oldest first, as
    /// `(stream id, event)`; empty when Redis is unavailable.
    pub async fn read_events(&self, run_id: &str, after: Option<&str>) -> Vec<(String, Value)> {
        let start = after.map_or_else(|| "-".to_owned(), |a| format!("({a}"));
        let entries: Option<Vec<(String, Vec<String>)>> = self
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
                let raw = fields
                    .chunks(2)
                    .find(|kv| kv.first().is_some_and(|k| k == "event"))?
                    .get(1)?;
                Some((id, serde_json::from_str(raw).ok()?))
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
