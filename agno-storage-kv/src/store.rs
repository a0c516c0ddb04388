//! The store behind every trait: one multiplexed connection, the key prefix, key builders
//! and the reads and atomic writes the domain modules share.

use agno_storage_core::{Error, ErrorKind, Pagination, Result, SortOrder};
use redis::aio::ConnectionManager;

use crate::docs::Entry;

/// Members read per round trip when walking an index.
const CHUNK: usize = 500;

pub(crate) struct KvStore {
    conn: ConnectionManager,
    /// For connections of their own (subscriptions).
    pub(crate) client: redis::Client,
    pub(crate) prefix: String,
    pub(crate) server: &'static str,
    pub(crate) commit_script: redis::Script,
    /// agno's `expire`: the TTL, in seconds, of the records of [`EXPIRING_TABLES`].
    pub(crate) expire: Option<u64>,
}

/// The tables whose record keys agno's `expire` applies to (`_store_record` and the run
/// writes of `RedisDb`); schedules, learnings, jobs and schema versions never expire.
pub(crate) const EXPIRING_TABLES: &[&str] = &[
    crate::sessions::TABLE,
    crate::runs::TABLE,
    crate::memories::TABLE,
    crate::metrics::TABLE,
    crate::knowledge::TABLE,
    crate::evals::TABLE,
];

/// A Redis error as a storage error: connection problems are `Unavailable` (retryable),
/// everything else `Unexpected`.
pub(crate) fn redis_err(e: redis::RedisError) -> Error {
    let kind = if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
    {
        ErrorKind::Unavailable
    } else {
        ErrorKind::Unexpected
    };
    Error::new(kind, e.to_string()).with_source(e)
}

