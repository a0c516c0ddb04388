//! The store logic agno-storage's document backends share: every store trait of
//! `agno-storage-core` written once over [`DocBackend`] (get, put, delete, equality queries
//! and atomic commits whose writes carry compare-and-set preconditions).
//!
//! An adapter implements [`DocBackend`] for its database type (its client, its encoding, and
//! the hooks where its layout differs, such as [`DocBackend::doc_id`]); [`Docs`] over that
//! type implements every store trait, and [`agno_db`] wires it into an `AgnoDb`.
//!
//! Every read-modify-write is a compare-and-set: the document is read, changed and written
//! under the precondition that it is still the version read, retried with [`backoff`] up to
//! [`CAS_ATTEMPTS`] times on a lost race.
#![deny(missing_docs)]

mod backend;
mod evals;
mod jobs;
mod knowledge;
pub mod layout;
mod learnings;
mod legacy;
mod memories;
mod memory;
mod metrics;
mod migrate;
mod runs;
mod schedules;
mod sessions;

pub use agno_storage_core::{Table, TableNames};
pub use backend::{
    backoff, digest_id, get_one_by_one, matches_eq, object, opt, Commit, DocBackend, Fields, Guard,
    Pre, Stored, CAS_ATTEMPTS,
};
pub use jobs::{claim_oldest_job, decode_or_fail_job, ClaimPass};
pub use legacy::legacy_page_by_id;
pub use memory::InMemoryDb;
pub use migrate::{holds_agno_docs, migration_steps, stamp_new_database};
pub use runs::{copy_runs_cas, next_indexes_after, run_counter_id, updated_run, write_run_cas};
pub use sessions::{delete_session_cas, LEGACY_RUNS};

use std::sync::Arc;

use agno_storage_core::migration::{
    MigrationLock, MigrationStep, MigrationTarget, SchemaVersionStore, TableRef,
};
use agno_storage_core::{async_trait, AgnoDb, Result};
use ref_cast::RefCast;

/// The store traits of `agno-storage-core` over a [`DocBackend`]: an adapter's stores are
/// `Docs<ItsBackend>`, and [`agno_db`] wires one into an [`AgnoDb`]. It dereferences to the
/// backend; [`Docs::of`] views a borrowed backend the same way (for a backend's hooks).
#[derive(Debug, Clone, RefCast)]
#[repr(transparent)]
pub struct Docs<B>(pub B);

impl<B> Docs<B> {
    /// The stores over a borrowed backend.
    pub fn of(backend: &B) -> &Docs<B> {
        Docs::ref_cast(backend)
    }
}

impl<B> std::ops::Deref for Docs<B> {
    type Target = B;

    fn deref(&self) -> &B {
        &self.0
    }
}

impl<B: DocBackend> Docs<B> {
    /// The write that replaces `stored`, a document of `table`, with `fields`, conditioned
    /// on the version read.
    pub(crate) fn rewrite_fields(
        &self,
        table: Table,
        stored: &Stored<B>,
        fields: &Fields,
    ) -> B::Write {
        self.put(
            self.collection(table),
            &stored.id,
            fields,
            stored.unchanged(),
        )
    }

    /// [`Docs::rewrite_fields`] with `record` (`what`, for errors) as the body.
    pub(crate) fn rewrite<T: serde::Serialize + ?Sized>(
        &self,
        table: Table,
        stored: &Stored<B>,
        record: &T,
        what: &str,
    ) -> Result<B::Write> {
        Ok(self.rewrite_fields(table, stored, &self.to_fields(record, what)?))
    }

    /// Document [`DocBackend::doc_id`] of `id` of `table` and its record (`what`, for
    /// errors), if the record's key (`key`) is `id`.
    pub(crate) async fn keyed<T: serde::de::DeserializeOwned>(
        &self,
        table: Table,
        id: &str,
        what: &str,
        key: impl Fn(&T) -> &String,
    ) -> Result<Option<(Stored<B>, T)>> {
        let Some(stored) = self.get(self.collection(table), &self.doc_id(id)).await? else {
            return Ok(None);
        };
        let record: T = stored.decode(what)?;
        Ok((*key(&record) == id).then_some((stored, record)))
    }

