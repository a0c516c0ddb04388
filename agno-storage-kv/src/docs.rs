//! Redis/Valkey as a backend of the document engine (`agno-storage-doc`): a document is one
//! record key `{prefix}:{table}:{id}` holding agno's JSON text, its compare-and-set version
//! is that text as read, and a commit is one Lua script that checks every precondition, then
//! writes every record and moves its index entries (sorted sets under
//! `{prefix}:{table}:index:` and agno's own sets, computed from the old and new fields by the
//! table's [`TableLayout`]). Every store is the engine's; this crate's native paths are the
//! engine's hooks, and its maintenance writes (the legacy-runs copy, the metrics move) go
//! through the same commit; the follower applies the same per-table rules with its ledger
//! scripts.

use std::sync::Arc;

use agno_storage_core::metrics::{is_legacy_metric_json, SHARED_BUCKET};
use agno_storage_core::{
    async_trait, Error, ErrorKind, Job, JobWakeups, MemoryStats, MetricsRecord, Page, Pagination,
    Result, RunRecord, SessionQuery,
};
use agno_storage_core::{SortOrder, Table};
use agno_storage_doc::layout::{shape, shape_serde, Nulls};
use agno_storage_doc::{matches_eq, Commit, DocBackend, Fields, Guard, Pre, Stored};
use serde_json::Value;

use crate::codec::{decode_object, encode, encode_ascii};
use crate::indexing::RecordIndex;
use crate::store::{KvStore, EXPIRING_TABLES};

/// Checks every record's precondition, then applies every write and index operation.
/// ARGV[1] the record count; per record (key index, expectation `*` any / `-` absent /
/// `=` equal to the value after it / `exists` / `zcard` the sorted set has that many
/// members / `zmax` its highest score is that (empty: it is empty) / `owner` a record whose
/// `user_id` is no string or is the value after it / `unowned` a record whose `user_id` is
/// no string / `znext` always, and the index assigned is one past the sorted set's highest
/// score (0 when empty), the expected value, action `set` / `seti` (set, the assigned index
/// written where the text holds a NUL) / `del` / `none`, new text); then the operation
/// count and `(kind, key index, member, score)` quadruples (a score `@` is the assigned
/// index; `prune`: remove `member` from the set whose key index is in the score's place
/// once the sorted set is empty; `expire`: the key lives that many seconds more; prunes come
/// last). Returns `{1, assigned index}` when applied (`{1}` without `znext`), `{0}` when a
/// precondition failed (nothing written).
const COMMIT: &str = r#"
local n = tonumber(ARGV[1])
local i = 2
local assigned
for _ = 1, n do
  local k, expect = KEYS[tonumber(ARGV[i])], ARGV[i + 1]
  local want = ARGV[i + 2]
  if expect == '-' then
    if redis.call('EXISTS', k) == 1 then return {0} end
  elseif expect == '=' then
    if redis.call('GET', k) ~= want then return {0} end
  elseif expect == 'exists' then
    if redis.call('EXISTS', k) == 0 then return {0} end
  elseif expect == 'zcard' then
    if redis.call('ZCARD', k) ~= tonumber(want) then return {0} end
  elseif expect == 'zmax' then
    local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
    if want == '' then
      if #top ~= 0 then return {0} end
    elseif #top ~= 2 or tonumber(top[2]) ~= tonumber(want) then return {0} end
  elseif expect == 'owner' or expect == 'unowned' then
    local text = redis.call('GET', k)
    if not text then return {0} end
    local ok, record = pcall(cjson.decode, text)
    if not ok or type(record) ~= 'table' then return {0} end
    local owner = record['user_id']
    if type(owner) == 'string' and (expect == 'unowned' or owner ~= want) then return {0} end
  elseif expect == 'znext' then
    local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
    if #top == 0 then assigned = 0 else
      local t = tonumber(top[2])
      assigned = t - math.fmod(t, 1) + 1
    end
  end
  i = i + 5
end
i = 2
for _ = 1, n do
  local k, action = KEYS[tonumber(ARGV[i])], ARGV[i + 3]
  if action == 'set' then redis.call('SET', k, ARGV[i + 4])
  elseif action == 'seti' then
    redis.call('SET', k, (string.gsub(ARGV[i + 4], '%z', string.format('%d', assigned))))
  elseif action == 'del' then redis.call('DEL', k) end
  i = i + 5
end
local m = tonumber(ARGV[i])
i = i + 1
for _ = 1, m do
  local kind, k, member, score = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  if score == '@' then score = string.format('%d', assigned) end
  i = i + 4
  if kind == 'zadd' then redis.call('ZADD', k, score, member)
  elseif kind == 'zrem' then redis.call('ZREM', k, member)
  elseif kind == 'sadd' then redis.call('SADD', k, member)
  elseif kind == 'expire' then redis.call('EXPIRE', k, tonumber(score))
  elseif kind == 'prune' then
    if redis.call('ZCARD', k) == 0 then redis.call('SREM', KEYS[tonumber(score)], member) end
  else return redis.error_reply('agno commit: unknown op ' .. kind) end
