//! The runs of recently read sessions, reused while they provably have not changed.
//!
//! A session read fetches every run's JSON text, which for a long session is most of its
//! cost, and a conversation re-reads its session every turn. Two proofs of "unchanged":
//! - SQLite tells the database's version (any commit by another connection or process, any
//!   schema change, or any change by the store's own connection to the runs table changes
//!   it): a read at the version its session's runs were read at reuses them without a
//!   query. After changes by the store's own connection only (the next turn's run, say),
//!   which its update hook notes row by row ([`crate::row_log`]), a read lists the
//!   session's `rowid`s and fetches only the runs that are new or changed. A read after
//!   another connection's commit reads every run again, and keeps the cached copy of each
//!   run whose stored text is unchanged, with its parse and its view.
//! - PostgreSQL tells each row's version (`xmin`, the transaction that wrote it). A read
//!   first computes, on the server, a digest of the session's runs' ids and versions; if it
//!   is the cached one, the cached runs are returned and nothing else is sent. Otherwise the
//!   same statement lists every run with its version, and fetches the text only of runs
//!   whose version differs from the cached one.
//!
//! Either way a read never returns runs from before a change it could have seen: SQLite's
//! version is taken before the rows it stamps (a commit in between only costs a miss), and
//! PostgreSQL's digest, versions and texts come from one statement, so one snapshot. (An
//! `xmin` value repeats only after 2^32 transactions; an entry would have to outlive that
//! and meet the same value on the same run. The digest sums 64-bit hashes seeded at random
//! per cache, so a changed set of runs keeps the cached digest with a chance of 2^-64.)
//!
//! Entries are bounded in bytes of run text, per [`crate::SqlDb`] (see
//! [`crate::SqlDb::set_run_cache_bytes`]); the least recently read go first. A session
//! larger than the bound is kept alone until another session is read: its runs are in
//! memory while it is read anyway, and agno keeps its last 64 sessions whatever their size.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use agno_storage_core::legacy::SessionRun;

use crate::exec::DataVersion;

/// Bytes of run text the cache holds by default.
pub(crate) const DEFAULT_RUN_CACHE_BYTES: usize = 64 << 20;

/// How a session's cached runs are known to be current.
#[derive(Clone)]
pub(crate) enum Stamp {
    /// The database's version when they were read, and each run's `rowid` when the
    /// executor watched the table (else none).
    Database(DataVersion, Arc<Vec<i64>>),
    /// Each run's row version.
    Rows(Arc<RowVersions>),
}

/// The row versions of a session's cached runs, ready for the next read.
pub(crate) struct RowVersions {
    /// The JSON object `{run_id: version}` a read sends.
    pub(crate) known: String,
    /// Each run's position among the cached runs.
    pub(crate) position: HashMap<String, usize>,
    /// The digest of all the runs' ids and versions, as the server computed it.
    pub(crate) digest: String,
}

impl RowVersions {
    /// The versions of `runs`, `versions[i]` being the version of `runs[i]`, whose digest
    /// is `digest`.
    pub(crate) fn new(runs: &[SessionRun], versions: Vec<String>, digest: String) -> Self {
        let position = runs
            .iter()
            .enumerate()
            .map(|(i, run)| (run.run_id.clone(), i))
            .collect();
        let known: serde_json::Map<String, serde_json::Value> = runs
            .iter()
            .map(|run| run.run_id.clone())
            .zip(versions.into_iter().map(serde_json::Value::String))
            .collect();
        RowVersions {
            known: serde_json::Value::Object(known).to_string(),
            position,
            digest,
        }
    }
}

/// A session's cached runs, read at one database version.
pub(crate) struct Held {
    /// Each run's `rowid`, in order, when the executor watched the table (else none).
    pub(crate) row_ids: Arc<Vec<i64>>,
    pub(crate) runs: Arc<Vec<SessionRun>>,
}

/// One session's runs as read at `stamp`.
struct Entry {
    stamp: Stamp,
    runs: Arc<Vec<SessionRun>>,
    bytes: usize,
    last_read: u64,
}

/// Runs of recently read sessions, keyed by session id.
pub(crate) struct RunCache {
    entries: Mutex<Entries>,
    capacity: AtomicUsize,
    seed: i64,
}

#[derive(Default)]
struct Entries {
    by_session: HashMap<String, Entry>,
    bytes: usize,
    reads: u64,
}

impl Entries {
    /// Evicts the least recently read sessions until at most `bytes` are held.
    fn evict_to(&mut self, bytes: usize) {
        while self.bytes > bytes {
            let Some(oldest) = self
                .by_session
                .iter()
                .min_by_key(|(_, e)| e.last_read)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            if let Some(old) = self.by_session.remove(&oldest) {
                self.bytes -= old.bytes;
            }
        }
    }
}

impl RunCache {
    /// A cache holding at most `capacity` bytes of run text (0 keeps nothing).
    pub(crate) fn new(capacity: usize) -> Self {
        RunCache {
            entries: Mutex::new(Entries::default()),
            capacity: AtomicUsize::new(capacity),
            seed: uuid::Uuid::new_v4().as_u64_pair().0 as i64,
        }
    }

    /// The random seed of this cache's row-version digests ([`RowVersions::digest`]).
    pub(crate) fn seed(&self) -> i64 {
        self.seed
    }