    /// Deletes the document of `table` whose `key_field` is `key` when `user_id` may see it
    /// (its stored `user_id`, read without decoding it): whether it was deleted. The delete
    /// is conditioned on the document as read, so an owner changed meanwhile is seen.
    pub(crate) async fn delete_visible(
        &self,
        table: Table,
        key_field: &str,
        key: &str,
        user_id: Option<&str>,
        operation: &'static str,
    ) -> Result<bool> {
        let coll = self.collection(table);
        for attempt in 0..CAS_ATTEMPTS {
            let Some(stored) = self.find(coll, key_field, key).await? else {
                return Ok(false);
            };
            if !agno_storage_core::visible_to(stored.str("user_id"), user_id) {
                return Ok(false);
            }
            let write = self.delete(coll, &stored.id, stored.unchanged());
            match self.commit(operation, vec![write]).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended(operation))
    }

    /// [`Docs::delete_visible`] for each of `keys`: how many were deleted.
    pub(crate) async fn delete_all_visible(
        &self,
        table: Table,
        key_field: &str,
        keys: &[String],
        user_id: Option<&str>,
        operation: &'static str,
    ) -> Result<u64> {
        let mut deleted = 0;
        for key in keys {
            if self
                .delete_visible(table, key_field, key, user_id, operation)
                .await?
            {
                deleted += 1;
            }
        }
        Ok(deleted)
    }
}

/// A way to stand a document backend in for another (the test kit's `DefaultPaths`, which
/// leaves a backend's native paths to the engine's defaults), for adapters that build their
/// own `AgnoDb` and take the wrapper as a type parameter.
pub trait Wrap {
    /// `B` wrapped.
    type Of<B: DocBackend>: DocBackend;
    /// Wraps `backend`.
    fn wrap<B: DocBackend>(backend: B) -> Self::Of<B>;
}

/// The identity [`Wrap`]: the backend itself.
#[derive(Debug, Clone, Copy)]
pub struct Unwrapped;

impl Wrap for Unwrapped {
    type Of<B: DocBackend> = B;

    fn wrap<B: DocBackend>(backend: B) -> B {
        backend
    }
}

/// One [`AgnoDb`] over every store of `db`.
pub fn agno_db<B: DocBackend>(db: &B) -> AgnoDb {
    let me = Arc::new(Docs(db.clone()));
    let mut builder = AgnoDb::builder(B::BACKEND);
    if let Some(max) = B::MAX_ID_CHARS {
        builder = builder.max_id_chars(max);
    }
    if let Some(max) = B::MAX_JSON_DEPTH {
        builder = builder.max_json_depth(max);
    }
    builder
        .all_stores(me.clone())
        .migrations(me)
        .durable(B::DURABLE)
        .tables(collection_names(db))
        .build()
}

/// The backend's name of every table, for the spans.
pub fn collection_names<B: DocBackend>(db: &B) -> TableNames {
    let name = |t| db.collection(t).to_owned();
    TableNames {
        sessions: name(Table::Sessions),
        runs: name(Table::Runs),
        memories: name(Table::Memories),
        metrics: name(Table::Metrics),
        evals: name(Table::Evals),
        knowledge: name(Table::Knowledge),
        schedules: name(Table::Schedules),
        schedule_runs: name(Table::ScheduleRuns),
        learnings: name(Table::Learnings),
        jobs: name(Table::Jobs),
        versions: name(Table::Versions),
        meta: name(Table::Meta),
    }
}

#[async_trait]
impl<B: DocBackend> MigrationTarget for Docs<B> {
    fn tables(&self) -> Vec<TableRef> {
        self.collections()
    }

    fn versions(&self) -> &dyn SchemaVersionStore {
        self
    }

    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        migration_steps(Arc::new(self.clone()))
    }

    /// Takes the migration lock: creates the lock document, or takes over one whose lease
    /// has passed, retrying every 100 ms. `Conflict` after a minute (or two leases, if
    /// longer) while a live holder keeps renewing it.
    async fn lock(&self) -> Result<MigrationLock> {
        self.0.migration_lock().await
    }
}