end
return {1, assigned}
"#;

/// One index entry of a record: a sorted-set member with its score, or (without a score)
/// a plain set member.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Entry {
    pub(crate) key: String,
    pub(crate) member: String,
    pub(crate) score: Option<f64>,
}

impl Entry {
    /// A sorted-set entry.
    pub(crate) fn z(key: String, member: &str, score: f64) -> Self {
        Entry {
            key,
            member: member.to_owned(),
            score: Some(score),
        }
    }

    /// A set entry.
    pub(crate) fn s(key: String, member: &str) -> Self {
        Entry {
            key,
            member: member.to_owned(),
            score: None,
        }
    }
}

/// A score as Redis parses it (integers without a fraction).
pub(crate) fn score_arg(score: f64) -> String {
    if score.fract() == 0.0 && score.abs() < 9.0e15 {
        format!("{}", score as i64)
    } else {
        format!("{score}")
    }
}

/// Which server a [`KvDocs`] talks to: the name the engine's errors carry.
pub(crate) trait Server: Clone + Send + Sync + 'static {
    /// `redis` or `valkey`.
    const NAME: &'static str;
}

/// Redis.
#[derive(Clone)]
pub(crate) struct Redis;

impl Server for Redis {
    const NAME: &'static str = "redis";
}

/// Valkey.
#[derive(Clone)]
pub(crate) struct Valkey;

impl Server for Valkey {
    const NAME: &'static str = "valkey";
}

/// The compiled commit script.
pub(crate) fn commit_script() -> redis::Script {
    redis::Script::new(COMMIT)
}

/// The engine's backend over one Redis/Valkey database and key prefix.
#[derive(Clone)]
pub(crate) struct KvDocs<S> {
    store: Arc<KvStore>,
    server: std::marker::PhantomData<S>,
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
            server: std::marker::PhantomData,
        }
    }
}

/// One write of a commit, or the error building it met.
pub(crate) struct KvWrite(pub(crate) Result<Planned>);

/// What a commit requires of a key before it applies.
pub(crate) enum Expect {
    /// Nothing.
    Any,
    /// The key does not exist.
    Absent,
    /// The key holds this text.
    Text(String),
    /// The key exists.
    Exists,
    /// The sorted set at the key has this many members.
    Zcard(usize),
    /// The highest score of the sorted set at the key is this (`None`: it is empty).
    Zmax(Option<f64>),
    /// The key holds a record writable by this user ([`agno_storage_core::writable_by`]:
    /// its `user_id` is no string, or is this one).
    WritableBy(Option<String>),
    /// None; the commit assigns the index one past the sorted set's highest score (0 when
    /// empty) to its [`Planned::assigning_index`] write.
    NextIndex,
}

impl Planned {
    /// This write storing `text` as it is (a record moved to another key byte for byte).
    pub(crate) fn verbatim(mut self, text: String) -> Self {
        self.action = Action::Set(text);
        self
    }

    /// This write of a record whose index in sorted set `set` the commit assigns
    /// ([`Expect::NextIndex`]), given the same write planned with index 0 (`self`) and with
    /// index 1 (`one`): the record is stored with the assigned index in the one place the
    /// two texts differ, and scored with it in `set`. `None` when the texts do not differ in
    /// exactly one place, or `self` stores no record.
    pub(crate) fn assigning_index(mut self, one: &Planned, set: &str) -> Option<Self> {
        let (Action::Set(zero), Action::Set(one)) = (&self.action, &one.action) else {
            return None;
        };
        let (a, b) = (zero.as_bytes(), one.as_bytes());
        let at = a.iter().zip(b).position(|(x, y)| x != y)?;
        if a.len() != b.len() || a[at + 1..] != b[at + 1..] || (a[at], b[at]) != (b'0', b'1') {
            return None;
        }
        let text = format!("{}\0{}", &zero[..at], &zero[at + 1..]);
        self.action = Action::SetAssigning {
            text,
            set: set.to_owned(),
        };
        Some(self)
    }
}

/// What a commit does to a key.
enum Action {
    Set(String),
    /// Set, the assigned index ([`Expect::NextIndex`]) written where `text` holds a NUL and
    /// used as the record's score in sorted set `set`.
    SetAssigning {
        text: String,
        set: String,
    },
    Delete,
    Nothing,
}

pub(crate) struct Planned {
    key: String,
    segment: String,
    id: String,
    expect: Expect,
    action: Action,
    /// The index entries of the version replaced (`None`: unknown, read at commit).
    old: Option<Vec<Entry>>,
    new: Vec<Entry>,
}

/// The index key of one value of an indexed field.
pub(crate) type IndexOf = fn(&KvStore, &str) -> String;

