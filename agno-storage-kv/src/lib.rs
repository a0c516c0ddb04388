//! Key-value storage for agno-storage: Redis and Valkey.
//!
//! Records are stored under the keys and in the JSON encoding agno 3.1.10's `RedisDb` and
//! `ValkeyDb` use (`{prefix}:sessions:{id}`, one `{prefix}:runs:{id}` per run listed in
//! `{prefix}:runs:by_session:{session_id}`, `{prefix}:agno_schema_versions:{table}`, the
//! job queue under `{prefix}:jobs:`), so a Rust service and a Python agent share one
//! server. Sessions, runs, memories, metrics, evals, knowledge, schedules, schedule runs,
//! learnings, jobs and schema versions are all served, and every store of the core
//! contract passes the `conformance-tests` suite on Redis and on Valkey.
//!
//! ```no_run
//! # async fn demo() -> agno_storage_core::Result<()> {
//! use agno_storage_kv::{KvDb, KvOptions};
//! let db = KvDb::connect("redis://127.0.0.1:6379", KvOptions::default()).await?.agno_db();
//! # Ok(()) }
//! ```
//!
//! # What differs from agno's adapters
//!
//! - **No scans on the request path.** agno lists with `SCAN` plus one `GET` per key, O(keys
//!   in the database) per call. Here sorted sets (per owner, per component, per session, per
//!   status, by due time) are written in the same atomic step as the record, so listing a
//!   user's sessions costs O(log n + page). They live under `{prefix}:{table}:index:`,
//!   which agno's scans skip. Records agno writes are not in them until
//!   [`KvDb::rebuild_indexes`] (or the migration) indexes them, or, live, while a
//!   [`KvDb::follow_foreign_writes`] follower runs (keyspace notifications; one connection
//!   and one `GET` per write); reads by id never need them.
//! - **Atomic read-modify-writes.** Every write is a compare-and-set in one Lua script: the
//!   owner guards, `run_index` assignment, schedule and job claims, fenced job transitions,
//!   idempotency keys, metrics upserts and unique `(user_id, name)` schedule names.
//! - **TTL as agno's, opt-in.** [`KvOptions::expire`] is agno's `expire`: the same keys get
//!   the same TTL. Listings skip entries whose record expired, where agno's scans simply
//!   stop seeing the key.
//! - Legacy runs blobs survive renames; deleted runs are scrubbed from them; the v3.0.0
//!   migration never overwrites a newer run with its legacy copy and stamps nothing after a
//!   failed scan or a partial copy.
//!
//! # Durability
//!
//! Redis acknowledges a write once it is in memory. With the default RDB snapshots a crash
//! loses what was written since the last snapshot; with `appendonly yes` and
//! `appendfsync everysec` at most about a second; with `appendfsync always` nothing that was
//! acknowledged. [`agno_storage_core::Capabilities::durable`] is set only when the server
//! reports `appendonly yes`. For a job queue that must never lose an accepted job, keep the
//! SQL adapter's queue as the record of truth.
//!
//! # Features
//!
//! Nothing is compiled by default.
//!
//! - `redis`: Redis through the `redis` crate's tokio client (connection manager, Lua
//!   scripts).
//! - `valkey`: Valkey, which speaks the Redis protocol: the same client and code.
//! - `full`: all of the above.
#![deny(missing_docs)]
#![cfg(feature = "redis")]

mod codec;
mod docs;
mod evals;
mod follower;
mod indexing;
mod jobs;
mod knowledge;
mod learnings;
mod legacy;
mod memories;
mod metrics;
mod migrate;
mod runs;
mod schedules;
mod sessions;
mod store;

pub use client::{IndexReport, KvDb, KvOptions};
pub use follower::{
    FollowError, FollowerStatus, IndexFollower, KEYSPACE_EVENTS_SETTING, REQUIRED_KEYSPACE_EVENTS,
};
pub use migrate::DEFAULT_MIGRATION_LOCK_LEASE;
/// The `redis` crate this one is built on, for an application that builds its own client.
pub use redis;

mod client {
    use std::sync::Arc;

    use agno_storage_core::{AgnoDb, Error, ErrorKind, OpenMode, Result, TableType};

    use agno_storage_doc::{DocBackend, Docs, Unwrapped, Wrap};

    use crate::docs::{KvDocs, Redis, Valkey};
    use crate::follower::{FollowError, Follower, IndexFollower};
    use crate::migrate::KvMigrations;
    use crate::store::{redis_err, KvStore};

