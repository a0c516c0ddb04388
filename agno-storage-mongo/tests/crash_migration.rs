//! Crash during migration on MongoDB: a child process migrating a large agno 2.x database
//! is killed with SIGKILL at random points, and the database must recover (see
//! `agno_storage_testkit::crash`).
//!
//! The server comes from `AGNO_TEST_MONGODB_URL`; without it the test is skipped, except
//! under `CI=true`, where it fails.
//!
//! The migration lock is a lease (`_id: "migration_lock"` in the meta collection) that its
//! holder renews every lease/3; the trial's children and parent use a 2-second lease (the
//! default is 30 s), so after a kill the recovering `up()` waits up to 2 seconds for the dead
//! child's lease to pass and takes the lock over: nothing clears it by hand. A holder whose
//! `up()` returned must leave no lock: `up()` awaits `HeldLock::release`, and the
//! `after_child` hook fails the trial when a finished child left its lock.

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Error, ErrorKind, Result};
use agno_storage_mongo::mongodb::bson::{doc, Document};
use agno_storage_mongo::mongodb::Client;
use agno_storage_mongo::{MongoDb, TableNames};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use common::{mongo_err, Writer};
use conformance_tests::async_trait;

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);

struct Mongo {
    url: String,
    client: tokio::sync::OnceCell<Client>,
}

impl Mongo {
    async fn client(&self) -> Result<&Client> {
        self.client
            .get_or_try_init(|| async { Client::with_uri_str(&self.url).await.map_err(mongo_err) })
            .await
    }
}

#[async_trait]
impl CrashBackend for Mongo {
    fn name(&self) -> &str {
        "mongodb"
    }

    fn default_sessions(&self) -> usize {
        // SecantusDB, the test server, is a single-threaded Python server that copies about
        // 60 runs a second: 100 runs keep the 20 trials near a minute.
        10
    }

    async fn create(&self) -> Result<CrashDb> {
        // `agno_ct_<epoch>_…`: the conformance suite drops such leftovers after three hours.
        let name = format!(
            "agno_ct_{}_crash_{}",
            now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let db = self.client().await?.database(&name);
        // agno 2.9.0's indexes that 3.x changes, plus the sessions collection itself.
        for (coll, key, index) in [
            ("agno_sessions", doc! {"session_id": 1}, "session_id_1"),
            ("agno_schedules", doc! {"name": 1}, "name_1"),
            (
                "agno_metrics",
                doc! {"date": 1, "aggregation_period": 1},
                "date_1_aggregation_period_1",
            ),
        ] {
            db.run_command(
                doc! {"createIndexes": coll, "indexes": [{"key": key, "name": index, "unique": true}]},
            )
            .await
            .map_err(mongo_err)?;
        }
        Ok(CrashDb {
            locator: name,
            writer: Arc::new(Writer { db }),
        })
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        let db = self.client().await?.database(locator);
        Ok(MongoDb::open(db, TableNames::default())
            .await?
            .with_migration_lock_lease(LEASE)?
            .agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        if killed {
            // The dead child's lock stays: the recovering up() takes it over after the lease.
            return Ok(());
        }
        let meta = TableNames::default().meta;
        let held = self
            .client()
            .await?
            .database(locator)
            .collection::<Document>(&meta)
            .find_one(doc! {"_id": "migration_lock"})
            .await
            .map_err(mongo_err)?;
        if held.is_some() {
            return Err(Error::new(
                ErrorKind::Conflict,
                "a child whose up() returned left its migration lock behind: up() must release it",
            ));
        }
        Ok(())
    }

    async fn destroy(&self, locator: &str) -> Result<()> {
        self.client()
            .await?
            .database(locator)
            .drop()
            .await
            .map_err(mongo_err)
    }
}

fn main() -> ExitCode {
    let target = match std::env::var("AGNO_TEST_MONGODB_URL") {
        Ok(url) if !url.is_empty() => Target::ready(Mongo {
            url,
            client: tokio::sync::OnceCell::new(),
        }),
        _ => Target::missing("mongodb", "AGNO_TEST_MONGODB_URL"),
    };
    agno_storage_testkit::crash::main(vec![target])
}