/// A table's layout, as its domain module declares it.
pub(crate) struct TableLayout {
    /// agno's key order for a record, nulls kept as `model_dump` writes them (empty: the
    /// record's serde order, as `to_dict` writes it).
    pub(crate) order: fn(&Fields) -> &'static [&'static str],
    /// The field holding the record's id.
    pub(crate) key_field: &'static str,
    /// A record's score in its indexes.
    pub(crate) score: fn(&Fields) -> f64,
    /// The field the group indexes are keyed on (`user_id`: the owner).
    pub(crate) group_field: &'static str,
    /// The index of a group (`Some(value)`, or `None` for records without one), if kept.
    pub(crate) by_owner: fn(&KvStore, Option<&str>) -> Option<String>,
    /// Whether a record goes into its group's index (agno 2.x's whole-day metrics do not).
    pub(crate) owned: fn(&Fields) -> bool,
    /// The index of every record, if kept.
    pub(crate) all: Option<fn(&KvStore) -> String>,
    /// The set of owners holding at least one record (an owner leaves it with their last
    /// record), if the table keeps one.
    pub(crate) owners: Option<fn(&KvStore) -> String>,
    /// Entries beyond the group and all-records indexes (a schedule's due time).
    pub(crate) extra: fn(&KvStore, &str, &Fields) -> Vec<Entry>,
    /// The key a record holds to keep a value unique (a schedule's name), if any.
    pub(crate) unique_key: Option<fn(&KvStore, &Fields) -> Option<String>>,
    /// The field [`TableLayout::score`] reads (the order `query_page` serves).
    pub(crate) score_field: &'static str,
    /// The score in the group index, when not [`TableLayout::score`] (a run's index).
    pub(crate) group_score: Option<fn(&Fields) -> f64>,
    /// A second equality index: `(field, index of a value)`, scored by
    /// [`TableLayout::score`].
    pub(crate) secondary: Option<(&'static str, IndexOf)>,
    /// Fills in what records older writers stored without (`id`, fields).
    pub(crate) normalize: fn(&str, &mut Fields),
    /// What a record's key adds before its id (agno's job tickets: `job:`).
    pub(crate) key_prefix: &'static str,
    /// Whether records are `json.dumps`-encoded with `ensure_ascii` (agno's job tickets).
    pub(crate) ascii: bool,
    /// Equality lookups served by sets the records' `extra` entries keep: `(field, the set
    /// of a value, if any)`.
    pub(crate) lookups: &'static [(&'static str, IndexLookup)],
}

/// The set holding the records whose field has a value, if one is kept.
pub(crate) type IndexLookup = fn(&KvStore, &str) -> Option<String>;

/// The layout fields most tables share; a table's layout names what differs.
pub(crate) const DEFAULT_LAYOUT: TableLayout = TableLayout {
    order: |_| &[],
    key_field: "id",
    score: |_| 0.0,
    group_field: "user_id",
    by_owner: |_, _| None,
    owned: |_| true,
    all: None,
    owners: None,
    extra: no_extra,
    unique_key: None,
    score_field: "created_at",
    group_score: None,
    secondary: None,
    normalize: |_, _| {},
    key_prefix: "",
    ascii: false,
    lookups: &[],
};

/// A layout's `extra` for tables without further indexes.
pub(crate) fn no_extra(_: &KvStore, _: &str, _: &Fields) -> Vec<Entry> {
    Vec::new()
}

impl TableLayout {
    /// A record's index entries: in the table's index of every record, in its group's
    /// index (where the table keeps one for it), scored by [`TableLayout::score`], its
    /// owner set entry and its `extra` entries.
    pub(crate) fn entries(&self, store: &KvStore, id: &str, fields: &Fields) -> Vec<Entry> {
        let score = (self.score)(fields);
        let mut entries: Vec<Entry> = self
            .all
            .map(|all| Entry::z(all(store), id, score))
            .into_iter()
            .collect();
        let group = text(fields, self.group_field).filter(|_| (self.owned)(fields));
        if let Some(index) = (self.by_owner)(store, group) {
            let group_score = self.group_score.map_or(score, |f| f(fields));
            entries.push(Entry::z(index, id, group_score));
        }
        if let Some((field, index)) = self.secondary {
            if let Some(value) = text(fields, field) {
                entries.push(Entry::z(index(store, value), id, score));
            }
        }
        if let (Some(owners), Some(owner)) = (self.owners, group) {
            entries.push(Entry::s(owners(store), owner));
        }
        entries.extend((self.extra)(store, id, fields));
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
        crate::schedules::TABLE => Some(&crate::schedules::LAYOUT),
        crate::schedules::RUNS_TABLE => Some(&crate::schedules::RUNS_LAYOUT),
        crate::sessions::TABLE => Some(&crate::sessions::LAYOUT),
        crate::runs::TABLE => Some(&crate::runs::LAYOUT),
        crate::jobs::TABLE => Some(&crate::jobs::LAYOUT),
        _ => None,
    }
}

