//! SurrealDB records ⇄ JSON in agno's encodings, and the calls every store uses: get,
//! equality queries, and atomic commits whose writes carry compare-and-set preconditions.
//!
//! A commit is one SurrealQL transaction: for each write it reads the record, `THROW`s when
//! the record is not the version the caller read (a concurrent writer won), then writes it.
//! Two transactions writing the same record cannot both commit, so a lost race surfaces as
//! [`Commit::Conflict`] and the caller re-reads and retries.

use std::time::Duration;

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::{async_trait, Error, ErrorKind, Job, MetricsRecord, Result, RunRecord};
use agno_storage_doc::{DocBackend, Table};
use serde_json::Value;
use surrealdb::types::{
    Datetime, Number, Object, QueryError, RecordId, RecordIdKey, ToSql, Value as SValue,
};

use crate::db::Layout;
use crate::SurrealDb;

pub(crate) const BACKEND: &str = "surrealdb";

/// What a precondition failure `THROW`s (recognised in the error text).
const CAS_MARK: &str = "agno_storage_cas_conflict";

pub(crate) use agno_storage_doc::{backoff, digest_id, Commit, Fields, CAS_ATTEMPTS};

/// A stored record: its key (the id's key as a string), body in agno's plain shape, and the
/// raw record a compare-and-set writes against.
pub(crate) type Stored = agno_storage_doc::Stored<SurrealDb>;
/// The precondition of one write: `At(record)` requires the record to be exactly as read.
pub(crate) type Pre = agno_storage_doc::Pre<SurrealDb>;

/// How agno 3.1.10's `SurrealDb` encodes one table's records.
#[derive(Debug, Clone, Copy, Default)]
struct Codec {
    /// The field that becomes the record id's key (removed from the body on write).
    key_field: Option<&'static str>,
    /// String ids stored as record links.
    links: Links,
    /// Epoch-second fields stored as `datetime` (a null becomes now, as agno's
    /// `surrealize_dates`).
    datetimes: &'static [&'static str],
    /// A `YYYY-MM-DD` field stored as a `datetime` at 00:00Z (metrics `date`).
    day: Option<&'static str>,
    /// Sessions: `session_type` is not stored; it follows from which link is present.
    derive_session_type: bool,
    /// Schedules: store [`NAME_KEY`], the digest of `(user_id, name)` the unique index is on.
    name_key: bool,
}

/// The schedules field under the unique index: a digest of `(user_id, name)`. SurrealDB's
/// unique indexes do not compare a null `user_id`, so the pair is folded into one string.
pub(crate) const NAME_KEY: &str = "name_key";

#[derive(Debug, Clone, Copy)]
enum LinkTable {
    Agents,
    Teams,
    Workflows,
    Users,
}

/// `(agno field, stored field, linked table)` of each string id stored as a record link.
type Links = &'static [(&'static str, &'static str, LinkTable)];

const COMPONENT_LINKS: Links = &[
    ("agent_id", "agent", LinkTable::Agents),
    ("team_id", "team", LinkTable::Teams),
    ("workflow_id", "workflow", LinkTable::Workflows),
];
const DATES: &[&str] = &["created_at", "updated_at"];

impl Codec {
    /// A table keyed by `key_field`, with `links` and the dates stored as `datetime`.
    fn dated(key_field: Option<&'static str>, links: Links) -> Codec {
        Codec {
            key_field,
            links,
            datetimes: DATES,
            ..Codec::default()
        }
    }
}

impl Layout {
    fn codec(&self, table: &str) -> Codec {
        if table == self.sessions {
            Codec {
                derive_session_type: true,
                ..Codec::dated(Some("session_id"), COMPONENT_LINKS)
            }
        } else if table == self.runs {
            Codec::dated(None, &[])
        } else if table == self.memories {
            Codec::dated(Some("memory_id"), &[("user_id", "user", LinkTable::Users)])
        } else if table == self.evals {
            Codec::dated(Some("run_id"), COMPONENT_LINKS)
        } else if table == self.knowledge {
            Codec::dated(Some("id"), &[])
        } else if table == self.metrics {
            Codec {
                day: Some("date"),
                ..Codec::dated(Some("id"), &[])
            }
        } else {
            // Schedules (with their name digest), ours (jobs, learnings, meta, schedule runs)
            // and the version stamps: plain JSON.
            Codec {
                key_field: Some("id"),
                name_key: table == self.schedules,
                ..Codec::default()
            }
        }
    }

