//! [`DynamoDb`]: the client, table names and specs, and the item operations every store
//! shares (consistent reads, full scans and GSI queries that follow `LastEvaluatedKey`,
//! conditional writes, transactions).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use agno_storage_core::migration::{SchemaVersion, SchemaVersionStore, TableType};
pub(crate) use agno_storage_core::Table;
use agno_storage_core::{AgnoDb, Error, ErrorKind, OpenMode, Result, TableNames};
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, KeySchemaElement,
    KeyType, Projection, ProjectionType, ProvisionedThroughput, ScalarAttributeType, TableStatus,
    TransactWriteItem,
};
use aws_sdk_dynamodb::Client;
use tokio::sync::Mutex;

use crate::codec::{Item, BACKEND};
use agno_storage_core::lease::DEFAULT_MIGRATION_LOCK_LEASE;
use agno_storage_doc::Docs;

/// Static credentials (an access key pair), e.g. for DynamoDB Local.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
}

/// How to reach DynamoDB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoOptions {
    /// A custom endpoint (`http://127.0.0.1:8000` for DynamoDB Local); `None` for AWS.
    pub endpoint: Option<String>,
    /// The region (`us-east-1` by default).
    pub region: String,
    /// Static credentials; `None` uses the AWS SDK's default provider chain.
    pub credentials: Option<StaticCredentials>,
    /// The table names.
    pub tables: TableNames,
    /// The `Limit` of each Scan and Query request: at most this many items are evaluated per
    /// request, and the rest follows through `LastEvaluatedKey`. `None` (the default) sets no
    /// limit, so only DynamoDB's own 1 MB page splits a read. Small values cost more round
    /// trips; they exist to bound one request's work (and let tests exercise paging). Must
    /// be at least 1.
    pub page_size: Option<i32>,
    /// The migration lock's lease (default [`DEFAULT_MIGRATION_LOCK_LEASE`], 30 s; at least
    /// one second): see [`DynamoDb::with_migration_lock_lease`].
    pub migration_lock_lease: Duration,
}

impl Default for DynamoOptions {
    fn default() -> Self {
        DynamoOptions {
            endpoint: None,
            region: "us-east-1".into(),
            credentials: None,
            tables: TableNames::default(),
            page_size: None,
            migration_lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
        }
    }
}

/// One GSI: `(name, hash attribute, its type, range attribute and type)`; types are `'S'`
/// or `'N'`.
type Gsi = (String, &'static str, char, Option<(&'static str, char)>);

/// A condition's expression, names and values, as the request builders take them.
type CondParts = (
    Option<String>,
    Option<HashMap<String, String>>,
    Option<HashMap<String, AttributeValue>>,
);

/// What DynamoDB needs to know of each table: its key attribute and agno's GSIs.
pub(crate) trait KeySchema {
    /// The hash key attribute.
    fn key(self) -> &'static str;
    /// agno's GSIs.
    fn indexes(self) -> Vec<Gsi>;
}