/// A stored document whose text does not parse: its id, its text and the error.
pub(crate) type Unparsable = (String, String, agno_storage_core::Error);

/// The collection of our bookkeeping documents.
const META: &str = "storage_meta";

/// Meta documents whose id starts with this are stored at the key that follows it, holding
/// only their holder's id as plain text (the unique-value keys, such as a schedule's name
/// key, that the follower and earlier versions write).
const LITERAL_KEY: char = '@';

/// The holder fields of literal-key meta documents (a schedule's name key, a job's
/// idempotency key): the one a document carries is stored, and read back as either.
const HOLDERS: [&str; 2] = ["schedule_id", "job_id"];

fn expectation<S: Server>(pre: Pre<KvDocs<S>>) -> Expect {
    match pre {
        Pre::Any => Expect::Any,
        Pre::Absent => Expect::Absent,
        Pre::At(raw) => Expect::Text(raw),
    }
}

/// The numeric field `key` of `fields` as a score (0 when absent or not a number).
pub(crate) fn score(fields: &Fields, key: &str) -> f64 {
    fields.get(key).and_then(Value::as_f64).unwrap_or_default()
}

/// A record's `updated_at` as a score; its `created_at` when it has none (a record agno
/// wrote without one is ordered by its creation).
pub(crate) fn updated_or_created(fields: &Fields) -> f64 {
    match fields.get("updated_at").filter(|v| !v.is_null()) {
        Some(_) => score(fields, "updated_at"),
        None => score(fields, "created_at"),
    }
}

/// The string field `key` of `fields`.
pub(crate) fn text<'a>(fields: &'a Fields, key: &str) -> Option<&'a str> {
    fields.get(key).and_then(Value::as_str)
}

/// The fields of record `id` of `segment` as stored text `raw`: timestamps Python wrote as
/// floats as integers, a missing key field filled from the key.
pub(crate) fn view(store: &KvStore, segment: &str, id: &str, raw: &str) -> Result<Fields> {
    let key = store.key(segment, id);
    let mut fields = match decode_object(&key, raw) {
        Ok(fields) => fields,
        Err(e) => match (segment == crate::runs::TABLE)
            .then(|| crate::runs::unreadable_fields(raw))
            .flatten()
        {
            Some(fields) => fields,
            None => return Err(e.with_backend(store.server)),
        },
    };
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
        (l.normalize)(id, &mut fields);
    }
    Ok(fields)
}

/// The stored text of a record of `segment` holding `fields`, over `existing` (the record it
/// replaces, whose keys the fields do not model are kept): agno's key order where the table
/// has one, else the fields' own order.
pub(crate) fn body(segment: &str, fields: &Fields, existing: Option<&Value>) -> String {
    let l = layout(segment);
    let order = l.map_or(&[][..], |l| (l.order)(fields));
    let value = if order.is_empty() {
        shape_serde(fields.clone(), existing)
    } else {
        shape(fields.clone(), order, Nulls::Keep, existing)
    };
    if l.is_some_and(|l| l.ascii) {
        encode_ascii(&value)
    } else {
        encode(&value)
    }
}

impl<S: Server> KvDocs<S> {
    pub(crate) fn store(&self) -> &KvStore {
        &self.store
    }

    pub(crate) fn stored(&self, segment: &str, id: &str, raw: String) -> Result<Stored<Self>> {
        Ok(Stored {
            id: id.to_owned(),
            fields: view(&self.store, segment, id, &raw)?,
            version: raw,
        })
    }

    /// The documents `ids` of `collection` that exist, in one `MGET`; one whose text does
    /// not parse is its id, its text and the error, in its place.
    pub(crate) async fn get_many_raw(
        &self,
        collection: &str,
        ids: &[String],
    ) -> Result<Vec<std::result::Result<Stored<Self>, Unparsable>>> {
        let keys: Vec<String> = ids
            .iter()
            .map(|id| self.store.key_of(collection, id).0)
            .collect();
        let mut out = Vec::with_capacity(ids.len());
        for (id, raw) in ids.iter().zip(self.store.mget(&keys).await?) {
            if let Some(raw) = raw {
                out.push(match view(&self.store, collection, id, &raw) {
                    Ok(fields) => Ok(Stored {
                        id: id.clone(),
                        fields,
                        version: raw,
                    }),
                    Err(e) => Err((id.clone(), raw, e)),
                });
            }
        }
        Ok(out)
    }
}

/// Index entries and commits: plans of writes and their index moves, and the script that
/// applies them.
impl KvStore {
    /// The index entries of record `id` of `segment` holding `fields`.
    pub(crate) fn entries(&self, segment: &str, id: &str, fields: &Fields) -> Vec<Entry> {
        layout(segment).map_or_else(Vec::new, |l| l.entries(self, id, fields))
    }