    /// How to lay out keys on the server.
    #[derive(Debug, Clone)]
    pub struct KvOptions {
        /// The key prefix, agno's `db_prefix` (default `agno`): keys are `{prefix}:{table}:…`.
        pub prefix: String,
        /// Stamp every table `3.0.0` on connect when nothing lives under the prefix yet
        /// (default true). A prefix holding agno 2.x data is never stamped this way: migrate
        /// it with the migration manager.
        pub stamp_new: bool,
        /// agno's `expire` (default none): the records of sessions, runs, memories,
        /// metrics, knowledge and evals are written with this TTL, in whole seconds, and a
        /// run's write refreshes its session's run list, as `RedisDb(expire=…)` writes them.
        /// As there, each key's TTL restarts with its own last write, so a session's older
        /// runs can expire before the session does; listings skip index entries whose
        /// record has expired (their `total` may still count them until the entry is
        /// dropped). Schedules, learnings, jobs and schema versions never expire.
        pub expire: Option<std::time::Duration>,
        /// How long connecting (and reconnecting) may take (default 5 s).
        pub connection_timeout: std::time::Duration,
        /// How long a reply may take (default 30 s: long enough for a large `MGET` or a
        /// script deleting a session with many runs; the client's own default is 500 ms).
        pub response_timeout: std::time::Duration,
    }

    impl Default for KvOptions {
        fn default() -> Self {
            KvOptions {
                prefix: "agno".into(),
                stamp_new: true,
                expire: None,
                connection_timeout: std::time::Duration::from_secs(5),
                response_timeout: std::time::Duration::from_secs(30),
            }
        }
    }

    /// Records indexed by [`KvDb::rebuild_indexes`], per table.
    #[derive(Debug, Clone, Default, PartialEq, Eq)]
    pub struct IndexReport {
        /// `(table, records indexed)`, in migration order, then `agno_jobs`. The sessions
        /// table counts its sessions and their runs.
        pub tables: Vec<(String, u64)>,
    }

    /// One Redis or Valkey database under one key prefix.
    #[derive(Clone)]
    pub struct KvDb {
        store: Arc<KvStore>,
        client: redis::Client,
        durable: bool,
        /// The migration lock's lease ([`KvDb::with_migration_lock_lease`]).
        lock_lease: std::time::Duration,
    }

