//! Firestore values ⇄ JSON, document ids, and the raw gRPC calls every store uses: get,
//! equality queries, atomic commits with preconditions, and the field transforms.

use std::collections::HashMap;
use std::time::Duration;

use agno_storage_core::legacy::InsertedRuns;
use agno_storage_core::metrics::is_legacy_metric_json;
use agno_storage_core::{
    async_trait, Error, ErrorKind, MetricsRecord, Result, RunRecord, UserMemory,
};
use agno_storage_doc::{DocBackend, Table};
use firestore::gcloud_sdk::google::firestore::v1 as pb;
use firestore::gcloud_sdk::prost_types::Timestamp;
use firestore::gcloud_sdk::tonic::{Code, Request, Status};
use futures::TryStreamExt;
use pb::structured_query::{
    composite_filter, field_filter, filter, CollectionSelector, CompositeFilter, FieldFilter,
    FieldReference, Filter,
};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::FirestoreDb;

pub(crate) const BACKEND: &str = "firestore";

pub(crate) use agno_storage_doc::{backoff, Commit, Fields, CAS_ATTEMPTS};

/// A stored document; its version is its update time.
pub(crate) type Stored = agno_storage_doc::Stored<FirestoreDb>;
/// The precondition of one write: `At(None)` only requires the document to exist.
pub(crate) type Pre = agno_storage_doc::Pre<FirestoreDb>;

/// One write of `operation` under `pre`.
fn write(operation: pb::write::Operation, pre: Pre) -> Write {
    use pb::precondition::ConditionType as C;
    let condition = match pre {
        Pre::Any => None,
        Pre::Absent => Some(C::Exists(false)),
        Pre::At(None) => Some(C::Exists(true)),
        Pre::At(Some(t)) => Some(C::UpdateTime(t)),
    };
    Write(pb::Write {
        operation: Some(operation),
        update_mask: None,
        update_transforms: vec![],
        current_document: condition.map(|c| pb::Precondition {
            condition_type: Some(c),
        }),
    })
}

fn status_err(operation: &'static str, s: Status) -> Error {
    let kind = match s.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled => ErrorKind::Unavailable,
        Code::AlreadyExists => ErrorKind::AlreadyExists,
        Code::NotFound => ErrorKind::NotFound,
        Code::PermissionDenied | Code::Unauthenticated => ErrorKind::PermissionDenied,
        Code::InvalidArgument => ErrorKind::InvalidInput,
        _ => ErrorKind::Unexpected,
    };
    let temporary = matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Aborted
    );
    Error::new(kind, format!("{}: {}", s.code(), s.message()))
        .with_backend(BACKEND)
        .with_operation(operation)
        .set_temporary(temporary)
        .with_source(s)
}

