//! Keeps the indexes in step with records other writers (agno in Python) put under the
//! prefix, live, from Redis keyspace notifications. See [`IndexFollower`].

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agno_storage_core::{Error, ErrorKind, TableType};
use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};

use crate::indexing::{Applied, Scripts, SEGMENTS};
use crate::store::{glob_escape, KvStore};

/// The server setting the follower needs: `notify-keyspace-events`.
pub const KEYSPACE_EVENTS_SETTING: &str = "notify-keyspace-events";

/// The event classes the follower needs in [`KEYSPACE_EVENTS_SETTING`]: `K` (keyspace
/// channels), `$` (string commands: `set`), `g` (generic: `del`, `rename`), `x` (`expired`).
/// `KEA` includes them all.
pub const REQUIRED_KEYSPACE_EVENTS: &str = "K$gx";

/// How long the follower waits for the events of its probe key before concluding that the
/// server does not publish them.
const PROBE_WAIT: Duration = Duration::from_secs(3);
/// After this long without a message the subscription is checked with a `PING`.
const HEALTH_INTERVAL: Duration = Duration::from_secs(15);
/// How long that `PING` may take before the subscription counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest pause between two reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Why [`crate::KvDb::follow_foreign_writes`] could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum FollowError {
    /// The server does not publish the keyspace events the follower needs, and it could not
    /// turn them on (`CONFIG SET` refused or disabled, as on managed services). The operator
    /// must set [`KEYSPACE_EVENTS_SETTING`] (`notify-keyspace-events`) to include
    /// [`REQUIRED_KEYSPACE_EVENTS`] (`K$gx`; `KEA` also works), e.g. in the service's
    /// parameter group, then call again.
    KeyspaceEventsOff {
        /// The server's current value, when `CONFIG GET` answered.
        current: Option<String>,
        /// What failed: the refused `CONFIG SET`, or which probe event never arrived.
        detail: String,
    },
    /// Any other failure: the server is unreachable, the subscription failed, or the first
    /// index rebuild failed for a reason other than undecodable records.
    Storage(Error),
}

impl std::fmt::Display for FollowError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FollowError::KeyspaceEventsOff { current, detail } => write!(
                f,
                "the server does not publish the keyspace events the index follower needs: set \
                 `{KEYSPACE_EVENTS_SETTING}` to include `{REQUIRED_KEYSPACE_EVENTS}` (or `KEA`), \
                 e.g. `CONFIG SET {KEYSPACE_EVENTS_SETTING} KEA` or the service's parameter group \
                 (current value: {}; {detail})",
                current.as_deref().map_or_else(
                    || "unknown, CONFIG GET refused".to_owned(),
                    |c| format!("{c:?}")
                )
            ),
            FollowError::Storage(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for FollowError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FollowError::Storage(e) => Some(e),
            FollowError::KeyspaceEventsOff { .. } => None,
        }
    }
}

impl From<Error> for FollowError {
    fn from(e: Error) -> Self {
        FollowError::Storage(e)
    }
}

impl From<FollowError> for Error {
    /// `KeyspaceEventsOff` becomes `ErrorKind::Unsupported` with the same message.
    fn from(e: FollowError) -> Self {
        match e {
            FollowError::Storage(e) => e,
            off @ FollowError::KeyspaceEventsOff { .. } => {
                Error::new(ErrorKind::Unsupported, off.to_string())
            }
        }
    }
}

/// What an [`IndexFollower`] has done so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FollowerStatus {
    /// Whether the subscription is up (false while reconnecting).
    pub connected: bool,
    /// Keyspace events received for records under the prefix.
    pub events: u64,
    /// Records (re)indexed after a write event.
    pub indexed: u64,
    /// Records removed from the indexes after a `del`/`expired` event, or by a rebuild
    /// because they were deleted while no follower listened.
    pub removed: u64,
    /// Full rebuilds run: one at start, one after each reconnection.
    pub rebuilds: u64,
    /// Times the subscription was lost and set up again.
    pub reconnects: u64,
    /// Events or rebuilds that failed (undecodable records, server errors); the follower
    /// carries on.
    pub errors: u64,
    /// The latest of those failures.
    pub last_error: Option<String>,
}

