//! [`JsonFiles`]: agno's table files as the document engine's backend. A document is one
//! row of one table file, its id the table's key field, its version a digest of the row as
//! read ([`fingerprint`]).
//!
//! A commit's writes to one file are one read-modify-write of that file (see
//! [`Files::modify`]): every precondition is checked on the rows just read and every write
//! applied, or nothing is written. Writes to several files are committed file by file, in
//! table order. The engine's commits that span tables are overridden here (a run's write,
//! a session's delete, a legacy-run copy: see `runs.rs`) or carry no precondition (a
//! schedule deleted with its runs), and this backend keeps no guard documents: the
//! uniqueness of a schedule's `(user_id, name)`, a job's `(user_id, idempotency_key)` and
//! a metrics row's `(user_id, date, aggregation_period)` is checked on the whole file in
//! the commit, as a unique index would be. So no file but agno's own is written.

use std::sync::Arc;

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::migration::{MigrationLock, ReleasedOnDrop};
use agno_storage_core::{async_trait, Error, ErrorKind, MetricsRecord, Result, RunRecord, Table};
use agno_storage_doc::{matches_eq, Commit, DocBackend, Fields, Pre, Stored};
use serde_json::Value;

use crate::files::{Files, Step};
use crate::rows::{fingerprint, layout, row_id, text, view};

/// The table files of one database, shared by its clones.
#[derive(Clone)]
pub(crate) struct JsonFiles(pub(crate) Arc<Inner>);

pub(crate) struct Inner {
    pub(crate) files: Files,
    /// Serializes migrations in this process.
    pub(crate) migration_lock: Arc<tokio::sync::Mutex<()>>,
    /// The local directory, whose lock file serializes migrations across processes.
    #[cfg(feature = "fs")]
    pub(crate) dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for JsonFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonFiles")
            .field("backend", &self.0.files.backend())
            .finish_non_exhaustive()
    }
}

impl std::ops::Deref for JsonFiles {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.0
    }
}

/// One write of a commit: a row put (laid out over the row it replaces) or deleted.
pub(crate) struct RowWrite {
    /// The table, or the collection name that names none.
    table: std::result::Result<Table, String>,
    id: String,
    fields: Option<Fields>,
    pre: Pre<JsonFiles>,
}

/// The table whose file is `collection`.
fn table_of(collection: &str) -> Option<Table> {
    Table::ALL
        .into_iter()
        .find(|t| t.default_name() == collection)
}

fn unknown_collection(collection: &str) -> Error {
    Error::new(
        ErrorKind::InvalidInput,
        format!("no agno table file is named {collection:?}"),
    )
    .with_backend(JsonFiles::BACKEND)
}

/// The index of the row of `table` with document id `id`.
fn position(table: Table, rows: &[Value], id: &str) -> Option<usize> {
    rows.iter()
        .position(|r| row_id(table, r).as_deref() == Some(id))
}

/// Whether `write`'s precondition holds on `rows`.
fn holds(table: Table, rows: &[Value], write: &RowWrite) -> bool {
    let current = position(table, rows, &write.id).map(|i| &rows[i]);
    match &write.pre {
        Pre::Any => true,
        Pre::Absent => current.is_none(),
        Pre::At(version) => current.map(fingerprint) == Some(*version),
    }
}

/// Applies a write to row `id`: a put replaces the row in place (a schema stamp is moved to
/// the end, as agno's `upsert_schema_version` filters and appends) or appends it.
fn apply(table: Table, rows: &mut Vec<Value>, id: &str, fields: Option<Fields>) {
    let at = position(table, rows, id);
    match (fields, at) {
        (Some(fields), Some(i)) if table != Table::Versions => {
            rows[i] = layout(table, fields, Some(&rows[i]));
        }
        (Some(fields), at) => {
            let existing = at.map(|i| rows.remove(i));
            rows.push(layout(table, fields, existing.as_ref()));
        }
        (None, Some(i)) => {
            rows.remove(i);
        }
        (None, None) => {}
    }
}