impl KeySchema for Table {
    fn key(self) -> &'static str {
        match self {
            Table::Meta => "pk",
            table => table.key_field(),
        }
    }

    fn indexes(self) -> Vec<Gsi> {
        let by = |hash: &'static str, ht: char, range: &'static str, rt: char| {
            (format!("{hash}-{range}-index"), hash, ht, Some((range, rt)))
        };
        match self {
            Table::Sessions => [
                "session_type",
                "user_id",
                "agent_id",
                "team_id",
                "workflow_id",
            ]
            .into_iter()
            .map(|h| by(h, 'S', "created_at", 'N'))
            .collect(),
            Table::Runs => [
                "session_id",
                "user_id",
                "agent_id",
                "team_id",
                "workflow_id",
                "status",
            ]
            .into_iter()
            .map(|h| by(h, 'S', "created_at", 'N'))
            .collect(),
            Table::Memories => {
                let mut v: Vec<_> = ["user_id", "agent_id", "team_id", "workflow_id"]
                    .into_iter()
                    .map(|h| by(h, 'S', "updated_at", 'S'))
                    .collect();
                v.push(by("workflow_id", 'S', "created_at", 'S'));
                v
            }
            Table::Evals => ["eval_type", "agent_id", "team_id", "workflow_id"]
                .into_iter()
                .map(|h| by(h, 'S', "created_at", 'N'))
                .collect(),
            Table::Knowledge => ["user_id", "type", "status"]
                .into_iter()
                .map(|h| by(h, 'S', "created_at", 'N'))
                .collect(),
            Table::Metrics => vec![
                by("date", 'S', "aggregation_period", 'S'),
                ("created_at-index".into(), "created_at", 'N', None),
            ],
            _ => Vec::new(),
        }
    }
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) names: TableNames,
    ensured: Mutex<HashSet<Table>>,
    /// Whether a missing table is created on first use (false in [`OpenMode::Existing`]).
    create: bool,
    /// The `Limit` of each Scan and Query request ([`DynamoOptions::page_size`]).
    page_size: Option<i32>,
    /// The migration lock's lease ([`DynamoOptions::migration_lock_lease`]).
    pub(crate) lock_lease: Duration,
}

/// One set of agno tables in DynamoDB. Cheap to clone.
///
/// Table names, key schema, GSIs, attribute encodings and the schema-version items are
/// agno 3.1.10's, so Python agents and this crate share one set of tables.
#[derive(Clone)]
pub struct DynamoDb {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for DynamoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DynamoDb")
            .field("names", &self.inner.names)
            .finish_non_exhaustive()
    }
}

/// An SDK error as a storage error: transport failures and throttling are `Unavailable`
/// (retryable), a failed condition `Conflict`, a missing table `NotFound`.
pub(crate) fn sdk_err<E, R>(operation: &'static str) -> impl FnOnce(SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    move |e| {
        let kind = match &e {
            SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) => ErrorKind::Unavailable,
            _ => match e.code() {
                Some(
                    "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "InternalServerError",
                ) => ErrorKind::Unavailable,
                Some("ConditionalCheckFailedException" | "TransactionConflictException") => {
                    ErrorKind::Conflict
                }
                Some("ResourceNotFoundException") => ErrorKind::NotFound,
                _ => ErrorKind::Unexpected,
            },
        };
        Error::new(kind, DisplayErrorContext(&e).to_string())
            .with_backend(BACKEND)
            .with_operation(operation)
            .with_source(e)
    }
}

fn build_err(e: aws_sdk_dynamodb::error::BuildError) -> Error {
    Error::new(ErrorKind::Unexpected, e.to_string())
        .with_backend(BACKEND)
        .with_source(e)
}

/// A condition expression with its placeholders.
#[derive(Debug, Default, Clone)]
pub(crate) struct Cond {
    parts: Vec<String>,
    names: HashMap<String, String>,
    values: HashMap<String, AttributeValue>,
}

impl Cond {
    fn name(&mut self, attr: &str) -> String {
        let key = format!("#n{}", self.names.len());
        self.names.insert(key.clone(), attr.to_owned());
        key
    }

    fn val(&mut self, v: AttributeValue) -> String {
        let key = format!(":v{}", self.values.len());
        self.values.insert(key, v);
        format!(":v{}", self.values.len() - 1)
    }

    /// The item does not exist (its key attribute is absent).
    pub(crate) fn absent(key: &str) -> Self {
        Cond::default().missing(key)
    }

    /// `attr` is absent.
    pub(crate) fn missing(mut self, attr: &str) -> Self {
        let n = self.name(attr);
        self.parts.push(format!("attribute_not_exists({n})"));
        self
    }

    /// `attr` exists.
    pub(crate) fn exists(mut self, attr: &str) -> Self {
        let n = self.name(attr);
        self.parts.push(format!("attribute_exists({n})"));
        self
    }

