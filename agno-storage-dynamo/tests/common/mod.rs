//! Shared by the conformance suite and the crash trial: a DynamoDB Local client, and agno
//! 2.9.0's legacy session writer and sessions table.

use std::collections::HashMap;

use agno_storage_core::{Error, ErrorKind, Result, Session};
use agno_storage_dynamo::aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use agno_storage_dynamo::aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ProvisionedThroughput, ScalarAttributeType, TableStatus,
};
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use conformance_tests::{async_trait, LegacyWriter};
use serde_json::Value;

/// A test-setup failure as a storage error.
pub fn ddb_err(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Unavailable, e.to_string())
}

/// A client for DynamoDB Local with static test credentials (never a default profile).
pub fn client(url: &str) -> Client {
    let conf = agno_storage_dynamo::aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .build();
    Client::from_conf(conf)
}

/// Writes sessions as agno 2.9.0's `DynamoDb.upsert_session` did: the whole session dict
/// with `runs` as an `S` holding the JSON list, no stamps, no runs table.
pub struct Writer {
    pub client: Client,
    pub table: String,
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

/// agno 2.9.0's sessions table (its only table this suite needs), created before the
/// store opens, so the store sees an existing unstamped (pre-v3) database.
pub async fn create_legacy_sessions(client: &Client, table: &str) -> Result<()> {
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
