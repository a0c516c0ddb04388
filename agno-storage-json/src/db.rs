//! [`JsonDb`]: opening a set of table files on a local directory, in memory, on GCS or S3.

use std::sync::Arc;

use agno_storage_core::session::Session;
use agno_storage_core::{AgnoDb, OpenMode, Result};
use object_store::ObjectStore;
use serde_json::Value;

use agno_storage_doc::Docs;

use crate::backend::{Inner, JsonFiles};
use crate::files::{table_files, Concurrency, Files, TableFile};

/// One set of agno JSON tables: a directory, or a prefix in an object store.
#[derive(Clone)]
pub struct JsonDb {
    files: JsonFiles,
    backend: &'static str,
    durable: bool,
}

impl std::fmt::Debug for JsonDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonDb")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

impl JsonDb {
    /// Opens (creating) the directory `dir` as agno's `JsonDb(db_path=dir)` uses it.
    ///
    /// Tables with no file yet are stamped `3.0.0`; existing unstamped files are pre-v3
    /// tables for the migration manager. Writers hold `.<table>.json.lock` lock files in
    /// the directory, so several processes can share it without losing updates.
    #[cfg(feature = "fs")]
    pub async fn open_local(dir: impl AsRef<std::path::Path>) -> Result<Self> {
        Self::open_local_with_mode(dir, OpenMode::CreateMissing).await
    }