    /// `attr = v`.
    pub(crate) fn eq(mut self, attr: &str, v: AttributeValue) -> Self {
        let n = self.name(attr);
        let v = self.val(v);
        self.parts.push(format!("{n} = {v}"));
        self
    }

    /// The stored item is exactly `old` (every attribute equal, none of `new`'s extra
    /// attributes present), or absent when `old` is `None`: a compare-and-set on the whole
    /// item.
    pub(crate) fn unchanged(tbl: Table, old: Option<&Item>, new: &Item) -> Self {
        let Some(old) = old else {
            return Cond::absent(tbl.key());
        };
        let mut c = Cond::default();
        for (k, v) in old {
            c = match v {
                AttributeValue::Null(_) => c.exists(k),
                other => c.eq(k, other.clone()),
            };
        }
        for k in new.keys().filter(|k| !old.contains_key(*k)) {
            c = c.missing(k);
        }
        c
    }

    fn parts(self) -> CondParts {
        if self.parts.is_empty() {
            return (None, None, None);
        }
        let expr = self.parts.join(" AND ");
        let names = (!self.names.is_empty()).then_some(self.names);
        let values = (!self.values.is_empty()).then_some(self.values);
        (Some(expr), names, values)
    }
}

/// How a transaction ended.
pub(crate) enum TxOutcome {
    /// Every write applied.
    Applied,
    /// Cancelled: a condition failed.
    Cancelled,
}

/// Whether an SDK error is a failed condition.
fn is_condition_failed<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.code() == Some("ConditionalCheckFailedException")
}

impl DynamoDb {
    /// Connects with `options`: a client for the endpoint, region and credentials given.
    ///
    /// Nothing is created here beyond the schema-version stamps of a new database: tables
    /// are created on first use (described once per handle). A database where none of the
    /// agno tables exists yet is new and its tables are stamped at the latest schema
    /// version; an existing unstamped one is pre-v3 (agno 2.x): run
    /// [`agno_storage_core::MigrationManager`] on it.
    pub async fn connect(options: DynamoOptions) -> Result<Self> {
        Self::connect_with_mode(options, OpenMode::CreateMissing).await
    }

    /// [`DynamoDb::connect`] in `mode` (see [`DynamoDb::open_with_mode`]).
    pub async fn connect_with_mode(options: DynamoOptions, mode: OpenMode) -> Result<Self> {
        let client = match &options.credentials {
            Some(c) => {
                let mut conf = aws_sdk_dynamodb::Config::builder()
                    .behavior_version(BehaviorVersion::latest())
                    .region(Region::new(options.region.clone()))
                    .credentials_provider(Credentials::new(
                        c.access_key_id.clone(),
                        c.secret_access_key.clone(),
                        None,
                        None,
                        "agno-storage",
                    ));
                if let Some(e) = &options.endpoint {
                    conf = conf.endpoint_url(e.clone());
                }
                Client::from_conf(conf.build())
            }
            None => {
                let mut loader = aws_config::defaults(BehaviorVersion::latest())
                    .region(Region::new(options.region.clone()));
                if let Some(e) = &options.endpoint {
                    loader = loader.endpoint_url(e.clone());
                }
                Client::new(&loader.load().await)
            }
        };
        Self::open_with_mode(client, options.tables, mode)
            .await?
            .with_page_size(options.page_size)?
            .with_migration_lock_lease(options.migration_lock_lease)
    }

    /// Opens the tables `names` with an existing client (see [`DynamoDb::connect`]).
    pub async fn open(client: Client, names: TableNames) -> Result<Self> {
        Self::open_with_mode(client, names, OpenMode::CreateMissing).await
    }