/// A JSON value as a Firestore value: integers stay integers, other numbers are doubles,
/// objects are maps.
pub(crate) fn to_pb(value: &Value) -> pb::Value {
    use pb::value::ValueType as V;
    let v = match value {
        Value::Null => V::NullValue(0),
        Value::Bool(b) => V::BooleanValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => V::IntegerValue(i),
            None => V::DoubleValue(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => V::StringValue(s.clone()),
        Value::Array(items) => V::ArrayValue(pb::ArrayValue {
            values: items.iter().map(to_pb).collect(),
        }),
        Value::Object(map) => V::MapValue(pb::MapValue {
            fields: map_to_pb(map),
        }),
    };
    pb::Value {
        value_type: Some(v),
    }
}

fn map_to_pb(map: &Fields) -> HashMap<String, pb::Value> {
    map.iter().map(|(k, v)| (k.clone(), to_pb(v))).collect()
}

/// A Firestore value as JSON. Timestamps become epoch seconds, bytes and references strings,
/// geo points `{latitude, longitude}`. Map keys come back sorted (Firestore keeps no order).
pub(crate) fn from_pb(value: pb::Value) -> Value {
    use pb::value::ValueType as V;
    match value.value_type {
        None | Some(V::NullValue(_)) => Value::Null,
        Some(V::BooleanValue(b)) => Value::Bool(b),
        Some(V::IntegerValue(i)) => Value::from(i),
        Some(V::DoubleValue(f)) => {
            serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
        }
        Some(V::TimestampValue(t)) => Value::from(t.seconds),
        Some(V::StringValue(s)) => Value::String(s),
        Some(V::BytesValue(b)) => Value::String(String::from_utf8_lossy(&b).into_owned()),
        Some(V::ReferenceValue(r)) => Value::String(r),
        Some(V::GeoPointValue(p)) => {
            serde_json::json!({"latitude": p.latitude, "longitude": p.longitude})
        }
        Some(V::ArrayValue(a)) => Value::Array(a.values.into_iter().map(from_pb).collect()),
        Some(V::MapValue(m)) => Value::Object(map_from_pb(m.fields)),
        #[allow(unreachable_patterns)]
        Some(_) => Value::Null,
    }
}

fn map_from_pb(fields: HashMap<String, pb::Value>) -> Fields {
    let mut sorted: Vec<(String, pb::Value)> = fields.into_iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    sorted.into_iter().map(|(k, v)| (k, from_pb(v))).collect()
}

/// A document id for a record key: the key itself where Firestore accepts it (agno's run
/// ids, our deterministic ids for sessions, memories and knowledge); `~` and the SHA-256 of
/// the key otherwise (`/`, `.`, `..`, `__x__`, empty, over 1,500 bytes, or a leading `~`).
pub(crate) fn doc_id(key: &str) -> String {
    let reserved = key.is_empty()
        || key == "."
        || key == ".."
        || key.contains('/')
        || key.starts_with('~')
        || (key.len() >= 4 && key.starts_with("__") && key.ends_with("__"))
        || key.len() > 1500;
    if reserved {
        format!("~{}", hex::encode(Sha256::digest(key.as_bytes())))
    } else {
        key.to_owned()
    }
}

/// One write of a commit.
pub struct Write(pb::Write);

impl FirestoreDb {
    fn doc_name(&self, collection: &str, id: &str) -> String {
        format!(
            "{}/{}/{}",
            self.inner.client.get_documents_path(),
            collection,
            id
        )
    }

    /// Applies `(field, transform)` server-side on document `id` when `pre` holds
    /// (`Pre::Any` creates it when absent, `Pre::At(None)` never does).
    pub(crate) fn transform_if(
        &self,
        collection: &str,
        id: &str,
        transforms: Vec<(&str, pb::document_transform::field_transform::TransformType)>,
        pre: Pre,
    ) -> Write {
        let transform = pb::DocumentTransform {
            document: self.doc_name(collection, id),
            field_transforms: transforms
                .into_iter()
                .map(|(f, t)| pb::document_transform::FieldTransform {
                    field_path: f.to_owned(),
                    transform_type: Some(t),
                })
                .collect(),
        };
        write(pb::write::Operation::Transform(transform), pre)
    }

    /// Commits `writes` atomically (no transaction: each write carries its precondition):
    /// the write results, or `None` when a precondition failed.
    pub(crate) async fn commit_results(
        &self,
        operation: &'static str,
        writes: Vec<Write>,
    ) -> Result<Option<Vec<pb::WriteResult>>> {
        if writes.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let request = pb::CommitRequest {
            database: self.inner.client.get_database_path().clone(),
            writes: writes.into_iter().map(|w| w.0).collect(),
            transaction: vec![],
            ..Default::default()
        };
        match self
            .inner
            .client
            .client()
            .get()
            .commit(Request::new(request))
            .await
        {
            Ok(r) => Ok(Some(r.into_inner().write_results)),
            Err(s)
                if matches!(
                    s.code(),
                    Code::FailedPrecondition | Code::AlreadyExists | Code::NotFound | Code::Aborted
                ) =>
            {
                Ok(None)
            }
            Err(s) => Err(status_err(operation, s)),
        }
    }

    async fn query_limit(
        &self,
        collection: &str,
        eq: &[(&str, Value)],
        limit: Option<i32>,
    ) -> Result<Vec<Stored>> {
        let filters: Vec<Filter> = eq
            .iter()
            .map(|(field, value)| {
                let field = FieldReference {
                    field_path: quote_path(field),
                };
                let filter_type = if value.is_null() {
                    filter::FilterType::UnaryFilter(pb::structured_query::UnaryFilter {
                        op: pb::structured_query::unary_filter::Operator::IsNull as i32,
                        operand_type: Some(pb::structured_query::unary_filter::OperandType::Field(
                            field,
                        )),
                    })
                } else {
                    filter::FilterType::FieldFilter(FieldFilter {
                        field: Some(field),
                        op: field_filter::Operator::Equal as i32,
                        value: Some(to_pb(value)),
                    })
                };
                Filter {
                    filter_type: Some(filter_type),
                }
            })
            .collect();
        let r#where = match filters.len() {
            0 => None,
            1 => filters.into_iter().next(),
            _ => Some(Filter {
                filter_type: Some(filter::FilterType::CompositeFilter(CompositeFilter {
                    op: composite_filter::Operator::And as i32,
                    filters,
                })),
            }),
        };
        let query = pb::StructuredQuery {
            from: vec![CollectionSelector {
                collection_id: collection.to_owned(),
                all_descendants: false,
            }],
            r#where,
            limit,
            ..Default::default()
        };
        let request = pb::RunQueryRequest {
            parent: self.inner.client.get_documents_path().clone(),
            query_type: Some(pb::run_query_request::QueryType::StructuredQuery(query)),
            ..Default::default()
        };
        let stream = self
            .inner
            .client
            .client()
            .get()
            .run_query(Request::new(request))
            .await
            .map_err(|s| status_err("query", s))?
            .into_inner();
        let responses: Vec<pb::RunQueryResponse> = stream
            .try_collect()
            .await
            .map_err(|s| status_err("query", s))?;
        Ok(responses
            .into_iter()
            .filter_map(|r| r.document)
            .map(stored)
            .collect())
    }
}