    /// [`JsonDb::open_local`] in `mode`. With [`OpenMode::Existing`] nothing is created: no
    /// directory, no stamp, no file; a missing directory (or a file in its place), or one
    /// holding none of agno's table files, is `NotFound`.
    #[cfg(feature = "fs")]
    pub async fn open_local_with_mode(
        dir: impl AsRef<std::path::Path>,
        mode: OpenMode,
    ) -> Result<Self> {
        use agno_storage_core::{Error, ErrorKind};
        let dir = dir.as_ref().to_path_buf();
        if mode.creates() {
            std::fs::create_dir_all(&dir).map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot create the directory {}: {e}", dir.display()),
                )
                .with_source(e)
            })?;
        } else {
            match std::fs::metadata(&dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(OpenMode::no_database(
                        dir.display(),
                        "it is a file, not a directory",
                    )
                    .with_backend("json"))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    return Err(OpenMode::no_database(
                        dir.display(),
                        "the directory does not exist",
                    )
                    .with_backend("json"))
                }
                Err(e) => {
                    return Err(Error::new(
                        ErrorKind::Unavailable,
                        format!("cannot read the directory {}: {e}", dir.display()),
                    )
                    .with_backend("json")
                    .with_source(e))
                }
            }
        }
        let fs = crate::files::local_store(&dir).map_err(|e| {
            Error::new(
                ErrorKind::InvalidInput,
                format!("cannot open the directory {}: {e}", dir.display()),
            )
            .with_source(e)
        })?;
        let files = Files::new(
            Arc::new(fs),
            "",
            Concurrency::LockFiles(dir.clone()),
            "json",
        );
        let shown = dir.display().to_string();
        Self::init(files, Some(dir), true, mode, &shown).await
    }

    /// A private database held in memory (`object_store`'s `InMemory`); nothing survives
    /// the process.
    #[cfg(feature = "memory")]
    pub async fn in_memory() -> Result<Self> {
        let store = Arc::new(object_store::memory::InMemory::new());
        Self::open_store(store, "", "json-memory", false).await
    }

    /// Opens `prefix` in the GCS bucket `bucket`, as agno's `GcsJsonDb(bucket_name, prefix)`
    /// uses it (an empty prefix is agno's default, `agno/`), with credentials from the
    /// environment (`GOOGLE_SERVICE_ACCOUNT`, …; see `object_store`'s
    /// `GoogleCloudStorageBuilder`). Writes are conditional on the object's generation.
    #[cfg(feature = "gcs")]
    pub async fn open_gcs(bucket: &str, prefix: &str) -> Result<Self> {
        Self::open_gcs_with_mode(bucket, prefix, OpenMode::CreateMissing).await
    }

    /// [`JsonDb::open_gcs`] in `mode` (see [`JsonDb::open_store_with_mode`]).
    #[cfg(feature = "gcs")]
    pub async fn open_gcs_with_mode(bucket: &str, prefix: &str, mode: OpenMode) -> Result<Self> {
        let prefix = if prefix.is_empty() { "agno/" } else { prefix };
        let store = object_store::gcp::GoogleCloudStorageBuilder::from_env()
            .with_bucket_name(bucket)
            .build()
            .map_err(|e| config_error("GCS", e))?;
        Self::open_store_with_mode(Arc::new(store), prefix, "gcs-json", true, mode).await
    }

    /// Opens `prefix` in the S3 bucket `bucket`, with credentials and region from the
    /// environment (`AWS_*`; see `object_store`'s `AmazonS3Builder`). Writes use S3's
    /// conditional puts (`If-Match` on the ETag).
    #[cfg(feature = "s3")]
    pub async fn open_s3(bucket: &str, prefix: &str) -> Result<Self> {
        Self::open_s3_with_mode(bucket, prefix, OpenMode::CreateMissing).await
    }

    /// [`JsonDb::open_s3`] in `mode` (see [`JsonDb::open_store_with_mode`]).
    #[cfg(feature = "s3")]
    pub async fn open_s3_with_mode(bucket: &str, prefix: &str, mode: OpenMode) -> Result<Self> {
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
            .build()
            .map_err(|e| config_error("S3", e))?;
        Self::open_store_with_mode(Arc::new(store), prefix, "s3-json", true, mode).await
    }

    /// Opens `prefix` of any object store that supports conditional puts
    /// (`PutMode::Create` and `PutMode::Update`): a store built with custom options, a GCS
    /// or S3 emulator. `backend` is the short name errors and capabilities report;
    /// `durable` says whether writes survive a restart. For a local directory use
    /// [`JsonDb::open_local`]: `LocalFileSystem` has no `PutMode::Update`.
    pub async fn open_store(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        backend: &'static str,
        durable: bool,
    ) -> Result<Self> {
        Self::open_store_with_mode(store, prefix, backend, durable, OpenMode::CreateMissing).await
    }

    /// [`JsonDb::open_store`] in `mode`. With [`OpenMode::Existing`] nothing is written (no
    /// stamp): a prefix holding none of agno's table files is `NotFound`.
    pub async fn open_store_with_mode(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        backend: &'static str,
        durable: bool,
        mode: OpenMode,
    ) -> Result<Self> {
        let files = Files::new(store, prefix, Concurrency::Conditional, backend);
        let shown = format!("{backend} prefix `{prefix}`");
        Self::init(files, None, durable, mode, &shown).await
    }

    /// Builds the store; stamps new tables, or in [`OpenMode::Existing`] only checks that
    /// some agno table file exists (`what` names the place in that error).
    async fn init(
        files: Files,
        dir: Option<std::path::PathBuf>,
        durable: bool,
        mode: OpenMode,
        what: &str,
    ) -> Result<Self> {
        if !mode.creates() {
            let present = files.existing_files().await?;
            let known: Vec<String> = table_files().map(TableFile::file_name).collect();
            if !present.iter().any(|f| known.contains(f)) {
                return Err(
                    OpenMode::no_database(what, "none of agno's table files exists")
                        .with_backend(files.backend()),
                );
            }
        }
        let backend = files.backend();
        #[cfg(not(feature = "fs"))]
        let _ = dir;
        let files = JsonFiles(Arc::new(Inner {
            files,
            migration_lock: Arc::new(tokio::sync::Mutex::new(())),
            #[cfg(feature = "fs")]
            dir,
        }));
        if mode.creates() {
            files.stamp_new_tables().await?;
        }
        Ok(JsonDb {
            files,
            backend,
            durable,
        })
    }

    /// Writes a session as agno 2.x's `JsonDb` stored it, with its runs inside the session
    /// (`runs_blob`: the array, or an encoded JSON string of it), for migration tests and
    /// imports. Migrate afterwards with [`agno_storage_core::MigrationManager`].
    pub async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        let id = session.session_id.clone();
        Docs::of(&self.files)
            .write_legacy_session(&id, session, runs_blob)
            .await
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        let docs = Arc::new(Docs(self.files.clone()));
        AgnoDb::builder(self.backend)
            .all_stores(docs.clone())
            .migrations(docs)
            .durable(self.durable)
            .tables(agno_storage_doc::collection_names(&self.files))
            .build()
    }
}

#[cfg(any(feature = "gcs", feature = "s3"))]
fn config_error(what: &str, e: object_store::Error) -> agno_storage_core::Error {
    agno_storage_core::Error::new(
        agno_storage_core::ErrorKind::InvalidInput,
        format!("cannot configure the {what} client: {e}"),
    )
    .with_source(e)
}
