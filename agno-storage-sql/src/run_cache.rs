//! The runs of recently read sessions, kept while the database provably has not changed.
//!
//! A session read fetches every run's JSON text, which for a long session is most of its
//! cost, and a conversation re-reads its session every turn. When the executor can tell the
//! database's version (SQLite: any commit by any connection or process, any schema change,
//! or any change by this store's own connection changes it), a read whose version matches
//! the one its session's runs were read at reuses them without reading them again. Entries
//! are bounded in bytes of run text; the least recently read go first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agno_storage_core::legacy::SessionRun;

use crate::exec::DataVersion;

/// Bytes of run text the cache holds by default.
pub(crate) const DEFAULT_RUN_CACHE_BYTES: usize = 64 << 20;

/// One session's runs as read at `version`.
struct Entry {
    version: DataVersion,
    runs: Arc<Vec<SessionRun>>,
    bytes: usize,
    last_read: u64,
}

/// Runs of recently read sessions, keyed by session id.
pub(crate) struct RunCache {
    entries: Mutex<Entries>,
    capacity: usize,
}

#[derive(Default)]
struct Entries {
    by_session: HashMap<String, Entry>,
    bytes: usize,
    reads: u64,
}

impl RunCache {
    /// A cache holding at most `capacity` bytes of run text (0 keeps nothing).
    pub(crate) fn new(capacity: usize) -> Self {
        RunCache {
            entries: Mutex::new(Entries::default()),
            capacity,
        }
    }

    fn entries(&self) -> MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The version `session_id`'s cached runs were read at.
    pub(crate) fn version(&self, session_id: &str) -> Option<DataVersion> {
        self.entries().by_session.get(session_id).map(|e| e.version)
    }

    /// The cached runs of `session_id` if they were read at `version`.
    pub(crate) fn get(&self, session_id: &str, version: DataVersion) -> Option<Vec<SessionRun>> {
        let mut entries = self.entries();
        entries.reads += 1;
        let reads = entries.reads;
        let entry = entries.by_session.get_mut(session_id)?;
        if entry.version != version {
            return None;
        }
        entry.last_read = reads;
        let runs = entry.runs.clone();
        drop(entries);
        Some(runs.as_ref().clone())
    }

    /// Keeps `runs` of `session_id` as read at `version`, evicting the least recently read
    /// sessions to stay within capacity; runs larger than the whole capacity are not kept.
    pub(crate) fn put(&self, session_id: &str, version: DataVersion, runs: Vec<SessionRun>) {
        let bytes: usize = runs
            .iter()
            .map(|r| r.run_id.len() + r.run.stored_text_len())
            .sum();
        let mut entries = self.entries();
        if let Some(old) = entries.by_session.remove(session_id) {
            entries.bytes -= old.bytes;
        }
        if bytes > self.capacity {
            return;
        }
        while entries.bytes + bytes > self.capacity {
            let Some(oldest) = entries
                .by_session
                .iter()
                .min_by_key(|(_, e)| e.last_read)
                .map(|(id, _)| id.clone())
            else {
                break;
            };
            if let Some(old) = entries.by_session.remove(&oldest) {
                entries.bytes -= old.bytes;
            }
        }
        entries.reads += 1;
        let last_read = entries.reads;
        entries.bytes += bytes;
        entries.by_session.insert(
            session_id.to_owned(),
            Entry {
                version,
                runs: Arc::new(runs),
                bytes,
                last_read,
            },
        );
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
        }
    }

    #[test]
    fn a_changed_version_misses_and_the_least_recently_read_go_first() {
        let cache = RunCache::new(250);
        cache.put("a", version(1), runs(100));
        assert!(cache.get("a", version(2)).is_none(), "another version");
        assert_eq!(cache.get("a", version(1)).map(|r| r.len()), Some(1));
        cache.put("b", version(1), runs(100));
        assert!(cache.get("a", version(1)).is_some());
        cache.put("c", version(1), runs(100));
        assert!(
            cache.get("b", version(1)).is_none(),
            "b was read least recently"
        );
        assert!(cache.get("a", version(1)).is_some());
        assert!(cache.get("c", version(1)).is_some());
        cache.put("d", version(1), runs(300));
        assert!(cache.version("d").is_none(), "larger than the whole cache");
    }
}
