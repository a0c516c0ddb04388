//! [`DocBackend`] for [`DynamoDb`]: the document engine's stores over agno's tables.
//!
//! A document is an item of the table's key attribute (`run_id`, `memory_id`, … `pk` in the
//! meta table); its fields are the item decoded with agno's encoding ([`crate::codec`]),
//! and its version is the item as read, so a compare-and-set is a conditional write on the
//! whole item ([`Cond::unchanged`]). A commit of one write is a conditional `PutItem` or
//! `DeleteItem`; of more, one `TransactWriteItems`.

use std::time::Duration;

use agno_storage_core::legacy::{InsertedRuns, LegacySessionRuns};
use agno_storage_core::{
    async_trait, Error, ErrorKind, MetricsRecord, Result, RunRecord, Table, UserMemory,
};
use agno_storage_doc::{Commit, DocBackend, Fields, Guard, Pre, Stored};
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::DateTime;
use serde_json::Value;

use crate::codec::{attr, err, from_item, s, sv, to_item, Item, BACKEND};
use crate::db::{Cond, KeySchema, TxOutcome};
use crate::DynamoDb;

/// DynamoDB's limit on the writes of one `TransactWriteItems`.
const MAX_TRANSACTION_WRITES: usize = 100;

/// One write of a commit ([`DocBackend::Write`]).
#[derive(Debug)]
pub struct DynamoWrite {
    table: Table,
    op: WriteOp,
}

#[derive(Debug)]
enum WriteOp {
    Put(Item, Option<Cond>),
    Delete(String, Option<Cond>),
    /// A write to a collection this database does not have: the commit fails with it.
    Invalid(Error),
}

impl DynamoWrite {
    fn invalid(e: Error) -> Self {
        DynamoWrite {
            table: Table::Meta,
            op: WriteOp::Invalid(e),
        }
    }
}

/// The attributes of `table` agno stores as `S` JSON text (objects and arrays), decoded back
/// on read; any other `S` stays a string even when it looks like JSON.
pub(crate) fn json_attributes(table: Table) -> &'static [&'static str] {
    match table {
        Table::Sessions => crate::runs::SESSION_JSON,
        Table::Runs => &["run_data"],
        Table::Memories => &["topics"],
        Table::Metrics => &["token_metrics", "model_metrics"],
        Table::Evals => &["eval_data", "eval_input"],
        Table::Knowledge => &["metadata"],
        Table::Schedules | Table::Jobs => &["payload"],
        Table::ScheduleRuns => &["input", "output", "requirements"],
        Table::Learnings => &["content", "metadata"],
        Table::Versions | Table::Meta => &[],
    }
}

impl DynamoDb {
    /// The table named `collection`.
    fn table_named(&self, collection: &str) -> Result<Table> {
        Table::ALL
            .into_iter()
            .find(|t| self.inner.names.get(*t) == collection)
            .ok_or_else(|| {
                err(
                    ErrorKind::Unexpected,
                    format!("{collection} is none of this database's tables"),
                )
            })
    }

    /// An item as a stored document.
    fn stored(table: Table, item: Item) -> Option<Stored<Self>> {
        let id = match item.get(table.key()) {
            Some(AttributeValue::S(id)) => id.clone(),
            _ => return None,
        };
        Some(Stored {
            id,
            fields: from_item(&item, json_attributes(table)),
            version: item,
        })
    }

    /// The condition of a write of `new` (`None`: a delete) under `pre`.
    fn condition(table: Table, pre: Pre<Self>, new: Option<&Item>) -> Option<Cond> {
        match pre {
            Pre::Any => None,
            Pre::Absent => Some(Cond::absent(table.key())),
            Pre::At(old) => Some(Cond::unchanged(
                table,
                Some(&old),
                new.unwrap_or(&Item::new()),
            )),
        }
    }

    /// Applies one write; `false` when its condition failed.
    async fn apply(&self, write: DynamoWrite) -> Result<bool> {
        match write.op {
            WriteOp::Put(item, cond) => self.put(write.table, item, cond).await,
            WriteOp::Delete(key, cond) => self.delete_if(write.table, &key, cond).await,
            WriteOp::Invalid(e) => Err(e),
        }
    }

