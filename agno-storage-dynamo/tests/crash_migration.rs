//! Crash during migration on DynamoDB: a child process migrating a large agno 2.x database
//! is killed with SIGKILL at random points, and the database must recover (see
//! `agno_storage_testkit::crash`).
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

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::{now_epoch_seconds, AgnoDb, Error, ErrorKind, Result};
use agno_storage_dynamo::aws_sdk_dynamodb::types::AttributeValue;
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use agno_storage_dynamo::{DynamoDb, TableNames};
use agno_storage_testkit::crash::{CrashBackend, CrashDb, Target};
use common::{client, create_legacy_sessions, ddb_err, Writer};
use conformance_tests::async_trait;

/// The migration lock lease of the children and the parent.
const LEASE: Duration = Duration::from_secs(2);

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
    agno_storage_testkit::crash::main(vec![target])
}