    fn link_table(&self, link: LinkTable) -> &str {
        match link {
            LinkTable::Agents => &self.links.agents,
            LinkTable::Teams => &self.links.teams,
            LinkTable::Workflows => &self.links.workflows,
            LinkTable::Users => &self.links.users,
        }
    }
}

fn key_string(key: &RecordIdKey) -> String {
    match key {
        RecordIdKey::String(s) => s.clone(),
        RecordIdKey::Number(n) => n.to_string(),
        other => other.to_sql(),
    }
}

fn epoch_datetime(secs: i64) -> SValue {
    match chrono::DateTime::<chrono::Utc>::from_timestamp(secs, 0) {
        Some(dt) => SValue::Datetime(Datetime::from(dt)),
        None => SValue::Number(Number::Int(secs)),
    }
}

fn now_datetime() -> SValue {
    SValue::Datetime(Datetime::from(chrono::Utc::now()))
}

/// A record id of `table` keyed by `key` (always a string key, as agno's `RecordID`).
pub(crate) fn rid(table: &str, key: &str) -> SValue {
    SValue::RecordId(RecordId::new(table, key))
}

impl Layout {
    /// `fields` in the stored shape of `table`.
    pub(crate) fn encode(&self, table: &str, fields: &Fields) -> SValue {
        let codec = self.codec(table);
        let mut fields = fields.clone();
        fields.remove("id");
        if let Some(k) = codec.key_field {
            fields.remove(k);
        }
        let mut session_type = None;
        if codec.derive_session_type {
            session_type = fields.remove("session_type");
        }
        let mut linked = false;
        let mut links: Vec<(&str, SValue)> = Vec::new();
        for (agno, stored, target) in codec.links {
            if let Some(Value::String(id)) = fields.remove(*agno) {
                links.push((stored, rid(self.link_table(*target), &id)));
                linked = true;
            }
        }
        let mut dates: Vec<(&str, SValue)> = Vec::new();
        for name in codec.datetimes {
            match fields.remove(*name) {
                Some(Value::Number(n)) => match n.as_i64() {
                    Some(secs) => dates.push((name, epoch_datetime(secs))),
                    None => {
                        let secs = n.as_f64().unwrap_or_default() as i64;
                        dates.push((name, epoch_datetime(secs)));
                    }
                },
                Some(Value::Null) | None => dates.push((name, now_datetime())),
                Some(other) => {
                    fields.insert((*name).to_owned(), other);
                }
            }
        }
        let mut day = None;
        if let Some(name) = codec.day {
            if let Some(Value::String(s)) = fields.get(name) {
                if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
                    let midnight = d.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
                    if let Some(m) = midnight {
                        day = Some((name, SValue::Datetime(Datetime::from(m))));
                        fields.remove(name);
                    }
                }
            }
        }
        if codec.name_key {
            let user = fields.get("user_id").and_then(Value::as_str);
            let name = fields.get("name").and_then(Value::as_str);
            let key = digest_id("schedule_name", &[user, name]);
            fields.insert(NAME_KEY.into(), Value::String(key));
        }
        let mut obj = match surrealdb::types::SurrealValue::into_value(Value::Object(fields)) {
            SValue::Object(o) => o,
            _ => Object::new(),
        };
        for (k, v) in links.into_iter().chain(dates).chain(day) {
            obj.insert(k, v);
        }
        if codec.derive_session_type && !linked {
            // No component id to link: keep the type so the session reads back whole.
            if let Some(t) = session_type {
                obj.insert(
                    "session_type",
                    surrealdb::types::SurrealValue::into_value(t),
                );
            }
        }
        SValue::Object(obj)
    }

    /// A stored record of `table` in agno's plain shape, or `None` when it is not an object.
    pub(crate) fn decode(&self, table: &str, raw: SValue) -> Option<Stored> {
        let SValue::Object(obj) = &raw else {
            return None;
        };
        let codec = self.codec(table);
        let mut fields = Fields::new();
        let mut id = String::new();
        for (k, v) in obj.iter() {
            if codec.name_key && k == NAME_KEY {
                continue;
            }
            if k == "id" {
                if let SValue::RecordId(r) = v {
                    id = key_string(&r.key);
                }
                continue;
            }
            if let Some((agno, _, _)) = codec.links.iter().find(|(_, s, _)| s == k) {
                match v {
                    SValue::RecordId(r) => {
                        fields.insert((*agno).to_owned(), Value::String(key_string(&r.key)));
                    }
                    SValue::None | SValue::Null => {}
                    other => {
                        fields.insert((*agno).to_owned(), other.clone().into_json_value());
                    }
                }
                continue;
            }
            let value = match v {
                SValue::Datetime(dt) => {
                    let utc: chrono::DateTime<chrono::Utc> = (*dt).into();
                    if codec.day == Some(k.as_str()) {
                        Value::String(utc.date_naive().format("%Y-%m-%d").to_string())
                    } else {
                        Value::from(utc.timestamp())
                    }
                }
                SValue::RecordId(r) => Value::String(key_string(&r.key)),
                other => other.clone().into_json_value(),
            };
            fields.insert(k.clone(), value);
        }
        if let Some(k) = codec.key_field {
            fields.insert(k.to_owned(), Value::String(id.clone()));
        }
        if codec.derive_session_type && !fields.contains_key("session_type") {
            let t = if fields.get("agent_id").is_some_and(|v| !v.is_null()) {
                "agent"
            } else if fields.get("team_id").is_some_and(|v| !v.is_null()) {
                "team"
            } else if fields.get("workflow_id").is_some_and(|v| !v.is_null()) {
                "workflow"
            } else {
                "agent"
            };
            fields.insert("session_type".into(), Value::String(t.into()));
        }
        Some(Stored {
            id,
            fields,
            version: raw,
        })
    }

    /// The stored field and value an equality filter on agno field `field` compares.
    fn eq_term(&self, table: &str, field: &str, value: &Value) -> (String, SValue) {
        let codec = self.codec(table);
        if let Some((_, stored, target)) = codec.links.iter().find(|(a, _, _)| *a == field) {
            let v = match value {
                Value::String(s) => rid(self.link_table(*target), s),
                _ => SValue::Null,
            };
            return ((*stored).to_owned(), v);
        }
        (
            field.to_owned(),
            surrealdb::types::SurrealValue::into_value(value.clone()),
        )
    }
}