    /// Applies `writes` (at most [`MAX_TRANSACTION_WRITES`]) as one transaction.
    async fn apply_all(&self, writes: Vec<DynamoWrite>) -> Result<Commit> {
        let mut items = Vec::with_capacity(writes.len());
        for write in writes {
            items.push(match write.op {
                WriteOp::Put(item, cond) => self.tx_put(write.table, item, cond).await?,
                WriteOp::Delete(key, cond) => self.tx_delete(write.table, &key, cond).await?,
                WriteOp::Invalid(e) => return Err(e),
            });
        }
        match self.transact(items).await {
            Ok(TxOutcome::Applied) => Ok(Commit::Done),
            Ok(TxOutcome::Cancelled) => Ok(Commit::Conflict),
            // A concurrent transaction on the same items: re-read and retry.
            Err(e) if e.kind() == ErrorKind::Conflict => Ok(Commit::Conflict),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl DocBackend for DynamoDb {
    const BACKEND: &'static str = BACKEND;
    const ITEM: &'static str = "item";
    const SCHEDULE_NAME_GUARDS: bool = true;
    const MAX_ID_CHARS: Option<usize> = Some(crate::db::MAX_ID_CHARS);
    const MAX_JSON_DEPTH: Option<usize> = None;
    /// Versions without heartbeats broke a lock once its `locked_at` was 10 minutes old.
    const LEGACY_LOCK_STALE_SECONDS: i64 = 600;
    const MAX_COMMIT_WRITES: usize = MAX_TRANSACTION_WRITES;

    type Version = Item;
    type Write = DynamoWrite;

    fn collection(&self, which: Table) -> &str {
        self.inner.names.get(which)
    }

    /// The item is `fields` with agno's encoding and its key attribute set to `id`.
    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> DynamoWrite {
        let table = match self.table_named(collection) {
            Ok(table) => table,
            Err(e) => return DynamoWrite::invalid(e),
        };
        let mut item = to_item(&Value::Object(fields.clone()));
        item.insert(table.key().to_owned(), AttributeValue::S(id.to_owned()));
        let cond = Self::condition(table, pre, Some(&item));
        DynamoWrite {
            table,
            op: WriteOp::Put(item, cond),
        }
    }

    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> DynamoWrite {
        let table = match self.table_named(collection) {
            Ok(table) => table,
            Err(e) => return DynamoWrite::invalid(e),
        };
        DynamoWrite {
            table,
            op: WriteOp::Delete(id.to_owned(), Self::condition(table, pre, None)),
        }
    }

    async fn commit(
        &self,
        operation: &'static str,
        mut writes: Vec<DynamoWrite>,
    ) -> Result<Commit> {
        if writes.len() > MAX_TRANSACTION_WRITES {
            return Err(err(
                ErrorKind::Unexpected,
                format!(
                    "{operation}: {} writes exceed DynamoDB's {MAX_TRANSACTION_WRITES} per transaction",
                    writes.len()
                ),
            ));
        }
        match writes.len() {
            0 => Ok(Commit::Done),
            1 => {
                let Some(write) = writes.pop() else {
                    return Ok(Commit::Done);
                };
                Ok(if self.apply(write).await? {
                    Commit::Done
                } else {
                    Commit::Conflict
                })
            }
            _ => self.apply_all(writes).await,
        }
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        let table = self.table_named(collection)?;
        Ok(DynamoDb::get(self, table, id)
            .await?
            .and_then(|item| Self::stored(table, item)))
    }

    /// A Query of agno's `session_id-created_at-index` for a session's runs (as agno reads
    /// them), otherwise a consistent Scan filtered by `eq`.
    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        let table = self.table_named(collection)?;
        let session = eq.iter().find_map(|(k, v)| match (*k, v) {
            ("session_id", Value::String(s)) if table == Table::Runs => Some(s.as_str()),
            _ => None,
        });
        let items = match session {
            Some(session_id) => self.query_index(table, "session_id", session_id).await?,
            None => self.scan_where(table, eq).await?,
        };
        Ok(items
            .into_iter()
            .filter_map(|item| Self::stored(table, item))
            .filter(|d| agno_storage_doc::matches_eq(&d.fields, eq))
            .collect())
    }

    async fn any_doc(&self, collection: &str) -> Result<bool> {
        let table = self.table_named(collection)?;
        let mut start = None;
        loop {
            let (items, next) = self.scan_page(table, &[], start).await?;
            if !items.is_empty() {
                return Ok(true);
            }
            match next {
                Some(key) => start = Some(key),
                None => return Ok(false),
            }
        }
    }

    /// `schedule_name#{schedules table}#{owner}#{name}`, the owner length-prefixed (`n`
    /// for none), holder `id`.
    fn schedule_name_guard(&self, user_id: Option<&str>, name: &str) -> Guard {
        let owner = user_id.map_or_else(|| "n".to_owned(), |u| format!("u{}:{u}", u.len()));
        Guard {
            id: format!(
                "schedule_name#{}#{owner}#{name}",
                self.inner.names.schedules
            ),
            holder: "id",
        }
    }

    /// `job_idem#{jobs table}#u{len}:{owner}:{key}`, as agno's Redis queue keys it, holder
    /// `id`.
    fn job_key_guard(&self, user_id: Option<&str>, key: &str) -> Guard {
        let user = user_id.unwrap_or("");
        Guard {
            id: format!(
                "job_idem#{}#u{}:{user}:{key}",
                self.inner.names.jobs,
                user.len()
            ),
            holder: "id",
        }
    }

    /// An existing row's id, or the one claimed now through a uniqueness item in the meta
    /// table, so concurrent writers of one day never create two rows.
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        self.claim_metrics_id(record).await
    }

    /// `UserMemory.to_dict()`, as agno writes it: `created_at` as a naive ISO string and
    /// `updated_at` as a UTC ISO string (both are range keys of agno's `S`-typed GSIs).
    fn encode_memory(&self, memory: &UserMemory) -> Result<Fields> {
        let mut fields = self.to_fields(memory, "a memory")?;
        let at = |ts: i64| DateTime::from_timestamp(ts, 0);
        fields.insert(
            "created_at".into(),
            at(memory.created_at).map_or(Value::Null, |d| {
                Value::String(d.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string())
            }),
        );
        fields.insert(
            "updated_at".into(),
            memory.updated_at.and_then(at).map_or(Value::Null, |d| {
                Value::String(d.format("%Y-%m-%dT%H:%M:%S%.f+00:00").to_string())
            }),
        );
        Ok(fields)
    }

    /// The atomic counter item (see `DynamoDb::write_run`).
    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        DynamoDb::write_run(self, run).await
    }

