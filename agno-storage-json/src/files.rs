//! Table files on an object store: whole-file reads, and read-modify-write cycles that never
//! lose a concurrent update.
//!
//! Every table is one JSON array in one object, as agno writes it. A write reads the object,
//! changes the rows in memory and puts the whole object back:
//!
//! - on stores with compare-and-swap (memory, GCS, S3) the put is conditional on the version
//!   that was read (`PutMode::Update` / `PutMode::Create`), and a lost race re-runs the cycle
//!   on fresh rows;
//! - on a local directory (object_store's `LocalFileSystem` has no `PutMode::Update`) the
//!   cycle holds an exclusive lock file next to the table, across processes, and publishes
//!   the new file by an atomic rename, so readers never see a half-written table.
//!
//! Inside one process a per-table mutex serializes the cycles first, so concurrent tasks do
//! not spend round trips losing races to each other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agno_storage_core::{Error, ErrorKind, Result};
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, PutMode, PutOptions, PutPayload, UpdateVersion,
};
use serde_json::Value;

use agno_storage_core::json::{list_to_python_json_with, to_python_json_with, PythonJson};

pub(crate) use agno_storage_core::Table;

/// Every table file: every table but our bookkeeping (`Table::Meta`), which JSON stores
/// do not keep.
pub(crate) fn table_files() -> impl Iterator<Item = Table> {
    Table::ALL.into_iter().filter(|t| *t != Table::Meta)
}

/// A table's file, named as agno 3.1.10 names it.
pub(crate) trait TableFile {
    /// The file name (`agno_sessions.json`).
    fn file_name(self) -> String;
}

impl TableFile for Table {
    fn file_name(self) -> String {
        format!("{}.json", self.default_name())
    }
}

/// What a read-modify-write closure decided.
pub(crate) enum Step<T> {
    /// The rows changed: write them back, then return the value.
    Write(T),
    /// Nothing changed: return the value without writing.
    Keep(T),
}

impl<T> Step<T> {
    /// `Write(value)` when the rows `changed`, else `Keep(value)`.
    pub(crate) fn when(changed: bool, value: T) -> Self {
        if changed {
            Step::Write(value)
        } else {
            Step::Keep(value)
        }
    }
}

/// How writers are kept from losing each other's updates.
pub(crate) enum Concurrency {
    /// Conditional puts on the version that was read (memory, GCS, S3).
    Conditional,
    /// An exclusive lock file per table in this local directory.
    #[cfg(feature = "fs")]
    LockFiles(std::path::PathBuf),
}

/// How long a conditional write keeps retrying lost races before giving up with `Conflict`.
const RETRY_BUDGET: Duration = Duration::from_secs(60);

/// The tables of one database: an object store, a prefix and the write discipline.
pub(crate) struct Files {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    concurrency: Concurrency,
    backend: &'static str,
    /// One mutex per table: serializes this process's read-modify-write cycles.
    local: std::sync::Mutex<HashMap<Table, Arc<tokio::sync::Mutex<()>>>>,
}

