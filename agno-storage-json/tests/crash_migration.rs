//! Crash during migration on JSON files: a child process migrating a large agno 2.x
//! directory (or bucket prefix) is killed with SIGKILL at random points, and the database
//! must recover (see `agno_storage_testkit::crash`).
//!
//! The local directory always runs; GCS and S3 (features `gcs`, `s3`) need their emulators'
//! variables and are skipped without them, except under `CI=true`. The local migration lock
//! is a `flock`, released when its holder dies; object stores take none. So no `after_child`
//! hook is needed.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Result};
use agno_storage_json::JsonDb;
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use conformance_tests::async_trait;

struct Local;

#[async_trait]
impl CrashBackend for Local {
    fn name(&self) -> &str {
        "json-local"
    }

    fn default_sessions(&self) -> usize {
        // Every session's copy loads and rewrites the whole runs file, so the migration is
        // quadratic in the runs: 200 runs keep the 20 trials within the time budget.
        20
    }

    async fn create(&self) -> Result<CrashDb> {
        let dir = common::scratch_dir("crash");
        for table in common::LEGACY_TABLES {
            std::fs::write(dir.join(format!("{table}.json")), "[]").map_err(|e| {
                agno_storage_core::Error::new(
                    agno_storage_core::ErrorKind::Unavailable,
                    e.to_string(),
                )
            })?;
        }
        let db = JsonDb::open_local(&dir).await?;
        Ok(CrashDb {
            locator: dir.display().to_string(),
            writer: Arc::new(common::Writer(db)),
        })
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        Ok(JsonDb::open_local(locator).await?.agno_db())
    }

    async fn destroy(&self, locator: &str) -> Result<()> {
        let _ = std::fs::remove_dir_all(locator);
        Ok(())
    }
}

#[cfg(any(feature = "gcs", feature = "s3"))]
mod bucket {
    use super::*;
    use agno_storage_core::{Error, ErrorKind};
    use agno_storage_json::object_store::path::Path;
    use agno_storage_json::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    use common::bucket::Bucket;
    use futures::TryStreamExt;

    /// A bucket; each trial gets its own prefix under the run's.
    pub struct Crashable(pub Bucket);

    fn store_err(e: agno_storage_json::object_store::Error) -> Error {
        Error::new(ErrorKind::Unavailable, e.to_string())
    }

    #[async_trait]
    impl CrashBackend for Crashable {
        fn name(&self) -> &str {
            self.0.name
        }

        fn default_sessions(&self) -> usize {
            // Every session's copy loads and rewrites the whole runs document over HTTP.
            10
        }

        async fn create(&self) -> Result<CrashDb> {
            let prefix = self.0.prefix("crash");
            for table in common::LEGACY_TABLES {
                self.0
                    .store
                    .put(
                        &Path::from(format!("{prefix}{table}.json")),
                        PutPayload::from_static(b"[]"),
                    )
                    .await
                    .map_err(store_err)?;
            }
            let db = self.0.open(&prefix).await?;
            Ok(CrashDb {
                locator: prefix,
                writer: Arc::new(common::Writer(db)),
            })
        }

        async fn open(&self, locator: &str) -> Result<AgnoDb> {
            Ok(self.0.open(locator).await?.agno_db())
        }

        async fn destroy(&self, locator: &str) -> Result<()> {
            let store: &dyn ObjectStore = self.0.store.as_ref();
            let objects: Vec<_> = store
                .list(Some(&Path::from(locator.trim_end_matches('/'))))
                .try_collect()
                .await
                .map_err(store_err)?;
            for object in objects {
                store.delete(&object.location).await.map_err(store_err)?;
            }
            Ok(())
        }
    }
}

fn main() -> ExitCode {
    #[allow(unused_mut)]
    let mut targets = vec![Target::ready(Local)];
    #[cfg(feature = "gcs")]
    targets.push(match common::gcs_store() {
        Some(store) => Target::ready(bucket::Crashable(common::bucket::Bucket::new(
            "json-gcs", store,
        ))),
        None => Target::missing("json-gcs", "AGNO_TEST_GCS_SERVICE_ACCOUNT"),
    });
    #[cfg(feature = "s3")]
    targets.push(match common::s3_store() {
        Some(store) => Target::ready(bucket::Crashable(common::bucket::Bucket::new(
            "json-s3", store,
        ))),
        None => Target::missing("json-s3", "AGNO_TEST_S3_URL"),
    });
    agno_storage_testkit::crash::main(targets)
}
