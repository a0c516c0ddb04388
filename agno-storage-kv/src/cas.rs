//! The one atomic primitive every write uses: compare-and-set of a record plus its index
//! entries, in one Lua script.
//!
//! Callers read a record, decide in Rust (sharing the core's rules), and commit with a
//! [`Cas`]: the script checks that the record still holds what was read and that every
//! guard holds, then writes the record and applies the index operations. Nothing is
//! written when a check fails, so a read-modify-write is atomic; a changed record is
//! retried by the caller with a fresh read.

use std::collections::HashMap;

/// KEYS[1] is the record. ARGV: expectation on it (`*` any, `-` absent, `=` equal to
/// ARGV[2]), action (`set` to ARGV[4], `del`, `keep`), then the guard count and
/// `(kind, key index, value)` triples, then the op count and `(kind, key index, a, b)`
/// quadruples. Returns 1 when applied, 0 when the record changed, -i when guard i failed.
const SCRIPT: &str = r#"
local cur = redis.call('GET', KEYS[1])
local expect = ARGV[1]
if expect == '-' then
  if cur then return 0 end
elseif expect == '=' then
  if cur ~= ARGV[2] then return 0 end
end
local i = 6
for g = 1, tonumber(ARGV[5]) do
  local kind, k, a = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2]
  i = i + 3
  local ok
  if kind == 'absent' then ok = redis.call('EXISTS', k) == 0
  elseif kind == 'exists' then ok = redis.call('EXISTS', k) == 1
  elseif kind == 'eq' then ok = redis.call('GET', k) == a
  elseif kind == 'zcard_eq' then ok = redis.call('ZCARD', k) == tonumber(a)
  elseif kind == 'zmax_eq' then
    local top = redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')
    if a == '' then ok = #top == 0 else ok = #top == 2 and tonumber(top[2]) == tonumber(a) end
  else
    return redis.error_reply('agno cas: unknown guard ' .. kind)
  end
  if not ok then return -g end
end
local action = ARGV[3]
if action == 'set' then redis.call('SET', KEYS[1], ARGV[4])
elseif action == 'del' then redis.call('DEL', KEYS[1]) end
local n = tonumber(ARGV[i])
i = i + 1
for _ = 1, n do
  local kind, k, a, b = ARGV[i], KEYS[tonumber(ARGV[i + 1])], ARGV[i + 2], ARGV[i + 3]
  i = i + 4
  if kind == 'zadd' then redis.call('ZADD', k, b, a)
  elseif kind == 'zrem' then redis.call('ZREM', k, a)
  elseif kind == 'sadd' then redis.call('SADD', k, a)
  elseif kind == 'srem' then redis.call('SREM', k, a)
  elseif kind == 'del' then redis.call('DEL', k)
  else
    return redis.error_reply('agno cas: unknown op ' .. kind)
  end
end
return 1
"#;

/// The compiled script (its SHA is cached by the client; `NOSCRIPT` reloads it).
pub(crate) fn script() -> redis::Script {
    redis::Script::new(SCRIPT)
}

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

enum Expect {
    Any,
    Absent,
    Value(String),
}

enum Action {
    Set(String),
    Del,
    Keep,
}

/// What a [`Cas`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything was written.
    Applied,
    /// The record no longer holds what was read: read again and retry.
    Changed,
    /// Guard `n` (0-based, in the order added) failed; nothing was written.
    Guard(usize),
}

/// A compare-and-set of one record with guards and index operations.
pub(crate) struct Cas {
    keys: Vec<String>,
    index: HashMap<String, usize>,
    expect: Expect,
    action: Action,
    guards: Vec<[String; 3]>,
    ops: Vec<[String; 4]>,
}

impl Cas {
    /// A transaction on the record at `key`, expecting nothing in particular.
    pub(crate) fn on(key: &str) -> Self {
        let mut cas = Cas {
            keys: Vec::new(),
            index: HashMap::new(),
            expect: Expect::Any,
            action: Action::Keep,
            guards: Vec::new(),
            ops: Vec::new(),
        };
        cas.k(key);
        cas
    }

    fn k(&mut self, key: &str) -> String {
        if let Some(i) = self.index.get(key) {
            return i.to_string();
        }
        self.keys.push(key.to_owned());
        let i = self.keys.len();
        self.index.insert(key.to_owned(), i);
        i.to_string()
    }