/// The fields whose values no two rows of `table` share, as a unique index would keep
/// them: a schedule's `(user_id, name)`, a job's `(user_id, idempotency_key)` (rows without
/// a key apart), a metrics row's `(user_id, date, aggregation_period)`.
fn unique_key(table: Table) -> &'static [&'static str] {
    match table {
        Table::Schedules => &["user_id", "name"],
        Table::Jobs => &["user_id", "idempotency_key"],
        Table::Metrics => &["user_id", "date", "aggregation_period"],
        _ => &[],
    }
}

/// Whether two rows of `rows` share `table`'s unique key.
fn duplicates_unique_key(table: Table, rows: &[Value]) -> bool {
    let fields = unique_key(table);
    if fields.is_empty() {
        return false;
    }
    let mut seen = std::collections::HashSet::new();
    rows.iter()
        .filter_map(|r| {
            let key: Vec<&Value> = fields
                .iter()
                .map(|f| r.get(*f).unwrap_or(&Value::Null))
                .collect();
            let last = key.last()?;
            (!last.is_null() && last.as_str() != Some(""))
                .then(|| Value::from(key.into_iter().cloned().collect::<Vec<_>>()).to_string())
        })
        .any(|key| !seen.insert(key))
}

/// Whether two live serialized tickets of one session share a `session_seq` (JSON files
/// keep no session guard: this check, run inside the file's compare-and-set, makes two
/// enqueues that read one view of a session conflict, and the loser sequences again).
fn duplicates_session_place(table: Table, rows: &[Value]) -> bool {
    if table != Table::Jobs {
        return false;
    }
    let mut seen = std::collections::HashSet::new();
    rows.iter()
        .filter(|r| {
            r["payload"]["serialize_session"] == Value::Bool(true)
                && matches!(r["status"].as_str(), Some("queued" | "running" | "paused"))
        })
        .map(|r| {
            (
                r["session_id"].to_string(),
                r["payload"]["session_seq"].as_i64().unwrap_or(0),
            )
        })
        .any(|place| !seen.insert(place))
}

impl JsonFiles {
    /// Commits the writes of one file: `Conflict` when a precondition fails or the commit
    /// would break a unique key or give two live tickets of a session one place.
    async fn commit_file(&self, table: Table, writes: Vec<RowWrite>) -> Result<Commit> {
        self.files
            .modify(table, |rows| {
                if !writes.iter().all(|w| holds(table, rows, w)) {
                    return Ok(Step::Keep(Commit::Conflict));
                }
                let unique_before = !duplicates_unique_key(table, rows);
                let places_before = !duplicates_session_place(table, rows);
                for w in &writes {
                    apply(table, rows, &w.id, w.fields.clone());
                }
                // The rows are this attempt's copy: kept, they are not written.
                if (unique_before && duplicates_unique_key(table, rows))
                    || (places_before && duplicates_session_place(table, rows))
                {
                    return Ok(Step::Keep(Commit::Conflict));
                }
                Ok(Step::Write(Commit::Done))
            })
            .await
    }

    /// The rows of `collection` as stored documents matching `eq`.
    async fn rows(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        let table = table_of(collection).ok_or_else(|| unknown_collection(collection))?;
        let mut out = Vec::new();
        for row in self.files.load(table).await? {
            let Some(id) = row_id(table, &row) else {
                continue;
            };
            let matched = match crate::files::undecodable(&row) {
                None => matches_eq(row.as_object().unwrap_or(&Fields::new()), eq),
                Some(_) => matches_eq(&crate::files::undecodable_fields(&row), eq),
            };
            if matched {
                out.push(Stored {
                    id,
                    version: fingerprint(&row),
                    fields: view(table, row)?,
                });
            }
        }
        Ok(out)
    }
}

#[async_trait]
impl DocBackend for JsonFiles {
    const BACKEND: &'static str = "json";
    const ITEM: &'static str = "row";
    const SCHEDULE_NAME_GUARDS: bool = false;
    const JOB_KEY_GUARDS: bool = false;
    /// Jobs are one file under one compare-and-set: a commit that would give two live
    /// tickets of a session one `session_seq` is a conflict instead.
    const JOB_SESSION_GUARDS: bool = false;
    const MAX_ID_CHARS: Option<usize> = None;
    const MAX_JSON_DEPTH: Option<usize> = None;