/// One write of a commit.
#[derive(Clone)]
pub struct Write {
    table: String,
    id: String,
    op: Op,
    pre: Pre,
}

#[derive(Clone)]
enum Op {
    Put(SValue),
    Delete,
    /// Only the precondition: the record is read and compared, not written.
    Check,
    /// Sets `touched_at` on a run-index counter record (creating it): a write that makes
    /// concurrent transactions touching or deleting the same record conflict. With a
    /// `run_index`, a seeded counter (one with `next`) is raised past it.
    Touch(Option<i64>),
    /// Deletes every record of the table whose field (the write's `id`) equals the value.
    DeleteWhere(SValue),
}

impl Write {
    fn new(table: &str, id: &str, op: Op, pre: Pre) -> Write {
        Write {
            table: table.to_owned(),
            id: id.to_owned(),
            op,
            pre,
        }
    }
}

/// `surrealdb::Error` as ours.
pub(crate) fn db_err(operation: &'static str, e: surrealdb::Error) -> Error {
    let kind = if e.is_connection() {
        ErrorKind::Unavailable
    } else if e.is_not_allowed() {
        ErrorKind::PermissionDenied
    } else if e.is_already_exists() {
        ErrorKind::AlreadyExists
    } else if e.is_validation() {
        ErrorKind::InvalidInput
    } else {
        ErrorKind::Unexpected
    };
    let temporary = e.is_connection();
    Error::new(kind, format!("SurrealDB: {}", e.message()))
        .with_backend(BACKEND)
        .with_operation(operation)
        .set_temporary(temporary)
        .with_source(e)
}

/// Whether a statement's error means "another writer won", by its kind: our precondition
/// `THROW`, a transaction conflict, or a unique index that already holds the value.
/// SurrealDB 3.3 reports the last as an `Internal` error without details (its index error
/// is flattened to text on the way out), so that one case is told by its message.
fn is_conflict(e: &surrealdb::Error) -> bool {
    e.is_thrown()
        || e.is_already_exists()
        || matches!(e.query_details(), Some(QueryError::TransactionConflict))
        || (e.is_internal() && e.message().contains("already contains"))
}

