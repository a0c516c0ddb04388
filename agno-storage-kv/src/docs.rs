//! Redis/Valkey as a backend of the document engine (`agno-storage-doc`): a document is one
//! record key `{prefix}:{table}:{id}` holding agno's JSON text, its compare-and-set version
//! is that text as read, and a commit is one Lua script that checks every precondition, then
//! writes every record and moves its index entries (sorted sets under
//! `{prefix}:{table}:index:`, computed from the old and new fields by the table's rule).
//!
//! The domains served through the engine so far: eval runs, knowledge contents and
//! learnings; the others still use this crate's own modules.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::metrics::{is_legacy_metric_json, SHARED_BUCKET};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MemoryStats, MetricsRecord, Page, Pagination, Result,
};
use agno_storage_core::{SortOrder, Table};
use agno_storage_doc::layout::{shape, Nulls};
use agno_storage_doc::{matches_eq, Commit, DocBackend, Fields, Pre, Stored};
use serde_json::Value;

use crate::cas::{score_arg, Entry};
use crate::codec::{decode_object, encode};
use crate::indexing::RecordIndex;
use crate::store::KvStore;

/// Checks every record's precondition, then applies every write and index operation.
/// ARGV[1] the record count; per record (key index, expectation `*` any / `-` absent /
/// `=` equal to the value after it, expected text, action `set` / `del`, new text); then
/// the operation count and `(kind, key index, member, score)` quadruples (`prune`: remove
/// `member` from the set whose key index is in the score's place once the sorted set is
/// empty; prunes come last). Returns 1 when
/// applied, 0 when a precondition failed (nothing written).
const COMMIT: &str = r#"
local n = tonumber(ARGV[1])
local i = 2
for _ = 1, n do
  local k, expect = KEYS[tonumber(ARGV[i])], ARGV[i + 1]
  if expect == '-' then
    if redis.call('EXISTS', k) == 1 then return 0 end
  elseif expect == '=' then
    if redis.call('GET', k) ~= ARGV[i + 2] then return 0 end
  end
  i = i + 5
end
i = 2
for _ = 1, n do
  local k = KEYS[tonumber(ARGV[i])]
  if ARGV[i + 3] == 'set' then redis.call('SET', k, ARGV[i + 4]) else redis.call('DEL', k) end
  i = i + 5
end
local m = tonumber(ARGV[i])
i = i + 1
for _ = 1, m do
  local kind, k, member, score = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  if kind == 'zadd' then redis.call('ZADD', k, score, member)
  elseif kind == 'zrem' then redis.call('ZREM', k, member)
  elseif kind == 'sadd' then redis.call('SADD', k, member)
  elseif kind == 'prune' then
    if redis.call('ZCARD', k) == 0 then redis.call('SREM', KEYS[tonumber(score)], member) end
  else return redis.error_reply('agno commit: unknown op ' .. kind) end
end
return 1
"#;

/// Which server a [`KvDocs`] talks to: the name the engine's errors carry.
pub(crate) trait Server: Send + Sync + 'static {
    /// `redis` or `valkey`.
    const NAME: &'static str;
}

/// Redis.
pub(crate) struct Redis;

impl Server for Redis {
    const NAME: &'static str = "redis";
}

/// Valkey.
pub(crate) struct Valkey;

impl Server for Valkey {
    const NAME: &'static str = "valkey";
}

/// The engine's backend over one Redis/Valkey database and key prefix.
pub(crate) struct KvDocs<S> {
    store: Arc<KvStore>,
    commit_script: Arc<redis::Script>,
    server: std::marker::PhantomData<S>,
}

impl<S> Clone for KvDocs<S> {
    fn clone(&self) -> Self {
        KvDocs {
            store: self.store.clone(),
            commit_script: self.commit_script.clone(),
            server: std::marker::PhantomData,
        }
    }
}

impl<S> std::fmt::Debug for KvDocs<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvDocs")
            .field("server", &self.store.server)
            .field("prefix", &self.store.prefix)
            .finish()
    }
}

