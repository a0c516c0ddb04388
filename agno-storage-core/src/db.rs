//! [`AgnoDb`]: the one handle an application holds, one store per domain.

use std::sync::Arc;

use crate::capabilities::Capabilities;
use crate::error::{Error, Result};
use crate::eval::EvalStore;
use crate::guard::{Checked, Rules};
use crate::job::JobStore;
use crate::knowledge::KnowledgeStore;
use crate::learning::LearningStore;
use crate::legacy::LegacyRunsStore;
use crate::metrics::MetricsStore;
use crate::migration::MigrationTarget;
use crate::run::RunStore;
use crate::schedule::ScheduleStore;
use crate::session::SessionStore;
use crate::tables::TableNames;
use crate::user_memory::MemoryStore;

/// One database: a store per domain a backend offers. A domain it does not offer returns
/// [`crate::ErrorKind::Unsupported`] from its accessor; [`AgnoDb::capabilities`] says which.
#[derive(Clone)]
pub struct AgnoDb {
    backend: &'static str,
    durable: bool,
    max_id_chars: Option<usize>,
    max_json_depth: Option<usize>,
    /// The backend's table names, for the spans (agno's defaults unless given).
    tables: Arc<TableNames>,
    sessions: Option<Arc<dyn SessionStore>>,
    runs: Option<Arc<dyn RunStore>>,
    memories: Option<Arc<dyn MemoryStore>>,
    metrics: Option<Arc<dyn MetricsStore>>,
    evals: Option<Arc<dyn EvalStore>>,
    knowledge: Option<Arc<dyn KnowledgeStore>>,
    schedules: Option<Arc<dyn ScheduleStore>>,
    learnings: Option<Arc<dyn LearningStore>>,
    jobs: Option<Arc<dyn JobStore>>,
    migrations: Option<Arc<dyn MigrationTarget>>,
    legacy: Option<Arc<dyn LegacyRunsStore>>,
}

impl std::fmt::Debug for AgnoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgnoDb")
            .field("backend", &self.backend)
            .field("capabilities", &self.capabilities())
            .finish_non_exhaustive()
    }
}

fn get<'a, T: ?Sized>(
    slot: &'a Option<Arc<T>>,
    backend: &'static str,
    what: &'static str,
) -> Result<&'a T> {
    slot.as_deref()
        .ok_or_else(|| Error::unsupported(backend, what))
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, store: Arc<$ty>) -> Self {
                self.db.$name = Some(store);
                self
            }
        )*
    };
}

/// Builds an [`AgnoDb`] from the stores a backend offers.
pub struct AgnoDbBuilder {
    db: AgnoDb,
}

/// A type that implements every domain store trait and the legacy-runs access: what
/// [`AgnoDbBuilder::all_stores`] takes. Implemented for every such type.
pub trait AllStores:
    SessionStore
    + RunStore
    + MemoryStore
    + MetricsStore
    + EvalStore
    + KnowledgeStore
    + ScheduleStore
    + LearningStore
    + JobStore
    + LegacyRunsStore
    + 'static
{
}

impl<T> AllStores for T where
    T: SessionStore
        + RunStore
        + MemoryStore
        + MetricsStore
        + EvalStore
        + KnowledgeStore
        + ScheduleStore
        + LearningStore
        + JobStore
        + LegacyRunsStore
        + 'static
{
}

impl AgnoDbBuilder {
    setters! {
        /// The session store.
        sessions: dyn SessionStore;
        /// The runs store.
        runs: dyn RunStore;
        /// The memory store.
        memories: dyn MemoryStore;
        /// The metrics store.
        metrics: dyn MetricsStore;
        /// The eval store.
        evals: dyn EvalStore;
        /// The knowledge store.
        knowledge: dyn KnowledgeStore;
        /// The schedule store.
        schedules: dyn ScheduleStore;
        /// The learning store.
        learnings: dyn LearningStore;
        /// The job queue.
        jobs: dyn JobStore;
        /// The migration target (stamps, steps, lock).
        migrations: dyn MigrationTarget;
        /// Access to pre-v3 runs blobs.
        legacy: dyn LegacyRunsStore;
    }

    /// Every domain store and the legacy-runs access from one value that implements them
    /// all (an adapter's store type): the nine domain setters and [`AgnoDbBuilder::legacy`]
    /// in one call.
    pub fn all_stores<S: AllStores>(self, stores: Arc<S>) -> Self {
        self.sessions(stores.clone())
            .runs(stores.clone())
            .memories(stores.clone())
            .metrics(stores.clone())
            .evals(stores.clone())
            .knowledge(stores.clone())
            .schedules(stores.clone())
            .learnings(stores.clone())
            .jobs(stores.clone())
            .legacy(stores)
    }

    /// Writes survive a restart.
    pub fn durable(mut self, durable: bool) -> Self {
        self.db.durable = durable;
        self
    }

