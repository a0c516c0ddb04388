//! Every store call runs in an `agno_storage` span with its backend, domain, operation,
//! rows touched and duration (and its error kind when it fails), and records no argument:
//! one call per domain, on SQLite and on the in-memory store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use agno_storage_core::{
    AgnoDb, EvalRun, EvalType, Job, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Learning,
    MetricsQuery, Page, RunRecord, Schedule, Session, SessionRead, SessionType, UserMemory,
};
use agno_storage_sql::{SqlDb, TableNames};
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// The fields of every closed `agno_storage` span, in order.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<HashMap<String, String>>>>);

struct Fields(HashMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().into(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.to_string());
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Captured {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields(HashMap::new());
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if span.name() == "agno_storage" {
                if let Some(fields) = span.extensions_mut().remove::<Fields>() {
                    self.0.lock().unwrap().push(fields.0);
                }
            }
        }
    }
}

const USER: &str = "alice-7f3e";

/// One call per domain; each must leave one span with these `(domain, operation, rows,
/// table)`.
async fn one_call_per_domain(
    db: &AgnoDb,
) -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    let session = Session::new("s-1", SessionType::Agent, "agent-1").with_user(USER);
    db.sessions()
        .unwrap()
        .upsert_session(session)
        .await
        .unwrap();
    let run = RunRecord::from_run_data(
        "s-1",
        Some(USER.into()),
        json!({"run_id": "r-1", "content": "secret words"}),
    )
    .unwrap();
    db.runs().unwrap().upsert_run(run).await.unwrap();
    let memory = UserMemory::new("m-1", Some(USER.into()), "likes tea");
    db.memories().unwrap().upsert_memory(memory).await.unwrap();
    let eval = EvalRun {
        run_id: "e-1".into(),
        eval_type: EvalType::Accuracy,
        eval_data: json!({"avg_score": 8}),
        eval_input: None,
        name: None,
        agent_id: None,
        team_id: None,
        workflow_id: None,
        model_id: None,
        model_provider: None,
        evaluated_component_name: None,
        user_id: Some(USER.into()),
        created_at: 1,
        updated_at: None,
    };
    db.evals().unwrap().create_eval_run(eval).await.unwrap();
    let content = KnowledgeContent::new("k-1", "notes", "a doc");
    db.knowledge()
        .unwrap()
        .upsert_knowledge_content(content)
        .await
        .unwrap();
    let schedule = Schedule::new("sch-1", "nightly", "/agents/a/runs", "0 0 * * *");
    db.schedules()
        .unwrap()
        .create_schedule(schedule)
        .await
        .unwrap();
    let learning = Learning {
        learning_id: "l-1".into(),
        learning_type: "user_profile".into(),
        namespace: None,
        user_id: Some(USER.into()),
        agent_id: None,
        team_id: None,
        workflow_id: None,
        session_id: None,
        entity_id: None,
        entity_type: None,
        content: json!({"name": "A"}),
        metadata: None,
        created_at: 1,
        updated_at: None,
    };
    db.learnings()
        .unwrap()
        .upsert_learning(learning)
        .await
        .unwrap();
    let job = Job::new(
        "j-1",
        "agent",
        "agent-1",
        "s-1",
        json!({"token": "secret words"}),
    );
    db.jobs().unwrap().enqueue_job(job, 0).await.unwrap();
    db.metrics()
        .unwrap()
        .get_metrics(MetricsQuery::default())
        .await
        .unwrap();
    let refused = db
        .sessions()
        .unwrap()
        .get_session("bad\0id", SessionRead::for_user(USER))
        .await;
    assert!(refused.is_err());
    vec![
        ("sessions", "upsert_session", "1", "agno_sessions"),
        ("runs", "upsert_run", "1", "agno_runs"),
        ("memories", "upsert_memory", "1", "agno_memories"),
        ("evals", "create_eval_run", "1", "agno_eval_runs"),
        (
            "knowledge",
            "upsert_knowledge_content",
            "1",
            "agno_knowledge",
        ),
        ("schedules", "create_schedule", "1", "agno_schedules"),
        ("learnings", "upsert_learning", "1", "agno_learnings"),
        ("jobs", "enqueue_job", "1", "agno_jobs"),
        ("metrics", "get_metrics", "0", "agno_metrics"),
    ]
}