impl Files {
    pub(crate) fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        concurrency: Concurrency,
        backend: &'static str,
    ) -> Self {
        Files {
            store,
            prefix: Path::from(prefix.trim_matches('/')),
            concurrency,
            backend,
            local: std::sync::Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn backend(&self) -> &'static str {
        self.backend
    }

    fn path(&self, table: Table) -> Path {
        self.prefix.clone().join(table.file_name())
    }

    fn table_mutex(&self, table: Table) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.local.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(table).or_default().clone()
    }

    /// The file names (not paths) present directly under the prefix.
    pub(crate) async fn existing_files(&self) -> Result<Vec<String>> {
        let prefix = (!self.prefix.as_ref().is_empty()).then_some(&self.prefix);
        let listing = self
            .store
            .list_with_delimiter(prefix)
            .await
            .map_err(|e| self.error(e, "list"))?;
        Ok(listing
            .objects
            .into_iter()
            .filter_map(|o| o.location.filename().map(str::to_owned))
            .collect())
    }

    /// Every row of `table`; a missing file is an empty table.
    pub(crate) async fn load(&self, table: Table) -> Result<Vec<Value>> {
        Ok(self.load_versioned(table).await?.0)
    }

    async fn load_versioned(&self, table: Table) -> Result<(Vec<Value>, Option<UpdateVersion>)> {
        let path = self.path(table);
        let result = match self.store.get_opts(&path, GetOptions::default()).await {
            Ok(result) => result,
            Err(object_store::Error::NotFound { .. }) => return Ok((Vec::new(), None)),
            Err(e) => return Err(self.error(e, "read")),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let bytes = result.bytes().await.map_err(|e| self.error(e, "read"))?;
        Ok((parse_table(table, &bytes)?, Some(version)))
    }

    /// Runs `change` on the current rows of `table` and writes them back when it says so,
    /// without losing a concurrent writer's update: `change` may run again on fresh rows.
    pub(crate) async fn modify<T, F>(&self, table: Table, mut change: F) -> Result<T>
    where
        F: FnMut(&mut Vec<Value>) -> Result<Step<T>> + Send,
        T: Send,
    {
        let mutex = self.table_mutex(table);
        let _in_process = mutex.lock().await;
        match &self.concurrency {
            Concurrency::Conditional => self.modify_conditional(table, &mut change).await,
            #[cfg(feature = "fs")]
            Concurrency::LockFiles(dir) => {
                let lock_path = dir.join(format!(".{}.lock", table.file_name()));
                let _lock = crate::lockfile::LockFile::acquire(lock_path).await?;
                let (mut rows, _) = self.load_versioned(table).await?;
                match change(&mut rows)? {
                    Step::Keep(value) => Ok(value),
                    Step::Write(value) => {
                        let options = PutOptions::from(PutMode::Overwrite);
                        self.store
                            .put_opts(&self.path(table), payload(&rows), options)
                            .await
                            .map_err(|e| self.error(e, "write"))?;
                        Ok(value)
                    }
                }
            }
        }
    }

    async fn modify_conditional<T, F>(&self, table: Table, change: &mut F) -> Result<T>
    where
        F: FnMut(&mut Vec<Value>) -> Result<Step<T>> + Send,
        T: Send,
    {
        let started = Instant::now();
        let mut attempt = 0u32;
        loop {
            let (mut rows, version) = self.load_versioned(table).await?;
            let value = match change(&mut rows)? {
                Step::Keep(value) => return Ok(value),
                Step::Write(value) => value,
            };
            let mode = match version {
                Some(v) => PutMode::Update(v),
                None => PutMode::Create,
            };
            let mut attributes = Attributes::new();
            attributes.insert(Attribute::ContentType, "application/json".into());
            let options = PutOptions {
                mode,
                attributes,
                ..Default::default()
            };
            match self
                .store
                .put_opts(&self.path(table), payload(&rows), options)
                .await
            {
                Ok(_) => return Ok(value),
                Err(
                    e @ (object_store::Error::Precondition { .. }
                    | object_store::Error::AlreadyExists { .. }),
                ) => {
                    if started.elapsed() > RETRY_BUDGET {
                        return Err(Error::new(
                            ErrorKind::Conflict,
                            format!(
                                "{} kept changing under this write for {}s ({attempt} attempts); nothing was written. Retry later.",
                                table.file_name(),
                                RETRY_BUDGET.as_secs()
                            ),
                        )
                        .with_backend(self.backend)
                        .with_source(e));
                    }
                    attempt += 1;
                    tokio::time::sleep(backoff(attempt)).await;
                }
                Err(e) => return Err(self.error(e, "write")),
            }
        }
    }

    fn error(&self, e: object_store::Error, operation: &'static str) -> Error {
        let kind = match &e {
            object_store::Error::NotFound { .. } => ErrorKind::NotFound,
            object_store::Error::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            object_store::Error::Precondition { .. } => ErrorKind::Conflict,
            object_store::Error::NotSupported { .. }
            | object_store::Error::NotImplemented { .. } => ErrorKind::Unsupported,
            object_store::Error::InvalidPath { .. } => ErrorKind::InvalidInput,
            _ => ErrorKind::Unavailable,
        };
        let hint = match kind {
            ErrorKind::Unsupported => {
                " (the store needs conditional puts; open a local directory with JsonDb::open_local)"
            }
            _ => "",
        };
        Error::new(kind, format!("{e}{hint}"))
            .with_backend(self.backend)
            .with_operation(operation)
            .with_source(e)
    }
}

/// Whether local directories opened from now on sync their writes (see
/// [`crate::set_local_fsync`]).
#[cfg(feature = "fs")]
static LOCAL_FSYNC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

#[cfg(feature = "fs")]
pub(crate) fn set_local_fsync(enabled: bool) {
    LOCAL_FSYNC.store(enabled, std::sync::atomic::Ordering::Relaxed);
}

/// The object store of a local directory. With fsync on (the default), `LocalFileSystem`
/// writes each table to a staging file, `fsync`s it, renames it into place and `fsync`s the
/// directory before the put returns, so an acknowledged write survives a power cut as far as
/// the file system honours `fsync` (on Unix; Windows cannot sync a directory). The lock
/// files need no sync: they are empty and only their `flock` matters, which a crash releases.
#[cfg(feature = "fs")]
pub(crate) fn local_store(
    dir: &std::path::Path,
) -> object_store::Result<object_store::local::LocalFileSystem> {
    let fsync = LOCAL_FSYNC.load(std::sync::atomic::Ordering::Relaxed);
    if fsync {
        // The directory may have just been created: make its entry in the parent durable
        // too (the puts sync the directory itself). Best effort: a parent that cannot be
        // opened (no read permission) only loses this for a directory made moments ago.
        #[cfg(unix)]
        {
            let parent = dir
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."));
            if let Ok(parent) = std::fs::File::open(parent) {
                let _ = parent.sync_all();
            }
        }
    }
    Ok(object_store::local::LocalFileSystem::new_with_prefix(dir)?.with_fsync(fsync))
}