/// The errors of a query's failed statements, in statement order.
struct Failed(Vec<surrealdb::Error>);

impl Failed {
    fn is_conflict(&self) -> bool {
        self.0.iter().any(is_conflict)
    }

    /// As ours: every message, the statement that failed (not one skipped because of it) as
    /// the source.
    fn into_error(self, operation: &'static str) -> Error {
        let conflict = self.is_conflict();
        let text: Vec<&str> = self.0.iter().map(|e| e.message()).collect();
        let message = format!("SurrealDB: {}", text.join("; "));
        let cause = self
            .0
            .iter()
            .position(|e| !matches!(e.query_details(), Some(QueryError::NotExecuted)))
            .unwrap_or(0);
        let mut error = Error::new(
            if conflict {
                ErrorKind::Conflict
            } else {
                ErrorKind::Unexpected
            },
            message,
        )
        .with_backend(BACKEND)
        .with_operation(operation)
        .set_temporary(conflict);
        if let Some(first) = self.0.into_iter().nth(cause) {
            error = error.with_source(first);
        }
        error
    }
}

/// Checks a table name is a plain identifier (names go into SurrealQL text).
pub(crate) fn check_ident(name: &str) -> Result<()> {
    let ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_input(format!(
            "table name {name:?} is not a plain identifier (letters, digits and `_`)"
        )))
    }
}

impl SurrealDb {
    /// Runs `sql` with `vars`; every statement's result in order, or the first error.
    pub(crate) async fn run(
        &self,
        operation: &'static str,
        sql: &str,
        vars: Vec<(String, SValue)>,
    ) -> Result<Vec<SValue>> {
        self.run_raw(operation, sql, vars)
            .await?
            .map_err(|failed| failed.into_error(operation))
    }

    /// Runs `sql`; `Ok(Err(failed))` when a statement failed.
    async fn run_raw(
        &self,
        operation: &'static str,
        sql: &str,
        vars: Vec<(String, SValue)>,
    ) -> Result<std::result::Result<Vec<SValue>, Failed>> {
        let mut obj = Object::new();
        for (k, v) in vars {
            obj.insert(k, v);
        }
        let mut response = self
            .inner
            .client
            .query(sql.to_owned())
            .bind(SValue::Object(obj))
            .await
            .map_err(|e| db_err(operation, e))?;
        let errors = response.take_errors();
        if !errors.is_empty() {
            let mut list: Vec<(usize, surrealdb::Error)> = errors.into_iter().collect();
            list.sort_by_key(|(i, _)| *i);
            return Ok(Err(Failed(list.into_iter().map(|(_, e)| e).collect())));
        }
        let n = response.num_statements();
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let v: SValue = response.take(i).map_err(|e| db_err(operation, e))?;
            out.push(v);
        }
        Ok(Ok(out))
    }

    /// Writes nothing; fails the commit unless record `id` of `table` meets `pre`.
    pub(crate) fn check(&self, table: &str, id: &str, pre: Pre) -> Write {
        Write::new(table, id, Op::Check, pre)
    }

    /// Sets `touched_at` on run-index counter `id` of `table` (creating it), so that this
    /// commit and any other writing that record cannot both commit; a seeded counter is
    /// raised past `run_index`.
    pub(crate) fn touch(&self, table: &str, id: &str, run_index: Option<i64>) -> Write {
        Write::new(table, id, Op::Touch(run_index), Pre::Any)
    }

    /// Deletes every record of `table` whose plain field `field` equals `value`.
    pub(crate) fn delete_where(&self, table: &str, field: &'static str, value: &str) -> Write {
        let value = SValue::String(value.to_owned());
        Write::new(table, field, Op::DeleteWhere(value), Pre::Any)
    }

    async fn query_limit(
        &self,
        table: &str,
        eq: &[(&str, Value)],
        limit: Option<usize>,
    ) -> Result<Vec<Stored>> {
        let mut conds = Vec::new();
        let mut vars = Vec::new();
        for (i, (field, value)) in eq.iter().enumerate() {
            let (stored, v) = self.inner.names.eq_term(table, field, value);
            check_ident(&stored)?;
            if matches!(v, SValue::Null) {
                conds.push(format!("({stored} = NONE OR {stored} = NULL)"));
            } else {
                conds.push(format!("{stored} = $p{i}"));
                vars.push((format!("p{i}"), v));
            }
        }
        let mut clause = String::new();
        if !conds.is_empty() {
            clause = format!("WHERE {}", conds.join(" AND "));
        }
        if let Some(n) = limit {
            clause.push_str(&format!(" LIMIT {n}"));
        }
        self.select(table, &clause, vars).await
    }

    /// `SELECT * FROM table {clause}` (clause: `WHERE …`, `ORDER BY …`, `LIMIT …` over plain
    /// fields, values bound from `vars`), decoded.
    pub(crate) async fn select(
        &self,
        table: &str,
        clause: &str,
        vars: Vec<(String, SValue)>,
    ) -> Result<Vec<Stored>> {
        check_ident(table)?;
        let sql = format!("SELECT * FROM {table} {clause};");
        let out = self.run("query", &sql, vars).await?;
        Ok(rows(out)
            .into_iter()
            .filter_map(|raw| self.inner.names.decode(table, raw))
            .collect())
    }
}