    /// [`DynamoDb::open`] in `mode`. With [`OpenMode::Existing`] nothing is created: no
    /// stamp, and no table, neither now nor on first use (a call on an absent table answers
    /// `NotFound`); tables named by none of agno's table names is `NotFound` at once.
    pub async fn open_with_mode(client: Client, names: TableNames, mode: OpenMode) -> Result<Self> {
        let mut existing = HashSet::new();
        let mut start: Option<String> = None;
        loop {
            let out = client
                .list_tables()
                .set_exclusive_start_table_name(start.take())
                .send()
                .await
                .map_err(sdk_err("list tables"))?;
            existing.extend(out.table_names().iter().cloned());
            match out.last_evaluated_table_name() {
                Some(next) => start = Some(next.to_owned()),
                None => break,
            }
        }
        let fresh = !TableType::ALL
            .iter()
            .any(|t| existing.contains(names.of(*t)));
        let me = DynamoDb {
            inner: Arc::new(Inner {
                client,
                names,
                ensured: Mutex::new(HashSet::new()),
                create: mode.creates(),
                page_size: None,
                lock_lease: DEFAULT_MIGRATION_LOCK_LEASE,
            }),
        };
        if !mode.creates() {
            let others = [
                &me.inner.names.runs,
                &me.inner.names.jobs,
                &me.inner.names.versions,
            ];
            if fresh && !others.iter().any(|t| existing.contains(t.as_str())) {
                return Err(OpenMode::no_database(
                    "DynamoDB",
                    format!(
                        "none of agno's tables exists under these table names ({}, {}, …)",
                        me.inner.names.sessions, me.inner.names.runs
                    ),
                )
                .with_backend(BACKEND));
            }
            return Ok(me);
        }
        if fresh {
            for t in TableType::ALL {
                Docs::of(&me)
                    .set_schema_version(me.inner.names.of(t), SchemaVersion::LATEST)
                    .await?;
            }
        }
        Ok(me)
    }

    /// This handle with another Scan/Query page size (see [`DynamoOptions::page_size`]);
    /// `InvalidInput` when it is below 1.
    pub fn with_page_size(self, page_size: Option<i32>) -> Result<Self> {
        if let Some(n) = page_size.filter(|n| *n < 1) {
            return Err(
                Error::invalid_input(format!("page_size must be at least 1, got {n}"))
                    .with_backend(BACKEND),
            );
        }
        Ok(self.rebuilt(page_size, self.inner.lock_lease))
    }

    /// This handle with another migration lock lease (default
    /// [`DEFAULT_MIGRATION_LOCK_LEASE`], 30 s); `InvalidInput` below one second.
    ///
    /// While a migration holds the lock, a heartbeat renews the lease every `lease / 3`; a
    /// lock whose holder died (no heartbeat) is taken over by the next migration once its
    /// lease passes, so a crashed migration blocks others for at most `lease`. The holder's
    /// lease is written into the lock, so a waiter honours the holder's lease, not its own.
    /// Too short a lease lets a holder stalled longer than two thirds of it (a long pause, an
    /// unreachable endpoint) lose the lock while it still works; `release` then reports the
    /// loss.
    pub fn with_migration_lock_lease(self, lease: Duration) -> Result<Self> {
        let lease =
            agno_storage_core::lease::check_lease(lease).map_err(|e| e.with_backend(BACKEND))?;
        Ok(self.rebuilt(self.inner.page_size, lease))
    }

    /// A new handle on this client and tables with `page_size` and `lock_lease` (tables are
    /// described again on first use).
    fn rebuilt(&self, page_size: Option<i32>, lock_lease: Duration) -> Self {
        DynamoDb {
            inner: Arc::new(Inner {
                client: self.inner.client.clone(),
                names: self.inner.names.clone(),
                ensured: Mutex::new(HashSet::new()),
                create: self.inner.create,
                page_size,
                lock_lease,
            }),
        }
    }

    /// The migration lock lease in use (see [`DynamoDb::with_migration_lock_lease`]).
    pub fn migration_lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    /// The Scan/Query page size in use (see [`DynamoOptions::page_size`]).
    pub fn page_size(&self) -> Option<i32> {
        self.inner.page_size
    }

    /// The underlying client.
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The table names in use.
    pub fn names(&self) -> &TableNames {
        &self.inner.names
    }

