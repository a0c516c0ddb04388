//! Indexing of records found on the server rather than written through our own
//! compare-and-set: the one per-record function ([`KvStore::record_index`]) that both the
//! full rebuild ([`KvStore::reindex`], `KvDb::rebuild_indexes`, the migration's index step)
//! and the live follower (`crate::follower`) use, and the follower's exact per-record apply
//! and removal scripts.
//!
//! # The ledger
//!
//! When a record is deleted its content is gone, so the indexes it sat in (per owner, per
//! component, per schedule…) cannot be computed from it. The follower therefore keeps, per
//! table, a hash `{prefix}:{table}:index:ledger` (field: the record's id in its key, value: a
//! JSON list of index operations, see [`LedgerOp`]) of where it indexed each record. A
//! removal undoes exactly those entries; an update removes the entries the old value had
//! and the new one lacks. Only the follower (and its rebuilds) writes the ledger; records
//! indexed while no follower ran have no ledger field, and their stale entries are dropped
//! the first time a listing meets them, as before.

use agno_storage_core::{Error, ErrorKind, Result, TableType};
use serde_json::{json, Value};

use crate::docs::{score_arg, Entry};
use crate::store::KvStore;

/// The tables (key segments `{prefix}:{segment}:…`) whose records are indexed, in the order
/// [`KvStore::reindex`] walks them.
pub(crate) const SEGMENTS: [&str; 10] = [
    crate::sessions::TABLE,
    crate::runs::TABLE,
    crate::memories::TABLE,
    crate::metrics::TABLE,
    crate::evals::TABLE,
    crate::knowledge::TABLE,
    crate::schedules::TABLE,
    crate::schedules::RUNS_TABLE,
    crate::learnings::TABLE,
    crate::jobs::TABLE,
];

/// Everything indexing one record writes.
#[derive(Debug, Default)]
pub(crate) struct RecordIndex {
    /// Sorted-set and set entries.
    pub(crate) entries: Vec<Entry>,
    /// `(user sorted set, users set, user)`: the user leaves the set when their sorted set
    /// is empty (memory owners).
    pub(crate) prunes: Vec<(String, String, String)>,
    /// `(name key, record id)`: a unique-name key the record claims (schedules).
    pub(crate) name_claim: Option<(String, String)>,
}

/// One operation of a ledger entry, as JSON arrays:
/// `["z", key, member]` (sorted-set entry; its score is passed beside the ledger),
/// `["s", key, member]` (set entry, undone through a `p` operation),
/// `["p", sorted set, set, member]` (remove `member` from `set` once `sorted set` is empty),
/// `["n", key, id]` (name key holding `id`: deleted only while it still holds `id`).
type LedgerOp = Value;

/// Applies one record's index operations exactly, if the record still holds `ARGV[1]`.
/// KEYS[1] the record, KEYS[2] the ledger; ARGV[2] the ledger field, ARGV[3] the new
/// operations (JSON), ARGV[4..] the score of each operation (empty for non-`z`). Entries
/// the previous ledger value had and the new one lacks are removed. Returns 1 when applied,
/// 0 when the record changed meanwhile (its own event follows), -1 when a name key is held
/// by another record (everything else was applied).
const APPLY: &str = r#"
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local new = cjson.decode(ARGV[3])
local function id(op) return table.concat(op, '\n') end
local keep = {}
local clash = 0
for n, op in ipairs(new) do
  keep[id(op)] = true
  if op[1] == 'z' then redis.call('ZADD', op[2], ARGV[3 + n], op[3])
  elseif op[1] == 's' then redis.call('SADD', op[2], op[3])
  elseif op[1] == 'n' then
    local holder = redis.call('GET', op[2])
    if not holder then redis.call('SET', op[2], op[3])
    elseif holder ~= op[3] then clash = 1 end
  end
