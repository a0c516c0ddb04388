//! [`SurrealDb`]: the connection, table names, options and agno's table definitions.

use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{AgnoDb, Error, ErrorKind, OpenMode, Result, TableNames};
use surrealdb::engine::any::Any;
use surrealdb::Surreal;

use crate::doc::{check_ident, db_err, BACKEND};
use crate::DEFAULT_MIGRATION_LOCK_LEASE;

/// The tables agno's `SurrealDb` links records to (`agent`, `team`, `workflow`, `user` fields
/// are record links into them); never written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkTables {
    /// Link target of a session's or eval's `agent` (`agno_agents`).
    pub agents: String,
    /// Link target of `team` (`agno_teams`).
    pub teams: String,
    /// Link target of `workflow` (`agno_workflows`).
    pub workflows: String,
    /// Link target of a memory's `user` (`agno_users`).
    pub users: String,
}

impl Default for LinkTables {
    fn default() -> Self {
        LinkTables {
            agents: "agno_agents".into(),
            teams: "agno_teams".into(),
            workflows: "agno_workflows".into(),
            users: "agno_users".into(),
        }
    }
}

/// Every table name in use: agno's tables and the link targets. Dereferences to the
/// [`TableNames`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    pub(crate) tables: TableNames,
    pub(crate) links: LinkTables,
}

impl std::ops::Deref for Layout {
    type Target = TableNames;

    fn deref(&self) -> &TableNames {
        &self.tables
    }
}

impl Layout {
    fn all(&self) -> [&str; 16] {
        [
            &self.sessions,
            &self.runs,
            &self.memories,
            &self.metrics,
            &self.evals,
            &self.knowledge,
            &self.schedules,
            &self.schedule_runs,
            &self.learnings,
            &self.jobs,
            &self.versions,
            &self.meta,
            &self.links.agents,
            &self.links.teams,
            &self.links.workflows,
            &self.links.users,
        ]
    }

    /// agno 3.1.10's table definitions (`db/surrealdb/models.py:get_schema`), plus ours.
    ///
    /// Differences from agno's: `updated_at` has `DEFAULT time::now()` instead of
    /// `VALUE time::now()`, so the stored value is the one the adapter returns; schedules
    /// carry the unique index `idx_user_id_name` on `name_key`, a digest of `(user_id, name)`
    /// (a unique index over a null `user_id` would not compare it). Every statement is
    /// `IF NOT EXISTS`: tables agno already defined are left as they are.
    pub(crate) fn schema(&self) -> String {
        let dates = |t: &str, created: bool| {
            let mut s = String::new();
            if created {
                s.push_str(&format!(
                    "DEFINE FIELD IF NOT EXISTS created_at ON {t} TYPE datetime DEFAULT time::now();\n"
                ));
            }
            s.push_str(&format!(
                "DEFINE FIELD IF NOT EXISTS updated_at ON {t} TYPE datetime DEFAULT time::now();\n"
            ));
            s
        };
        let mut sql = String::new();
        for t in self.all() {
            if [
                &self.links.agents,
                &self.links.teams,
                &self.links.workflows,
                &self.links.users,
            ]
            .contains(&&t.to_owned())
            {
                continue;
            }
            sql.push_str(&format!("DEFINE TABLE IF NOT EXISTS {t} SCHEMALESS;\n"));
        }
        sql.push_str(&dates(&self.sessions, true));
        sql.push_str(&dates(&self.memories, false));
        sql.push_str(&dates(&self.knowledge, true));
        sql.push_str(&dates(&self.evals, true));
        sql.push_str(&dates(&self.runs, true));
        let r = &self.runs;
        sql.push_str(&format!(
            "DEFINE INDEX IF NOT EXISTS idx_run_id ON {r} FIELDS run_id UNIQUE;\n"
        ));
        for f in [
            "session_id",
            "user_id",
            "agent_id",
            "team_id",
            "workflow_id",
            "status",
        ] {
            sql.push_str(&format!(
                "DEFINE INDEX IF NOT EXISTS idx_{f} ON {r} FIELDS {f};\n"
            ));
        }
        let s = &self.schedules;
        sql.push_str(&format!(
            "DEFINE INDEX IF NOT EXISTS idx_user_id_name ON {s} FIELDS {} UNIQUE;\n",
            crate::doc::NAME_KEY
        ));
        for (t, f) in [
            (&self.sessions, "user_id"),
            (&self.schedule_runs, "schedule_id"),
            (&self.jobs, "status"),
        ] {
            sql.push_str(&format!(
                "DEFINE INDEX IF NOT EXISTS idx_{f} ON {t} FIELDS {f};\n"
            ));
        }
        sql
    }
}

