//! Crash during migration on DynamoDB: a child process migrating a large agno 2.x database
//! is killed with SIGKILL at random points, and the database must recover (see
//! `conformance_tests::crash`).
//!
//! The server comes from `AGNO_TEST_DYNAMODB_URL` (DynamoDB Local); without it the test is
//! skipped, except under `CI=true`, where it fails.
//!
//! The migration lock is a lease (`pk = "migration_lock#<versions table>"` in the meta table)
//! that its holder renews every lease/3; the trial's children and parent use a 2-second
//! lease (the default is 30 s), so after a kill the recovering `up()` waits up to 2 seconds
//! for the dead child's lease to pass and takes the lock over: nothing clears it by hand. A
//! holder whose `up()` returned must leave no lock: `up()` awaits `HeldLock::release`, and the
//! `after_child` hook fails the trial when a finished child left its lock.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Error, ErrorKind, Result, Session};
use agno_storage_dynamo::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use agno_storage_dynamo::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ProvisionedThroughput, ScalarAttributeType, TableStatus,
};
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use agno_storage_dynamo::{DynamoDb, TableNames};
use conformance_tests::crash::{CrashBackend, CrashDb, Target};
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);

fn ddb_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, e.to_string())
}

/// A client for DynamoDB Local with static test credentials (never a default profile).
fn client(url: &str) -> Client {
    let conf = agno_storage_dynamo::aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    Client::from_conf(conf)
}

struct Dynamo {
    url: String,
    client: tokio::sync::OnceCell<Client>,
}

impl Dynamo {
    /// One client, created on the runtime that uses it.
    async fn client(&self) -> &Client {
        self.client
            .get_or_init(|| async { client(&self.url) })
            .await
    }
}

/// Writes sessions as agno 2.9.0's `DynamoDb.upsert_session` did: the whole session dict
/// with `runs` as an `S` holding the JSON list, no stamps, no runs table.
struct Writer {
    client: Client,
    table: String,
}

#[async_trait]
impl LegacyWriter for Writer {
    async fn write_legacy_session(&self, s: Session, runs_blob: Value) -> Result<()> {
        let mut item = HashMap::new();
        let v = serde_json::to_value(&s).map_err(|e| Error::invalid_input(e.to_string()))?;
        if let Value::Object(map) = v {
            for (k, v) in map {
                let a = match v {
                    Value::Null => continue,
                    Value::Bool(b) => AttributeValue::N(if b { "True" } else { "False" }.into()),
                    Value::Number(n) => AttributeValue::N(n.to_string()),
                    Value::String(s) => AttributeValue::S(s),
                    other => AttributeValue::S(other.to_string()),
                };
                item.insert(k, a);
            }
        }
        let runs = match runs_blob {
            Value::String(text) => text,
            other => other.to_string(),
        };
        item.insert("runs".into(), AttributeValue::S(runs));
        self.client
            .put_item()
            .table_name(&self.table)
            .set_item(Some(item))
            .send()
            .await
            .map_err(ddb_err)?;
        Ok(())
    }
}

/// agno 2.9.0's sessions table, created before the store opens, so the store sees an
/// existing unstamped (pre-v3) database.
async fn create_legacy_sessions(client: &Client, table: &str) -> Result<()> {
    let build = |e: agno_storage_dynamo::aws_sdk_dynamodb::error::BuildError| ddb_err(e);
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("session_id")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .map_err(build)?,
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("session_id")
                .key_type(KeyType::Hash)
                .build()
                .map_err(build)?,
        )
        .billing_mode(BillingMode::Provisioned)
        .provisioned_throughput(
            ProvisionedThroughput::builder()
                .read_capacity_units(5)
                .write_capacity_units(5)
                .build()
                .map_err(build)?,
        )
        .send()
        .await
        .map_err(ddb_err)?;
    for _ in 0..600 {
        let out = client
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(ddb_err)?;
        if out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Err(ddb_err(format!("{table} did not become ACTIVE")))
}

#[async_trait]
impl CrashBackend for Dynamo {
    fn name(&self) -> &str {
        "dynamodb"
    }

    fn default_sessions(&self) -> usize {
        // DynamoDB Local serializes writes: 250 runs keep the 20 trials near a minute.
        25
    }

    async fn create(&self) -> Result<CrashDb> {
        // `agno_ct_<epoch>_…`: the conformance suite drops such leftovers after three hours.
        let prefix = format!(
            "agno_ct_{}_crash{}_",
            now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let table = TableNames::with_prefix(&prefix).sessions;
        create_legacy_sessions(self.client().await, &table).await?;
        Ok(CrashDb {
            locator: prefix,
            writer: Arc::new(Writer {
                client: self.client().await.clone(),
                table,
            }),
        })
    }

    async fn open(&self, locator: &str) -> Result<AgnoDb> {
        Ok(DynamoDb::open(
            self.client().await.clone(),
            TableNames::with_prefix(locator),
        )
        .await?
        .with_migration_lock_lease(LEASE)?
        .agno_db())
    }

    async fn after_child(&self, locator: &str, killed: bool) -> Result<()> {
        if killed {
            // The dead child's lock stays: the recovering up() takes it over after the lease.
            return Ok(());
        }
        let names = TableNames::with_prefix(locator);
        let out = self
            .client()
            .await
            .get_item()
            .table_name(&names.meta)
            .key(
                "pk",
                AttributeValue::S(format!("migration_lock#{}", names.versions)),
            )
            .consistent_read(true)
            .send()
            .await
            .map_err(ddb_err)?;
        if out.item().is_some_and(|a| !a.is_empty()) {
            return Err(Error::new(
                ErrorKind::Conflict,
                "a child whose up() returned left its migration lock behind: up() must release it",
            ));
        }
        Ok(())
    }

    async fn destroy(&self, locator: &str) -> Result<()> {
        let mut start: Option<String> = None;
        let mut ours = Vec::new();
        loop {
            let out = self
                .client()
                .await
                .list_tables()
                .set_exclusive_start_table_name(start.take())
                .send()
                .await
                .map_err(ddb_err)?;
            ours.extend(
                out.table_names()
                    .iter()
                    .filter(|n| n.starts_with(locator))
                    .cloned(),
            );
            match out.last_evaluated_table_name() {
                Some(last) => start = Some(last.to_owned()),
                None => break,
            }
        }
        for table in ours {
            self.client()
                .await
                .delete_table()
                .table_name(table)
                .send()
                .await
                .map_err(ddb_err)?;
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let target = match std::env::var("AGNO_TEST_DYNAMODB_URL") {
        Ok(url) if !url.is_empty() => Target::ready(Dynamo {
            url,
            client: tokio::sync::OnceCell::new(),
        }),
        _ => Target::missing("dynamodb", "AGNO_TEST_DYNAMODB_URL"),
    };
    conformance_tests::crash::main(vec![target])
}