end
local old = redis.call('HGET', KEYS[2], ARGV[2])
if old then
  local prunes = {}
  for _, op in ipairs(cjson.decode(old)) do
    if not keep[id(op)] then
      if op[1] == 'z' then redis.call('ZREM', op[2], op[3])
      elseif op[1] == 'n' then
        if redis.call('GET', op[2]) == op[3] then redis.call('DEL', op[2]) end
      elseif op[1] == 'p' then table.insert(prunes, op) end
    end
  end
  for _, op in ipairs(prunes) do
    if redis.call('ZCARD', op[2]) == 0 then redis.call('SREM', op[3], op[4]) end
  end
end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1 - 2 * clash
"#;

/// Undoes the ledger entry of a deleted record. KEYS[1] the record, KEYS[2] the ledger,
/// ARGV[1] the ledger field. Returns 0 when the record exists again (its write event
/// follows), 1 when its entries were removed, 2 when the ledger knew nothing of it.
const REMOVE: &str = r#"
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old then return 2 end
local prunes = {}
for _, op in ipairs(cjson.decode(old)) do
  if op[1] == 'z' then redis.call('ZREM', op[2], op[3])
  elseif op[1] == 'n' then
    if redis.call('GET', op[2]) == op[3] then redis.call('DEL', op[2]) end
  elseif op[1] == 'p' then table.insert(prunes, op) end
end
for _, op in ipairs(prunes) do
  if redis.call('ZCARD', op[2]) == 0 then redis.call('SREM', op[3], op[4]) end
end
redis.call('HDEL', KEYS[2], ARGV[1])
return 1
"#;

/// The follower's compiled scripts (SHAs cached by the client; `NOSCRIPT` reloads them).
pub(crate) struct Scripts {
    apply: redis::Script,
    remove: redis::Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            apply: redis::Script::new(APPLY),
            remove: redis::Script::new(REMOVE),
        }
    }
}

/// What applying one record did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Applied {
    /// Indexed (or its entries removed).
    Done,
    /// The record changed or came back meanwhile; its own event follows.
    Raced,
    /// A removal for which the ledger held nothing (indexed while no follower ran).
    Unknown,
    /// Indexed, but its unique name key is held by another record.
    NameTaken,
}

impl KvStore {
    /// `{prefix}:{segment}:index:ledger`: where the follower indexed each record of a table.
    pub(crate) fn ledger(&self, segment: &str) -> String {
        self.idx(segment, "ledger")
    }