    type Version = u64;
    type Write = RowWrite;

    fn collection(&self, which: Table) -> &str {
        which.default_name()
    }

    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> RowWrite {
        RowWrite {
            table: table_of(collection).ok_or_else(|| collection.to_owned()),
            id: id.to_owned(),
            fields: Some(fields.clone()),
            pre,
        }
    }

    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> RowWrite {
        RowWrite {
            table: table_of(collection).ok_or_else(|| collection.to_owned()),
            id: id.to_owned(),
            fields: None,
            pre,
        }
    }

    async fn commit(&self, _operation: &'static str, writes: Vec<RowWrite>) -> Result<Commit> {
        let mut by_table: Vec<(Table, Vec<RowWrite>)> = Vec::new();
        for w in writes {
            let table = w.table.clone().map_err(|c| unknown_collection(&c))?;
            match by_table.iter_mut().find(|(t, _)| *t == table) {
                Some((_, batch)) => batch.push(w),
                None => by_table.push((table, vec![w])),
            }
        }
        by_table.sort_by_key(|(t, _)| Table::ALL.iter().position(|a| a == t));
        for (table, batch) in by_table {
            if self.commit_file(table, batch).await? == Commit::Conflict {
                return Ok(Commit::Conflict);
            }
        }
        Ok(Commit::Done)
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        let table = table_of(collection).ok_or_else(|| unknown_collection(collection))?;
        let key = table.key_field();
        Ok(self
            .rows(collection, &[(key, Value::String(id.to_owned()))])
            .await?
            .into_iter()
            .next())
    }

    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        self.rows(collection, eq).await
    }

    async fn any_doc(&self, collection: &str) -> Result<bool> {
        let table = table_of(collection).ok_or_else(|| unknown_collection(collection))?;
        Ok(!self.files.load(table).await?.is_empty())
    }

    /// The `id` of the stored row of the record's `(date, owner, period)`, else the
    /// record's own.
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        let date = record.date.to_string();
        let rows = self.files.load(Table::Metrics).await?;
        Ok(rows
            .iter()
            .find(|r| {
                text(r, "user_id") == Some(record.stored_user_id())
                    && text(r, "date") == Some(date.as_str())
                    && text(r, "aggregation_period") == Some(record.aggregation_period.as_str())
            })
            .and_then(|r| text(r, "id"))
            .map_or_else(|| record.id.clone(), str::to_owned))
    }

    fn is_legacy_metric(&self, fields: &Fields) -> bool {
        agno_storage_core::metrics::is_legacy_metric_json(fields)
    }

    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        crate::runs::write_run(self, run).await
    }

    async fn copy_legacy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        crate::runs::copy_runs(self, rows).await
    }

    async fn delete_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        crate::runs::delete_session(self, session_id, user_id).await
    }

    /// In-process, a mutex; on a local directory also the lock file `.agno_migrations.lock`
    /// (across processes). On object stores concurrent migrations are safe without one:
    /// the copy never overwrites a stored run and every write is a compare-and-swap.
    async fn migration_lock(&self) -> Result<MigrationLock> {
        let guard = self.migration_lock.clone().lock_owned().await;
        #[cfg(feature = "fs")]
        if let Some(dir) = &self.dir {
            let file =
                crate::lockfile::LockFile::acquire(dir.join(".agno_migrations.lock")).await?;
            return Ok(Box::new(ReleasedOnDrop((guard, file))));
        }
        Ok(Box::new(ReleasedOnDrop(guard)))
    }

    fn lock_location(&self) -> String {
        #[cfg(feature = "fs")]
        if let Some(dir) = &self.dir {
            return format!(
                "the lock file {}",
                dir.join(".agno_migrations.lock").display()
            );
        }
        format!("this process ({})", self.files.backend())
    }
}
