//! The conformance suite against DynamoDB, one fresh table-name prefix per case.
//!
//! The server comes from `AGNO_TEST_DYNAMODB_URL` (DynamoDB Local from `scripts/test.sh`).
//! Without it the suite is skipped, except under `CI=true`, where a missing or unreachable
//! server fails the run.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Capabilities, Result};
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use agno_storage_dynamo::{DynamoDb, TableNames};
use agno_storage_testkit::default_paths::DefaultPaths;
use agno_storage_testkit::servers::{self, Backend};
use common::{client, create_legacy_sessions, Writer};
use conformance_tests::{async_trait, Harness, JobStress, LegacyDb, RawRunWriter, RawRunsDb};

const PREFIX: &str = "agno_ct_";

struct Dynamo {
    url: String,
    client: tokio::sync::OnceCell<Client>,
    /// The engine's default paths in place of DynamoDB's native ones (see
    /// `agno_storage_testkit::default_paths`).
    default_paths: bool,
}

impl Dynamo {
    fn new(url: &str, default_paths: bool) -> Self {
        Dynamo {
            url: url.to_owned(),
            client: tokio::sync::OnceCell::new(),
            default_paths,
        }
    }

    /// The stores of `store`, on its native paths or the engine's defaults.
    fn wire(&self, store: DynamoDb) -> AgnoDb {
        if self.default_paths {
            agno_storage_doc::agno_db(&DefaultPaths(store))
        } else {
            store.agno_db()
        }
    }

    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { client(&self.url) })
            .await
    }

    /// `agno_ct_<epoch>_<random>_`: the epoch lets a later run drop tables left behind.
    fn names(&self) -> TableNames {
        TableNames::with_prefix(&format!(
            "{PREFIX}{}_{}_",
            now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ))
    }
}

#[async_trait]
impl Harness for Dynamo {
    fn name(&self) -> &str {
        if self.default_paths {
            "dynamodb-default-paths"
        } else {
            "dynamodb"
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// DynamoDB Local serializes writes; 400 jobs keep the trial to about a minute
    /// (`AGNO_JOB_STRESS_JOBS=2000` runs the full size).
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 400,
            ..JobStress::default()
        }
    }

    async fn open(&self, _case: &str) -> Result<AgnoDb> {
        let client = self.client().await.clone();
        Ok(self.wire(DynamoDb::open(client, self.names()).await?))
    }

    fn writes_raw_runs(&self) -> bool {
        true
    }

    async fn open_with_raw_runs(&self, _case: &str) -> Result<RawRunsDb> {
        let client = self.client().await.clone();
        let names = self.names();
        let table = names.runs.clone();
        let db = self.wire(DynamoDb::open(client.clone(), names).await?);
        Ok(RawRunsDb {
            db,
            writer: Arc::new(RawRuns { client, table }),
        })
    }

    async fn open_legacy(&self, _case: &str) -> Result<LegacyDb> {
        let client = self.client().await.clone();
        let names = self.names();
        create_legacy_sessions(&client, &names.sessions).await?;
        let table = names.sessions.clone();
        let store = DynamoDb::open(client.clone(), names).await?;
        Ok(LegacyDb {
            db: self.wire(store),
            writer: Arc::new(Writer { client, table }),
        })
    }
}

/// Rewrites run items of one runs table past the adapter.
struct RawRuns {
    client: Client,
    table: String,
}

#[async_trait]
impl RawRunWriter for RawRuns {
    /// A lone surrogate escape in the run's `run_data` text, as agno's `DynamoDb` writes one.
    async fn make_undecodable(&self, run_id: &str) -> Result<()> {
        use agno_storage_dynamo::aws_sdk_dynamodb::types::AttributeValue;
        let err = |e: String| agno_storage_core::Error::invalid_input(e);
        let key = AttributeValue::S(run_id.to_owned());
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("run_id", key.clone())
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        let Some(AttributeValue::S(data)) = item.item().and_then(|i| i.get("run_data")) else {
            return Err(err(format!("run {run_id} has no run_data text")));
        };
        self.client
            .update_item()
            .table_name(&self.table)
            .key("run_id", key)
            .update_expression("SET run_data = :d")
            .expression_attribute_values(
                ":d",
                AttributeValue::S(data.replace("output of", r"caf\udce9")),
            )
            .send()
            .await
            .map_err(|e| err(e.to_string()))?;
        Ok(())
    }
}

/// Drops tables earlier runs left behind (older than three hours), never a running one's.
async fn drop_stale_tables(client: &Client) -> std::result::Result<(), String> {
    let cutoff = now_epoch_seconds() - 3 * 3600;
    let mut start: Option<String> = None;
    let mut stale = Vec::new();
    loop {
        let out = client
            .list_tables()
            .set_exclusive_start_table_name(start.take())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        for name in out.table_names() {
            let epoch = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.split('_').next())
                .and_then(|e| e.parse::<i64>().ok());
            if epoch.is_some_and(|e| e < cutoff) {
                stale.push(name.clone());
            }
        }
        match out.last_evaluated_table_name() {
            Some(next) => start = Some(next.to_owned()),
            None => break,
        }
    }
    for name in stale {
        client
            .delete_table()
            .table_name(name)
            .send()
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let url = match servers::url_for_suite(Backend::DynamoDb) {
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
    let checked = runtime.block_on(drop_stale_tables(&client(&url)));
    if let Err(e) = checked {
        eprintln!("error: DynamoDB at AGNO_TEST_DYNAMODB_URL is unreachable: {e}");
        return ExitCode::FAILURE;
    }
    drop(runtime);
    // DynamoDB's native paths, then the engine's defaults on the same layout: both pass.
    let mut code = conformance_tests::main(Dynamo::new(&url, false));
    if code == ExitCode::SUCCESS {
        code = conformance_tests::main(Dynamo::new(&url, true));
    }
    servers::stop_all();
    code
}
