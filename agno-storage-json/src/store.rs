//! The store behind every trait: the table files plus the migration lock.

use std::sync::Arc;

use agno_storage_core::Result;

use crate::doc::{decode_all, find, Doc};
use crate::files::Files;

pub(crate) struct JsonStore {
    pub(crate) files: Files,
    /// Serializes migrations in this process.
    pub(crate) migration_lock: Arc<tokio::sync::Mutex<()>>,
    /// The local directory, whose lock file serializes migrations across processes.
    #[cfg(feature = "fs")]
    pub(crate) dir: Option<std::path::PathBuf>,
}

impl JsonStore {
    /// Every record of `T`'s table.
    pub(crate) async fn all<T: Doc>(&self) -> Result<Vec<T>> {
        decode_all(&self.files.load(T::TABLE).await?)
    }

    /// The record of `T`'s table with key `id`.
    pub(crate) async fn get<T: Doc>(&self, id: &str) -> Result<Option<T>> {
        Ok(find::<T>(&self.files.load(T::TABLE).await?, id)?.map(|(_, r)| r))
    }
}
