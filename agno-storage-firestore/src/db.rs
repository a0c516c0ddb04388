//! [`FirestoreDb`]: the connection, collection names and options.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{AgnoDb, Error, ErrorKind, OpenMode, Result, TableNames};

use crate::doc::BACKEND;
use crate::DEFAULT_MIGRATION_LOCK_LEASE;

/// Collection names: the same as every backend's, agno 3.1.10's defaults (its `FirestoreDb`
/// has no schedules or learnings collections; ours use Mongo's layout).
#[deprecated(note = "use `TableNames`, the one names type of every backend")]
pub type CollectionNames = TableNames;

/// How [`FirestoreDb::connect`] opens a database.
#[derive(Debug, Clone)]
pub struct FirestoreOptions {
    /// Table names (agno's defaults).
    pub names: TableNames,
    /// When none of agno's collections holds a document, stamp every table at the latest
    /// schema version (a new database). Turn off to open an empty database that agno 2.x
    /// data will be imported into and then migrated. Default: on.
    pub stamp_new_database: bool,
    /// The migration lock's lease (default [`DEFAULT_MIGRATION_LOCK_LEASE`], 30 s; at least
    /// one second; [`FirestoreDb::open`] refuses a shorter one with `InvalidInput`).
    ///
    /// While a migration holds the lock, a heartbeat renews the lease every `lease / 3`; a
    /// lock whose holder died (no heartbeat) is taken over by the next migration once its
    /// lease passes, so a crashed migration blocks others for at most `lease`. The holder's
    /// lease is written into the lock, so a waiter honours the holder's lease, not its own.
    /// Too short a lease lets a holder stalled longer than two thirds of it (a long pause, a
    /// slow emulator) lose the lock while it still works; `release` then reports the loss.
    pub migration_lock_lease: Duration,
}

impl Default for FirestoreOptions {
    fn default() -> Self {
        FirestoreOptions {
            names: TableNames::default(),
            stamp_new_database: true,
            migration_lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) client: firestore::FirestoreDb,
    pub(crate) names: TableNames,
    /// The migration lock's lease ([`FirestoreOptions::migration_lock_lease`]).
    pub(crate) lock_lease: Duration,
}

/// One Firestore database (the `(default)` database of a project) holding agno's
/// collections. Cheap to clone.
///
/// Collections, field encodings (native maps and arrays), run document ids (`run_id`),
/// metrics document ids and the schema-version documents are agno 3.1.10's. Sessions,
/// memories, knowledge and eval runs get deterministic document ids (their key) instead of
/// agno's auto ids, so concurrent creates cannot make duplicates; documents agno wrote under
/// auto ids are still found by their key field.
#[derive(Clone)]
pub struct FirestoreDb {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for FirestoreDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirestoreDb")
            .field("database", self.inner.client.get_database_path())
            .field("names", &self.inner.names)
            .finish()
    }
}

impl FirestoreDb {
    /// Connects to project `project_id` (Google application default credentials, or the
    /// emulator named by `FIRESTORE_EMULATOR_HOST`).
    pub async fn connect(project_id: &str, options: FirestoreOptions) -> Result<Self> {
        Self::connect_with_mode(project_id, options, OpenMode::CreateMissing).await
    }

    /// [`FirestoreDb::connect`] in `mode` (see [`FirestoreDb::open_with_mode`]).
    pub async fn connect_with_mode(
        project_id: &str,
        options: FirestoreOptions,
        mode: OpenMode,
    ) -> Result<Self> {
        let client = firestore::FirestoreDb::with_options(firestore::FirestoreDbOptions::new(
            project_id.to_owned(),
        ))
        .await
        .map_err(|e| {
            Error::new(
                ErrorKind::Unavailable,
                format!("cannot connect to Firestore: {e}"),
            )
            .with_backend(BACKEND)
            .with_operation("connect")
            .with_source(e)
        })?;
        Self::open_with_mode(client, options, mode).await
    }

    /// Opens an existing client. A database whose agno collections are all empty is new:
    /// its tables are stamped at the latest schema version (unless
    /// [`FirestoreOptions::stamp_new_database`] is off). An existing unstamped database is
    /// pre-v3 (agno 2.x): run [`agno_storage_core::MigrationManager`] on it.
    pub async fn open(client: firestore::FirestoreDb, options: FirestoreOptions) -> Result<Self> {
        Self::open_with_mode(client, options, OpenMode::CreateMissing).await
    }

    /// [`FirestoreDb::open`] in `mode`. With [`OpenMode::Existing`] nothing is written (no
    /// stamp, whatever [`FirestoreOptions::stamp_new_database`] says): a database where
    /// none of agno's collections holds a document is `NotFound`.
    pub async fn open_with_mode(
        client: firestore::FirestoreDb,
        options: FirestoreOptions,
        mode: OpenMode,
    ) -> Result<Self> {
        let lease = agno_storage_core::lease::check_lease(options.migration_lock_lease)
            .map_err(|e| e.with_backend(BACKEND))?;
        let me = FirestoreDb {
            inner: Arc::new(Inner {
                client,
                names: options.names,
                lock_lease: lease,
            }),
        };
        if !mode.creates() {
            if !agno_storage_doc::holds_agno_docs(&me).await? {
                return Err(OpenMode::no_database(
                    format!("Firestore {}", me.inner.client.get_database_path()),
                    "none of agno's collections holds a document",
                )
                .with_backend(BACKEND));
            }
            return Ok(me);
        }
        if options.stamp_new_database {
            agno_storage_doc::stamp_new_database(&me).await?;
        }
        Ok(me)
    }

    /// The underlying `firestore` client.
    pub fn client(&self) -> &firestore::FirestoreDb {
        &self.inner.client
    }

    /// The collection names in use.
    pub fn names(&self) -> &TableNames {
        &self.inner.names
    }

    /// The migration lock lease in use ([`FirestoreOptions::migration_lock_lease`]).
    pub fn migration_lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        agno_storage_doc::agno_db(self)
    }
}