impl<S> KvDocs<S> {
    pub(crate) fn new(store: Arc<KvStore>) -> Self {
        KvDocs {
            store,
            commit_script: Arc::new(redis::Script::new(COMMIT)),
            server: std::marker::PhantomData,
        }
    }
}

/// One write of a commit: the record, its precondition, its new text (`None`: deleted) and
/// the index entries to remove and add, or the error building it met.
pub(crate) struct KvWrite(Result<Planned>);

struct Planned {
    key: String,
    expect: Option<Option<String>>,
    value: Option<String>,
    old: Vec<Entry>,
    new: Vec<Entry>,
    /// Owner set entries to drop once their owner's index is empty.
    prunes: Vec<(String, String, String)>,
}

impl TableLayout {
    /// A record's index entries: in the table's index of every record and in its owner's
    /// index (where the table keeps one for it), scored by [`TableLayout::score`].
    pub(crate) fn entries(&self, store: &KvStore, id: &str, fields: &Fields) -> Vec<Entry> {
        let score = (self.score)(fields);
        let mut entries = vec![Entry::z((self.all)(store), id, score)];
        let owner = text(fields, "user_id").filter(|_| (self.owned)(fields));
        if let Some(index) = (self.by_owner)(store, owner) {
            entries.push(Entry::z(index, id, score));
        }
        if let (Some(owners), Some(owner)) = (self.owners, owner) {
            entries.push(Entry::s(owners(store), owner));
        }
        entries
    }

    /// Where an owner set entry is pruned from: `(owner's index, owners set, owner)` for
    /// each set entry of `entries` (removed once the owner's index is empty).
    fn prunes(&self, store: &KvStore, entries: &[Entry]) -> Vec<(String, String, String)> {
        entries
            .iter()
            .filter(|e| e.score.is_none())
            .filter_map(|e| {
                let index = (self.by_owner)(store, Some(&e.member))?;
                Some((index, e.key.clone(), e.member.clone()))
            })
            .collect()
    }
}

fn layout(segment: &str) -> Option<&'static TableLayout> {
    match segment {
        crate::evals::TABLE => Some(&crate::evals::LAYOUT),
        crate::knowledge::TABLE => Some(&crate::knowledge::LAYOUT),
        crate::learnings::TABLE => Some(&crate::learnings::LAYOUT),
        crate::memories::TABLE => Some(&crate::memories::LAYOUT),
        crate::metrics::TABLE => Some(&crate::metrics::LAYOUT),
        _ => None,
    }
}

/// A table's layout, as its domain module declares it.
pub(crate) struct TableLayout {
    /// agno's key order (nulls kept, as `model_dump` writes them).
    pub(crate) order: &'static [&'static str],
    /// The field holding the record's id.
    pub(crate) key_field: &'static str,
    /// A record's score in its indexes.
    pub(crate) score: fn(&Fields) -> f64,
    /// The owner index (`Some(user)`, or `None` for the unowned records), if kept.
    pub(crate) by_owner: fn(&KvStore, Option<&str>) -> Option<String>,
    /// Whether a record goes into its owner's index (agno 2.x's whole-day metrics do not).
    pub(crate) owned: fn(&Fields) -> bool,
    /// The index of every record.
    pub(crate) all: fn(&KvStore) -> String,
    /// The set of owners holding at least one record (an owner leaves it with their last
    /// record), if the table keeps one.
    pub(crate) owners: Option<fn(&KvStore) -> String>,
    /// The field [`TableLayout::score`] reads (the order `query_page` serves).
    pub(crate) score_field: &'static str,
}

/// A precondition as what the record must hold: `None` anything, `Some(None)` nothing,
/// `Some(Some(text))` that text.
fn expectation<S: Server>(pre: Pre<KvDocs<S>>) -> Option<Option<String>> {
    match pre {
        Pre::Any => None,
        Pre::Absent => Some(None),
        Pre::At(raw) => Some(Some(raw)),
    }
}

