//! [`MongoDb`]: the connection, collection names and indexes.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{SchemaVersion, SchemaVersionStore, TableType};
use agno_storage_core::{AgnoDb, OpenMode, Result, TableNames};
use futures::future::BoxFuture;
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::error::{TRANSIENT_TRANSACTION_ERROR, UNKNOWN_TRANSACTION_COMMIT_RESULT};
use mongodb::options::ClientOptions;
use mongodb::{Client, ClientSession, Collection, Database};

use crate::doc::{db_err, BACKEND};
use crate::migrate::DEFAULT_MIGRATION_LOCK_LEASE;
use crate::schema::{self, IndexSpec};

/// How often a transaction that hit a transient conflict is retried.
const TRANSACTION_ATTEMPTS: u32 = 5;

/// Whether the server refused a transaction because it has none (a standalone `mongod`:
/// "Transaction numbers are only allowed on a replica set member or mongos", code 20).
fn transactions_unsupported(e: &mongodb::error::Error) -> bool {
    matches!(e.kind.as_ref(), mongodb::error::ErrorKind::Command(c) if c.code == 20)
}

/// Collection names: the same as every backend's, agno 3.1.10's defaults.
#[deprecated(note = "use `TableNames`, the one names type of every backend")]
pub type CollectionNames = TableNames;

pub(crate) struct Inner {
    pub(crate) db: Database,
    pub(crate) names: TableNames,
    /// The migration lock's lease ([`MongoDb::with_migration_lock_lease`]).
    pub(crate) lock_lease: Duration,
    /// Where each session's next `run_index` was last seen by this handle.
    pub(crate) run_hints: crate::runs::RunHints,
}

/// One MongoDB database holding agno's collections. Cheap to clone.
///
/// Documents, index names and the schema-version collection are agno 3.1.10's, so Python
/// agents and this crate share one database. `_id`s are the driver's ObjectIds, except a
/// run whose `run_index` this crate assigned: its `_id` is `{session_id, run_index}`, the
/// unique claim on that index (agno never reads `_id`).
#[derive(Clone)]
pub struct MongoDb {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for MongoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MongoDb")
            .field("database", &self.inner.db.name())
            .field("names", &self.inner.names)
            .finish()
    }
}

impl MongoDb {
    /// Connects to `url` and opens database `db_name` (agno's default is `agno`).
    pub async fn connect(url: &str, db_name: &str, names: TableNames) -> Result<Self> {
        Self::connect_with_mode(url, db_name, names, OpenMode::CreateMissing).await
    }

    /// [`MongoDb::connect`] in `mode` (see [`MongoDb::open_with_mode`]).
    pub async fn connect_with_mode(
        url: &str,
        db_name: &str,
        names: TableNames,
        mode: OpenMode,
    ) -> Result<Self> {
        let options = ClientOptions::parse(url).await.map_err(db_err("connect"))?;
        let client = Client::with_options(options).map_err(db_err("connect"))?;
        Self::open_with_mode(client.database(db_name), names, mode).await
    }

    /// Opens `db` with an existing client.
    ///
    /// Creates every collection's indexes as agno does (each independently; one that
    /// conflicts with a pre-v3 index is skipped until the migration repairs it) and drops
    /// the pre-v3 metrics index. A database that held none of the collections is new: its
    /// tables are stamped at the latest schema version. An existing unstamped database is
    /// pre-v3 (agno 2.x): run [`agno_storage_core::MigrationManager`] on it.
    pub async fn open(db: Database, names: TableNames) -> Result<Self> {
        Self::open_with_mode(db, names, OpenMode::CreateMissing).await
    }