    /// The index entries of one record of `segment` with id `id` (as in its key) and stored
    /// text `raw`: the one per-record rule every rebuild and the follower use. `Ok(None)` for
    /// the tables the engine does not serve and keys of a table that are not records (job
    /// queue helpers); an error when `raw` does not decode.
    pub(crate) fn record_index(
        &self,
        segment: &str,
        id: &str,
        raw: &str,
    ) -> Result<Option<RecordIndex>> {
        let Some(l) = layout(segment) else {
            return Ok(None);
        };
        // Keys of the table without the records' prefix are not records (the queue's sets).
        let Some(id) = id.strip_prefix(l.key_prefix) else {
            return Ok(None);
        };
        let fields = view(self, segment, id, raw)?;
        let entries = l.entries(self, id, &fields);
        Ok(Some(RecordIndex {
            prunes: l.prunes(self, &entries),
            entries,
            name_claim: l
                .unique_key
                .and_then(|key| key(self, &fields))
                .map(|key| (key, id.to_owned())),
        }))
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
        layout(segment).map_or_else(Vec::new, |l| l.prunes(self, &removed))
    }

    /// The index answering `eq` on `segment` (the group index for an equality on the group
    /// field, else the table's index of every record), if the table keeps one.
    fn index_for(&self, segment: &str, eq: &[(&str, Value)]) -> Option<String> {
        let l = layout(segment)?;
        let all = l.all.map(|all| all(self));
        let secondary =
            l.secondary.and_then(
                |(field, index)| match eq.iter().find(|(k, _)| *k == field) {
                    Some((_, Value::String(v))) => Some(index(self, v)),
                    _ => None,
                },
            );
        let lookup =
            l.lookups
                .iter()
                .find_map(|(field, set)| match eq.iter().find(|(k, _)| k == field) {
                    Some((_, Value::String(v))) => set(self, v),
                    _ => None,
                });
        match eq.iter().find(|(k, _)| *k == l.group_field) {
            Some((_, Value::String(g))) => (l.by_owner)(self, Some(g)),
            Some((_, Value::Null)) => (l.by_owner)(self, None).or(secondary).or(lookup).or(all),
            Some(_) => None,
            None => secondary.or(lookup).or(all),
        }
    }

    /// The key of document `id` of `collection`, and whether it is a literal-key meta
    /// document (see [`LITERAL_KEY`]).
    fn key_of(&self, collection: &str, id: &str) -> (String, bool) {
        match id.strip_prefix(LITERAL_KEY) {
            Some(key) if collection == META => (key.to_owned(), true),
            _ => match layout(collection).filter(|l| !l.key_prefix.is_empty()) {
                Some(l) => (
                    self.key(collection, &format!("{}{id}", l.key_prefix)),
                    false,
                ),
                None => (self.key(collection, id), false),
            },
        }
    }

    /// A write of document `id` of `collection`: `fields` (`None`: a delete) under
    /// `expect`, with the index moves from the version `expect` names (a text) to `fields`.
    pub(crate) fn plan(
        &self,
        collection: &str,
        id: &str,
        expect: Expect,
        fields: Option<&Fields>,
    ) -> Result<Planned> {
        let (key, literal) = self.key_of(collection, id);
        let (existing, old) = match &expect {
            Expect::Text(raw) if !literal => {
                let fields = view(self, collection, id, raw)?;
                let old = self.entries(collection, id, &fields);
                (Some(Value::Object(fields)), Some(old))
            }
            Expect::Any => (None, None),
            _ => (None, Some(Vec::new())),
        };
        let action = match fields {
            Some(fields) if literal => Action::Set(
                HOLDERS
                    .iter()
                    .find_map(|h| fields.get(*h).and_then(Value::as_str))
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Some(fields) => Action::Set(body(collection, fields, existing.as_ref())),
            None => Action::Delete,
        };
        Ok(Planned {
            key,
            segment: collection.to_owned(),
            id: id.to_owned(),
            new: fields.map_or_else(Vec::new, |f| self.entries(collection, id, f)),
            old,
            action,
            expect,
        })
    }

    /// A write of document `id` of `collection` over stored text `raw` that does not parse,
    /// conditioned on that text: its index entries are taken to be those of `known` (what
    /// is known of it, such as the set it was found through).
    pub(crate) fn plan_over_unparsable(
        &self,
        collection: &str,
        id: &str,
        raw: String,
        known: &Fields,
        fields: &Fields,
    ) -> Result<Planned> {
        let mut planned = self.plan(collection, id, Expect::Any, Some(fields))?;
        planned.old = Some(self.entries(collection, id, known));
        planned.expect = Expect::Text(raw);
        Ok(planned)
    }

    /// A commit's check of `key` that writes nothing.
    pub(crate) fn check(&self, key: String, expect: Expect) -> Planned {
        Planned {
            key,
            segment: String::new(),
            id: String::new(),
            expect,
            action: Action::Nothing,
            old: Some(Vec::new()),
            new: Vec::new(),
        }
    }

    /// A commit's delete of a key that is no record (a set emptied by the commit's other
    /// writes).
    pub(crate) fn drop_key(&self, key: String) -> Planned {
        Planned {
            action: Action::Delete,
            ..self.check(key, Expect::Any)
        }
    }

    /// Fills in the index entries of the versions replaced without a precondition, from the
    /// records as they are now (a record replaced between this read and the commit may leave
    /// stale entries, which listings drop when they meet them): one read for all `commits`.
    async fn resolve_old(&self, commits: &mut [Vec<Planned>]) -> Result<()> {
        let mut unknown: Vec<&mut Planned> = commits
            .iter_mut()
            .flatten()
            .filter(|w| w.old.is_none())
            .collect();
        let keys: Vec<String> = unknown.iter().map(|w| w.key.clone()).collect();
        let current = self.mget(&keys).await?;
        for (w, raw) in unknown.iter_mut().zip(current) {
            w.old = Some(match (raw, layout(&w.segment)) {
                (Some(raw), Some(_)) => {
                    let fields = view(self, &w.segment, &w.id, &raw)?;
                    self.entries(&w.segment, &w.id, &fields)
                }
                _ => Vec::new(),
            });
        }
        Ok(())
    }

    /// Applies every write or none: [`Commit::Conflict`] when a check failed.
    pub(crate) async fn commit(&self, writes: Vec<Planned>) -> Result<Commit> {
        Ok(self.commit_assigning(writes).await?.0)
    }

    /// [`KvStore::commit`], with the index a [`Expect::NextIndex`] check assigned, if any.
    pub(crate) async fn commit_assigning(
        &self,
        mut writes: Vec<Planned>,
    ) -> Result<(Commit, Option<i64>)> {
        if writes.is_empty() {
            return Ok((Commit::Done, None));
        }
        self.resolve_old(std::slice::from_mut(&mut writes)).await?;
        let reply: Vec<i64> = self
            .invocation(&writes)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.err(e))?;
        Ok(outcome(&reply))
    }

