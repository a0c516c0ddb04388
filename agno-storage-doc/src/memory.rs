//! [`InMemoryDb`]: the engine over documents held in process memory, a complete store for
//! unit tests and demos. Nothing survives the process.
//!
//! A commit takes one short lock over the whole state, checks every precondition, then
//! applies every write, so commits are atomic and serializable; a document's version is a
//! counter bumped by each write.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use agno_storage_core::migration::{SchemaVersion, TableType};
use agno_storage_core::{async_trait, AgnoDb, MetricsRecord, Result, Session};
use serde_json::Value;

use crate::migrate::version_fields;
use crate::{Commit, DocBackend, Docs, Fields, Pre, Stored, Table};

type Documents = BTreeMap<String, (Fields, u64)>;

#[derive(Debug, Default)]
struct State {
    collections: HashMap<&'static str, Documents>,
    clock: u64,
}

/// One write of an [`InMemoryDb`] commit.
#[derive(Debug)]
pub struct MemoryWrite {
    collection: &'static str,
    id: String,
    fields: Option<Fields>,
    pre: Pre<InMemoryDb>,
}

/// The in-memory database. Cheap to clone: clones share one state.
#[derive(Debug, Clone)]
pub struct InMemoryDb {
    state: Arc<Mutex<State>>,
}

impl Default for InMemoryDb {
    fn default() -> Self {
        Self::new()
    }
}

impl InMemoryDb {
    /// A new, empty database with every table stamped at the latest schema version.
    pub fn new() -> Self {
        let db = Self::new_legacy();
        {
            let mut state = db.lock();
            for t in TableType::ALL {
                let fields = version_fields(t.default_name(), SchemaVersion::LATEST);
                state.write(
                    Table::Versions.default_name(),
                    t.default_name(),
                    Some(fields),
                );
            }
        }
        db
    }

    /// A new, empty database in the state agno 2.x leaves: nothing stamped. Fill it with
    /// [`InMemoryDb::insert_legacy_session`], then migrate it.
    pub fn new_legacy() -> Self {
        InMemoryDb {
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// Writes a session as agno 2.x stored it, with its runs in a legacy blob (an array or
    /// an encoded JSON string), for migration tests and imports.
    pub async fn insert_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        let id = session.session_id.clone();
        Docs::of(self)
            .write_legacy_session(&id, session, runs_blob)
            .await
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        crate::agno_db(self)
    }

    /// Every store of this database, for a caller that wires them itself.
    pub fn stores(&self) -> Docs<InMemoryDb> {
        Docs(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave a half-applied commit: preconditions are
        // checked before the first write. Recover the state instead of propagating the poison.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    fn write(&mut self, collection: &'static str, id: &str, fields: Option<Fields>) {
        self.clock += 1;
        let docs = self.collections.entry(collection).or_default();
        match fields {
            Some(f) => {
                docs.insert(id.to_owned(), (f, self.clock));
            }
            None => {
                docs.remove(id);
            }
        }
    }

    fn holds(&self, w: &MemoryWrite) -> bool {
        let current = self
            .collections
            .get(w.collection)
            .and_then(|docs| docs.get(&w.id))
            .map(|(_, v)| *v);
        match &w.pre {
            Pre::Any => true,
            Pre::Absent => current.is_none(),
            Pre::At(v) => current == Some(*v),
        }
    }
}

fn collection_name(collection: &str) -> &'static str {
    Table::ALL
        .into_iter()
        .map(Table::default_name)
        .find(|n| *n == collection)
        .unwrap_or("agno_storage_unknown")
}

#[async_trait]
impl DocBackend for InMemoryDb {
    const BACKEND: &'static str = "memory";
    const ITEM: &'static str = "document";
    const SCHEDULE_NAME_GUARDS: bool = true;
    const MAX_ID_CHARS: Option<usize> = None;
    const MAX_JSON_DEPTH: Option<usize> = None;
    const DURABLE: bool = false;

    type Version = u64;
    type Write = MemoryWrite;

    fn collection(&self, which: Table) -> &str {
        which.default_name()
    }

    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre<Self>) -> MemoryWrite {
        MemoryWrite {
            collection: collection_name(collection),
            id: id.to_owned(),
            fields: Some(fields.clone()),
            pre,
        }
    }

    fn delete(&self, collection: &str, id: &str, pre: Pre<Self>) -> MemoryWrite {
        MemoryWrite {
            collection: collection_name(collection),
            id: id.to_owned(),
            fields: None,
            pre,
        }
    }

    async fn commit(&self, _operation: &'static str, writes: Vec<MemoryWrite>) -> Result<Commit> {
        let mut state = self.lock();
        if !writes.iter().all(|w| state.holds(w)) {
            return Ok(Commit::Conflict);
        }
        for w in writes {
            state.write(w.collection, &w.id, w.fields);
        }
        Ok(Commit::Done)
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        let state = self.lock();
        Ok(state
            .collections
            .get(collection)
            .and_then(|docs| docs.get(id))
            .map(|(fields, version)| Stored {
                id: id.to_owned(),
                fields: fields.clone(),
                version: *version,
            }))
    }

    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        let state = self.lock();
        Ok(state
            .collections
            .get(collection)
            .into_iter()
            .flatten()
            .filter(|(_, (fields, _))| crate::matches_eq(fields, eq))
            .map(|(id, (fields, version))| Stored {
                id: id.clone(),
                fields: fields.clone(),
                version: *version,
            })
            .collect())
    }

    async fn any_doc(&self, collection: &str) -> Result<bool> {
        Ok(self
            .lock()
            .collections
            .get(collection)
            .is_some_and(|docs| !docs.is_empty()))
    }

    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        Ok(crate::digest_id(
            "metrics",
            &[
                Some(&record.date.to_string()),
                Some(&record.aggregation_period),
                Some(record.stored_user_id()),
            ],
        ))
    }

    fn lock_location(&self) -> String {
        format!("document \"migration_lock\" in {}", Self::BACKEND)
    }
}