    /// [`MongoDb::open`] in `mode`. With [`OpenMode::Existing`] nothing is created or
    /// dropped (no index, no stamp, no collection): a database holding none of agno's
    /// collections is `NotFound`.
    pub async fn open_with_mode(db: Database, names: TableNames, mode: OpenMode) -> Result<Self> {
        let existing: Vec<String> = db
            .list_collection_names()
            .await
            .map_err(db_err("list collections"))?;
        let fresh = !TableType::ALL
            .iter()
            .any(|t| existing.iter().any(|c| c == names.of(*t)));
        if !mode.creates() {
            let others = [&names.runs, &names.jobs, &names.versions];
            let any_agno = !fresh || existing.iter().any(|c| others.contains(&c));
            if !any_agno {
                return Err(OpenMode::no_database(
                    format!("MongoDB database `{}`", db.name()),
                    "none of agno's collections exists",
                )
                .with_backend("mongodb"));
            }
            return Ok(MongoDb {
                inner: Arc::new(Inner {
                    db,
                    names,
                    lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
                    run_hints: Default::default(),
                }),
            });
        }
        let me = MongoDb {
            inner: Arc::new(Inner {
                db,
                names,
                lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
                run_hints: Default::default(),
            }),
        };
        me.drop_index_if(&me.inner.names.metrics, |_, name| {
            name == schema::LEGACY_METRICS_INDEX
        })
        .await?;
        for (collection, specs) in me.index_plan() {
            me.ensure_indexes(&collection, &specs).await?;
        }
        if fresh {
            for t in TableType::ALL {
                me.set_schema_version(me.inner.names.of(t), SchemaVersion::LATEST)
                    .await?;
            }
        }
        Ok(me)
    }

    /// This handle with another migration lock lease (default
    /// [`DEFAULT_MIGRATION_LOCK_LEASE`], 30 s); `InvalidInput` below one second.
    ///
    /// While a migration holds the lock, a heartbeat renews the lease every `lease / 3`; a
    /// lock whose holder died (no heartbeat) is taken over by the next migration once its
    /// lease passes, so a crashed migration blocks others for at most `lease`. The holder's
    /// lease is written into the lock, so a waiter honours the holder's lease, not its own.
    /// Too short a lease lets a holder stalled longer than two thirds of it (a long pause, an
    /// unreachable server) lose the lock while it still works; `release` then reports the
    /// loss.
    pub fn with_migration_lock_lease(self, lease: Duration) -> Result<Self> {
        let lease =
            agno_storage_core::lease::check_lease(lease).map_err(|e| e.with_backend(BACKEND))?;
        Ok(MongoDb {
            inner: Arc::new(Inner {
                db: self.inner.db.clone(),
                names: self.inner.names.clone(),
                lock_lease: lease,
                run_hints: Default::default(),
            }),
        })
    }

    /// The migration lock lease in use (see [`MongoDb::with_migration_lock_lease`]).
    pub fn migration_lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    /// The underlying database.
    pub fn database(&self) -> &Database {
        &self.inner.db
    }

    /// The collection names in use.
    pub fn names(&self) -> &TableNames {
        &self.inner.names
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        let me = Arc::new(self.clone());
        AgnoDb::builder(BACKEND)
            // BSON documents nest at most 100 levels; the driver's BSON reader recurses once
            // per level, and on a 2 MiB worker stack in a debug build 98 levels overflow it
            // (measured by the nesting case) and 64 do not.
            .max_json_depth(64)
            .all_stores(me.clone())
            .migrations(me)
            .durable(true)
            .tables(self.inner.names.clone())
            .build()
    }

    pub(crate) fn coll(&self, name: &str) -> Collection<Document> {
        self.inner.db.collection(name)
    }