/// Where and how [`SurrealDb::connect`] opens a database.
#[derive(Debug, Clone)]
pub struct SurrealOptions {
    /// The namespace (`db_ns` in agno).
    pub namespace: String,
    /// The database (`db_db` in agno).
    pub database: String,
    /// Root credentials `(user, password)` to sign in with; `None` for embedded engines.
    pub credentials: Option<(String, String)>,
    /// Table names (agno's defaults).
    pub names: TableNames,
    /// The tables agno's record links point into (agno's defaults).
    pub links: LinkTables,
    /// When none of agno's tables holds a record, stamp every table at the latest schema
    /// version (a new database). Turn off to open an empty database that agno 2.x data will
    /// be imported into and then migrated. Default: on.
    pub stamp_new_database: bool,
    /// The migration lock's lease (default [`DEFAULT_MIGRATION_LOCK_LEASE`], 30 s; at least
    /// one second; [`SurrealDb::open`] refuses a shorter one with `InvalidInput`).
    ///
    /// While a migration holds the lock, a heartbeat renews the lease every `lease / 3`; a
    /// lock whose holder died (no heartbeat) is taken over by the next migration once its
    /// lease passes, so a crashed migration blocks others for at most `lease`. The holder's
    /// lease is written into the lock, so a waiter honours the holder's lease, not its own.
    /// Too short a lease lets a holder stalled longer than two thirds of it (a long pause, an
    /// overloaded server) lose the lock while it still works; `release` then reports the
    /// loss.
    pub migration_lock_lease: Duration,
}

impl SurrealOptions {
    /// Namespace `namespace`, database `database`, agno's table names, no credentials.
    pub fn new(namespace: impl Into<String>, database: impl Into<String>) -> Self {
        SurrealOptions {
            namespace: namespace.into(),
            database: database.into(),
            credentials: None,
            names: TableNames::default(),
            links: LinkTables::default(),
            stamp_new_database: true,
            migration_lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
        }
    }

    /// Signs in as root user `user` with `password`.
    pub fn with_credentials(
        mut self,
        user: impl Into<String>,
        password: impl Into<String>,
    ) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Sets the migration lock's lease ([`SurrealOptions::migration_lock_lease`]).
    pub fn with_migration_lock_lease(mut self, lease: Duration) -> Self {
        self.migration_lock_lease = lease;
        self
    }
}

/// Refuses a migration lock lease under core's minimum (one second).
fn check_lease(lease: Duration) -> Result<()> {
    agno_storage_core::lease::check_lease(lease)
        .map(|_| ())
        .map_err(|e| e.with_backend(BACKEND))
}

pub(crate) struct Inner {
    pub(crate) client: Surreal<Any>,
    pub(crate) names: Layout,
    /// The migration lock's lease ([`SurrealOptions::migration_lock_lease`]).
    pub(crate) lock_lease: Duration,
}

/// One SurrealDB database (a namespace and database) holding agno's tables. Cheap to clone.
///
/// Table names, record ids, field encodings (record links for agent/team/workflow/user ids,
/// `datetime` timestamps) and the schema-version records are agno 3.1.10's. Every
/// read-modify-write is one SurrealQL transaction that re-checks the record it read.
#[derive(Clone)]
pub struct SurrealDb {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for SurrealDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SurrealDb")
            .field("names", &self.inner.names)
            .finish_non_exhaustive()
    }
}

impl SurrealDb {
    /// Connects to `url` (`mem://`, `surrealkv://PATH`, `ws://HOST:PORT`, as the enabled
    /// features allow), signs in when credentials are given, selects the namespace and
    /// database, then [`SurrealDb::open`]s it. `InvalidInput` (before connecting) when
    /// [`SurrealOptions::migration_lock_lease`] is under one second.
    pub async fn connect(url: &str, options: SurrealOptions) -> Result<Self> {
        Self::connect_with_mode(url, options, OpenMode::CreateMissing).await
    }