/// The numeric field `key` of `fields` as a score (0 when absent or not a number).
pub(crate) fn score(fields: &Fields, key: &str) -> f64 {
    fields.get(key).and_then(Value::as_f64).unwrap_or_default()
}

/// The string field `key` of `fields`.
pub(crate) fn text<'a>(fields: &'a Fields, key: &str) -> Option<&'a str> {
    fields.get(key).and_then(Value::as_str)
}

/// The fields of record `id` of `segment` as stored text `raw`: timestamps Python wrote as
/// floats as integers, a missing key field filled from the key.
pub(crate) fn view(store: &KvStore, segment: &str, id: &str, raw: &str) -> Result<Fields> {
    let key = store.key(segment, id);
    let mut fields = decode_object(&key, raw).map_err(|e| e.with_backend(store.server))?;
    for ts in ["created_at", "updated_at"] {
        if let Some(v) = fields.get_mut(ts) {
            if let (false, Some(f)) = (v.is_i64(), v.as_f64()) {
                *v = Value::from(f as i64);
            }
        }
    }
    if let Some(l) = layout(segment) {
        if !fields.get(l.key_field).is_some_and(Value::is_string) {
            fields.insert(l.key_field.to_owned(), Value::String(id.to_owned()));
        }
    }
    Ok(fields)
}

/// How record `id` of `segment` stored as `raw` is indexed, when the table is served by the
/// engine (`None` for the other tables): the rule the follower and rebuilds apply.
pub(crate) fn record_index(
    store: &KvStore,
    segment: &str,
    id: &str,
    raw: &str,
) -> Result<Option<RecordIndex>> {
    let Some(l) = layout(segment) else {
        return Ok(None);
    };
    let entries = l.entries(store, id, &view(store, segment, id, raw)?);
    Ok(Some(RecordIndex {
        prunes: l.prunes(store, &entries),
        entries,
        name_claim: None,
    }))
}

impl<S: Server> KvDocs<S> {
    fn view(&self, segment: &str, id: &str, raw: &str) -> Result<Fields> {
        view(&self.store, segment, id, raw)
    }

    fn stored(&self, segment: &str, id: &str, raw: String) -> Result<Stored<Self>> {
        Ok(Stored {
            id: id.to_owned(),
            fields: self.view(segment, id, &raw)?,
            version: raw,
        })
    }

    /// The index entries of record `id` of `segment` holding `fields`.
    fn entries(&self, segment: &str, id: &str, fields: &Fields) -> Vec<Entry> {
        layout(segment).map_or_else(Vec::new, |l| l.entries(&self.store, id, fields))
    }

    /// The owner set entries of `old` that `new` lacks, as prunes.
    fn removed_owners(
        &self,
        segment: &str,
        old: &[Entry],
        new: &[Entry],
    ) -> Vec<(String, String, String)> {
        let removed: Vec<Entry> = old
            .iter()
            .filter(|e| e.score.is_none() && !new.contains(e))
            .cloned()
            .collect();
        layout(segment).map_or_else(Vec::new, |l| l.prunes(&self.store, &removed))
    }

    /// The entries of the version `pre` expects (none when it expects nothing in particular:
    /// entries a replaced record leaves behind are dropped when a listing meets them).
    fn old_entries(&self, segment: &str, id: &str, pre: &Pre<Self>) -> Result<Vec<Entry>> {
        match pre {
            Pre::At(raw) => Ok(self.entries(segment, id, &self.view(segment, id, raw)?)),
            Pre::Any | Pre::Absent => Ok(Vec::new()),
        }
    }

    /// The index answering `eq` on `segment` (the owner index for an equality on `user_id`,
    /// else the table's index of every record), if the table keeps one.
    fn index_for(&self, segment: &str, eq: &[(&str, Value)]) -> Option<String> {
        let l = layout(segment)?;
        match eq.iter().find(|(k, _)| *k == "user_id") {
            Some((_, Value::String(u))) => (l.by_owner)(&self.store, Some(u)),
            Some((_, Value::Null)) => {
                (l.by_owner)(&self.store, None).or_else(|| Some((l.all)(&self.store)))
            }
            Some(_) => None,
            None => Some((l.all)(&self.store)),
        }
    }
}