    /// The table segment and record id of `key`, when it is a record this crate indexes
    /// (not an index, a run list, a job queue helper or anything outside the tables).
    pub(crate) fn split_record_key<'a>(&self, key: &'a str) -> Option<(&'static str, &'a str)> {
        SEGMENTS.iter().find_map(|segment| {
            let id = self.record_id(segment, key)?;
            if *segment == crate::jobs::TABLE && !id.starts_with("job:") {
                return None;
            }
            Some((*segment, id))
        })
    }

    /// The ledger operations of `ix` and the score of each (`""` for non-sorted-set ones).
    fn ledger_ops(ix: &RecordIndex) -> (Vec<LedgerOp>, Vec<String>) {
        let mut ops = Vec::new();
        let mut scores = Vec::new();
        for e in &ix.entries {
            match e.score {
                Some(s) => {
                    ops.push(json!(["z", e.key, e.member]));
                    scores.push(score_arg(s));
                }
                None => {
                    ops.push(json!(["s", e.key, e.member]));
                    scores.push(String::new());
                }
            }
        }
        for (zset, set, member) in &ix.prunes {
            ops.push(json!(["p", zset, set, member]));
            scores.push(String::new());
        }
        if let Some((name_key, id)) = &ix.name_claim {
            ops.push(json!(["n", name_key, id]));
            scores.push(String::new());
        }
        (ops, scores)
    }

    /// Indexes one record exactly (the follower's path): if `key` still holds `raw`, adds
    /// the entries of `raw`, removes those its previous ledger value had and `raw` lacks,
    /// and records the new ledger value, in one script.
    pub(crate) async fn apply_record(
        &self,
        scripts: &Scripts,
        segment: &str,
        id: &str,
        raw: &str,
        ix: &RecordIndex,
    ) -> Result<Applied> {
        let (ops, scores) = Self::ledger_ops(ix);
        let mut inv = scripts.apply.key(self.key(segment, id));
        inv.key(self.ledger(segment))
            .arg(raw)
            .arg(id)
            .arg(Value::Array(ops).to_string());
        for s in scores {
            inv.arg(s);
        }
        let n: i64 = inv
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.err(e))?;
        Ok(match n {
            1 => Applied::Done,
            -1 => Applied::NameTaken,
            _ => Applied::Raced,
        })
    }

    /// Removes a deleted record from every index its ledger entry lists (the follower's
    /// path). Nothing happens when the record exists again.
    pub(crate) async fn remove_record(
        &self,
        scripts: &Scripts,
        segment: &str,
        id: &str,
    ) -> Result<Applied> {
        let n: i64 = scripts
            .remove
            .key(self.key(segment, id))
            .key(self.ledger(segment))
            .arg(id)
            .invoke_async(&mut self.conn())
            .await
            .map_err(|e| self.err(e))?;
        Ok(match n {
            1 => Applied::Done,
            2 => Applied::Unknown,
            _ => Applied::Raced,
        })
    }

    /// Rebuilds the indexes of one table from a scan of its records (additive: entries are
    /// added or re-scored). Returns how many records were indexed. Records that cannot be
    /// decoded are reported in the error after the others were indexed.
    pub(crate) async fn reindex(&self, table: TableType) -> Result<u64> {
        self.reindex_with(table, false).await
    }

    /// [`KvStore::reindex`]; with `ledger`, also records each record's ledger entry (the
    /// follower's rebuilds), so later deletions are undone exactly.
    pub(crate) async fn reindex_with(&self, table: TableType, ledger: bool) -> Result<u64> {
        let segments: &[&str] = match table {
            TableType::Sessions => &[crate::sessions::TABLE, crate::runs::TABLE],
            TableType::Memories => &[crate::memories::TABLE],
            TableType::Metrics => &[crate::metrics::TABLE],
            TableType::Evals => &[crate::evals::TABLE],
            TableType::Knowledge => &[crate::knowledge::TABLE],
            TableType::Schedules => &[crate::schedules::TABLE],
            TableType::ScheduleRuns => &[crate::schedules::RUNS_TABLE],
            TableType::Learnings => &[crate::learnings::TABLE],
        };
        if table == TableType::Metrics {
            for (id, _) in self.scan_records(crate::metrics::TABLE).await? {
                self.move_legacy_metric(&id).await?;
            }
        }
        let mut entries: Vec<Entry> = Vec::new();
        let mut ledger_fields: Vec<(String, String, String)> = Vec::new();
        let mut bad: Vec<String> = Vec::new();
        let mut indexed = 0u64;
        let mut names: Vec<(String, String)> = Vec::new();
        for segment in segments {
            for (id, raw) in self.scan_records(segment).await? {
                match self.record_index(segment, &id, &raw) {
                    Ok(Some(mut ix)) => {
                        indexed += 1;
                        if ledger {
                            let (ops, _) = Self::ledger_ops(&ix);
                            ledger_fields.push((
                                self.ledger(segment),
                                id.clone(),
                                Value::Array(ops).to_string(),
                            ));
                        }
                        entries.append(&mut ix.entries);
                        names.extend(ix.name_claim);
                    }
                    Ok(None) => {}
                    Err(err) => bad.push(format!("{}: {}", self.key(segment, &id), err.message())),
                }
            }
        }
        self.add_entries(&entries).await?;
        self.add_ledger(&ledger_fields).await?;
        for (name_key, id) in names {
            let set: bool = self
                .query(redis::cmd("SET").arg(&name_key).arg(&id).arg("NX"))
                .await
                .map(|r: Option<String>| r.is_some())?;
            if !set && self.get(&name_key).await?.as_deref() != Some(id.as_str()) {
                bad.push(format!(
                    "schedule {id}: its (user_id, name) is taken by another schedule; rename one of them"
                ));
            }
        }
        if !bad.is_empty() {
            let shown: Vec<&str> = bad.iter().take(20).map(String::as_str).collect();
            return Err(Error::new(
                ErrorKind::Serialization,
                format!(
                    "{} record(s) of {} could not be indexed ({}{}); every other record was. Repair or delete them, then run again",
                    bad.len(),
                    table.default_name(),
                    shown.join("; "),
                    if bad.len() > shown.len() { "; …" } else { "" }
                ),
            )
            .with_backend(self.server));
        }
        Ok(indexed)
    }

    /// Rebuilds the job queue's indexes (agno maintains `queued`, `running` and `all`; this
    /// adds ours for tickets agno wrote).
    pub(crate) async fn reindex_jobs(&self) -> Result<u64> {
        self.reindex_jobs_with(false).await
    }

    /// [`KvStore::reindex_jobs`], with ledger entries when `ledger` (see
    /// [`KvStore::reindex_with`]).
    pub(crate) async fn reindex_jobs_with(&self, ledger: bool) -> Result<u64> {
        let mut entries = Vec::new();
        let mut ledger_fields = Vec::new();
        let mut indexed = 0;
        for (id, raw) in self.scan_records(crate::jobs::TABLE).await? {
            let Some(mut ix) = self.record_index(crate::jobs::TABLE, &id, &raw)? else {
                continue;
            };
            if ledger {
                let (ops, _) = Self::ledger_ops(&ix);
                ledger_fields.push((
                    self.ledger(crate::jobs::TABLE),
                    id.clone(),
                    Value::Array(ops).to_string(),
                ));
            }
            entries.append(&mut ix.entries);
            indexed += 1;
        }
        self.add_entries(&entries).await?;
        self.add_ledger(&ledger_fields).await?;
        Ok(indexed)
    }

    /// Undoes the ledger entries of records of `segment` that no longer exist (deleted
    /// while no follower ran, or while it was disconnected). O(ledger fields). Returns how
    /// many were removed.
    pub(crate) async fn prune_ledger(&self, scripts: &Scripts, segment: &str) -> Result<u64> {
        let ledger = self.ledger(segment);
        let mut hscan = redis::cmd("HSCAN");
        hscan.arg(&ledger).cursor_arg(0).arg("COUNT").arg(500);
        // Fields and values alternate; the fields are the record ids.
        let pairs: Vec<String> = self.cursor(hscan, false).await?;
        let mut ids: Vec<String> = pairs.into_iter().step_by(2).collect();
        ids.sort();
        ids.dedup();
        let mut removed = 0;
        for chunk in ids.chunks(500) {
            let mut pipe = redis::pipe();
            for id in chunk {
                pipe.cmd("EXISTS").arg(self.key(segment, id));
            }
            let exists: Vec<i64> = self.pipe(&pipe).await?;
            for (id, n) in chunk.iter().zip(exists) {
                if n == 0 && self.remove_record(scripts, segment, id).await? == Applied::Done {
                    removed += 1;
                }
            }
        }
        Ok(removed)
    }

    /// Writes ledger fields `(ledger key, field, value)` in bulk.
    async fn add_ledger(&self, fields: &[(String, String, String)]) -> Result<()> {
        for chunk in fields.chunks(500) {
            let mut pipe = redis::pipe();
            for (key, field, value) in chunk {
                pipe.cmd("HSET").arg(key).arg(field).arg(value).ignore();
            }
            self.pipe::<()>(&pipe).await?;
        }
        Ok(())
    }
}