    /// Each of `commits` applied on its own, as [`KvStore::commit`] applies one, in one
    /// pipeline of scripts (one round trip): each reports its own outcome, a failed one
    /// (a script error) without hiding the others'. The pipeline loads the script first, so
    /// a server that lost it (a restart, `SCRIPT FLUSH`) runs it all the same. An error for
    /// the whole call (the connection) leaves unknown which applied.
    pub(crate) async fn commit_each(
        &self,
        mut commits: Vec<Vec<Planned>>,
    ) -> Result<Vec<Result<Commit>>> {
        if commits.len() == 1 {
            let writes = commits.pop().unwrap_or_default();
            return Ok(vec![self.commit(writes).await]);
        }
        self.resolve_old(&mut commits).await?;
        let invocations: Vec<_> = commits
            .iter()
            .filter(|writes| !writes.is_empty())
            .map(|writes| self.invocation(writes))
            .collect();
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.load_script(&self.commit_script).ignore();
        for invocation in &invocations {
            pipe.invoke_script(invocation);
        }
        let mut replies = if invocations.is_empty() {
            Vec::new()
        } else {
            self.pipe::<Vec<redis::Value>>(&pipe).await?
        }
        .into_iter();
        Ok(commits
            .iter()
            .map(|writes| {
                if writes.is_empty() {
                    return Ok(Commit::Done);
                }
                let reply = replies.next().ok_or_else(|| {
                    Error::new(ErrorKind::Unexpected, "a pipeline of commits lost a reply")
                        .with_backend(self.server)
                })?;
                let reply = reply
                    .extract_error()
                    .and_then(|v| redis::from_redis_value::<Vec<i64>>(v).map_err(Into::into))
                    .map_err(|e| self.err(e))?;
                Ok(outcome(&reply).0)
            })
            .collect())
    }

