//! User isolation on every domain: user A never sees, updates or deletes user B's rows.

use agno_storage_core::{
    ErrorKind, EvalQuery, EvalRun, EvalType, Job, JobQuery, KnowledgeContent, KnowledgeQuery,
    Learning, LearningQuery, MemoryQuery, Pagination, RunQuery, Schedule, ScheduleUpdate,
    SessionQuery, SessionRead, SessionType, UserMemory,
};
use serde_json::json;

use super::{run_row, session, uid};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx};

/// A run goes only into a session its writer may write: appending a run to another user's
/// session (agno's adapters accept it, and the run then shows in that user's history) is
/// refused with `PermissionDenied` and writes nothing; an unowned session takes anyone's runs.
pub(crate) async fn runs_go_only_into_the_writers_sessions(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let alices = session(SessionType::Agent, Some("alice"));
    let shared = session(SessionType::Agent, None);
    sessions.upsert_session(alices.clone()).await?;
    sessions.upsert_session(shared.clone()).await?;
    runs.upsert_run(run_row(
        &alices,
        &format!("{}-own", alices.session_id),
        "COMPLETED",
    ))
    .await?;
    for (writer, what) in [(Some("bob"), "bob"), (None, "an unscoped writer")] {
        let planted_id = format!("{}-planted-{}", alices.session_id, writer.unwrap_or("none"));
        let mut planted = run_row(&alices, &planted_id, "COMPLETED");
        planted.user_id = writer.map(str::to_owned);
        expect_err(
            runs.upsert_run(planted.clone()).await,
            ErrorKind::PermissionDenied,
            &format!("{what} appending a run to alice's session"),
        )?;
        ensure(
            runs.get_run(&planted.run_id, None).await?.is_none(),
            format!("the refused run of {what} was stored"),
        )?;
    }
    let history = runs
        .get_runs(RunQuery {
            session_id: Some(alices.session_id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        history.total,
        1,
        "runs in alice's session after the refusals",
    )?;
    let mut bobs = run_row(&shared, &format!("{}-bob", shared.session_id), "COMPLETED");
    bobs.user_id = Some("bob".into());
    runs.upsert_run(bobs.clone()).await?;
    ensure(
        runs.get_run(&bobs.run_id, Some("bob")).await?.is_some(),
        "bob's run in an unowned session",
    )?;
    Ok(())
}

/// Sessions and runs: reads, renames and deletes of one user never reach another's rows,
/// and deleting a user's sessions removes only their runs.
pub(crate) async fn sessions_and_runs_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let a = session(SessionType::Agent, Some("alice"));
    let b = session(SessionType::Agent, Some("bob"));
    for s in [&a, &b] {
        sessions.upsert_session(s.clone()).await?;
        runs.upsert_run(run_row(s, &format!("{}-r", s.session_id), "COMPLETED"))
            .await?;
    }
    ensure(
        sessions
            .get_session(&b.session_id, SessionRead::for_user("alice"))
            .await?
            .is_none(),
        "alice reads bob's session",
    )?;
    ensure(
        sessions
            .get_session(&b.session_id, SessionRead::default())
            .await?
            .is_some(),
        "an unscoped read sees bob's session",
    )?;
    ensure(
        runs.get_run(&format!("{}-r", b.session_id), Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's run",
    )?;
    let listed = sessions
        .get_sessions(SessionQuery {
            user_id: Some("alice".into()),
            include_runs: true,
            ..Default::default()
        })
        .await?;
    ensure(
        listed
            .items
            .iter()
            .all(|s| s.user_id.as_deref() == Some("alice")),
        "alice's listing contains another user's session",
    )?;
    let alice_runs = runs
        .get_runs(RunQuery {
            session_id: Some(b.session_id.clone()),
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(alice_runs.total, 0, "alice listing runs of bob's session")?;
    let mut stolen = run_row(&b, &format!("{}-r", b.session_id), "CANCELLED");
    stolen.user_id = Some("alice".into());
    expect_err(
        runs.upsert_run(stolen).await,
        ErrorKind::PermissionDenied,
        "alice overwriting bob's run",
    )?;
    ensure(
        sessions
            .rename_session(&b.session_id, "x", Some("alice"))
            .await?
            .is_none(),
        "alice renames bob's session",
    )?;
    ensure_eq(
        runs.delete_runs(&[format!("{}-r", b.session_id)], Some("alice"))
            .await?,
        0,
        "alice deleting bob's run",
    )?;
    let deleted = sessions
        .delete_sessions(&[a.session_id.clone(), b.session_id.clone()], Some("alice"))
        .await?;
    ensure_eq(deleted, 1, "sessions alice may delete")?;
    ensure(
        sessions
            .get_session(&b.session_id, SessionRead::for_user("bob"))
            .await?
            .is_some(),
        "bob's session survives alice's delete",
    )?;
    ensure(
        runs.get_run(&format!("{}-r", b.session_id), Some("bob"))
            .await?
            .is_some(),
        "bob's run survives alice's delete",
    )?;
    ensure(
        runs.get_run(&format!("{}-r", a.session_id), None)
            .await?
            .is_none(),
        "alice's run is deleted with her session",
    )?;
    Ok(())
}

/// Memories: scoped reads, lists, topics, stats, deletes; no cross-user overwrite.
pub(crate) async fn memories_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.memories()?;
    let mut a = UserMemory::new(uid("m"), Some("alice".into()), "alice likes tea");
    a.topics = Some(vec!["drinks".into()]);
    let mut b = UserMemory::new(uid("m"), Some("bob".into()), "bob likes coffee");
    b.topics = Some(vec!["coffee".into()]);
    store.upsert_memory(a.clone()).await?;
    store.upsert_memory(b.clone()).await?;
    ensure(
        store
            .get_memory(&b.memory_id, Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's memory",
    )?;
    let listed = store
        .get_memories(MemoryQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        listed
            .items
            .iter()
            .map(|m| m.memory_id.clone())
            .collect::<Vec<_>>(),
        vec![a.memory_id.clone()],
        "alice's memories",
    )?;
    ensure_eq(
        store.get_memory_topics(Some("alice")).await?,
        vec!["drinks".to_owned()],
        "alice's topics",
    )?;
    let stats = store
        .get_memory_stats(Some("alice"), Pagination::default())
        .await?;
    ensure_eq(
        stats
            .items
            .iter()
            .map(|s| s.user_id.clone())
            .collect::<Vec<_>>(),
        vec!["alice".to_owned()],
        "alice's stats",
    )?;
    let mut overwrite = b.clone();
    overwrite.user_id = Some("alice".into());
    overwrite.memory = "hijacked".into();
    expect_err(
        store.upsert_memory(overwrite).await,
        ErrorKind::PermissionDenied,
        "alice overwriting bob's memory",
    )?;
    ensure_eq(
        store
            .delete_memories(std::slice::from_ref(&b.memory_id), Some("alice"))
            .await?,
        0,
        "alice deleting bob's memory",
    )?;
    let kept = store
        .get_memory(&b.memory_id, Some("bob"))
        .await?
        .ok_or("bob's memory vanished")?;
    ensure_eq(
        kept.memory.as_str(),
        "bob likes coffee",
        "bob's memory text",
    )?;
    Ok(())
}

pub(crate) fn eval(user: &str) -> EvalRun {
    EvalRun {
        run_id: uid("e"),
        eval_type: EvalType::Accuracy,
        eval_data: json!({"avg_score": 8.5}),
        eval_input: Some(json!({"input": "2+2", "expected_output": "4"})),
        name: Some("math".into()),
        agent_id: Some("agent-1".into()),
        team_id: None,
        workflow_id: None,
        model_id: Some("gpt-4o".into()),
        model_provider: Some("OpenAI".into()),
        evaluated_component_name: Some("Math agent".into()),
        user_id: Some(user.into()),
        created_at: agno_storage_core::now_epoch_seconds(),
        updated_at: None,
    }
}

/// Eval runs: scoped reads, lists, renames and deletes.
pub(crate) async fn evals_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.evals()?;
    let (a, b) = (eval("alice"), eval("bob"));
    store.create_eval_run(a.clone()).await?;
    store.create_eval_run(b.clone()).await?;
    ensure(
        store
            .get_eval_run(&b.run_id, Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's eval",
    )?;
    let listed = store
        .get_eval_runs(EvalQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(listed.total, 1, "alice's eval runs")?;
    ensure(
        store
            .rename_eval_run(&b.run_id, "x", Some("alice"))
            .await?
            .is_none(),
        "alice renames bob's eval",
    )?;
    ensure_eq(
        store
            .delete_eval_runs(std::slice::from_ref(&b.run_id), Some("alice"))
            .await?,
        0,
        "alice deleting bob's eval",
    )?;
    ensure(
        store.get_eval_run(&b.run_id, Some("bob")).await?.is_some(),
        "bob's eval survives",
    )?;
    Ok(())
}

/// Knowledge: a user reads their own and shared rows; deletes are strict.
pub(crate) async fn knowledge_reads_owner_or_shared(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.knowledge()?;
    let shared = KnowledgeContent::new(uid("k"), "handbook", "shared doc");
    let mut mine = KnowledgeContent::new(uid("k"), "notes", "alice's doc");
    mine.user_id = Some("alice".into());
    let mut theirs = KnowledgeContent::new(uid("k"), "diary", "bob's doc");
    theirs.user_id = Some("bob".into());
    for c in [&shared, &mine, &theirs] {
        store.upsert_knowledge_content(c.clone()).await?;
    }
    let visible = store
        .get_knowledge_contents(KnowledgeQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    let mut ids: Vec<String> = visible.items.iter().map(|c| c.id.clone()).collect();
    ids.sort();
    let mut expected = vec![shared.id.clone(), mine.id.clone()];
    expected.sort();
    ensure_eq(ids, expected, "alice sees her own and shared content")?;
    ensure(
        store
            .get_knowledge_content(&theirs.id, Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's content",
    )?;
    ensure(
        store
            .get_knowledge_content(&shared.id, Some("alice"))
            .await?
            .is_some(),
        "alice reads shared content",
    )?;
    let mut hijack = theirs.clone();
    hijack.user_id = Some("alice".into());
    expect_err(
        store.upsert_knowledge_content(hijack).await,
        ErrorKind::NotFound,
        "alice upserting bob's content",
    )?;
    ensure(
        !store
            .delete_knowledge_content(&shared.id, Some("alice"))
            .await?,
        "alice deletes shared content",
    )?;
    ensure(
        !store
            .delete_knowledge_content(&theirs.id, Some("alice"))
            .await?,
        "alice deletes bob's content",
    )?;
    ensure(
        store
            .delete_knowledge_content(&mine.id, Some("alice"))
            .await?,
        "alice deletes her own content",
    )?;
    Ok(())
}

/// Schedules: scoped reads, updates and deletes.
pub(crate) async fn schedules_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mut b = Schedule::new(uid("sch"), "nightly", "/agents/a1/runs", "0 0 * * *");
    b.user_id = Some("bob".into());
    store.create_schedule(b.clone()).await?;
    ensure(
        store.get_schedule(&b.id, Some("alice")).await?.is_none(),
        "alice reads bob's schedule",
    )?;
    ensure(
        store
            .get_schedule_by_name("nightly", Some("alice"))
            .await?
            .is_none(),
        "alice finds bob's schedule by name",
    )?;
    ensure(
        store.get_schedule_by_name("nightly", None).await?.is_none(),
        "the unowned bucket finds bob's schedule by name",
    )?;
    let listed = store
        .get_schedules(None, Some("alice"), Pagination::default())
        .await?;
    ensure_eq(listed.total, 0, "alice's schedules")?;
    let update = ScheduleUpdate::new(
        json!({"enabled": false})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )?;
    ensure(
        store
            .update_schedule(&b.id, Some("alice"), update)
            .await?
            .is_none(),
        "alice updates bob's schedule",
    )?;
    ensure(
        !store.delete_schedule(&b.id, Some("alice")).await?,
        "alice deletes bob's schedule",
    )?;
    let kept = store
        .get_schedule(&b.id, Some("bob"))
        .await?
        .ok_or("bob's schedule vanished")?;
    ensure(kept.enabled, "bob's schedule still enabled")?;
    Ok(())
}

pub(crate) fn learning(id: &str, user: Option<&str>) -> Learning {
    Learning {
        learning_id: id.to_owned(),
        learning_type: "user_profile".into(),
        namespace: None,
        user_id: user.map(str::to_owned),
        agent_id: None,
        team_id: None,
        workflow_id: None,
        session_id: None,
        entity_id: None,
        entity_type: None,
        content: json!({"name": user}),
        metadata: None,
        created_at: agno_storage_core::now_epoch_seconds(),
        updated_at: None,
    }
}

/// Learnings: scoped reads, lists (with and without globals) and deletes; no overwrite.
pub(crate) async fn learnings_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let (a, b, g) = (
        learning(&uid("l"), Some("alice")),
        learning(&uid("l"), Some("bob")),
        learning(&uid("l"), None),
    );
    for l in [&a, &b, &g] {
        store.upsert_learning(l.clone()).await?;
    }
    ensure(
        store
            .get_learning(&b.learning_id, Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's learning",
    )?;
    let own = store
        .list_learnings(LearningQuery {
            user_id: Some("alice".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(own.total, 1, "alice's learnings")?;
    let with_global = store
        .list_learnings(LearningQuery {
            user_id: Some("alice".into()),
            include_global: true,
            ..Default::default()
        })
        .await?;
    ensure_eq(with_global.total, 2, "alice's learnings plus global ones")?;
    let mut hijack = b.clone();
    hijack.user_id = Some("alice".into());
    expect_err(
        store.upsert_learning(hijack).await,
        ErrorKind::PermissionDenied,
        "alice overwriting bob's learning",
    )?;
    ensure(
        !store.delete_learning(&b.learning_id, Some("alice")).await?,
        "alice deletes bob's learning",
    )?;
    Ok(())
}

/// Jobs: scoped reads, lists and cancels.
pub(crate) async fn jobs_are_user_scoped(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut job = Job::new(
        uid("job"),
        "agent",
        "agent-1",
        uid("s"),
        json!({"input": "hi"}),
    );
    job.user_id = Some("bob".into());
    store.enqueue_job(job.clone(), 0).await?;
    ensure(
        store.get_job(&job.id, Some("alice")).await?.is_none(),
        "alice reads bob's job",
    )?;
    ensure_eq(
        store
            .list_jobs(JobQuery {
                user_id: Some("alice".into()),
                ..Default::default()
            })
            .await?
            .total,
        0,
        "alice's jobs",
    )?;
    ensure(
        !store.cancel_job(&job.id, Some("alice")).await?,
        "alice cancels bob's job",
    )?;
    ensure(
        store.cancel_job(&job.id, Some("bob")).await?,
        "bob cancels his queued job",
    )?;
    Ok(())
}