/// A background task that indexes the records other writers (agno in Python) put under the
/// prefix, as they are written, so listings include them without
/// [`crate::KvDb::rebuild_indexes`]. Started by [`crate::KvDb::follow_foreign_writes`].
///
/// Dropping the handle or calling [`IndexFollower::stop`] ends the task. Writes made while
/// no follower runs are picked up by the next follower's start-up rebuild (or by
/// `rebuild_indexes`).
#[derive(Debug)]
pub struct IndexFollower {
    task: Option<tokio::task::JoinHandle<()>>,
    status: Arc<Mutex<FollowerStatus>>,
}

impl IndexFollower {
    /// A snapshot of what the follower has done so far.
    pub fn status(&self) -> FollowerStatus {
        lock(&self.status).clone()
    }

    /// Ends the task and waits until it has stopped. An event being handled is abandoned;
    /// each index update is one atomic script, so nothing is left half-written.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for IndexFollower {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

fn lock(status: &Mutex<FollowerStatus>) -> MutexGuard<'_, FollowerStatus> {
    status
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One subscription: the sink (for health pings) and the stream of messages.
struct Subscription {
    sink: PubSubSink,
    stream: PubSubStream,
}

/// The follower's state, owned by its task.
pub(crate) struct Follower {
    store: Arc<KvStore>,
    client: redis::Client,
    /// `__keyspace@{db}__:`.
    channel_prefix: String,
    scripts: Scripts,
    status: Arc<Mutex<FollowerStatus>>,
}

impl Follower {
    /// Subscribes, rebuilds once, and spawns the task; see
    /// [`crate::KvDb::follow_foreign_writes`].
    pub(crate) async fn start(
        store: Arc<KvStore>,
        client: redis::Client,
    ) -> Result<IndexFollower, FollowError> {
        let db = client.get_connection_info().redis_settings().db();
        let follower = Follower {
            store,
            client,
            channel_prefix: format!("__keyspace@{db}__:"),
            scripts: Scripts::new(),
            status: Arc::new(Mutex::new(FollowerStatus::default())),
        };
        let (sub, early) = follower.subscribe().await?;
        follower.rebuild().await.map_err(FollowError::Storage)?;
        let status = follower.status.clone();
        let task = tokio::spawn(follower.run(sub, early));
        Ok(IndexFollower {
            task: Some(task),
            status,
        })
    }

    fn note_error(&self, what: String) {
        let mut s = lock(&self.status);
        s.errors += 1;
        s.last_error = Some(what);
    }

    /// Turns on the event classes the follower needs when the server lacks them (merged into
    /// the current value). Returns the value read, or `None` when `CONFIG GET` is refused;
    /// a refused `CONFIG SET` is [`FollowError::KeyspaceEventsOff`].
    async fn ensure_setting(&self) -> Result<Option<String>, FollowError> {
        let read: std::result::Result<Vec<String>, Error> = self
            .store
            .query(redis::cmd("CONFIG").arg("GET").arg(KEYSPACE_EVENTS_SETTING))
            .await;
        let current = match read {
            Ok(v) => v.get(1).cloned().unwrap_or_default(),
            Err(e) if e.kind() == ErrorKind::Unavailable => return Err(e.into()),
            // CONFIG disabled or not permitted (managed services): the probe decides.
            Err(_) => return Ok(None),
        };
        let missing = missing_classes(&current);
        if missing.is_empty() {
            return Ok(Some(current));
        }
        let merged = format!("{current}{missing}");
        match self
            .store
            .query::<()>(
                redis::cmd("CONFIG")
                    .arg("SET")
                    .arg(KEYSPACE_EVENTS_SETTING)
                    .arg(&merged),
            )
            .await
        {
            Ok(()) => Ok(Some(merged)),
            Err(e) if e.kind() == ErrorKind::Unavailable => Err(e.into()),
            Err(e) => Err(FollowError::KeyspaceEventsOff {
                current: Some(current),
                detail: format!("`CONFIG SET {KEYSPACE_EVENTS_SETTING} {merged}` was refused: {e}"),
            }),
        }
    }