#[async_trait]
impl<S: Server> DocBackend for KvDocs<S> {
    const BACKEND: &'static str = S::NAME;
    const ITEM: &'static str = "record";
    const SCHEDULE_NAME_GUARDS: bool = true;
    const MAX_ID_CHARS: Option<usize> = None;
    const MAX_JSON_DEPTH: Option<usize> = None;
    /// Reported per server by `KvDb` (`appendonly`), which builds its own `AgnoDb`.
    const DURABLE: bool = false;

    type Version = String;
    type Write = KvWrite;

    fn collection(&self, which: Table) -> &str {
        match which {
            Table::Sessions => crate::sessions::TABLE,
            Table::Runs => crate::runs::TABLE,
            Table::Memories => crate::memories::TABLE,
            Table::Metrics => crate::metrics::TABLE,
            Table::Evals => crate::evals::TABLE,
            Table::Knowledge => crate::knowledge::TABLE,
            Table::Schedules => crate::schedules::TABLE,
            Table::ScheduleRuns => crate::schedules::RUNS_TABLE,
            Table::Learnings => crate::learnings::TABLE,
            Table::Jobs => crate::jobs::TABLE,
            Table::Versions => "agno_schema_versions",
            Table::Meta => "storage_meta",
        }
    }

    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> KvWrite {
        KvWrite((|| {
            let existing = match &pre {
                Pre::At(raw) => Some(Value::Object(self.view(collection, id, raw)?)),
                _ => None,
            };
            let body = match layout(collection) {
                Some(l) => shape(fields.clone(), l.order, Nulls::Keep, existing.as_ref()),
                None => Value::Object(fields.clone()),
            };
            let old = self.old_entries(collection, id, &pre)?;
            let new = self.entries(collection, id, fields);
            Ok(Planned {
                key: self.store.key(collection, id),
                prunes: self.removed_owners(collection, &old, &new),
                old,
                new,
                value: Some(encode(&body)),
                expect: expectation(pre),
            })
        })())
    }

    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> KvWrite {
        KvWrite((|| {
            let old = self.old_entries(collection, id, &pre)?;
            Ok(Planned {
                key: self.store.key(collection, id),
                prunes: self.removed_owners(collection, &old, &[]),
                old,
                new: Vec::new(),
                value: None,
                expect: expectation(pre),
            })
        })())
    }

    async fn commit(&self, _operation: &'static str, writes: Vec<KvWrite>) -> Result<Commit> {
        let writes = writes
            .into_iter()
            .map(|w| w.0)
            .collect::<Result<Vec<_>>>()?;
        if writes.is_empty() {
            return Ok(Commit::Done);
        }
        let mut keys: Vec<String> = Vec::new();
        let mut slot = |key: &str| -> usize {
            match keys.iter().position(|k| k == key) {
                Some(i) => i + 1,
                None => {
                    keys.push(key.to_owned());
                    keys.len()
                }
            }
        };
        let mut records = Vec::with_capacity(writes.len());
        let mut ops: Vec<(&str, usize, &str, String)> = Vec::new();
        for w in &writes {
            let (expect, want) = match &w.expect {
                None => ("*", ""),
                Some(None) => ("-", ""),
                Some(Some(raw)) => ("=", raw.as_str()),
            };
            let (action, value) = match &w.value {
                Some(v) => ("set", v.as_str()),
                None => ("del", ""),
            };
            records.push((slot(&w.key), expect, want, action, value));
            for e in w.old.iter().filter(|e| e.score.is_some()) {
                if !w.new.iter().any(|n| n.key == e.key && n.member == e.member) {
                    ops.push(("zrem", slot(&e.key), &e.member, String::new()));
                }
            }
            for e in w.new.iter().filter(|e| !w.old.contains(e)) {
                match e.score {
                    Some(s) => ops.push(("zadd", slot(&e.key), &e.member, score_arg(s))),
                    None => ops.push(("sadd", slot(&e.key), &e.member, String::new())),
                }
            }
        }
        for w in &writes {
            for (index, set, member) in &w.prunes {
                let set = slot(set).to_string();
                ops.push(("prune", slot(index), member, set));
            }
        }
        let mut inv = self.commit_script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        inv.arg(records.len());
        for (k, expect, want, action, value) in &records {
            inv.arg(*k).arg(*expect).arg(*want).arg(*action).arg(*value);
        }
        inv.arg(ops.len());
        for (kind, k, member, score) in &ops {
            inv.arg(*kind).arg(*k).arg(*member).arg(score);
        }
        let applied: i64 = inv
            .invoke_async(&mut self.store.conn())
            .await
            .map_err(|e| self.store.err(e))?;
        Ok(if applied == 1 {
            Commit::Done
        } else {
            Commit::Conflict
        })
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        match self.store.get(&self.store.key(collection, id)).await? {
            Some(raw) => Ok(Some(self.stored(collection, id, raw)?)),
            None => Ok(None),
        }
    }

