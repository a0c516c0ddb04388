//! Memories, evals, knowledge, metrics and pagination.

use agno_storage_core::metrics::calculate_metrics;
use agno_storage_core::{
    ErrorKind, EvalQuery, EvalRun, EvalType, KnowledgeContent, KnowledgeQuery, MemoryQuery,
    MetricsQuery, Pagination, RunQuery, SessionQuery, SessionType, Sort, SortOrder, UserMemory,
};
use serde_json::json;

use super::{run_row, session, uid};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx};

/// `page` without `limit`, or `page < 1`, is an `InvalidInput` error on every list call.
pub(crate) async fn pagination_is_validated(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let no_limit = Pagination {
        limit: None,
        page: Some(1),
    };
    let page_zero = Pagination::page(10, 0);
    for (p, needle) in [(no_limit, "without `limit`"), (page_zero, "got 0.")] {
        let checks = [
            db.sessions()?
                .get_sessions(SessionQuery {
                    pagination: p,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            db.runs()?
                .get_runs(RunQuery {
                    pagination: p,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            db.memories()?
                .get_memories(MemoryQuery {
                    pagination: p,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            db.memories()?.get_memory_stats(None, p).await.map(|_| ()),
            db.evals()?
                .get_eval_runs(EvalQuery {
                    pagination: p,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
            db.knowledge()?
                .get_knowledge_contents(KnowledgeQuery {
                    pagination: p,
                    ..Default::default()
                })
                .await
                .map(|_| ()),
        ];
        for (i, result) in checks.into_iter().enumerate() {
            let err = expect_err(
                result,
                ErrorKind::InvalidInput,
                &format!("list call #{i} with {p:?}"),
            )?;
            ensure(
                err.message().contains(needle),
                format!("error text {:?} should contain {needle:?}", err.message()),
            )?;
        }
    }
    Ok(())
}

/// Pages are 1-indexed slices of the sorted rows; `total` counts before paging.
pub(crate) async fn pages_are_one_indexed_with_totals(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.sessions()?;
    let user = uid("u");
    for i in 0..7 {
        let mut s = session(SessionType::Agent, Some(&user));
        s.created_at = 2_000 + i;
        store.upsert_session(s).await?;
    }
    let page = |n| SessionQuery {
        user_id: Some(user.clone()),
        pagination: Pagination::page(3, n),
        sort: Sort::by("created_at", SortOrder::Asc),
        ..Default::default()
    };
    let p1 = store.get_sessions(page(1)).await?;
    ensure_eq(
        p1.items.iter().map(|s| s.created_at).collect::<Vec<_>>(),
        vec![2_000, 2_001, 2_002],
        "page 1",
    )?;
    ensure_eq(p1.total, 7, "total")?;
    let p3 = store.get_sessions(page(3)).await?;
    ensure_eq(
        p3.items.iter().map(|s| s.created_at).collect::<Vec<_>>(),
        vec![2_006],
        "page 3",
    )?;
    ensure_eq(
        store.get_sessions(page(4)).await?.items.len(),
        0,
        "page past the end",
    )?;
    Ok(())
}

/// A memory round-trips unchanged, timestamps included (agno shifts `created_at` by the
/// host's UTC offset on document stores); updates keep `created_at` and the owner.
pub(crate) async fn memory_round_trip_keeps_timestamps(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.memories()?;
    let mut m = UserMemory::new(
        uid("m"),
        Some("alice".into()),
        "Prefers \"quotes\", ünïcode and emoji 🍵",
    );
    m.created_at = 1_650_000_000;
    m.topics = Some(vec!["tea".into(), "style".into()]);
    m.input = Some("I like tea".into());
    m.agent_id = Some("agent-1".into());
    m.feedback = Some("good".into());
    store.upsert_memory(m.clone()).await?;
    let read = store
        .get_memory(&m.memory_id, Some("alice"))
        .await?
        .ok_or("memory not found")?;
    ensure_eq(read.created_at, 1_650_000_000, "created_at")?;
    ensure_eq(read.memory.as_str(), m.memory.as_str(), "memory text")?;
    ensure_eq(&read.topics, &m.topics, "topics")?;
    ensure_eq(
        (&read.input, &read.agent_id, &read.feedback),
        (&m.input, &m.agent_id, &m.feedback),
        "input, agent_id, feedback",
    )?;
    let mut edit = m.clone();
    edit.memory = "Prefers green tea".into();
    edit.created_at = 1;
    store.upsert_memory(edit).await?;
    let read = store
        .get_memory(&m.memory_id, None)
        .await?
        .ok_or("memory not found after update")?;
    ensure_eq(
        (read.created_at, read.memory.as_str()),
        (1_650_000_000, "Prefers green tea"),
        "after update",
    )?;
    ensure(
        read.updated_at.is_some_and(|t| t > 1_650_000_000),
        "updated_at moves on update",
    )?;
    Ok(())
}

/// Topic filters (all must match), case-insensitive search, distinct topics, stats.
pub(crate) async fn memory_search_topics_and_stats(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.memories()?;
    let user = uid("u");
    for (text, topics) in [
        ("Loves Green Tea", vec!["drinks", "tea"]),
        ("Hates coffee", vec!["drinks"]),
        ("Runs marathons", vec!["sport"]),
    ] {
        let mut m = UserMemory::new(uid("m"), Some(user.clone()), text);
        m.topics = Some(topics.into_iter().map(str::to_owned).collect());
        store.upsert_memory(m).await?;
    }
    let q = |topics: Vec<&str>, search: Option<&str>| MemoryQuery {
        user_id: Some(user.clone()),
        topics: topics.into_iter().map(str::to_owned).collect(),
        search_content: search.map(str::to_owned),
        ..Default::default()
    };
    ensure_eq(
        store.get_memories(q(vec!["drinks"], None)).await?.total,
        2,
        "topic drinks",
    )?;
    ensure_eq(
        store
            .get_memories(q(vec!["drinks", "tea"], None))
            .await?
            .total,
        1,
        "topics drinks AND tea",
    )?;
    ensure_eq(
        store
            .get_memories(q(vec![], Some("green tea")))
            .await?
            .total,
        1,
        "case-insensitive search",
    )?;
    ensure_eq(
        store.get_memory_topics(Some(&user)).await?,
        vec!["drinks".to_owned(), "sport".into(), "tea".into()],
        "distinct topics",
    )?;
    let stats = store
        .get_memory_stats(Some(&user), Pagination::default())
        .await?;
    ensure_eq(
        stats.items.first().map(|s| s.total_memories),
        Some(3),
        "total_memories",
    )?;
    Ok(())
}

/// Each eval run keeps its own `run_id`: a re-run adds a row, a duplicate id is refused.
pub(crate) async fn eval_reruns_do_not_overwrite(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.evals()?;
    let base = EvalRun {
        run_id: uid("e"),
        eval_type: EvalType::Performance,
        eval_data: json!({"avg_run_time": 1.25}),
        eval_input: None,
        name: Some("latency".into()),
        agent_id: Some("agent-1".into()),
        team_id: None,
        workflow_id: None,
        model_id: None,
        model_provider: None,
        evaluated_component_name: None,
        user_id: None,
        created_at: 1_000,
        updated_at: None,
    };
    store.create_eval_run(base.clone()).await?;
    let rerun = EvalRun {
        run_id: uid("e"),
        eval_data: json!({"avg_run_time": 0.5}),
        created_at: 1_001,
        ..base.clone()
    };
    store.create_eval_run(rerun.clone()).await?;
    let mut clash = base.clone();
    clash.eval_data = json!({"avg_run_time": 99});
    expect_err(
        store.create_eval_run(clash).await,
        ErrorKind::AlreadyExists,
        "re-creating an eval run id",
    )?;
    let first = store
        .get_eval_run(&base.run_id, None)
        .await?
        .ok_or("first eval run vanished")?;
    ensure_eq(
        first.eval_data.clone(),
        json!({"avg_run_time": 1.25}),
        "first run's data",
    )?;
    let listed = store
        .get_eval_runs(EvalQuery {
            agent_id: Some("agent-1".into()),
            eval_types: vec![EvalType::Performance],
            ..Default::default()
        })
        .await?;
    ensure_eq(
        listed
            .items
            .iter()
            .map(|r| r.run_id.clone())
            .collect::<Vec<_>>(),
        vec![rerun.run_id.clone(), base.run_id.clone()],
        "newest first",
    )?;
    let renamed = store
        .rename_eval_run(&base.run_id, "latency v2", None)
        .await?
        .ok_or("rename returned nothing")?;
    ensure_eq(renamed.name.as_deref(), Some("latency v2"), "renamed")?;
    Ok(())
}

/// Metrics aggregate per user; unowned sessions land in the shared bucket, returned as
/// `None`; recomputing updates rows in place.
pub(crate) async fn metrics_per_user_with_shared_bucket(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs, metrics) = (db.sessions()?, db.runs()?, db.metrics()?);
    let day = chrono::NaiveDate::from_ymd_opt(2026, 3, 4).ok_or("bad date")?;
    let noon = day
        .and_hms_opt(12, 0, 0)
        .ok_or("bad time")?
        .and_utc()
        .timestamp();
    for (user, n_runs) in [(Some("alice"), 2), (Some("bob"), 1), (None, 3)] {
        let mut s = session(SessionType::Agent, user);
        s.created_at = noon;
        s.session_data = Some(
            json!({"session_metrics": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}),
        );
        sessions.upsert_session(s.clone()).await?;
        for i in 0..n_runs {
            runs.upsert_run(run_row(&s, &format!("{}-{i}", s.session_id), "COMPLETED"))
                .await?;
        }
    }
    calculate_metrics(sessions, metrics, day).await?;
    let all = metrics.get_metrics(MetricsQuery::default()).await?;
    ensure_eq(
        all.rows.len(),
        3,
        "rows for alice, bob and the shared bucket",
    )?;
    let shared = all
        .rows
        .iter()
        .find(|r| r.user_id.is_none())
        .ok_or("no shared bucket row (user_id None)")?;
    ensure_eq(
        (
            shared.agent_runs_count,
            shared.agent_sessions_count,
            shared.users_count,
        ),
        (3, 1, 0),
        "shared bucket counts",
    )?;
    let alice = metrics
        .get_metrics(MetricsQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(alice.rows.len(), 1, "alice's rows")?;
    let row = &alice.rows[0];
    ensure_eq(
        (row.agent_runs_count, row.users_count),
        (2, 1),
        "alice's counts",
    )?;
    ensure_eq(
        row.token_metrics["total_tokens"].clone(),
        json!(15),
        "alice's tokens",
    )?;
    ensure_eq(
        row.model_metrics.clone(),
        json!([{"model_id": "gpt-4o", "model_provider": "OpenAI", "count": 2}]),
        "alice's model metrics",
    )?;
    ensure(!row.completed, "today's row is not completed")?;
    let shared_only = metrics
        .get_metrics(MetricsQuery {
            user_id: Some(String::new()),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        shared_only.rows.len(),
        1,
        "the shared bucket selected with \"\"",
    )?;
    calculate_metrics(sessions, metrics, day).await?;
    let again = metrics
        .get_metrics(MetricsQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(again.rows.len(), 1, "rows after recomputing")?;
    ensure_eq(
        (&again.rows[0].id, again.rows[0].created_at),
        (&row.id, row.created_at),
        "id and created_at kept on recompute",
    )?;
    Ok(())
}

/// A knowledge upsert changes only the fields it sets; `external_id` is stored.
pub(crate) async fn knowledge_upsert_merges_fields(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.knowledge()?;
    let mut c = KnowledgeContent::new(uid("k"), "report.pdf", "Q3 report");
    c.metadata = Some(json!({"pages": 12}));
    c.external_id = Some("ext-42".into());
    c.content_type = Some("pdf".into());
    c.linked_to = Some("kb-1".into());
    store.upsert_knowledge_content(c.clone()).await?;
    let mut patch = KnowledgeContent::new(c.id.clone(), "report.pdf", "Q3 report");
    patch.status = Some("completed".into());
    patch.created_at = None;
    store.upsert_knowledge_content(patch).await?;
    let read = store
        .get_knowledge_content(&c.id, None)
        .await?
        .ok_or("content not found")?;
    ensure_eq(read.status.as_deref(), Some("completed"), "status set")?;
    ensure_eq(
        (read.external_id.as_deref(), read.content_type.as_deref()),
        (Some("ext-42"), Some("pdf")),
        "unset fields kept",
    )?;
    ensure_eq(
        read.metadata.clone(),
        Some(json!({"pages": 12})),
        "metadata kept",
    )?;
    let linked = store
        .get_knowledge_contents(KnowledgeQuery {
            linked_to: Some("kb-1".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(linked.total, 1, "linked_to filter")?;
    Ok(())
}

/// Eight metrics jobs recompute one day at once (two AgentOS instances on one database):
/// every `(user, date, period)` keeps exactly one row, with the right counts.
pub(crate) async fn concurrent_metrics_runs_keep_one_row_per_key(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let day = chrono::NaiveDate::from_ymd_opt(2026, 5, 6).ok_or("bad date")?;
    let noon = day
        .and_hms_opt(12, 0, 0)
        .ok_or("bad time")?
        .and_utc()
        .timestamp();
    for user in [Some("alice"), Some("bob"), None] {
        let mut s = session(SessionType::Agent, user);
        s.created_at = noon;
        sessions.upsert_session(s.clone()).await?;
        runs.upsert_run(run_row(&s, &format!("{}-r", s.session_id), "COMPLETED"))
            .await?;
    }
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let db = db.clone();
            tokio::spawn(async move {
                calculate_metrics(db.sessions()?, db.metrics()?, day)
                    .await
                    .map(|_| ())
            })
        })
        .collect();
    for t in tasks {
        t.await
            .map_err(|e| format!("metrics task panicked: {e}"))??;
    }
    let rows = db
        .metrics()?
        .get_metrics(MetricsQuery::default())
        .await?
        .rows;
    let mut keys: Vec<_> = rows
        .iter()
        .map(|r| (r.user_id.clone(), r.date, r.aggregation_period.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    ensure_eq(keys.len(), rows.len(), "rows per (user, date, period)")?;
    ensure_eq(rows.len(), 3, "rows for alice, bob and the shared bucket")?;
    ensure(
        rows.iter().all(|r| r.agent_runs_count == 1),
        format!("each bucket counts its one run: {rows:?}"),
    )?;
    Ok(())
}