    /// Checks the setting, subscribes to the prefix's keyspace channels, and proves with a
    /// probe key that `set`, `del` and `expired` events arrive. Returns the subscription
    /// and the events of other keys that arrived meanwhile.
    async fn subscribe(&self) -> Result<(Subscription, Vec<(String, String)>), FollowError> {
        let current = self.ensure_setting().await?;
        let pubsub = self
            .client
            .get_async_pubsub()
            .await
            .map_err(|e| FollowError::Storage(self.store.err(e)))?;
        let (mut sink, mut stream) = pubsub.split();
        let pattern = format!(
            "{}{}:*",
            self.channel_prefix,
            glob_escape(&self.store.prefix)
        );
        sink.psubscribe(&pattern)
            .await
            .map_err(|e| FollowError::Storage(self.store.err(e)))?;

        let probe = format!(
            "{}:agno_index_follower_probe:{}",
            self.store.prefix,
            uuid::Uuid::new_v4().simple()
        );
        let mut pipe = redis::pipe();
        pipe.cmd("SET").arg(&probe).arg("1").ignore();
        pipe.cmd("DEL").arg(&probe).ignore();
        pipe.cmd("SET")
            .arg(&probe)
            .arg("1")
            .arg("PX")
            .arg(1)
            .ignore();
        self.store.pipe::<()>(&pipe).await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
        // Reading an expired key deletes it and publishes `expired`.
        let _: Option<String> = self.store.get(&probe).await?;

        let mut seen = [false; 3];
        let mut early = Vec::new();
        let deadline = tokio::time::Instant::now() + PROBE_WAIT;
        while !seen.iter().all(|s| *s) {
            let msg = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    return Err(FollowError::Storage(
                        Error::new(
                            ErrorKind::Unavailable,
                            "the keyspace subscription closed during set-up",
                        )
                        .with_backend(self.store.server),
                    ))
                }
                Err(_) => break,
            };
            let Some((key, event)) = self.decode(&msg) else {
                continue;
            };
            if key == probe {
                match event.as_str() {
                    "set" => seen[0] = true,
                    "del" => seen[1] = true,
                    "expired" => seen[2] = true,
                    _ => {}
                }
            } else {
                early.push((key, event));
            }
        }
        if !seen.iter().all(|s| *s) {
            let lost: Vec<&str> = ["set", "del", "expired"]
                .iter()
                .zip(seen)
                .filter(|(_, s)| !s)
                .map(|(e, _)| *e)
                .collect();
            return Err(FollowError::KeyspaceEventsOff {
                current,
                detail: format!(
                    "no `{}` event arrived for the probe key {probe} within {} s",
                    lost.join("`, `"),
                    PROBE_WAIT.as_secs()
                ),
            });
        }
        lock(&self.status).connected = true;
        Ok((Subscription { sink, stream }, early))
    }

    /// The record key and event name of a keyspace message, or `None` for anything else.
    fn decode(&self, msg: &redis::Msg) -> Option<(String, String)> {
        let key = msg.get_channel_name().strip_prefix(&self.channel_prefix)?;
        let event: String = msg.get_payload().ok()?;
        Some((key.to_owned(), event))
    }

    /// The full rebuild (with ledger entries), once after each subscription, then the
    /// removal of ledger entries whose record is gone. Undecodable records are counted as
    /// errors; other failures are returned.
    async fn rebuild(&self) -> agno_storage_core::Result<()> {
        for t in TableType::ALL {
            match self.store.reindex_with(t, true).await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Serialization => self.note_error(e.to_string()),
                Err(e) => return Err(e),
            }
        }
        match self.store.reindex_jobs_with(true).await {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::Serialization => self.note_error(e.to_string()),
            Err(e) => return Err(e),
        }
        // Records deleted while no follower listened: undo what the ledger says.
        let mut removed = 0;
        for segment in SEGMENTS {
            removed += self.store.prune_ledger(&self.scripts, segment).await?;
        }
        lock(&self.status).removed += removed;
        lock(&self.status).rebuilds += 1;
        Ok(())
    }

    /// The task: handles events until the subscription is lost, then reconnects (with a
    /// growing pause) and rebuilds, forever.
    async fn run(self, mut sub: Subscription, early: Vec<(String, String)>) {
        for (key, event) in early {
            self.handle(&key, &event).await;
        }
        loop {
            self.follow(&mut sub).await;
            {
                let mut s = lock(&self.status);
                s.connected = false;
                s.reconnects += 1;
            }
            let mut backoff = Duration::from_millis(100);
            sub = loop {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                let (next, early) = match self.subscribe().await {
                    Ok(s) => s,
                    Err(e) => {
                        self.note_error(format!("reconnecting the index follower: {e}"));
                        continue;
                    }
                };
                if let Err(e) = self.rebuild().await {
                    self.note_error(format!("rebuilding after reconnecting: {e}"));
                    continue;
                }
                for (key, event) in early {
                    self.handle(&key, &event).await;
                }
                break next;
            };
        }
    }

    /// Handles messages until the subscription ends or stops answering pings.
    async fn follow(&self, sub: &mut Subscription) {
        loop {
            let msg = match tokio::time::timeout(HEALTH_INTERVAL, sub.stream.next()).await {
                Ok(Some(msg)) => msg,
                Ok(None) => {
                    self.note_error("the keyspace subscription was closed".into());
                    return;
                }
                Err(_) => {
                    let ping = tokio::time::timeout(PING_TIMEOUT, sub.sink.ping::<redis::Value>());
                    match ping.await {
                        Ok(Ok(_)) => continue,
                        Ok(Err(e)) => {
                            self.note_error(format!("the keyspace subscription failed: {e}"));
                            return;
                        }
                        Err(_) => {
                            self.note_error("the keyspace subscription stopped answering".into());
                            return;
                        }
                    }
                }
            };
            if let Some((key, event)) = self.decode(&msg) {
                self.handle(&key, &event).await;
            }
        }
    }

    /// One keyspace event: writes re-index the record, deletions remove it from the indexes
    /// its ledger lists. Keys that are not records (indexes, run lists, the ledger) and other
    /// events (`expire`, set and sorted-set commands) are ignored.
    async fn handle(&self, key: &str, event: &str) {
        let Some((segment, id)) = self.store.split_record_key(key) else {
            return;
        };
        let outcome = match event {
            "set" | "rename_to" | "copy_to" | "restore" => self.index(segment, id).await,
            "del" | "expired" | "evicted" | "rename_from" | "move_from" => {
                self.remove(segment, id).await
            }
            _ => return,
        };
        lock(&self.status).events += 1;
        if let Err(e) = outcome {
            self.note_error(format!("indexing {key} after `{event}`: {e}"));
        }
    }

    async fn index(&self, segment: &str, id: &str) -> agno_storage_core::Result<()> {
        let Some(raw) = self.store.get(&self.store.key(segment, id)).await? else {
            return self.remove(segment, id).await;
        };
        let Some(ix) = self.store.record_index(segment, id, &raw)? else {
            return Ok(());
        };
        match self
            .store
            .apply_record(&self.scripts, segment, id, &raw, &ix)
            .await?
        {
            Applied::Done => lock(&self.status).indexed += 1,
            Applied::NameTaken => {
                lock(&self.status).indexed += 1;
                self.note_error(format!(
                    "schedule {id}: its (user_id, name) is taken by another schedule; rename one of them"
                ));
            }
            Applied::Raced | Applied::Unknown => {}
        }
        Ok(())
    }

    async fn remove(&self, segment: &str, id: &str) -> agno_storage_core::Result<()> {
        if self.store.remove_record(&self.scripts, segment, id).await? == Applied::Done {
            lock(&self.status).removed += 1;
        }
        Ok(())
    }
}

/// The classes of [`REQUIRED_KEYSPACE_EVENTS`] that `flags` (a `notify-keyspace-events`
/// value) lacks, as flags to append. `A` stands for every class but `K`, `E`, `m`, `n`.
fn missing_classes(flags: &str) -> String {
    let all = flags.contains('A');
    REQUIRED_KEYSPACE_EVENTS
        .chars()
        .filter(|c| !(flags.contains(*c) || (all && *c != 'K')))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::missing_classes;

    #[test]
    fn merges_only_missing_classes() {
        assert_eq!(missing_classes(""), "K$gx");
        assert_eq!(missing_classes("AKE"), "");
        assert_eq!(missing_classes("AE"), "K");
        assert_eq!(missing_classes("g$xK"), "");
        assert_eq!(missing_classes("Ex"), "K$g");
    }
}