/// The glob pattern matching `literal` exactly, for `SCAN MATCH`.
pub(crate) fn glob_escape(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len());
    for c in literal.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl KvStore {
    pub(crate) fn new(
        conn: ConnectionManager,
        client: redis::Client,
        prefix: String,
        server: &'static str,
        expire: Option<u64>,
    ) -> Self {
        KvStore {
            conn,
            client,
            prefix,
            server,
            commit_script: crate::docs::commit_script(),
            expire,
        }
    }

    pub(crate) fn err(&self, e: redis::RedisError) -> Error {
        redis_err(e).with_backend(self.server)
    }

    /// `{prefix}:{table}:{id}`: a record, as agno names it.
    pub(crate) fn key(&self, table: &str, id: &str) -> String {
        format!("{}:{table}:{id}", self.prefix)
    }

    /// `{prefix}:{table}:index:{rest}`: a secondary index. agno's key scans skip
    /// `{table}:index:`, so these never show up as records to agno.
    pub(crate) fn idx(&self, table: &str, rest: &str) -> String {
        format!("{}:{table}:index:{rest}", self.prefix)
    }

    /// `{prefix}:runs:by_session:{session_id}`: agno's per-session run index (score
    /// `run_index`), which agno needs to see a run.
    pub(crate) fn by_session(&self, session_id: &str) -> String {
        format!("{}:runs:by_session:{session_id}", self.prefix)
    }

    /// The id of a record key of `table`, or `None` for helper keys (indexes, run lists).
    pub(crate) fn record_id<'a>(&self, table: &str, key: &'a str) -> Option<&'a str> {
        let id = key.strip_prefix(&format!("{}:{table}:", self.prefix))?;
        let helper = id.starts_with("index:") || (table == "runs" && id.starts_with("by_session:"));
        (!helper).then_some(id)
    }

    pub(crate) fn conn(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub(crate) async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        cmd.query_async(&mut self.conn())
            .await
            .map_err(|e| self.err(e))
    }

    pub(crate) async fn pipe<T: redis::FromRedisValue>(&self, pipe: &redis::Pipeline) -> Result<T> {
        pipe.query_async(&mut self.conn())
            .await
            .map_err(|e| self.err(e))
    }

    pub(crate) async fn get(&self, key: &str) -> Result<Option<String>> {
        self.query(redis::cmd("GET").arg(key)).await
    }

    /// The values of `keys`, in order (`None` for missing keys).
    pub(crate) async fn mget(&self, keys: &[String]) -> Result<Vec<Option<String>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(CHUNK) {
            let part: Vec<Option<String>> = self.query(redis::cmd("MGET").arg(chunk)).await?;
            out.extend(part);
        }
        Ok(out)
    }

    /// The server clock (`TIME`), in epoch seconds: the one clock every lease decision uses.
    pub(crate) async fn server_now(&self) -> Result<i64> {
        let (seconds, _micros): (i64, i64) = self.query(&redis::cmd("TIME")).await?;
        Ok(seconds)
    }

    /// Every item of a cursor command (`SCAN`, `HSCAN`, with `cursor_arg(0)`), page after
    /// page through the client's `iter_async`. `first_only` stops at the first item.
    pub(crate) async fn cursor<T: redis::FromRedisValue + Unpin + Send>(
        &self,
        cmd: redis::Cmd,
        first_only: bool,
    ) -> Result<Vec<T>> {
        let mut conn = self.conn();
        let mut items = cmd
            .iter_async::<T>(&mut conn)
            .await
            .map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        while let Some(item) = items.next_item().await {
            out.push(item.map_err(|e| self.err(e))?);
            if first_only {
                break;
            }
        }
        Ok(out)
    }

    /// Every key matching `pattern` (a `SCAN MATCH` glob), or only the first one found.
    /// O(keys in the database): for migrations and index rebuilds only.
    pub(crate) async fn scan_keys(&self, pattern: &str, first_only: bool) -> Result<Vec<String>> {
        let mut scan = redis::cmd("SCAN");
        scan.cursor_arg(0)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000);
        let mut keys: Vec<String> = self.cursor(scan, first_only).await?;
        keys.sort();
        keys.dedup();
        Ok(keys)
    }

    /// Every record of `table` as `(id, raw value)`, by `SCAN` (helper keys skipped).
    pub(crate) async fn scan_records(&self, table: &str) -> Result<Vec<(String, String)>> {
        let pattern = format!("{}:{table}:*", glob_escape(&self.prefix));
        let keys: Vec<String> = self
            .scan_keys(&pattern, false)
            .await?
            .into_iter()
            .filter(|k| self.record_id(table, k).is_some())
            .collect();
        let mut out = Vec::with_capacity(keys.len());
        // MGET answers nil for keys that are not strings, so helper structures are skipped.
        for (k, v) in keys.iter().zip(self.mget(&keys).await?) {
            if let (Some(id), Some(v)) = (self.record_id(table, k), v) {
                out.push((id.to_owned(), v));
            }
        }
        Ok(out)
    }

    /// Members of the sorted set `index` with scores in `[min, max]`, ascending.
    pub(crate) async fn members(&self, index: &str, min: &str, max: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut offset = 0usize;
        loop {
            let batch: Vec<String> = self
                .query(
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(index)
                        .arg(min)
                        .arg(max)
                        .arg("LIMIT")
                        .arg(offset)
                        .arg(CHUNK),
                )
                .await?;
            let n = batch.len();
            out.extend(batch);
            if n < CHUNK {
                return Ok(out);
            }
            offset += n;
        }
    }

    /// The records behind index members, whose keys are `key(id)`: `(id, raw)` for those
    /// that exist. Members whose record is gone (deleted by a writer that does not maintain
    /// this index) are dropped from `index`.
    pub(crate) async fn load_with(
        &self,
        index: &str,
        ids: Vec<String>,
        key: impl Fn(&str) -> String,
    ) -> Result<Vec<(String, String)>> {
        let keys: Vec<String> = ids.iter().map(|id| key(id)).collect();
        let values = self.mget(&keys).await?;
        let mut out = Vec::with_capacity(ids.len());
        let mut stale = Vec::new();
        for (id, v) in ids.into_iter().zip(values) {
            match v {
                Some(v) => out.push((id, v)),
                None => stale.push(id),
            }
        }
        if !stale.is_empty() {
            self.query::<i64>(redis::cmd("ZREM").arg(index).arg(&stale))
                .await?;
        }
        Ok(out)
    }

    /// One page of the records listed in `index` (whose keys are `key(id)`) with scores in
    /// `[min, max]`, in score order, and how many members are in that range: `ZCOUNT` plus
    /// one ranged read, O(log n + page). `decode` turns a record into a row, or `None` when
    /// the record no longer belongs in this index (another writer changed it); such
    /// members, and those whose record is gone, are dropped from `index` and the page is
    /// read again.
    pub(crate) async fn page_by<T>(
        &self,
        index: &str,
        key: impl Fn(&str) -> String,
        (min, max): (&str, &str),
        order: SortOrder,
        pagination: &Pagination,
        decode: impl Fn(&str, &str) -> Result<Option<T>>,
    ) -> Result<(Vec<T>, u64)> {
        pagination.validate()?;
        for _ in 0..10 {
            let total: u64 = self
                .query(redis::cmd("ZCOUNT").arg(index).arg(min).arg(max))
                .await?;
            let offset = pagination.offset();
            let count = pagination
                .limit
                .map_or(-1, |l| l.min(i64::MAX as u64) as i64);
            if pagination.limit == Some(0) || offset >= total {
                return Ok((Vec::new(), total));
            }
            let mut cmd = match order {
                SortOrder::Asc => {
                    let mut c = redis::cmd("ZRANGEBYSCORE");
                    c.arg(index).arg(min).arg(max);
                    c
                }
                SortOrder::Desc => {
                    let mut c = redis::cmd("ZREVRANGEBYSCORE");
                    c.arg(index).arg(max).arg(min);
                    c
                }
            };
            cmd.arg("LIMIT").arg(offset).arg(count);
            let ids: Vec<String> = self.query(&cmd).await?;
            let wanted = ids.len();
            let mut rows = Vec::with_capacity(wanted);
            let mut foreign = Vec::new();
            for (id, raw) in self.load_with(index, ids, &key).await? {
                match decode(&id, &raw)? {
                    Some(row) => rows.push(row),
                    None => foreign.push(id),
                }
            }
            if !foreign.is_empty() {
                self.query::<i64>(redis::cmd("ZREM").arg(index).arg(&foreign))
                    .await?;
            }
            if rows.len() == wanted {
                return Ok((rows, total));
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            format!("{index} keeps listing records that left it; rebuild the indexes (KvDb::rebuild_indexes)"),
        )
        .with_backend(self.server))
    }

    /// Adds index entries in bulk (rebuilds and migrations), many per round trip.
    pub(crate) async fn add_entries(&self, entries: &[Entry]) -> Result<()> {
        for chunk in entries.chunks(CHUNK) {
            let mut pipe = redis::pipe();
            for e in chunk {
                match e.score {
                    Some(s) => pipe
                        .cmd("ZADD")
                        .arg(&e.key)
                        .arg(crate::docs::score_arg(s))
                        .arg(&e.member)
                        .ignore(),
                    None => pipe.cmd("SADD").arg(&e.key).arg(&e.member).ignore(),
                };
            }
            self.pipe::<()>(&pipe).await?;
        }
        Ok(())
    }
}

/// `-inf`/`+inf` or a bound, for score ranges.
pub(crate) fn bound(v: Option<i64>, open: &str) -> String {
    v.map_or_else(|| open.to_owned(), |n| n.to_string())
}