    /// The commit script's call for `writes`, their old entries known.
    fn invocation(&self, writes: &[Planned]) -> redis::ScriptInvocation<'_> {
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
        let by_session = self.by_session("");
        let mut records = Vec::with_capacity(writes.len());
        let mut ops: Vec<(&str, usize, &str, String)> = Vec::new();
        for w in writes {
            let (expect, want) = match &w.expect {
                Expect::Any => ("*", String::new()),
                Expect::Absent => ("-", String::new()),
                Expect::Text(raw) => ("=", raw.clone()),
                Expect::Exists => ("exists", String::new()),
                Expect::Zcard(n) => ("zcard", n.to_string()),
                Expect::Zmax(top) => ("zmax", top.map(score_arg).unwrap_or_default()),
                Expect::WritableBy(Some(user)) => ("owner", user.clone()),
                Expect::WritableBy(None) => ("unowned", String::new()),
                Expect::NextIndex => ("znext", String::new()),
            };
            let (action, value, assigned_in) = match &w.action {
                Action::Set(v) => ("set", v.as_str(), None),
                Action::SetAssigning { text, set } => ("seti", text.as_str(), Some(set)),
                Action::Delete => ("del", "", None),
                Action::Nothing => ("none", "", None),
            };
            records.push((slot(&w.key), expect, want, action, value));
            let old = w.old.as_deref().unwrap_or_default();
            for e in old.iter().filter(|e| e.score.is_some()) {
                if !w.new.iter().any(|n| n.key == e.key && n.member == e.member) {
                    ops.push(("zrem", slot(&e.key), &e.member, String::new()));
                }
            }
            for e in w.new.iter().filter(|e| !old.contains(e)) {
                match e.score {
                    _ if assigned_in == Some(&e.key) => {
                        ops.push(("zadd", slot(&e.key), &e.member, "@".to_owned()))
                    }
                    Some(s) => ops.push(("zadd", slot(&e.key), &e.member, score_arg(s))),
                    None => ops.push(("sadd", slot(&e.key), &e.member, String::new())),
                }
            }
            if let (Some(ttl), "set" | "seti") = (self.expire, action) {
                if EXPIRING_TABLES.contains(&w.segment.as_str()) {
                    ops.push(("expire", slot(&w.key), "", ttl.to_string()));
                    // agno refreshes the session's run list with each run it writes.
                    for e in w.new.iter().filter(|e| e.key.starts_with(&by_session)) {
                        ops.push(("expire", slot(&e.key), "", ttl.to_string()));
                    }
                }
            }
        }
        let prunes: Vec<(String, String, String)> = writes
            .iter()
            .flat_map(|w| {
                self.removed_owners(&w.segment, w.old.as_deref().unwrap_or_default(), &w.new)
            })
            .collect();
        for (index, set, member) in &prunes {
            let set = slot(set).to_string();
            ops.push(("prune", slot(index), member, set));
        }
        let mut inv = self.commit_script.prepare_invoke();
        for k in &keys {
            inv.key(k);
        }
        inv.arg(records.len());
        for (k, expect, want, action, value) in &records {
            inv.arg(*k).arg(*expect).arg(want).arg(*action).arg(*value);
        }
        inv.arg(ops.len());
        for (kind, k, member, score) in &ops {
            inv.arg(*kind).arg(*k).arg(*member).arg(score);
        }
        inv
    }
}