#[async_trait]
impl DocBackend for SurrealDb {
    const BACKEND: &'static str = BACKEND;
    const MAX_ID_CHARS: Option<usize> = None;
    /// SurrealDB's engine recurses once per level of a value it stores (its own
    /// `MAX_COMPUTATION_DEPTH` is 120); measured on a 2 MiB runtime worker stack in a debug
    /// build, 64 levels of objects overflow it and 32 do not.
    const MAX_JSON_DEPTH: Option<usize> = Some(32);
    const ITEM: &'static str = "record";
    const SCHEDULE_NAME_GUARDS: bool = false;

    type Version = SValue;
    type Write = Write;

    fn collection(&self, which: Table) -> &str {
        self.inner.names.get(which)
    }

    /// Sets record `id` of `table` to `fields` (a full replace, in agno's encoding) under
    /// `pre`.
    fn put(&self, table: &str, id: &str, fields: &Fields, pre: Pre) -> Write {
        Write::new(
            table,
            id,
            Op::Put(self.inner.names.encode(table, fields)),
            pre,
        )
    }

    /// Deletes record `id` of `table` under `pre`.
    fn delete(&self, table: &str, id: &str, pre: Pre) -> Write {
        Write::new(table, id, Op::Delete, pre)
    }

    /// Commits `writes` in one transaction; [`Commit::Conflict`] when a precondition failed
    /// or a concurrent transaction won (nothing written then).
    async fn commit(&self, operation: &'static str, writes: Vec<Write>) -> Result<Commit> {
        if writes.is_empty() {
            return Ok(Commit::Done);
        }
        let mut sql = String::from("BEGIN TRANSACTION;\n");
        let mut vars = Vec::new();
        for (i, w) in writes.into_iter().enumerate() {
            if let Op::DeleteWhere(value) = w.op {
                check_ident(&w.table)?;
                check_ident(&w.id)?;
                vars.push((format!("v{i}"), value));
                sql.push_str(&format!(
                    "DELETE FROM {} WHERE {} = $v{i} RETURN NONE;\n",
                    w.table, w.id
                ));
                continue;
            }
            vars.push((format!("r{i}"), rid(&w.table, &w.id)));
            match w.pre {
                Pre::Any => {}
                Pre::Absent => sql.push_str(&format!(
                    "IF (SELECT * FROM $r{i})[0] != NONE {{ THROW \"{CAS_MARK}\" }};\n"
                )),
                Pre::At(raw) => {
                    vars.push((format!("e{i}"), raw));
                    sql.push_str(&format!(
                        "IF (SELECT * FROM $r{i})[0] != $e{i} {{ THROW \"{CAS_MARK}\" }};\n"
                    ));
                }
            }
            match w.op {
                Op::Put(v) => {
                    vars.push((format!("v{i}"), v));
                    sql.push_str(&format!("UPSERT $r{i} CONTENT $v{i} RETURN NONE;\n"));
                }
                Op::Delete => sql.push_str(&format!("DELETE $r{i} RETURN NONE;\n")),
                Op::Touch(None) => sql.push_str(&format!(
                    "UPSERT $r{i} SET touched_at = time::now() RETURN NONE;\n"
                )),
                Op::Touch(Some(index)) => {
                    vars.push((format!("v{i}"), SValue::Number(Number::Int(index + 1))));
                    sql.push_str(&format!(
                        "UPSERT $r{i} SET touched_at = time::now(), next = IF next = NONE {{ NONE }} \
                         ELSE {{ math::max([next, $v{i}]) }} RETURN NONE;\n"
                    ));
                }
                Op::Check | Op::DeleteWhere(_) => {}
            }
        }
        sql.push_str("COMMIT TRANSACTION;");
        match self.run_raw(operation, &sql, vars).await? {
            Ok(_) => Ok(Commit::Done),
            Err(failed) if failed.is_conflict() => Ok(Commit::Conflict),
            Err(failed) => Err(failed.into_error(operation)),
        }
    }