/// The `agno_storage` spans `calls` leaves, and what it returns.
fn spans_of<T>(calls: impl std::future::Future<Output = T>) -> (Vec<HashMap<String, String>>, T) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::registry().with(captured.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let out = runtime.block_on(calls);
    let spans = captured.0.lock().unwrap().clone();
    (spans, out)
}

fn check(backend: &str, db: AgnoDb) {
    let (spans, expected) = spans_of(one_call_per_domain(&db));
    for (domain, operation, rows, table) in expected {
        let span = spans
            .iter()
            .find(|s| s.get("operation").map(String::as_str) == Some(operation))
            .unwrap_or_else(|| panic!("{backend}: no span of {operation} in {spans:?}"));
        assert_eq!(
            span.get("backend").map(String::as_str),
            Some(backend),
            "{span:?}"
        );
        assert_eq!(
            span.get("domain").map(String::as_str),
            Some(domain),
            "{span:?}"
        );
        assert_eq!(span.get("rows").map(String::as_str), Some(rows), "{span:?}");
        assert_eq!(
            span.get("table").map(String::as_str),
            Some(table),
            "{span:?}"
        );
        assert!(!span.contains_key("retries"), "{span:?}");
        assert!(
            span.get("duration_us")
                .is_some_and(|d| d.parse::<u64>().is_ok()),
            "{span:?}"
        );
        assert!(!span.contains_key("error"), "{span:?}");
    }
    let refused = spans
        .iter()
        .find(|s| s.get("operation").map(String::as_str) == Some("get_session"))
        .unwrap_or_else(|| panic!("{backend}: no span of the refused get_session"));
    assert_eq!(
        refused.get("error").map(String::as_str),
        Some("invalid_input"),
        "{refused:?}"
    );
    for span in &spans {
        for value in span.values() {
            assert!(
                !value.contains(USER) && !value.contains("secret"),
                "{backend}: a span records an argument: {span:?}"
            );
        }
    }
}

#[test]
fn every_store_call_has_a_span_on_sqlite() {
    let path =
        std::env::temp_dir().join(format!("agno-tracing-{}.db", uuid::Uuid::new_v4().simple()));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let db = runtime
        .block_on(SqlDb::open_sqlite(&path, TableNames::default()))
        .unwrap()
        .agno_db();
    drop(runtime);
    check("sqlite", db);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn every_store_call_has_a_span_on_the_in_memory_store() {
    check("memory", agno_storage_doc::InMemoryDb::new().agno_db());
}

/// A knowledge store that retries its write once, as a backend that lost a
/// compare-and-set race does (the document engine's backoff, MongoDB's transactions).
struct RetriesOnce(AgnoDb);

#[agno_storage_core::async_trait]
impl KnowledgeStore for RetriesOnce {
    async fn upsert_knowledge_content(
        &self,
        content: KnowledgeContent,
    ) -> agno_storage_core::Result<KnowledgeContent> {
        agno_storage_core::guard::record_retry(1);
        self.0.knowledge()?.upsert_knowledge_content(content).await
    }
    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> agno_storage_core::Result<Option<KnowledgeContent>> {
        self.0.knowledge()?.get_knowledge_content(id, user_id).await
    }
    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> agno_storage_core::Result<Page<KnowledgeContent>> {
        self.0.knowledge()?.get_knowledge_contents(query).await
    }
    async fn delete_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> agno_storage_core::Result<bool> {
        self.0
            .knowledge()?
            .delete_knowledge_content(id, user_id)
            .await
    }
}

/// A retried write's span says how many retries it took.
#[test]
fn a_retried_write_records_its_retries() {
    let memory = agno_storage_doc::InMemoryDb::new().agno_db();
    let retrying = RetriesOnce(memory);
    let db = AgnoDb::builder("retrying")
        .knowledge(Arc::new(retrying))
        .build();
    let (spans, written) = spans_of(async {
        db.knowledge()
            .unwrap()
            .upsert_knowledge_content(KnowledgeContent::new("k-1", "notes", "a doc"))
            .await
    });
    written.unwrap();
    let outer = spans
        .iter()
        .find(|s| s.get("backend").map(String::as_str) == Some("retrying"))
        .unwrap_or_else(|| panic!("no span of the retried write in {spans:?}"));
    assert_eq!(
        outer.get("retries").map(String::as_str),
        Some("1"),
        "{outer:?}"
    );
}