    /// Holds at most `capacity` bytes from now on, evicting what no longer fits.
    pub(crate) fn set_capacity(&self, capacity: usize) {
        self.capacity.store(capacity, Ordering::Relaxed);
        let mut entries = self.entries();
        entries.evict_to(capacity);
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The stamp and runs cached for `session_id`, marked as read now.
    pub(crate) fn get(&self, session_id: &str) -> Option<(Stamp, Arc<Vec<SessionRun>>)> {
        let mut entries = self.entries();
        entries.reads += 1;
        let reads = entries.reads;
        let entry = entries.by_session.get_mut(session_id)?;
        entry.last_read = reads;
        Some((entry.stamp.clone(), entry.runs.clone()))
    }

    /// The database version `session_id`'s cached runs were read at, with their `rowid`s,
    /// if cached that way.
    pub(crate) fn version(&self, session_id: &str) -> Option<(DataVersion, Arc<Vec<i64>>)> {
        match &self.entries().by_session.get(session_id)?.stamp {
            Stamp::Database(version, row_ids) => Some((*version, row_ids.clone())),
            Stamp::Rows(_) => None,
        }
    }

    /// The cached runs of `session_id` if they were read at database version `version`.
    pub(crate) fn at_version(&self, session_id: &str, version: DataVersion) -> Option<Held> {
        match self.get(session_id)? {
            (Stamp::Database(v, row_ids), runs) if v == version => Some(Held { row_ids, runs }),
            _ => None,
        }
    }

    /// Keeps `runs` of `session_id` as read at `stamp`, evicting the least recently read
    /// sessions to stay within capacity. Runs larger than the whole capacity are kept alone
    /// (every other session evicted) until another session is read, so a session re-read
    /// every turn stays cached whatever its size; a capacity of 0 keeps nothing.
    pub(crate) fn put(&self, session_id: &str, stamp: Stamp, runs: Vec<SessionRun>) {
        let bytes: usize = runs
            .iter()
            .map(|r| r.run_id.len() + r.run.stored_text_len())
            .sum();
        let capacity = self.capacity.load(Ordering::Relaxed);
        let mut entries = self.entries();
        if let Some(old) = entries.by_session.remove(session_id) {
            entries.bytes -= old.bytes;
        }
        if capacity == 0 {
            return;
        }
        entries.evict_to(capacity.saturating_sub(bytes));
        entries.reads += 1;
        let last_read = entries.reads;
        entries.bytes += bytes;
        entries.by_session.insert(
            session_id.to_owned(),
            Entry {
                stamp,
                runs: Arc::new(runs),
                bytes,
                last_read,
            },
        );
    }
}

/// Puts in `runs` the cached copy of each run of `cached` still the same
/// ([`keep_if_unchanged`]), so what was read of it (its parse, its view) carries over a
/// read that could not prove the session unchanged (SQLite after another connection's
/// commit).
pub(crate) fn keep_unchanged(runs: &mut [SessionRun], cached: &[SessionRun]) {
    let by_id: HashMap<&str, &SessionRun> = cached.iter().map(|r| (r.run_id.as_str(), r)).collect();
    for run in runs {
        if let Some(old) = by_id.get(run.run_id.as_str()) {
            keep_if_unchanged(run, old);
        }
    }
}

/// Replaces `run` by the cached `old` if it is the same run unchanged: same id, index,
/// creation time and stored text.
pub(crate) fn keep_if_unchanged(run: &mut SessionRun, old: &SessionRun) {
    if old.run_id == run.run_id
        && old.run_index == run.run_index
        && old.created_at == run.created_at
        && old.run.same_stored_text(&run.run)
    {
        run.run = old.run.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agno_storage_core::RunJson;

    fn runs(text_len: usize) -> Vec<SessionRun> {
        let text = format!(r#"{{"c": "{}"}}"#, "x".repeat(text_len.saturating_sub(9)));
        vec![SessionRun {
            run_id: "r".into(),
            run_index: Some(0),
            created_at: 0,
            run: RunJson::from_stored_text(text).expect("object"),
        }]
    }

    fn version(data: i64) -> DataVersion {
        DataVersion {
            data,
            schema: 1,
            own_changes: 0,
            watched: false,
        }
    }

    fn stamp(data: i64) -> Stamp {
        Stamp::Database(version(data), Arc::default())
    }

    #[test]
    fn a_changed_version_misses_and_the_least_recently_read_go_first() {
        let cache = RunCache::new(250);
        cache.put("a", stamp(1), runs(100));
        assert!(
            cache.at_version("a", version(2)).is_none(),
            "another version"
        );
        assert_eq!(
            cache.at_version("a", version(1)).map(|h| h.runs.len()),
            Some(1)
        );
        cache.put("b", stamp(1), runs(100));
        assert!(cache.at_version("a", version(1)).is_some());
        cache.put("c", stamp(1), runs(100));
        assert!(
            cache.at_version("b", version(1)).is_none(),
            "b was read least recently"
        );
        assert!(cache.at_version("a", version(1)).is_some());
        assert!(cache.at_version("c", version(1)).is_some());
        cache.put("d", stamp(1), runs(300));
        assert!(
            cache.version("d").is_some(),
            "larger than the whole cache: kept alone"
        );
        assert!(
            cache.version("a").is_none() && cache.version("c").is_none(),
            "every other session is evicted for it"
        );
        cache.put("a", stamp(1), runs(100));
        assert!(
            cache.version("d").is_none(),
            "the oversized session goes when another is read"
        );
        cache.put("c", stamp(1), runs(100));
        cache.set_capacity(0);
        assert!(cache.version("a").is_none() && cache.version("c").is_none());
        cache.put("a", stamp(1), runs(100));
        assert!(
            cache.version("a").is_none(),
            "a cache of 0 bytes keeps nothing"
        );
    }
}