/// The one key of a row kept as the text it was stored as, because this crate cannot
/// decode it (agno writes lone surrogates, e.g. file names decoded with `surrogateescape`,
/// which no Rust string holds). It starts with NUL, which no key this crate writes holds.
const UNDECODABLE: &str = "\u{0}agno-storage: undecodable row";

/// The stored text of a row this crate could not decode, kept verbatim: reads name it,
/// and rewriting the table writes it back byte for byte.
pub(crate) fn undecodable(row: &Value) -> Option<&str> {
    match row {
        Value::Object(map) if map.len() == 1 => map.get(UNDECODABLE)?.as_str(),
        _ => None,
    }
}

/// The raw JSON text of field `key` of an undecodable row, when it has one.
pub(crate) fn undecodable_raw_field(row: &Value, key: &str) -> Option<String> {
    let fields: HashMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_str(undecodable(row)?).ok()?;
    Some(fields.get(key)?.get().to_owned())
}

/// Every top-level field of an undecodable row whose value this crate can decode.
pub(crate) fn undecodable_fields(row: &Value) -> serde_json::Map<String, Value> {
    let raw: HashMap<String, Box<serde_json::value::RawValue>> = undecodable(row)
        .and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_default();
    raw.into_iter()
        .filter_map(|(key, value)| Some((key, serde_json::from_str(value.get()).ok()?)))
        .collect()
}

/// The string field `key` of an undecodable row, when it is a string this crate can read.
pub(crate) fn undecodable_field(row: &Value, key: &str) -> Option<String> {
    serde_json::from_str(&undecodable_raw_field(row, key)?).ok()
}

/// Why an undecodable row's text cannot be decoded.
pub(crate) fn undecodable_error(text: &str) -> String {
    match agno_storage_core::json::from_str::<Value>(text) {
        Err(e) => e.to_string(),
        Ok(_) => "no error".to_owned(),
    }
}

/// Rows as agno writes a table: `json.dump(rows, indent=2)` with ASCII escapes; a row kept
/// undecoded is written back as the text it was read as, at the same place.
fn payload(rows: &[Value]) -> PutPayload {
    let options = PythonJson {
        ensure_ascii: true,
        indent: Some(2),
    };
    if !rows.iter().any(|row| undecodable(row).is_some()) {
        return PutPayload::from(list_to_python_json_with(rows, options).into_bytes());
    }
    let mut out = String::from("[");
    for (i, row) in rows.iter().enumerate() {
        out.push_str(if i == 0 { "\n  " } else { ",\n  " });
        match undecodable(row) {
            Some(text) => out.push_str(text),
            // JSON text holds no raw newline but those of the layout: indent each line.
            None => out.push_str(&to_python_json_with(row, options).replace('\n', "\n  ")),
        }
    }
    out.push_str("\n]");
    PutPayload::from(out.into_bytes())
}

fn parse_table(table: Table, bytes: &[u8]) -> Result<Vec<Value>> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Vec::new());
    }
    if let Ok(Value::Array(rows)) = agno_storage_core::json::from_slice::<Value>(bytes) {
        return Ok(rows);
    }
    // Then each row separately, so one this crate cannot decode is kept as its text (see
    // [`undecodable`]) instead of failing the table. Splitting the array recurses into
    // nothing (serde_json skips raw values iteratively).
    let is_array = bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[');
    let mut de = serde_json::Deserializer::from_slice(bytes);
    de.disable_recursion_limit();
    let raw = <Vec<Box<serde_json::value::RawValue>> as serde::Deserialize>::deserialize(&mut de)
        .and_then(|rows| de.end().map(|()| rows));
    match raw {
        Ok(rows) => Ok(rows
            .into_iter()
            .map(|row| {
                agno_storage_core::json::from_str::<Value>(row.get()).unwrap_or_else(|_| {
                    let text = Value::String(row.get().to_owned());
                    Value::Object(serde_json::Map::from_iter([(UNDECODABLE.to_owned(), text)]))
                })
            })
            .collect()),
        Err(_) if !is_array => Err(Error::new(
            ErrorKind::Serialization,
            format!(
                "{} is not a JSON array of records; repair or move the file",
                table.file_name()
            ),
        )),
        Err(e) => Err(Error::serialization(table.file_name(), e)),
    }
}

/// A random delay that grows with the attempt, up to ~50 ms.
fn backoff(attempt: u32) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let ceiling = 1u64 << attempt.min(5);
    let noise = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    Duration::from_micros(500 + noise % (ceiling * 1500))
}
