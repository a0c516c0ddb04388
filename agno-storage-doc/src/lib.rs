//! The store logic agno-storage's document backends share: every store trait of
//! `agno-storage-core` written once over [`DocBackend`] (get, put, delete, equality queries
//! and atomic commits whose writes carry compare-and-set preconditions).
//!
//! An adapter implements [`DocBackend`] for its database type (its client, its encoding, and
//! the hooks where its layout differs, such as [`DocBackend::doc_id`]), then
//! [`doc_stores!`] implements the store traits for that type by delegating to [`Docs`].
//!
//! Every read-modify-write is a compare-and-set: the document is read, changed and written
//! under the precondition that it is still the version read, retried with [`backoff`] up to
//! [`CAS_ATTEMPTS`] times on a lost race.
#![deny(missing_docs)]

mod backend;
mod evals;
mod knowledge;
mod learnings;
mod memories;
mod metrics;

pub use backend::{
    backoff, digest_id, object, opt, Collection, Commit, DocBackend, Fields, Pre, Stored,
    CAS_ATTEMPTS,
};

/// The store traits of `agno-storage-core` over a [`DocBackend`]; it dereferences to the
/// backend. [`doc_stores!`] makes an adapter's type delegate to it.
#[derive(Debug)]
pub struct Docs<'a, B>(pub &'a B);

impl<B> std::ops::Deref for Docs<'_, B> {
    type Target = B;

    fn deref(&self) -> &B {
        self.0
    }
}

#[doc(hidden)]
pub mod __private {
    pub use crate::Docs;
    pub use agno_storage_core::{
        async_trait, EvalQuery, EvalRun, EvalStore, KnowledgeContent, KnowledgeQuery,
        KnowledgeStore, Learning, LearningQuery, LearningStore, MemoryQuery, MemoryStats,
        MemoryStore, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Page, Pagination,
        Result, UserMemory,
    };
}

/// Implements the store traits of `agno-storage-core` for `$db` (a [`DocBackend`]) by
/// delegating every call to [`Docs`].
#[macro_export]
macro_rules! doc_stores {
    ($db:ty) => {
        const _: () = {
            use $crate::__private::*;

            #[async_trait]
            impl EvalStore for $db {
                async fn create_eval_run(&self, run: EvalRun) -> Result<EvalRun> {
                    Docs(self).create_eval_run(run).await
                }
                async fn get_eval_run(
                    &self,
                    run_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<EvalRun>> {
                    Docs(self).get_eval_run(run_id, user_id).await
                }
                async fn get_eval_runs(&self, query: EvalQuery) -> Result<Page<EvalRun>> {
                    Docs(self).get_eval_runs(query).await
                }
                async fn rename_eval_run(
                    &self,
                    run_id: &str,
                    name: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<EvalRun>> {
                    Docs(self).rename_eval_run(run_id, name, user_id).await
                }
                async fn delete_eval_runs(
                    &self,
                    run_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_eval_runs(run_ids, user_id).await
                }
            }

            #[async_trait]
            impl KnowledgeStore for $db {
                async fn upsert_knowledge_content(
                    &self,
                    content: KnowledgeContent,
                ) -> Result<KnowledgeContent> {
                    Docs(self).upsert_knowledge_content(content).await
                }
                async fn get_knowledge_content(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<KnowledgeContent>> {
                    Docs(self).get_knowledge_content(id, user_id).await
                }
                async fn get_knowledge_contents(
                    &self,
                    query: KnowledgeQuery,
                ) -> Result<Page<KnowledgeContent>> {
                    Docs(self).get_knowledge_contents(query).await
                }
                async fn delete_knowledge_content(
                    &self,
                    id: &str,
                    user_id: Option<&str>,
                ) -> Result<bool> {
                    Docs(self).delete_knowledge_content(id, user_id).await
                }
            }

            #[async_trait]
            impl LearningStore for $db {
                async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
                    Docs(self).upsert_learning(learning).await
                }
                async fn get_learning(
                    &self,
                    learning_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<Learning>> {
                    Docs(self).get_learning(learning_id, user_id).await
                }
                async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
                    Docs(self).list_learnings(query).await
                }
                async fn delete_learning(
                    &self,
                    learning_id: &str,
                    user_id: Option<&str>,
                ) -> Result<bool> {
                    Docs(self).delete_learning(learning_id, user_id).await
                }
            }

            #[async_trait]
            impl MemoryStore for $db {
                async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
                    Docs(self).upsert_memory(memory).await
                }
                async fn get_memory(
                    &self,
                    memory_id: &str,
                    user_id: Option<&str>,
                ) -> Result<Option<UserMemory>> {
                    Docs(self).get_memory(memory_id, user_id).await
                }
                async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
                    Docs(self).get_memories(query).await
                }
                async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
                    Docs(self).get_memory_topics(user_id).await
                }
                async fn get_memory_stats(
                    &self,
                    user_id: Option<&str>,
                    pagination: Pagination,
                ) -> Result<Page<MemoryStats>> {
                    Docs(self).get_memory_stats(user_id, pagination).await
                }
                async fn delete_memories(
                    &self,
                    memory_ids: &[String],
                    user_id: Option<&str>,
                ) -> Result<u64> {
                    Docs(self).delete_memories(memory_ids, user_id).await
                }
            }

            #[async_trait]
            impl MetricsStore for $db {
                async fn upsert_metrics(
                    &self,
                    records: Vec<MetricsRecord>,
                ) -> Result<Vec<MetricsRecord>> {
                    Docs(self).upsert_metrics(records).await
                }
                async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
                    Docs(self).get_metrics(query).await
                }
            }
        };
    };
}
