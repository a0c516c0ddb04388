//! What the test targets share: scratch directories and agno 2.9.0's table files.

#![allow(dead_code)]

use std::path::PathBuf;

use agno_storage_core::{Result, Session};
use agno_storage_json::JsonDb;
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

/// The tables an agno 2.9.0 directory can hold (agno creates a file when it first reads
/// a table), plus those agno never writes: all unstamped, as a pre-v3 directory is.
pub const LEGACY_TABLES: &[&str] = &[
    "agno_sessions",
    "agno_memories",
    "agno_metrics",
    "agno_eval_runs",
    "agno_knowledge",
    "agno_schedules",
    "agno_schedule_runs",
    "agno_learnings",
];

/// A fresh directory under the system temp dir (or `AGNO_TEST_JSON_DIR`).
pub fn scratch_dir(name: &str) -> PathBuf {
    let root = std::env::var_os("AGNO_TEST_JSON_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("agno-storage-json-tests"));
    let dir = root.join(scratch_name(name));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Writes sessions as agno 2.9.0's `JsonDb` did: runs inside the session row.
pub struct Writer(pub JsonDb);

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, session: Session, runs_blob: Value) -> Result<()> {
        self.0.write_legacy_session(session, runs_blob).await
    }
}

/// Whether unreachable servers must fail the run instead of skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// A conformance harness over one bucket of an object store: every case gets its own
/// prefix (`<run>/<case>/`), legacy cases get agno 2.9.0's table files there first.
#[cfg(any(feature = "gcs", feature = "s3"))]
pub mod bucket {
    use std::sync::Arc;

    use agno_storage_core::{AgnoDb, Capabilities, Error, ErrorKind, Result};
    use agno_storage_json::object_store::path::Path;
    use agno_storage_json::object_store::{ObjectStore, ObjectStoreExt, PutPayload};
    use agno_storage_json::JsonDb;
    use conformance_tests::{async_trait, Harness, JobStress, LegacyDb};

    pub struct Bucket {
        pub name: &'static str,
        pub store: Arc<dyn ObjectStore>,
        pub run: String,
    }

    impl Bucket {
        pub fn new(name: &'static str, store: Arc<dyn ObjectStore>) -> Self {
            let run = format!(
                "agno-ct-{}",
                &uuid::Uuid::new_v4().simple().to_string()[..10]
            );
            Bucket { name, store, run }
        }

        pub fn prefix(&self, case: &str) -> String {
            format!("{}/{}/", self.run, super::scratch_name(case))
        }

        pub async fn open(&self, prefix: &str) -> Result<JsonDb> {
            JsonDb::open_store(self.store.clone(), prefix, self.name, true).await
        }
    }

    #[async_trait]
    impl Harness for Bucket {
        fn name(&self) -> &str {
            self.name
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::all()
        }

        /// Every claim rewrites the whole jobs object through the emulator: 200 jobs keep
        /// the trial to about a minute (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
        fn job_stress(&self) -> JobStress {
            JobStress {
                jobs: 200,
                ..JobStress::default()
            }
        }

        async fn open(&self, case: &str) -> Result<AgnoDb> {
            Ok(Bucket::open(self, &self.prefix(case)).await?.agno_db())
        }

        async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
            let prefix = self.prefix(case);
            for table in super::LEGACY_TABLES {
                self.store
                    .put(
                        &Path::from(format!("{prefix}{table}.json")),
                        PutPayload::from_static(b"[]"),
                    )
                    .await
                    .map_err(|e| Error::new(ErrorKind::Unavailable, e.to_string()))?;
            }
            let db = Bucket::open(self, &prefix).await?;
            Ok(LegacyDb {
                db: db.agno_db(),
                writer: Arc::new(super::Writer(db)),
            })
        }
    }
}

/// A path-safe, unique name for a case.
pub fn scratch_name(name: &str) -> String {
    let short: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(32)
        .collect();
    format!(
        "{short}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// The value of `var`, or `None` with a note (a panic under `CI=true`).
pub fn env_or_skip(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(v) => Some(v),
        Err(_) if ci() => panic!("CI=true but {var} is not set; run ./scripts/test.sh"),
        Err(_) => {
            eprintln!("note: {var} is not set; skipping {what} (./scripts/test.sh starts it)");
            None
        }
    }
}

/// The GCS emulator's bucket as an object store (`AGNO_TEST_GCS_*`), or `None` with a note.
#[cfg(feature = "gcs")]
pub fn gcs_store() -> Option<std::sync::Arc<dyn agno_storage_json::object_store::ObjectStore>> {
    use agno_storage_json::object_store::gcp::GoogleCloudStorageBuilder;
    let account = env_or_skip("AGNO_TEST_GCS_SERVICE_ACCOUNT", "the GCS tests")?;
    let bucket = std::env::var("AGNO_TEST_GCS_BUCKET").unwrap_or_else(|_| "agno-test".into());
    let store = GoogleCloudStorageBuilder::new()
        .with_bucket_name(bucket)
        .with_service_account_path(account)
        .build()
        .expect("configure the GCS client");
    Some(std::sync::Arc::new(store))
}

/// The S3 emulator's bucket as an object store (`AGNO_TEST_S3_*`), or `None` with a note.
#[cfg(feature = "s3")]
pub fn s3_store() -> Option<std::sync::Arc<dyn agno_storage_json::object_store::ObjectStore>> {
    use agno_storage_json::object_store::aws::{AmazonS3Builder, S3ConditionalPut};
    let url = env_or_skip("AGNO_TEST_S3_URL", "the S3 tests")?;
    let bucket = std::env::var("AGNO_TEST_S3_BUCKET").unwrap_or_else(|_| "agno-test".into());
    let store = AmazonS3Builder::new()
        .with_endpoint(url)
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_conditional_put(S3ConditionalPut::ETagMatch)
        .build()
        .expect("configure the S3 client");
    Some(std::sync::Arc::new(store))
}