    /// [`SurrealDb::connect`] in `mode` (see [`SurrealDb::open_with_mode`]). With
    /// [`OpenMode::Existing`] a `surrealkv://PATH` that does not exist is `NotFound` before
    /// connecting (connecting would create it).
    pub async fn connect_with_mode(
        url: &str,
        options: SurrealOptions,
        mode: OpenMode,
    ) -> Result<Self> {
        check_lease(options.migration_lock_lease)?;
        if let Some(path) = url.strip_prefix("surrealkv://").filter(|_| !mode.creates()) {
            if !std::path::Path::new(path).exists() {
                return Err(
                    OpenMode::no_database(path, "the SurrealKV store does not exist")
                        .with_backend(BACKEND),
                );
            }
        }
        let client = surrealdb::engine::any::connect(url.to_owned())
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unavailable,
                    format!("cannot connect to SurrealDB at {url}: {}", e.message()),
                )
                .with_backend(BACKEND)
                .with_operation("connect")
                .with_source(e)
            })?;
        if let Some((user, pass)) = &options.credentials {
            client
                .signin(surrealdb::opt::auth::Root {
                    username: user.clone(),
                    password: pass.clone(),
                })
                .await
                .map_err(|e| db_err("sign in", e))?;
        }
        if !mode.creates() {
            // Selecting a namespace or database that does not exist defines it: look first.
            let missing = |what: &str| {
                OpenMode::no_database(
                    format!(
                        "SurrealDB namespace `{}` database `{}`",
                        options.namespace, options.database
                    ),
                    format!("none of agno's tables holds a record (the {what} does not exist)"),
                )
                .with_backend(BACKEND)
            };
            if !defines(&client, "INFO FOR ROOT", "namespaces", &options.namespace).await? {
                return Err(missing("namespace"));
            }
            client
                .use_ns(options.namespace.clone())
                .await
                .map_err(|e| db_err("use namespace", e))?;
            if !defines(&client, "INFO FOR NS", "databases", &options.database).await? {
                return Err(missing("database"));
            }
        }
        client
            .use_ns(options.namespace.clone())
            .use_db(options.database.clone())
            .await
            .map_err(|e| db_err("use namespace and database", e))?;
        Self::open_with_mode(client, options, mode).await
    }

    /// Opens a connected client (namespace and database already selected): defines agno's
    /// tables and indexes where missing. A database whose agno tables are all empty is new:
    /// its tables are stamped at the latest schema version (unless
    /// [`SurrealOptions::stamp_new_database`] is off). An existing unstamped database is
    /// pre-v3 (agno 2.x): run [`agno_storage_core::MigrationManager`] on it.
    ///
    /// `InvalidInput` when a table name is not a plain identifier or
    /// [`SurrealOptions::migration_lock_lease`] is under one second.
    pub async fn open(client: Surreal<Any>, options: SurrealOptions) -> Result<Self> {
        Self::open_with_mode(client, options, OpenMode::CreateMissing).await
    }

    /// [`SurrealDb::open`] in `mode`. With [`OpenMode::Existing`] nothing is defined or
    /// written (no table, index or stamp, whatever [`SurrealOptions::stamp_new_database`]
    /// says): a database where none of agno's tables holds a record is `NotFound`.
    pub async fn open_with_mode(
        client: Surreal<Any>,
        options: SurrealOptions,
        mode: OpenMode,
    ) -> Result<Self> {
        check_lease(options.migration_lock_lease)?;
        let names = Layout {
            tables: options.names,
            links: options.links,
        };
        for t in names.all() {
            check_ident(t)?;
        }
        let me = SurrealDb {
            inner: Arc::new(Inner {
                client,
                names,
                lock_lease: options.migration_lock_lease,
            }),
        };
        if !mode.creates() {
            if !agno_storage_doc::holds_agno_docs(&me).await? {
                return Err(OpenMode::no_database(
                    format!(
                        "SurrealDB namespace `{}` database `{}`",
                        options.namespace, options.database
                    ),
                    "none of agno's tables holds a record",
                )
                .with_backend(BACKEND));
            }
            return Ok(me);
        }
        me.run("define tables", &me.inner.names.schema(), Vec::new())
            .await?;
        if options.stamp_new_database {
            agno_storage_doc::stamp_new_database(&me).await?;
        }
        Ok(me)
    }

    /// The underlying `surrealdb` client.
    pub fn client(&self) -> &Surreal<Any> {
        &self.inner.client
    }

    /// The table names in use.
    pub fn names(&self) -> &TableNames {
        &self.inner.names.tables
    }

    /// The migration lock lease in use ([`SurrealOptions::migration_lock_lease`]).
    pub fn migration_lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        agno_storage_doc::agno_db(self)
    }
}

/// Whether `info` (`INFO FOR ROOT`, `INFO FOR NS`) lists `name` among its `what`.
async fn defines(client: &Surreal<Any>, info: &str, what: &str, name: &str) -> Result<bool> {
    let mut response = client
        .query(info.to_owned())
        .await
        .map_err(|e| db_err("inspect", e))?;
    let listed: surrealdb::types::Value = response.take(0).map_err(|e| db_err("inspect", e))?;
    Ok(match &listed {
        surrealdb::types::Value::Object(o) => {
            matches!(o.get(what), Some(surrealdb::types::Value::Object(names)) if names.get(name).is_some())
        }
        _ => false,
    })
}