    async fn copy_legacy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        self.copy_runs(rows).await
    }

    async fn delete_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.delete_session_and_runs(session_id, user_id).await
    }

    /// Scan pages from `after` (see `DynamoDb::legacy_page`).
    async fn legacy_page(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<LegacySessionRuns>> {
        DynamoDb::legacy_page(self, after, limit).await
    }

    /// `migration_lock#<versions table>` in the meta table: a lease (`holder`, `locked_at`,
    /// `lease_until`) renewed by a heartbeat; see the engine's `take_lock`.
    fn lock_id(&self) -> String {
        format!("migration_lock#{}", self.inner.names.versions)
    }

    fn lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    fn lock_location(&self) -> String {
        format!("item pk {:?} in {}", self.lock_id(), self.inner.names.meta)
    }
}

/// The condition attribute values of `eq` as a filter: a null matches a missing attribute
/// (agno omits `None`).
pub(crate) fn filter_of(eq: &[(&str, Value)]) -> Cond {
    eq.iter().fold(Cond::default(), |c, (k, v)| match attr(v) {
        Some(value) => c.eq(k, value),
        None => c.missing(k),
    })
}

impl DynamoDb {
    /// The id of the metrics row of `record`'s `(user_id, date, aggregation_period)`: the
    /// claimed one, an existing row's, or the record's own, claimed now.
    pub(crate) async fn claim_metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        let pk = format!(
            "metrics#{}#{}#{}#{}",
            self.inner.names.metrics,
            record.stored_user_id(),
            record.date,
            record.aggregation_period
        );
        if let Some(claim) = self.get(Table::Meta, &pk).await? {
            if let Some(id) = s(&claim, "id") {
                return Ok(id.to_owned());
            }
        }
        // A row written before claims existed (pre-v3 rows, without `user_id`, never match).
        let key = [
            ("user_id", Value::from(record.stored_user_id())),
            ("date", Value::from(record.date.to_string())),
            (
                "aggregation_period",
                Value::from(record.aggregation_period.as_str()),
            ),
        ];
        let existing = self
            .scan_where(Table::Metrics, &key)
            .await?
            .iter()
            .find_map(|item| s(item, "id").map(str::to_owned))
            .unwrap_or_else(|| record.id.clone());
        let mut claim = Item::new();
        claim.insert("pk".into(), sv(&pk));
        claim.insert("id".into(), sv(&existing));
        if self
            .put(Table::Meta, claim, Some(Cond::absent("pk")))
            .await?
        {
            return Ok(existing);
        }
        match self.get(Table::Meta, &pk).await? {
            Some(c) => Ok(s(&c, "id").unwrap_or(&existing).to_owned()),
            None => Ok(existing),
        }
    }
}
