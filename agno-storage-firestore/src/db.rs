//! [`FirestoreDb`]: the connection, collection names and options.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::TableType;
use agno_storage_core::{AgnoDb, Error, ErrorKind, OpenMode, Result};
use agno_storage_doc::Collection;

use crate::doc::BACKEND;
use crate::DEFAULT_MIGRATION_LOCK_LEASE;

/// Collection names, as agno 3.1.10's `FirestoreDb` names them by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CollectionNames {
    /// Sessions (`agno_sessions`).
    pub sessions: String,
    /// Runs, one document per run, document id = `run_id` (`agno_runs`).
    pub runs: String,
    /// User memories (`agno_memories`).
    pub memories: String,
    /// Daily metrics (`agno_metrics`).
    pub metrics: String,
    /// Eval runs (`agno_eval_runs`).
    pub evals: String,
    /// Knowledge contents (`agno_knowledge`).
    pub knowledge: String,
    /// Schedules (`agno_schedules`; agno's `FirestoreDb` has none, the layout is Mongo's).
    pub schedules: String,
    /// Schedule runs (`agno_schedule_runs`).
    pub schedule_runs: String,
    /// Learnings (`agno_learnings`; agno's `FirestoreDb` raises `NotImplementedError`).
    pub learnings: String,
    /// The job queue (`agno_jobs`; ours).
    pub jobs: String,
    /// Per-table schema stamps, document id = table name (`agno_schema_versions`).
    pub versions: String,
    /// Our bookkeeping: run-index counters, uniqueness guards, the migration lock
    /// (`agno_storage_meta`; agno never reads it).
    pub meta: String,
}

impl Default for CollectionNames {
    fn default() -> Self {
        CollectionNames {
            sessions: "agno_sessions".into(),
            runs: "agno_runs".into(),
            memories: "agno_memories".into(),
            metrics: "agno_metrics".into(),
            evals: "agno_eval_runs".into(),
            knowledge: "agno_knowledge".into(),
            schedules: "agno_schedules".into(),
            schedule_runs: "agno_schedule_runs".into(),
            learnings: "agno_learnings".into(),
            jobs: "agno_jobs".into(),
            versions: "agno_schema_versions".into(),
            meta: "agno_storage_meta".into(),
        }
    }
}

impl CollectionNames {
    /// Every name with `prefix` in front (several isolated databases in one project).
    pub fn prefixed(prefix: &str) -> Self {
        let d = CollectionNames::default();
        let p = |s: String| format!("{prefix}{s}");
        CollectionNames {
            sessions: p(d.sessions),
            runs: p(d.runs),
            memories: p(d.memories),
            metrics: p(d.metrics),
            evals: p(d.evals),
            knowledge: p(d.knowledge),
            schedules: p(d.schedules),
            schedule_runs: p(d.schedule_runs),
            learnings: p(d.learnings),
            jobs: p(d.jobs),
            versions: p(d.versions),
            meta: p(d.meta),
        }
    }

    /// The physical name of a collection.
    pub fn get(&self, which: Collection) -> &str {
        match which {
            Collection::Sessions => &self.sessions,
            Collection::Runs => &self.runs,
            Collection::Memories => &self.memories,
            Collection::Metrics => &self.metrics,
            Collection::Evals => &self.evals,
            Collection::Knowledge => &self.knowledge,
            Collection::Schedules => &self.schedules,
            Collection::ScheduleRuns => &self.schedule_runs,
            Collection::Learnings => &self.learnings,
            Collection::Jobs => &self.jobs,
            Collection::Versions => &self.versions,
            Collection::Meta => &self.meta,
        }
    }

    /// The physical name of a migrated table type.
    pub fn of(&self, table: TableType) -> &str {
        self.get(Collection::from(table))
    }
}

/// How [`FirestoreDb::connect`] opens a database.
#[derive(Debug, Clone)]
pub struct FirestoreOptions {
    /// Collection names (agno's defaults).
    pub names: CollectionNames,
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
            names: CollectionNames::default(),
            stamp_new_database: true,
            migration_lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
        }
    }
}

pub(crate) struct Inner {
    pub(crate) client: firestore::FirestoreDb,
    pub(crate) names: CollectionNames,
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
    pub fn names(&self) -> &CollectionNames {
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
