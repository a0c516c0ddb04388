//! [`DefaultPaths`]: a document backend with the engine's default paths in place of its
//! native ones, so one suite pins that both agree.
//!
//! A backend's native paths are the engine hooks it overrides for speed or atomicity
//! (`write_run`, `copy_legacy_runs`, `delete_session`, `claim_next_job`, `claim_next_jobs`,
//! `get_each`, `commit_each`, `legacy_page`, `migration_lock`, `query_page`, `session_page`,
//! `memory_stats`, `due_schedules`, `now`).
//! `DefaultPaths(backend)` delegates everything else (its layout: names, document ids,
//! encodings, guards, metrics ids, the lock's item, where legacy blobs are) and leaves those
//! hooks to the engine's defaults; running the conformance suite over both shows the native
//! paths behave as the defaults do.

use agno_storage_core::{async_trait, MetricsRecord, Result, Table, UserMemory};
use agno_storage_doc::{Commit, DocBackend, Fields, Guard, Pre, Stored};
use serde_json::Value;

/// `B` with the engine's default paths in place of its native ones.
#[derive(Debug, Clone)]
pub struct DefaultPaths<B>(pub B);

/// [`DefaultPaths`] as an [`agno_storage_doc::Wrap`], for adapters that build their own
/// `AgnoDb` (Redis/Valkey's `KvDb::agno_db_with`).
#[derive(Debug, Clone, Copy)]
pub struct DefaultPathsOf;

impl agno_storage_doc::Wrap for DefaultPathsOf {
    type Of<B: DocBackend> = DefaultPaths<B>;

    fn wrap<B: DocBackend>(backend: B) -> DefaultPaths<B> {
        DefaultPaths(backend)
    }
}

fn pre<B: DocBackend>(pre: Pre<DefaultPaths<B>>) -> Pre<B> {
    match pre {
        Pre::Any => Pre::Any,
        Pre::Absent => Pre::Absent,
        Pre::At(version) => Pre::At(version),
    }
}

fn stored<B: DocBackend>(s: Stored<B>) -> Stored<DefaultPaths<B>> {
    Stored {
        id: s.id,
        fields: s.fields,
        version: s.version,
    }
}

#[async_trait]
impl<B: DocBackend> DocBackend for DefaultPaths<B> {
    const BACKEND: &'static str = B::BACKEND;
    const ITEM: &'static str = B::ITEM;
    const SCHEDULE_NAME_GUARDS: bool = B::SCHEDULE_NAME_GUARDS;
    const JOB_KEY_GUARDS: bool = B::JOB_KEY_GUARDS;
    const MAX_ID_CHARS: Option<usize> = B::MAX_ID_CHARS;
    const MAX_JSON_DEPTH: Option<usize> = B::MAX_JSON_DEPTH;
    const DURABLE: bool = B::DURABLE;
    const LEGACY_LOCK_STALE_SECONDS: i64 = B::LEGACY_LOCK_STALE_SECONDS;
    const MAX_COMMIT_WRITES: usize = B::MAX_COMMIT_WRITES;

    type Version = B::Version;
    type Write = B::Write;

    fn collection(&self, which: Table) -> &str {
        self.0.collection(which)
    }

    fn doc_id(&self, key: &str) -> String {
        self.0.doc_id(key)
    }

    fn put(&self, collection: &str, id: &str, fields: &Fields, p: Pre<Self>) -> B::Write {
        self.0.put(collection, id, fields, pre(p))
    }

    fn delete(&self, collection: &str, id: &str, p: Pre<Self>) -> B::Write {
        self.0.delete(collection, id, pre(p))
    }

    async fn commit(&self, operation: &'static str, writes: Vec<B::Write>) -> Result<Commit> {
        self.0.commit(operation, writes).await
    }

    async fn commit_all(&self, operation: &'static str, writes: Vec<B::Write>) -> Result<()> {
        self.0.commit_all(operation, writes).await
    }

    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored<Self>>> {
        Ok(self.0.get(collection, id).await?.map(stored))
    }

    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored<Self>>> {
        Ok(self
            .0
            .query(collection, eq)
            .await?
            .into_iter()
            .map(stored)
            .collect())
    }

    async fn any_doc(&self, collection: &str) -> Result<bool> {
        self.0.any_doc(collection).await
    }

    async fn find(
        &self,
        collection: &str,
        key_field: &str,
        key: &str,
    ) -> Result<Option<Stored<Self>>> {
        Ok(self.0.find(collection, key_field, key).await?.map(stored))
    }

    fn schedule_name_guard(&self, user_id: Option<&str>, name: &str) -> Guard {
        self.0.schedule_name_guard(user_id, name)
    }

    fn job_key_guard(&self, user_id: Option<&str>, key: &str) -> Guard {
        self.0.job_key_guard(user_id, key)
    }

    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        self.0.metrics_id(record).await
    }

    /// Where agno 2.x's runs blobs can be found is layout, not a path: a backend whose
    /// queries read indexes that records agno 2.x wrote are not in yet finds them its way.
    async fn legacy_sessions(&self, user_id: Option<&str>) -> Result<Vec<Stored<Self>>> {
        Ok(self
            .0
            .legacy_sessions(user_id)
            .await?
            .into_iter()
            .map(stored)
            .collect())
    }

    fn is_legacy_metric(&self, fields: &Fields) -> bool {
        self.0.is_legacy_metric(fields)
    }

    fn encode_memory(&self, memory: &UserMemory) -> Result<Fields> {
        self.0.encode_memory(memory)
    }

    fn lock_id(&self) -> String {
        self.0.lock_id()
    }

    fn lock_lease(&self) -> std::time::Duration {
        self.0.lock_lease()
    }

    fn lock_location(&self) -> String {
        self.0.lock_location()
    }
}