#[async_trait]
impl DocBackend for FirestoreDb {
    const BACKEND: &'static str = BACKEND;
    /// Document ids and indexed values hold 1,500 bytes; ids are combined into guard ids
    /// (owner and name), so 150 characters of up to 4 bytes each leave room for both.
    const MAX_ID_CHARS: Option<usize> = Some(150);
    /// Firestore nests maps and arrays at most 20 levels deep.
    const MAX_JSON_DEPTH: Option<usize> = Some(20);
    const ITEM: &'static str = "document";
    const SCHEDULE_NAME_GUARDS: bool = true;
    /// Firestore's commit limit is 500 writes; 400 leaves room.
    const MAX_COMMIT_WRITES: usize = 400;

    type Version = Option<Timestamp>;
    type Write = Write;

    fn collection(&self, which: Table) -> &str {
        self.inner.names.get(which)
    }

    fn doc_id(&self, key: &str) -> String {
        doc_id(key)
    }

    /// Sets document `id` of `collection` to `fields` (a full replace) under `pre`.
    fn put(&self, collection: &str, id: &str, fields: &Fields, pre: Pre) -> Write {
        let document = pb::Document {
            name: self.doc_name(collection, id),
            fields: map_to_pb(fields),
            create_time: None,
            update_time: None,
        };
        write(pb::write::Operation::Update(document), pre)
    }

    /// Deletes document `id` of `collection` under `pre`.
    fn delete(&self, collection: &str, id: &str, pre: Pre) -> Write {
        write(
            pb::write::Operation::Delete(self.doc_name(collection, id)),
            pre,
        )
    }

    async fn commit(&self, operation: &'static str, writes: Vec<Write>) -> Result<Commit> {
        Ok(match self.commit_results(operation, writes).await? {
            Some(_) => Commit::Done,
            None => Commit::Conflict,
        })
    }

    /// Document `id` of `collection`, if it exists.
    async fn get(&self, collection: &str, id: &str) -> Result<Option<Stored>> {
        let request = pb::GetDocumentRequest {
            name: self.doc_name(collection, id),
            ..Default::default()
        };
        match self
            .inner
            .client
            .client()
            .get()
            .get_document(Request::new(request))
            .await
        {
            Ok(r) => Ok(Some(stored(r.into_inner()))),
            Err(s) if s.code() == Code::NotFound => Ok(None),
            Err(s) => Err(status_err("get document", s)),
        }
    }