/// The commit script's reply: applied, with the index it assigned if any, or a conflict.
fn outcome(reply: &[i64]) -> (Commit, Option<i64>) {
    match reply {
        [1, assigned @ ..] => (Commit::Done, assigned.first().copied()),
        _ => (Commit::Conflict, None),
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
            Table::Meta => META,
        }
    }

    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> KvWrite {
        KvWrite(
            self.store
                .plan(collection, id, expectation(pre), Some(fields)),
        )
    }

    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> KvWrite {
        KvWrite(self.store.plan(collection, id, expectation(pre), None))
    }

    async fn commit(&self, _operation: &'static str, writes: Vec<KvWrite>) -> Result<Commit> {
        let writes = writes
            .into_iter()
            .map(|w| w.0)
            .collect::<Result<Vec<_>>>()?;
        self.store.commit(writes).await
    }

    /// One pipeline of commit scripts ([`KvStore::commit_each`]).
    async fn commit_each(
        &self,
        _operation: &'static str,
        commits: Vec<Vec<KvWrite>>,
    ) -> Result<Vec<Result<Commit>>> {
        // A commit whose writes could not be built is reported alone; the rest go together.
        let mut refused: Vec<Option<Error>> = Vec::with_capacity(commits.len());
        let mut ready = Vec::with_capacity(commits.len());
        for writes in commits {
            match writes.into_iter().map(|w| w.0).collect::<Result<Vec<_>>>() {
                Ok(planned) => {
                    ready.push(planned);
                    refused.push(None);
                }
                Err(e) => refused.push(Some(e)),
            }
        }
        let mut applied = self.store.commit_each(ready).await?.into_iter();
        Ok(refused
            .into_iter()
            .map(|refused| match refused {
                Some(e) => Err(e),
                None => applied.next().unwrap_or_else(|| {
                    Err(
                        Error::new(ErrorKind::Unexpected, "a commit's outcome is missing")
                            .with_backend(S::NAME),
                    )
                }),
            })
            .collect())
    }

    /// One `MGET` (holder keys, stored as plain text, are read one by one).
    async fn get_each(
        &self,
        collection: &str,
        ids: &[String],
    ) -> Result<Vec<Option<Stored<Self>>>> {
        let keys: Vec<(String, bool)> = ids
            .iter()
            .map(|id| self.store.key_of(collection, id))
            .collect();
        if keys.iter().any(|(_, literal)| *literal) {
            return agno_storage_doc::get_one_by_one(self, collection, ids).await;
        }
        let keys: Vec<String> = keys.into_iter().map(|(key, _)| key).collect();
        ids.iter()
            .zip(self.store.mget(&keys).await?)
            .map(|(id, raw)| raw.map(|raw| self.stored(collection, id, raw)).transpose())
            .collect()
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        let (key, literal) = self.store.key_of(collection, id);
        match self.store.get(&key).await? {
            Some(holder) if literal => Ok(Some(Stored {
                id: id.to_owned(),
                fields: HOLDERS
                    .iter()
                    .map(|h| ((*h).to_owned(), Value::String(holder.clone())))
                    .collect(),
                version: holder,
            })),
            Some(raw) => Ok(Some(self.stored(collection, id, raw)?)),
            None => Ok(None),
        }
    }

    /// agno-storage's name key `{prefix}:schedules:index:name:{owner}:{name}`, holding the
    /// schedule's id as plain text.
    fn schedule_name_guard(&self, user_id: Option<&str>, name: &str) -> Guard {
        Guard {
            id: format!(
                "{LITERAL_KEY}{}",
                self.store.schedule_name_key(user_id, name)
            ),
            holder: HOLDERS[0],
        }
    }

    /// agno's idempotency key `{prefix}:jobs:idem:u{len}:{user}:{key}`, holding the job's id
    /// as plain text.
    fn job_key_guard(&self, user_id: Option<&str>, key: &str) -> Guard {
        Guard {
            id: format!("{LITERAL_KEY}{}", self.store.idem_key(user_id, key)),
            holder: HOLDERS[1],
        }
    }

    /// `ZCARD` of agno's `queued` set.
    async fn count_queued_jobs(&self) -> Result<u64> {
        let store = &self.store;
        store
            .query(redis::cmd("ZCARD").arg(store.jobs_set("queued")))
            .await
    }

    async fn claim_next_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        let mut claimed = self
            .claim(worker_id, lock_grace_seconds, deployment_id, 1)
            .await?;
        Ok(claimed.pop())
    }

    async fn claim_next_jobs(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        self.claim(worker_id, lock_grace_seconds, deployment_id, limit)
            .await
    }

    async fn wake_workers(&self) {
        self.publish_wake().await;
    }

    async fn job_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        self.subscribe_wakeups().await
    }

    /// The members of agno's session set: the live serialized tickets, whoever wrote them.
    async fn session_jobs(&self, session_id: &str) -> Result<Vec<Job>> {
        self.live_session_tickets(session_id).await
    }

    /// The `due` (unlocked, by `next_run_at`) and `locked` (by `locked_at`) sorted sets,
    /// up to 64 of each.
    async fn due_schedules(&self, now: i64, lock_grace_seconds: i64) -> Result<Vec<Stored<Self>>> {
        let page = |index: String, max: i64| {
            let mut c = redis::cmd("ZRANGEBYSCORE");
            c.arg(index)
                .arg("-inf")
                .arg(max)
                .arg("LIMIT")
                .arg(0)
                .arg(64);
            c
        };
        let store = &self.store;
        let mut ids: Vec<String> = store.query(&page(store.schedules_due(), now)).await?;
        let stale: Vec<String> = store
            .query(&page(store.schedules_locked(), now - lock_grace_seconds))
            .await?;
        ids.extend(stale);
        ids.sort();
        ids.dedup();
        let found = self.get_each(crate::schedules::TABLE, &ids).await?;
        Ok(found.into_iter().flatten().collect())
    }

    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.upsert_run(run).await
    }

    async fn delete_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.delete_one_session(session_id, user_id).await
    }

    async fn session_page(&self, query: &SessionQuery) -> Result<Option<(Vec<Stored<Self>>, u64)>> {
        self.sessions_page(query).await
    }

    async fn legacy_sessions(&self, user_id: Option<&str>) -> Result<Vec<Stored<Self>>> {
        self.blob_sessions(user_id).await
    }

    /// The server's `TIME`: every writer's claims decided by one clock.
    async fn now(&self) -> Result<i64> {
        self.store.server_now().await
    }

    /// Reads the table's owner or all-records index (a `SCAN` for a table without indexes,
    /// never used by the stores served here), dropping members that left it.
    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        let records = match self.store.index_for(collection, eq) {
            Some(index) => {
                let ids = self.store.members(&index, "-inf", "+inf").await?;
                self.store
                    .load_with(&index, ids, |id| self.store.key_of(collection, id).0)
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
        let Some(index) = self.store.index_for(collection, eq) else {
            return Ok(None);
        };
        if !owner_only || sort_by != l.score_field {
            return Ok(None);
        }
        let (rows, total) = self
            .store
            .page_by(
                &index,
                |id| self.store.key_of(collection, id).0,
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

    fn lock_location(&self) -> String {
        format!("`{}:` on {}", self.store.prefix, self.store.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_are_integers_when_integral() {
        assert_eq!(score_arg(1_700_000_000.0), "1700000000");
        assert_eq!(score_arg(0.5), "0.5");
    }
}