    /// Commits `writes` (retrying a transaction conflict); a failed precondition after every
    /// retry is a `Conflict` error.
    async fn commit_all(&self, operation: &'static str, writes: Vec<Write>) -> Result<()> {
        for chunk in writes.chunks(200) {
            let mut done = false;
            for attempt in 0..CAS_ATTEMPTS {
                match self.commit(operation, chunk.to_vec()).await? {
                    Commit::Done => {
                        done = true;
                        break;
                    }
                    Commit::Conflict => backoff(attempt).await,
                }
            }
            if !done {
                return Err(Error::new(
                    ErrorKind::Conflict,
                    format!("{operation}: a concurrent writer changed the records"),
                )
                .with_backend(BACKEND)
                .set_temporary(true));
            }
        }
        Ok(())
    }

    /// Record `id` of `table`, if it exists.
    async fn get(&self, table: &str, id: &str) -> Result<Option<Stored>> {
        let out = self
            .run(
                "get record",
                "SELECT * FROM $r;",
                vec![("r".into(), rid(table, id))],
            )
            .await?;
        Ok(rows(out)
            .into_iter()
            .next()
            .and_then(|raw| self.inner.names.decode(table, raw)))
    }

    /// Every record of `table` whose agno fields equal `eq` (a null matches a missing or
    /// null field; link fields compare as links).
    async fn query(&self, table: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored>> {
        self.query_limit(table, eq, None).await
    }

    /// Whether `table` holds any record; false for a table the database does not define
    /// (SurrealDB 3 refuses to select from one, and a database opened without creating
    /// anything may lack agno's tables).
    async fn any_doc(&self, table: &str) -> Result<bool> {
        let info = self.run("list tables", "INFO FOR DB", Vec::new()).await?;
        let defined = match info.first() {
            Some(SValue::Object(db)) => {
                matches!(db.get("tables"), Some(SValue::Object(tables)) if tables.get(table).is_some())
            }
            _ => false,
        };
        Ok(defined && !self.query_limit(table, &[], Some(1)).await?.is_empty())
    }

    /// agno's record id: `{date}|{user_id}`, `""` for the shared bucket
    /// (`db/surrealdb/metrics.py`).
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        Ok(format!("{}|{}", record.date, record.stored_user_id()))
    }

    async fn claim_next_job(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        self.claim_paged(worker_id, lock_grace_seconds, deployment_id)
            .await
    }

    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.write_run_checked(run).await
    }

    async fn copy_legacy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        self.copy_runs_checked(rows).await
    }

    /// Exactly the session's runs, in the transaction that deletes the session as read and
    /// its run counter (which every run write touches, so a concurrent append conflicts).
    fn delete_session_runs(&self, session_id: &str) -> Option<Write> {
        Some(self.delete_where(self.collection(Table::Runs), "session_id", session_id))
    }

    fn lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    fn lock_location(&self) -> String {
        format!("record {}:migration_lock", self.inner.names.meta)
    }
}

/// The rows of the last statement's result.
fn rows(out: Vec<SValue>) -> Vec<SValue> {
    match out.into_iter().last() {
        Some(SValue::Array(a)) => a.into_iter().collect(),
        Some(SValue::None) | Some(SValue::Null) | None => Vec::new(),
        Some(other) => vec![other],
    }
}