    /// Reads the table's owner or all-records index (a `SCAN` for a table without indexes,
    /// never used by the stores served here), dropping members that left it.
    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        let records = match self.index_for(collection, eq) {
            Some(index) => {
                self.store
                    .load_index(collection, &index, "-inf", "+inf")
                    .await?
            }
            None => self.store.scan_records(collection).await?,
        };
        let mut out = Vec::with_capacity(records.len());
        for (id, raw) in records {
            let stored = self.stored(collection, &id, raw)?;
            if matches_eq(&stored.fields, eq) {
                out.push(stored);
            }
        }
        Ok(out)
    }

    async fn any_doc(&self, collection: &str) -> Result<bool> {
        Ok(!self.store.scan_records(collection).await?.is_empty())
    }

    /// Pages the owner or all-records index when `sort_by` is the field its scores are.
    async fn query_page(
        &self,
        collection: &str,
        eq: &[(&str, Value)],
        sort_by: &str,
        order: SortOrder,
        page: &Pagination,
    ) -> Result<Option<(Vec<Stored<Self>>, u64)>> {
        let Some(l) = layout(collection) else {
            return Ok(None);
        };
        let owner_only = eq.iter().all(|(k, v)| *k == "user_id" && v.is_string());
        let Some(index) = self.index_for(collection, eq) else {
            return Ok(None);
        };
        if !owner_only || sort_by != l.score_field {
            return Ok(None);
        }
        let (rows, total) = self
            .store
            .page_index(
                collection,
                &index,
                ("-inf", "+inf"),
                order,
                page,
                |id, raw| {
                    let stored = self.stored(collection, id, raw.to_owned())?;
                    Ok(matches_eq(&stored.fields, eq).then_some(stored))
                },
            )
            .await?;
        Ok(Some((rows, total)))
    }

    async fn memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: &Pagination,
    ) -> Result<Option<Page<MemoryStats>>> {
        self.store.memory_stats(user_id, pagination).await.map(Some)
    }

    /// agno 3.1.10's `{date}_{user}_{period}`; a whole-day agno 2.x Valkey record on the
    /// shared bucket's id is first moved off it (see `crate::metrics`).
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        let id = crate::metrics::record_id(record);
        if record.stored_user_id() == SHARED_BUCKET {
            self.store.move_legacy_metric(&id).await?;
        }
        Ok(id)
    }

    fn is_legacy_metric(&self, fields: &Fields) -> bool {
        is_legacy_metric_json(fields)
    }

    fn lock_lease(&self) -> Duration {
        crate::migrate::DEFAULT_MIGRATION_LOCK_LEASE
    }

    fn lock_location(&self) -> String {
        format!("`{}:` on {}", self.store.prefix, self.store.server)
    }

    fn contended(&self, operation: &str) -> Error {
        Error::new(
            ErrorKind::Conflict,
            format!("{operation}: concurrent writers kept changing the record; retry the call"),
        )
        .with_backend(self.store.server)
        .set_temporary(true)
    }
}