    /// Runs `work` (every write on the given session) in one multi-document transaction,
    /// retrying transient conflicts, so a crash never leaves half of it. On a server without
    /// transactions (a standalone `mongod`) it runs the same writes in a plain session.
    pub(crate) async fn transaction<T>(
        &self,
        operation: &'static str,
        work: impl for<'s> Fn(
            &'s MongoDb,
            &'s mut ClientSession,
        ) -> BoxFuture<'s, mongodb::error::Result<T>>,
    ) -> Result<T> {
        let client = self.inner.db.client();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut session = client.start_session().await.map_err(db_err(operation))?;
            session
                .start_transaction()
                .await
                .map_err(db_err(operation))?;
            let outcome = match work(self, &mut session).await {
                Ok(value) => session.commit_transaction().await.map(|()| value),
                Err(e) => {
                    let _ = session.abort_transaction().await;
                    Err(e)
                }
            };
            match outcome {
                Ok(value) => return Ok(value),
                Err(e) if transactions_unsupported(&e) => {
                    let mut plain = client.start_session().await.map_err(db_err(operation))?;
                    return work(self, &mut plain).await.map_err(db_err(operation));
                }
                Err(e)
                    if attempt < TRANSACTION_ATTEMPTS
                        && (e.contains_label(TRANSIENT_TRANSACTION_ERROR)
                            || e.contains_label(UNKNOWN_TRANSACTION_COMMIT_RESULT)) =>
                {
                    agno_storage_core::guard::record_retry(attempt as usize);
                    continue;
                }
                Err(e) => return Err(db_err(operation)(e)),
            }
        }
    }

    fn index_plan(&self) -> Vec<(String, Vec<IndexSpec>)> {
        let n = &self.inner.names;
        vec![
            (n.sessions.clone(), schema::sessions()),
            (n.runs.clone(), schema::runs()),
            (n.memories.clone(), schema::memories()),
            (n.metrics.clone(), schema::metrics()),
            (n.evals.clone(), schema::evals()),
            (n.knowledge.clone(), schema::knowledge()),
            (n.schedules.clone(), schema::schedules()),
            (n.schedule_runs.clone(), schema::schedule_runs()),
            (n.learnings.clone(), schema::learnings()),
            (n.jobs.clone(), schema::jobs()),
        ]
    }

    /// Creates `specs` on `collection` in one command; when that fails (an index conflicts
    /// with an existing one, or pre-existing duplicates block a unique index), creates them
    /// one by one and skips the ones the server refuses, as agno does.
    pub(crate) async fn ensure_indexes(&self, collection: &str, specs: &[IndexSpec]) -> Result<()> {
        let all: Vec<Bson> = specs.iter().map(|s| Bson::Document(s.to_doc())).collect();
        let batch = self
            .inner
            .db
            .run_command(doc! {"createIndexes": collection, "indexes": all})
            .await;
        match batch {
            Ok(_) => Ok(()),
            Err(e) if is_connection_error(&e) => Err(db_err("create indexes")(e)),
            Err(_) => {
                for spec in specs {
                    let one = self
                        .inner
                        .db
                        .run_command(doc! {"createIndexes": collection, "indexes": [spec.to_doc()]})
                        .await;
                    if let Err(e) = one {
                        if is_connection_error(&e) {
                            return Err(db_err("create indexes")(e));
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// The indexes of `collection` as `(key document, name, unique)`.
    pub(crate) async fn list_indexes(
        &self,
        collection: &str,
    ) -> Result<Vec<(Document, String, bool)>> {
        let coll = self.coll(collection);
        let cursor = match coll.list_indexes().await {
            Ok(c) => c,
            // A collection that does not exist has no indexes.
            Err(e) if !is_connection_error(&e) => return Ok(Vec::new()),
            Err(e) => return Err(db_err("list indexes")(e)),
        };
        let models: Vec<mongodb::IndexModel> =
            cursor.try_collect().await.map_err(db_err("list indexes"))?;
        Ok(models
            .into_iter()
            .map(|m| {
                let (name, unique) = m
                    .options
                    .map(|o| (o.name.unwrap_or_default(), o.unique.unwrap_or(false)))
                    .unwrap_or_default();
                (m.keys, name, unique)
            })
            .collect())
    }

    /// Drops the indexes of `collection` matching `which(keys, name)`; returns how many.
    pub(crate) async fn drop_index_if(
        &self,
        collection: &str,
        which: impl Fn(&(Document, String, bool), &str) -> bool,
    ) -> Result<u64> {
        let mut dropped = 0;
        for index in self.list_indexes(collection).await? {
            if which(&index, &index.1) {
                self.coll(collection)
                    .drop_index(&index.1)
                    .await
                    .map_err(db_err("drop index"))?;
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

fn is_connection_error(e: &mongodb::error::Error) -> bool {
    use mongodb::error::ErrorKind as K;
    matches!(
        e.kind.as_ref(),
        K::Io(_) | K::ServerSelection { .. } | K::ConnectionPoolCleared { .. }
    )
}