    impl std::fmt::Debug for KvDb {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("KvDb")
                .field("server", &self.store.server)
                .field("prefix", &self.store.prefix)
                .field("durable", &self.durable)
                .finish_non_exhaustive()
        }
    }

    impl KvDb {
        /// Connects to `url` (`redis://[user:password@]host:port[/db]`, `rediss://` for
        /// TLS when the client supports it) with `TCP_NODELAY`, and uses `options.prefix`.
        /// Detects whether the server is Redis or Valkey and whether it persists every write
        /// (AOF).
        pub async fn connect(url: &str, options: KvOptions) -> Result<KvDb> {
            Self::connect_with_mode(url, options, OpenMode::CreateMissing).await
        }

        /// [`KvDb::connect`] in `mode`. With [`OpenMode::Existing`] nothing is written (no
        /// stamp, whatever [`KvOptions::stamp_new`] says): a prefix under which no key lives
        /// is `NotFound`.
        pub async fn connect_with_mode(
            url: &str,
            options: KvOptions,
            mode: OpenMode,
        ) -> Result<KvDb> {
            use redis::IntoConnectionInfo;
            let invalid = |e: redis::RedisError| {
                Error::new(ErrorKind::InvalidInput, format!("invalid Redis URL: {e}"))
                    .with_source(e)
            };
            // Requests go out at once (TCP_NODELAY), as redis-py and most clients send them:
            // with Nagle's algorithm a request written in parts waits for the server's
            // acknowledgement of the first.
            let info = url.into_connection_info().map_err(invalid)?;
            let tcp = info.tcp_settings().clone().set_nodelay(true);
            let client = redis::Client::open(info.set_tcp_settings(tcp)).map_err(invalid)?;
            Self::open_with_mode(client, options, mode).await
        }

        /// Uses an application's own client (its TLS, credentials and protocol settings; the
        /// `redis` crate is re-exported as [`crate::redis`]), with `options`' prefix and
        /// timeouts.
        pub async fn open(client: redis::Client, options: KvOptions) -> Result<KvDb> {
            Self::open_with_mode(client, options, OpenMode::CreateMissing).await
        }

        /// [`KvDb::open`] in `mode` (see [`KvDb::connect_with_mode`]).
        pub async fn open_with_mode(
            client: redis::Client,
            options: KvOptions,
            mode: OpenMode,
        ) -> Result<KvDb> {
            if options.prefix.is_empty() {
                return Err(Error::invalid_input(
                    "the key prefix is empty; agno's default is `agno`",
                ));
            }
            let expire = match options.expire {
                Some(ttl) if ttl.as_secs() == 0 || ttl.subsec_nanos() != 0 => {
                    return Err(Error::invalid_input(format!(
                        "expire is {ttl:?}; Redis keys expire in whole seconds, as agno's \
                         `expire` counts them: give 1 s or more, in whole seconds"
                    )))
                }
                ttl => ttl.map(|t| t.as_secs()),
            };
            let config = redis::aio::ConnectionManagerConfig::new()
                .set_connection_timeout(Some(options.connection_timeout))
                .set_response_timeout(Some(options.response_timeout));
            let conn = client
                .get_connection_manager_with_config(config)
                .await
                .map_err(|e| redis_err(e).with_backend("redis"))?;
            let mut probe = conn.clone();
            let info: String = redis::cmd("INFO")
                .arg("server")
                .query_async(&mut probe)
                .await
                .map_err(|e| redis_err(e).with_backend("redis"))?;
            let server = if info.contains("server_name:valkey") {
                "valkey"
            } else {
                "redis"
            };
            // CONFIG may be disabled (managed services): then durability is unknown, so false.
            let durable = redis::cmd("CONFIG")
                .arg("GET")
                .arg("appendonly")
                .query_async::<Vec<String>>(&mut probe)
                .await
                .is_ok_and(|v| v.get(1).is_some_and(|s| s == "yes"));
            let store = Arc::new(KvStore::new(
                conn,
                client.clone(),
                options.prefix,
                server,
                expire,
            ));
            if !mode.creates() {
                if !store.holds_anything().await? {
                    return Err(OpenMode::no_database(
                        format!("key prefix `{}:`", store.prefix),
                        "no key lives under it",
                    )
                    .with_backend(server));
                }
            } else if options.stamp_new {
                store.stamp_if_new().await?;
            }
            Ok(KvDb {
                store,
                client,
                durable,
                lock_lease: crate::migrate::DEFAULT_MIGRATION_LOCK_LEASE,
            })
        }

        /// This handle with another migration lock lease (default
        /// [`crate::DEFAULT_MIGRATION_LOCK_LEASE`], 30 s); `InvalidInput` below one second.
        ///
        /// While a migration holds the lock, a heartbeat renews the key's TTL (the lease)
        /// every `lease / 3`; the key of a holder that died (no heartbeat) expires once its
        /// lease passes and the next migration takes it, so a crashed migration blocks others
        /// for at most `lease`. Too short a lease lets a holder stalled longer than two thirds
        /// of it (a long pause, an unreachable server) lose the lock while it still works;
        /// `release` then reports the loss.
        pub fn with_migration_lock_lease(mut self, lease: std::time::Duration) -> Result<KvDb> {
            self.lock_lease = agno_storage_core::lease::check_lease(lease)
                .map_err(|e| e.with_backend(self.store.server))?;
            Ok(self)
        }

        /// One handle over every store of this database.
        pub fn agno_db(&self) -> AgnoDb {
            self.agno_db_with::<Unwrapped>()
        }

        /// [`KvDb::agno_db`] with the stores the document engine serves over `W`'s wrapping
        /// of this database's engine backend (the test kit's `DefaultPathsOf` runs them on
        /// the engine's default paths instead of the sorted-set ones).
        pub fn agno_db_with<W: Wrap>(&self) -> AgnoDb {
            let s = self.store.clone();
            if s.server == "valkey" {
                self.agno_db_over(W::wrap(KvDocs::<Valkey>::new(s)))
            } else {
                self.agno_db_over(W::wrap(KvDocs::<Redis>::new(s)))
            }
        }

        /// The handle whose stores are the document engine's over `backend`, with this
        /// database's legacy-runs access, migrations and durability.
        fn agno_db_over<B: DocBackend>(&self, backend: B) -> AgnoDb {
            let docs = Arc::new(Docs(backend));
            let s = self.store.clone();
            AgnoDb::builder(s.server)
                .all_stores(docs.clone())
                .legacy(s.clone())
                .migrations(Arc::new(KvMigrations {
                    store: s,
                    learnings: docs,
                    lease: self.lock_lease,
                }))
                .durable(self.durable)
                .tables(agno_storage_doc::collection_names(&KvDocs::<Redis>::new(
                    self.store.clone(),
                )))
                .build()
        }

        /// `redis` or `valkey`, as the server reported itself.
        pub fn server(&self) -> &'static str {
            self.store.server
        }

        /// The key prefix.
        pub fn prefix(&self) -> &str {
            &self.store.prefix
        }

        /// Indexes every record under the prefix from a `SCAN` (O(keys)): run it after agno
        /// (Python) wrote to the same prefix, so listings include its records (or keep an
        /// [`KvDb::follow_foreign_writes`] follower running instead). Additive and safe to
        /// run while serving; entries of records deleted by agno are dropped when a listing
        /// meets them.
        pub async fn rebuild_indexes(&self) -> Result<IndexReport> {
            let mut report = IndexReport::default();
            for t in TableType::ALL {
                let n = self.store.reindex(t).await?;
                report.tables.push((t.default_name().to_owned(), n));
            }
            report
                .tables
                .push(("agno_jobs".into(), self.store.reindex_jobs().await?));
            Ok(report)
        }

        /// Starts a background follower that indexes records other writers (agno in Python,
        /// `redis-cli`, another service) put under this prefix, as they are written, so
        /// listings include them without [`KvDb::rebuild_indexes`]. Without a follower,
        /// such records are found by id at once but listed only after a rebuild.
        ///
        /// How: it subscribes to the prefix's keyspace notifications
        /// (`PSUBSCRIBE __keyspace@<db>__:<prefix>:*`), then runs one full rebuild, so
        /// nothing written before the subscription is missed. On each `set` it reads the
        /// key and indexes that one record with the rebuild's per-record rule; on `del`,
        /// `expired` (and `evicted`, `rename_from`) it removes the record from every index
        /// the follower put it in (a ledger hash per table, `{prefix}:{table}:index:ledger`,
        /// remembers where; each rebuild also undoes the ledger entries of records deleted
        /// while no follower listened; entries of records no follower ever indexed are
        /// dropped lazily by listings, as before). Each update is one atomic script that does nothing if the record changed
        /// meanwhile. Redis drops events while a subscriber is disconnected, so after a lost
        /// subscription it reconnects (pausing up to 5 s between attempts) and rebuilds
        /// again; a silent subscription is checked with `PING` every 15 s.
        ///
        /// Cost: one extra connection; one `GET` and one script call per write under the
        /// prefix — this service's own writes included, since Redis does not say who wrote
        /// (they are re-indexed idempotently); one script call per deletion; one ledger
        /// field per record; a full `SCAN` rebuild (about 2 s per 100,000 records) at start
        /// and after each reconnection.
        ///
        /// Needs the server setting [`crate::KEYSPACE_EVENTS_SETTING`]
        /// (`notify-keyspace-events`) to include [`crate::REQUIRED_KEYSPACE_EVENTS`]
        /// (`K$gx`; `KEA` also works). When it lacks them the follower adds them with
        /// `CONFIG SET`, merged into the current value (a server-wide setting: every
        /// subscriber on the server then receives these events). Where `CONFIG` is
        /// refused (managed Redis), it checks with a probe key under the prefix that the
        /// events arrive.
        ///
        /// When this returns, every record present under the prefix is indexed and later
        /// writes are followed. Undecodable records are skipped and reported in
        /// [`crate::FollowerStatus`]; the follower carries on. Call it once per process
        /// (several followers are harmless, each doing the same work). Needs a tokio
        /// runtime; the task runs until the handle is dropped or stopped.
        ///
        /// # Errors
        ///
        /// [`FollowError::KeyspaceEventsOff`] when the events are off and cannot be turned
        /// on (the operator must set `notify-keyspace-events`); [`FollowError::Storage`]
        /// when the server is unreachable or the first rebuild fails.
        pub async fn follow_foreign_writes(
            &self,
        ) -> std::result::Result<IndexFollower, FollowError> {
            Follower::start(self.store.clone(), self.client.clone()).await
        }
    }
}