    /// The record must hold `raw` (`None`: must be absent).
    pub(crate) fn expect(mut self, raw: Option<&str>) -> Self {
        self.expect = match raw {
            Some(v) => Expect::Value(v.to_owned()),
            None => Expect::Absent,
        };
        self
    }

    /// Writes `raw` to the record.
    pub(crate) fn set(mut self, raw: String) -> Self {
        self.action = Action::Set(raw);
        self
    }

    /// Deletes the record.
    pub(crate) fn delete(mut self) -> Self {
        self.action = Action::Del;
        self
    }

    fn guard(&mut self, kind: &str, key: &str, value: String) {
        let i = self.k(key);
        self.guards.push([kind.to_owned(), i, value]);
    }

    fn op(&mut self, kind: &str, key: &str, a: String, b: String) {
        let i = self.k(key);
        self.ops.push([kind.to_owned(), i, a, b]);
    }

    /// Guard: `key` exists.
    pub(crate) fn guard_exists(mut self, key: &str) -> Self {
        self.guard("exists", key, String::new());
        self
    }

    /// Guard: the string at `key` is `value`, or (with `None`) `key` does not exist.
    pub(crate) fn guard_value(mut self, key: &str, value: Option<&str>) -> Self {
        match value {
            Some(v) => self.guard("eq", key, v.to_owned()),
            None => self.guard("absent", key, String::new()),
        }
        self
    }

    /// Guard: the sorted set at `key` has exactly `n` members.
    pub(crate) fn guard_zcard(mut self, key: &str, n: usize) -> Self {
        self.guard("zcard_eq", key, n.to_string());
        self
    }

    /// Guard: the highest score in the sorted set at `key` is `score` (`None`: it is empty).
    pub(crate) fn guard_zmax(mut self, key: &str, score: Option<f64>) -> Self {
        self.guard("zmax_eq", key, score.map(score_arg).unwrap_or_default());
        self
    }

    /// Removes a sorted-set member.
    pub(crate) fn zrem(mut self, key: &str, member: &str) -> Self {
        self.op("zrem", key, member.to_owned(), String::new());
        self
    }

    /// Deletes another key.
    pub(crate) fn del_key(mut self, key: &str) -> Self {
        self.op("del", key, String::new(), String::new());
        self
    }

    /// Moves the record's index entries from `old` to `new`: removes entries that are gone,
    /// adds (or re-scores) the others.
    pub(crate) fn reindex(mut self, old: &[Entry], new: &[Entry]) -> Self {
        for e in old {
            if !new.iter().any(|n| n.key == e.key && n.member == e.member) {
                let kind = if e.score.is_some() { "zrem" } else { "srem" };
                self.op(kind, &e.key, e.member.clone(), String::new());
            }
        }
        for e in new {
            let unchanged = old.iter().any(|o| o == e);
            if unchanged {
                continue;
            }
            match e.score {
                Some(score) => self.op("zadd", &e.key, e.member.clone(), score_arg(score)),
                None => self.op("sadd", &e.key, e.member.clone(), String::new()),
            }
        }
        self
    }

    /// Runs the script on `conn`.
    pub(crate) async fn run(
        &self,
        script: &redis::Script,
        conn: &mut redis::aio::ConnectionManager,
    ) -> redis::RedisResult<Outcome> {
        let mut inv = script.prepare_invoke();
        for key in &self.keys {
            inv.key(key);
        }
        match &self.expect {
            Expect::Any => inv.arg("*").arg(""),
            Expect::Absent => inv.arg("-").arg(""),
            Expect::Value(v) => inv.arg("=").arg(v),
        };
        match &self.action {
            Action::Set(v) => inv.arg("set").arg(v),
            Action::Del => inv.arg("del").arg(""),
            Action::Keep => inv.arg("keep").arg(""),
        };
        inv.arg(self.guards.len());
        for g in &self.guards {
            inv.arg(&g[..]);
        }
        inv.arg(self.ops.len());
        for o in &self.ops {
            inv.arg(&o[..]);
        }
        let code: i64 = inv.invoke_async(conn).await?;
        Ok(match code {
            1 => Outcome::Applied,
            0 => Outcome::Changed,
            n => Outcome::Guard(usize::try_from(-n - 1).unwrap_or_default()),
        })
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