    /// One handle over every store of this database.
    pub fn agno_db(&self) -> AgnoDb {
        agno_storage_doc::agno_db(self)
    }

    pub(crate) fn name(&self, tbl: Table) -> &str {
        self.inner.names.get(tbl)
    }

    /// Makes sure `tbl` exists (created as agno creates it), once per handle.
    pub(crate) async fn ensure(&self, tbl: Table) -> Result<&str> {
        let name = self.name(tbl);
        let mut ensured = self.inner.ensured.lock().await;
        if ensured.contains(&tbl) {
            return Ok(name);
        }
        let client = &self.inner.client;
        let described = client.describe_table().table_name(name).send().await;
        let mut active = match described {
            Ok(out) => out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active),
            Err(e) if e.code() == Some("ResourceNotFoundException") && !self.inner.create => {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!(
                        "table {name} does not exist, and this database was opened without \
                         creating tables (OpenMode::Existing): create it with \
                         `agno-storage migrate <URL>`"
                    ),
                )
                .set_temporary(false)
                .with_backend(BACKEND)
                .with_source(e));
            }
            Err(e) if e.code() == Some("ResourceNotFoundException") => {
                self.create_table(tbl).await?;
                false
            }
            Err(e) => return Err(sdk_err("describe table")(e)),
        };
        let mut waited = 0;
        while !active {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            waited += 1;
            let out = client
                .describe_table()
                .table_name(name)
                .send()
                .await
                .map_err(sdk_err("describe table"))?;
            active = out.table().and_then(|t| t.table_status()) == Some(&TableStatus::Active);
            if waited > 600 && !active {
                return Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("table {name} did not become ACTIVE within 60 s"),
                )
                .with_backend(BACKEND));
            }
        }
        ensured.insert(tbl);
        Ok(name)
    }

    async fn create_table(&self, tbl: Table) -> Result<()> {
        let throughput = || {
            ProvisionedThroughput::builder()
                .read_capacity_units(5)
                .write_capacity_units(5)
                .build()
                .map_err(build_err)
        };
        let scalar = |t: char| {
            if t == 'N' {
                ScalarAttributeType::N
            } else {
                ScalarAttributeType::S
            }
        };
        let key = |name: &str, kt: KeyType| {
            KeySchemaElement::builder()
                .attribute_name(name)
                .key_type(kt)
                .build()
                .map_err(build_err)
        };
        let mut defs: Vec<(String, char)> = vec![(tbl.key().to_owned(), 'S')];
        let mut gsis = Vec::new();
        for (index, hash, ht, range) in tbl.indexes() {
            let mut schema = vec![key(hash, KeyType::Hash)?];
            defs.push((hash.to_owned(), ht));
            if let Some((r, rt)) = range {
                schema.push(key(r, KeyType::Range)?);
                defs.push((r.to_owned(), rt));
            }
            gsis.push(
                GlobalSecondaryIndex::builder()
                    .index_name(index)
                    .set_key_schema(Some(schema))
                    .projection(
                        Projection::builder()
                            .projection_type(ProjectionType::All)
                            .build(),
                    )
                    .provisioned_throughput(throughput()?)
                    .build()
                    .map_err(build_err)?,
            );
        }
        let mut seen = HashSet::new();
        let defs = defs
            .into_iter()
            .filter(|(n, _)| seen.insert(n.clone()))
            .map(|(n, t)| {
                AttributeDefinition::builder()
                    .attribute_name(n)
                    .attribute_type(scalar(t))
                    .build()
                    .map_err(build_err)
            })
            .collect::<Result<Vec<_>>>()?;
        let created = self
            .inner
            .client
            .create_table()
            .table_name(self.name(tbl))
            .set_attribute_definitions(Some(defs))
            .key_schema(key(tbl.key(), KeyType::Hash)?)
            .set_global_secondary_indexes((!gsis.is_empty()).then_some(gsis))
            .billing_mode(BillingMode::Provisioned)
            .provisioned_throughput(throughput()?)
            .send()
            .await;
        match created {
            Ok(_) => Ok(()),
            // Another handle created it first: wait for it like for our own.
            Err(e) if e.code() == Some("ResourceInUseException") => Ok(()),
            Err(e) => Err(sdk_err("create table")(e)),
        }
    }

    /// The item keyed `key`, read consistently.
    pub(crate) async fn get(&self, tbl: Table, key: &str) -> Result<Option<Item>> {
        let name = self.ensure(tbl).await?;
        let out = self
            .inner
            .client
            .get_item()
            .table_name(name)
            .key(tbl.key(), AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(sdk_err("get item"))?;
        Ok(out.item)
    }

    /// One consistent Scan request of `tbl` from `start` (exclusive; `None`: the beginning),
    /// filtered on the server by `eq` (a null: absent; empty: no filter): its items and the
    /// `LastEvaluatedKey` to continue from (`None`: the scan is complete).
    pub(crate) async fn scan_page(
        &self,
        tbl: Table,
        eq: &[(&str, serde_json::Value)],
        start: Option<Item>,
    ) -> Result<(Vec<Item>, Option<Item>)> {
        let name = self.ensure(tbl).await?;
        let (filter, names, values) = crate::doc::filter_of(eq).parts();
        let out = self
            .inner
            .client
            .scan()
            .table_name(name)
            .consistent_read(true)
            .set_limit(self.inner.page_size)
            .set_filter_expression(filter)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(sdk_err("scan"))?;
        let next = out.last_evaluated_key.filter(|k| !k.is_empty());
        Ok((out.items.unwrap_or_default(), next))
    }

    /// The items of `tbl` whose attributes equal `eq` (a null: absent), by [`DynamoDb::scan_page`]
    /// through empty pages to the end.
    pub(crate) async fn scan_where(
        &self,
        tbl: Table,
        eq: &[(&str, serde_json::Value)],
    ) -> Result<Vec<Item>> {
        let (mut items, mut start) = (Vec::new(), None);
        loop {
            let (page, next) = self.scan_page(tbl, eq, start).await?;
            items.extend(page);
            if next.is_none() {
                return Ok(items);
            }
            start = next;
        }
    }

    /// The items of `tbl` whose string attribute `attr` is `value`, through agno's GSI
    /// `{attr}-created_at-index` (a Query, following `LastEvaluatedKey`): the read costs the
    /// matching items, not the table. GSIs are eventually consistent and sparse: a write
    /// may take a moment to show (DynamoDB Local applies it at once), and an item without a
    /// numeric `created_at` is not indexed (every row this crate and agno write has one).
    pub(crate) async fn query_index(
        &self,
        tbl: Table,
        attr: &str,
        value: &str,
    ) -> Result<Vec<Item>> {
        let index = tbl
            .indexes()
            .into_iter()
            .find(|(_, hash, _, range)| *hash == attr && matches!(range, Some(("created_at", _))))
            .map(|(index, ..)| index)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("table {} has no {attr}-created_at-index", self.name(tbl)),
                )
                .with_backend(BACKEND)
            })?;
        let name = self.ensure(tbl).await?;
        let mut items = Vec::new();
        let mut start: Option<Item> = None;
        loop {
            let out = self
                .inner
                .client
                .query()
                .table_name(name)
                .index_name(&index)
                .key_condition_expression("#a = :v")
                .expression_attribute_names("#a", attr)
                .expression_attribute_values(":v", AttributeValue::S(value.to_owned()))
                .set_limit(self.inner.page_size)
                .set_exclusive_start_key(start.take())
                .send()
                .await
                .map_err(sdk_err("query"))?;
            items.extend(out.items.unwrap_or_default());
            match out.last_evaluated_key {
                Some(k) if !k.is_empty() => start = Some(k),
                _ => break,
            }
        }
        Ok(items)
    }

    /// Writes `item` when `cond` holds; `false` when it does not.
    pub(crate) async fn put(&self, tbl: Table, item: Item, cond: Option<Cond>) -> Result<bool> {
        let name = self.ensure(tbl).await?;
        let (expr, names, values) = cond.map(Cond::parts).unwrap_or((None, None, None));
        let out = self
            .inner
            .client
            .put_item()
            .table_name(name)
            .set_item(Some(item))
            .set_condition_expression(expr)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk_err("put item")(e)),
        }
    }

    /// Deletes the item keyed `key` when `cond` holds; `false` when it does not or when
    /// nothing was there.
    pub(crate) async fn delete(&self, tbl: Table, key: &str, cond: Option<Cond>) -> Result<bool> {
        let cond = cond.unwrap_or_default().exists(tbl.key());
        self.delete_if(tbl, key, Some(cond)).await
    }

    /// Deletes the item keyed `key` when `cond` holds (deleting nothing is no failure);
    /// `false` when the condition does not hold.
    pub(crate) async fn delete_if(
        &self,
        tbl: Table,
        key: &str,
        cond: Option<Cond>,
    ) -> Result<bool> {
        let name = self.ensure(tbl).await?;
        let (expr, names, values) = cond.map(Cond::parts).unwrap_or((None, None, None));
        let out = self
            .inner
            .client
            .delete_item()
            .table_name(name)
            .key(tbl.key(), AttributeValue::S(key.to_owned()))
            .set_condition_expression(expr)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .send()
            .await;
        match out {
            Ok(_) => Ok(true),
            Err(e) if is_condition_failed(&e) => Ok(false),
            Err(e) => Err(sdk_err("delete item")(e)),
        }
    }

    /// A transactional put (for [`DynamoDb::transact`]).
    pub(crate) async fn tx_put(
        &self,
        tbl: Table,
        item: Item,
        cond: Option<Cond>,
    ) -> Result<TransactWriteItem> {
        let name = self.ensure(tbl).await?;
        let (expr, names, values) = cond.map(Cond::parts).unwrap_or((None, None, None));
        let put = aws_sdk_dynamodb::types::Put::builder()
            .table_name(name)
            .set_item(Some(item))
            .set_condition_expression(expr)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .build()
            .map_err(build_err)?;
        Ok(TransactWriteItem::builder().put(put).build())
    }

    /// A transactional delete (for [`DynamoDb::transact`]).
    pub(crate) async fn tx_delete(
        &self,
        tbl: Table,
        key: &str,
        cond: Option<Cond>,
    ) -> Result<TransactWriteItem> {
        let name = self.ensure(tbl).await?;
        let (expr, names, values) = cond.map(Cond::parts).unwrap_or((None, None, None));
        let delete = aws_sdk_dynamodb::types::Delete::builder()
            .table_name(name)
            .key(tbl.key(), AttributeValue::S(key.to_owned()))
            .set_condition_expression(expr)
            .set_expression_attribute_names(names)
            .set_expression_attribute_values(values)
            .build()
            .map_err(build_err)?;
        Ok(TransactWriteItem::builder().delete(delete).build())
    }

    /// Runs `items` as one `TransactWriteItems`.
    pub(crate) async fn transact(&self, items: Vec<TransactWriteItem>) -> Result<TxOutcome> {
        let out = self
            .inner
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await;
        match out {
            Ok(_) => Ok(TxOutcome::Applied),
            Err(e) => {
                if let Some(aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError::TransactionCanceledException(c)) = e.as_service_error() {
                    if c
                        .cancellation_reasons()
                        .iter()
                        .any(|r| r.code() == Some("ConditionalCheckFailed"))
                    {
                        return Ok(TxOutcome::Cancelled);
                    }
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        "a concurrent transaction touched the same items; retry",
                    )
                    .with_backend(BACKEND));
                }
                Err(sdk_err("transact write items")(e))
            }
        }
    }
}

/// The longest id: keys hold 2,048 bytes (hash) and guard keys combine two ids (owner and
/// name or idempotency key): 200 characters of up to 4 bytes each fit both.
pub(crate) const MAX_ID_CHARS: usize = 200;