    /// Every document of `collection` whose fields equal `eq` (strings, numbers, booleans;
    /// a null matches a null field). Served by single-field indexes: no composite index.
    async fn query(&self, collection: &str, eq: &[(&str, Value)]) -> Result<Vec<Stored>> {
        self.query_limit(collection, eq, None).await
    }

    /// Whether `collection` holds any document.
    async fn any_doc(&self, collection: &str) -> Result<bool> {
        Ok(!self.query_limit(collection, &[], Some(1)).await?.is_empty())
    }

    /// Document `id` of `collection`, or else the first document whose `key_field` is `key`
    /// (documents agno wrote under auto ids).
    async fn find(&self, collection: &str, key_field: &str, key: &str) -> Result<Option<Stored>> {
        if let Some(found) = self.get(collection, &self.doc_id(key)).await? {
            if found.str(key_field) == Some(key) {
                return Ok(Some(found));
            }
        }
        Ok(self
            .query(collection, &[(key_field, Value::String(key.to_owned()))])
            .await?
            .into_iter()
            .next())
    }

    /// agno 3.1.10's ids: `{date}_shared_daily` for the shared bucket and
    /// `{date}_{sha256(user_id)}_daily` per user.
    async fn metrics_id(&self, record: &MetricsRecord) -> Result<String> {
        let owner = match record.user_id.as_deref().filter(|u| !u.is_empty()) {
            Some(u) => hex::encode(Sha256::digest(u.as_bytes())),
            None => "shared".to_owned(),
        };
        Ok(format!(
            "{}_{owner}_{}",
            record.date, record.aggregation_period
        ))
    }

    fn is_legacy_metric(&self, fields: &Fields) -> bool {
        is_legacy_metric_json(fields)
    }

    /// As agno 3.1.10 writes it (`UserMemory.to_dict()`): `created_at` as naive ISO text
    /// (UTC), `updated_at` in epoch seconds.
    fn encode_memory(&self, memory: &UserMemory) -> Result<Fields> {
        let mut fields = self.to_fields(memory, "a memory")?;
        if let Some(t) = chrono::DateTime::from_timestamp(memory.created_at, 0) {
            fields.insert(
                "created_at".into(),
                Value::String(t.naive_utc().format("%Y-%m-%dT%H:%M:%S").to_string()),
            );
        }
        Ok(fields)
    }

    async fn write_run(&self, run: RunRecord) -> Result<RunRecord> {
        self.write_run_counted(run).await
    }

    async fn copy_legacy_runs(&self, rows: Vec<RunRecord>) -> Result<InsertedRuns> {
        self.copy_runs_counted(rows).await
    }

    async fn delete_session(&self, session_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.delete_session_and_runs(session_id, user_id).await
    }

    fn lock_lease(&self) -> Duration {
        self.inner.lock_lease
    }

    fn lock_location(&self) -> String {
        format!(
            "document {:?} in {}",
            "migration_lock", self.inner.names.meta
        )
    }
}

fn stored(doc: pb::Document) -> Stored {
    let id = doc.name.rsplit('/').next().unwrap_or_default().to_owned();
    Stored {
        id,
        fields: map_from_pb(doc.fields),
        version: doc.update_time,
    }
}

/// A field path with backquotes where a segment is not a simple identifier.
fn quote_path(field: &str) -> String {
    let simple = field
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if simple {
        field.to_owned()
    } else {
        format!("`{}`", field.replace('\\', "\\\\").replace('`', "\\`"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trips() {
        let v = serde_json::json!({"a": [1, 2.5, true, null, "x"], "b": {"c": -7, "d": {}}});
        assert_eq!(from_pb(to_pb(&v)), v);
    }

    #[test]
    fn reserved_ids_are_hashed() {
        assert_eq!(doc_id("abc:1"), "abc:1");
        assert!(doc_id("a/b").starts_with('~'));
        assert!(doc_id("__x__").starts_with('~'));
        assert!(doc_id("").starts_with('~'));
        assert_ne!(doc_id("a/b"), doc_id("a/c"));
    }
}