    /// The longest identifier, in characters, the backend's keys hold (none by default).
    pub fn max_id_chars(mut self, max: usize) -> Self {
        self.db.max_id_chars = Some(max);
        self
    }

    /// The deepest JSON nesting the backend stores, when lower than
    /// [`crate::json::MAX_DEPTH`].
    pub fn max_json_depth(mut self, max: usize) -> Self {
        self.db.max_json_depth = Some(max);
        self
    }

    /// The names the backend gives its tables (collections, key spaces), which every
    /// store call's span reports as `table` (agno's defaults unless given).
    pub fn tables(mut self, tables: TableNames) -> Self {
        self.db.tables = Arc::new(tables);
        self
    }

    /// The finished handle: every domain store wrapped in the input rules of
    /// [`crate::guard`] (identifiers and nesting depth checked before the backend is called).
    pub fn build(self) -> AgnoDb {
        let mut db = self.db;
        let rules = Rules::new(db.backend, &db.capabilities());
        macro_rules! check {
            ($($slot:ident: $ty:ty),*) => {
                $(db.$slot = db.$slot.map(|inner| {
                    Arc::new(Checked::new(rules, inner).with_tables(db.tables.clone())) as Arc<$ty>
                });)*
            };
        }
        check!(
            sessions: dyn SessionStore,
            runs: dyn RunStore,
            memories: dyn MemoryStore,
            metrics: dyn MetricsStore,
            evals: dyn EvalStore,
            knowledge: dyn KnowledgeStore,
            schedules: dyn ScheduleStore,
            learnings: dyn LearningStore,
            jobs: dyn JobStore
        );
        db
    }
}

macro_rules! accessors {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {
        $(
            $(#[$doc])*
            pub fn $name(&self) -> Result<&$ty> {
                get(&self.$name, self.backend, stringify!($name))
            }
        )*
    };
}

impl AgnoDb {
    /// Starts a handle for `backend` (a short name such as `sqlite` or `memory`).
    pub fn builder(backend: &'static str) -> AgnoDbBuilder {
        AgnoDbBuilder {
            db: AgnoDb {
                backend,
                durable: false,
                max_id_chars: None,
                max_json_depth: None,
                tables: Arc::new(TableNames::default()),
                sessions: None,
                runs: None,
                memories: None,
                metrics: None,
                evals: None,
                knowledge: None,
                schedules: None,
                learnings: None,
                jobs: None,
                migrations: None,
                legacy: None,
            },
        }
    }

    /// The job queue as a shared handle, for what keeps it beyond a borrow (a worker
    /// runtime). `Unsupported` where the backend has no job queue.
    pub fn job_store(&self) -> Result<Arc<dyn JobStore>> {
        self.jobs
            .clone()
            .ok_or_else(|| Error::unsupported(self.backend, "jobs"))
    }

    /// The schedule store as a shared handle, for what keeps it beyond a borrow (a
    /// scheduler). `Unsupported` where the backend has no schedules.
    pub fn schedule_store(&self) -> Result<Arc<dyn ScheduleStore>> {
        self.schedules
            .clone()
            .ok_or_else(|| Error::unsupported(self.backend, "schedules"))
    }

    /// The backend's short name.
    pub fn backend(&self) -> &'static str {
        self.backend
    }

    /// What this handle offers, derived from the stores it holds.
    pub fn capabilities(&self) -> Capabilities {
        Capabilities {
            sessions: self.sessions.is_some(),
            runs: self.runs.is_some(),
            memories: self.memories.is_some(),
            metrics: self.metrics.is_some(),
            evals: self.evals.is_some(),
            knowledge: self.knowledge.is_some(),
            schedules: self.schedules.is_some(),
            learnings: self.learnings.is_some(),
            jobs: self.jobs.is_some(),
            migrations: self.migrations.is_some(),
            legacy_runs: self.legacy.is_some(),
            durable: self.durable,
            max_id_chars: self.max_id_chars,
            max_json_depth: self.max_json_depth,
        }
    }

    accessors! {
        /// Sessions.
        sessions: dyn SessionStore;
        /// Runs.
        runs: dyn RunStore;
        /// User memories.
        memories: dyn MemoryStore;
        /// Metrics.
        metrics: dyn MetricsStore;
        /// Eval runs.
        evals: dyn EvalStore;
        /// Knowledge contents.
        knowledge: dyn KnowledgeStore;
        /// Schedules and schedule runs.
        schedules: dyn ScheduleStore;
        /// Learnings.
        learnings: dyn LearningStore;
        /// The job queue.
        jobs: dyn JobStore;
        /// The migration target.
        migrations: dyn MigrationTarget;
        /// Pre-v3 runs blobs.
        legacy: dyn LegacyRunsStore;
    }
}
