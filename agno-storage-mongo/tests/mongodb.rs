//! The conformance suite against MongoDB, one fresh database per case.
//!
//! The server comes from `AGNO_TEST_MONGODB_URL` (SecantusDB from `scripts/test.sh`, or a
//! real `mongod`). Without it the suite is skipped, except under `CI=true`, where a
//! missing or unreachable server fails the run.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Capabilities, Result};
use agno_storage_mongo::mongodb::bson::doc;
use agno_storage_mongo::mongodb::{Client, Database};
use agno_storage_mongo::{MongoDb, TableNames};
use agno_storage_testkit::servers::{self, Backend};
use common::{mongo_err, Writer};
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb};

const DB_PREFIX: &str = "agno_ct_";

struct Mongo {
    url: String,
    client: tokio::sync::OnceCell<Client>,
}

impl Mongo {
    /// One client for every case, created on the suite's runtime.
    async fn client(&self) -> Result<&Client> {
        self.client
            .get_or_try_init(|| async { Client::with_uri_str(&self.url).await.map_err(mongo_err) })
            .await
    }

    /// `agno_ct_<epoch>_<case>`: the epoch lets a later run drop databases left behind.
    /// MongoDB caps database names at 63 bytes.
    async fn database(&self, case: &str) -> Result<Database> {
        let short: String = case
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(24)
            .collect();
        let name = format!(
            "{DB_PREFIX}{}_{short}_{}",
            now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        Ok(self.client().await?.database(&name))
    }
}

/// agno 2.9.0's indexes that 3.x changes: the global unique schedule name and the
/// per-day metrics key, plus the sessions collection itself.
async fn create_legacy_layout(db: &Database) -> Result<()> {
    for (coll, key, name) in [
        ("agno_sessions", doc! {"session_id": 1}, "session_id_1"),
        ("agno_schedules", doc! {"name": 1}, "name_1"),
        (
            "agno_metrics",
            doc! {"date": 1, "aggregation_period": 1},
            "date_1_aggregation_period_1",
        ),
    ] {
        db.run_command(
            doc! {"createIndexes": coll, "indexes": [{"key": key, "name": name, "unique": true}]},
        )
        .await
        .map_err(mongo_err)?;
    }
    Ok(())
}

#[async_trait]
impl Harness for Mongo {
    fn name(&self) -> &str {
        "mongodb"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// SecantusDB, the test server, is a single-threaded Python server: 300 jobs keep the
    /// trial under a minute (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 300,
            ..JobStress::default()
        }
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(
            MongoDb::open(self.database(case).await?, TableNames::default())
                .await?
                .agno_db(),
        )
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let db = self.database(case).await?;
        create_legacy_layout(&db).await?;
        let store = MongoDb::open(db.clone(), TableNames::default()).await?;
        Ok(LegacyDb {
            db: store.agno_db(),
            writer: Arc::new(Writer { db }),
        })
    }
}

/// Drops databases earlier runs left behind (older than three hours), never a running one's.
async fn drop_stale_databases(
    client: &Client,
) -> std::result::Result<(), agno_storage_mongo::mongodb::error::Error> {
    let cutoff = now_epoch_seconds() - 3 * 3600;
    for name in client.list_database_names().await? {
        let Some(rest) = name.strip_prefix(DB_PREFIX) else {
            continue;
        };
        let epoch = rest.split('_').next().and_then(|e| e.parse::<i64>().ok());
        if epoch.is_some_and(|e| e < cutoff) {
            client.database(&name).drop().await?;
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let url = match servers::url_for_suite(Backend::MongoDb) {
        Ok(url) => url,
        Err(code) => return code,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let checked = runtime.block_on(async {
        let client = Client::with_uri_str(&url).await?;
        client
            .database("admin")
            .run_command(doc! {"ping": 1})
            .await?;
        drop_stale_databases(&client).await
    });
    if let Err(e) = checked {
        eprintln!("error: MongoDB at AGNO_TEST_MONGODB_URL is unreachable: {e}");
        return ExitCode::FAILURE;
    }
    drop(runtime);
    let code = conformance_tests::main(Mongo {
        url,
        client: tokio::sync::OnceCell::new(),
    });
    servers::stop_all();
    code
}
