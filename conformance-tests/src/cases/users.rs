//! A user's data exported and erased (`export_user`, `erase_user`) over every domain the
//! backend stores.

use agno_storage_core::metrics::calculate_metrics;
use agno_storage_core::{
    erase_user, export_user, now_epoch_seconds, AgnoDb, DomainCounts, Job, JobQuery,
    KnowledgeContent, KnowledgeQuery, MemoryQuery, Result, RunQuery, Schedule, SessionQuery,
    SessionType, UserDomain, UserMemory, UserRecord,
};
use serde_json::json;

use super::scoping::{eval, learning};
use super::{run_row, schedule_run, session, uid};
use crate::{ensure, ensure_eq, CaseResult, Ctx};

/// Writes one user's records (`None`: the shared, unowned ones) in every domain `db`
/// stores: a session with two runs, a memory, an eval run, a knowledge content, a schedule
/// with a run, a learning and a job; the metrics rows come from the sessions. Returns the
/// records written per domain.
async fn write_user(db: &AgnoDb, user: Option<&str>) -> Result<DomainCounts> {
    let mut written = DomainCounts::new();
    let mut count = |domain, n| *written.entry(domain).or_default() += n;
    let s = session(SessionType::Agent, user);
    db.sessions()?.upsert_session(s.clone()).await?;
    count(UserDomain::Sessions, 1);
    if let Ok(runs) = db.runs() {
        for i in 0..2 {
            let run = run_row(&s, &format!("{}-r{i}", s.session_id), "COMPLETED");
            runs.upsert_run(run).await?;
        }
        // A run's owner is its session's, so shared sessions' runs are nobody's.
        if user.is_some() {
            count(UserDomain::Runs, 2);
        }
    }
    if let Ok(memories) = db.memories() {
        let memory = UserMemory::new(uid("m"), user.map(str::to_owned), "likes tea");
        memories.upsert_memory(memory).await?;
        count(UserDomain::Memories, 1);
    }
    if let (Ok(evals), Some(u)) = (db.evals(), user) {
        evals.create_eval_run(eval(u)).await?;
        count(UserDomain::EvalRuns, 1);
    }
    if let Ok(knowledge) = db.knowledge() {
        let mut content = KnowledgeContent::new(uid("k"), "notes", "a doc");
        content.user_id = user.map(str::to_owned);
        knowledge.upsert_knowledge_content(content).await?;
        count(UserDomain::KnowledgeContents, 1);
    }
    if let Ok(schedules) = db.schedules() {
        let mut schedule =
            Schedule::new(uid("sch"), uid("nightly"), "/agents/a1/runs", "0 0 * * *");
        schedule.user_id = user.map(str::to_owned);
        let schedule = schedules.create_schedule(schedule).await?;
        let run = schedule_run(
            &schedule.id,
            Some(now_epoch_seconds()),
            None,
            now_epoch_seconds(),
        );
        schedules.create_schedule_run(run).await?;
        count(UserDomain::Schedules, 1);
        count(UserDomain::ScheduleRuns, 1);
    }
    if let Ok(learnings) = db.learnings() {
        learnings.upsert_learning(learning(&uid("l"), user)).await?;
        count(UserDomain::Learnings, 1);
    }
    if let Ok(jobs) = db.jobs() {
        let mut job = Job::new(
            uid("job"),
            "agent",
            "agent-1",
            s.session_id.clone(),
            json!({}),
        );
        job.user_id = user.map(str::to_owned);
        jobs.enqueue_job(job, 0).await?;
        count(UserDomain::Jobs, 1);
    }
    Ok(written)
}

/// Everything `user` owns, as [`export_user`] emits it, in order.
async fn exported(db: &AgnoDb, user: &str) -> Result<(Vec<UserRecord>, DomainCounts)> {
    let mut records = Vec::new();
    let counts = export_user(db, user, |r| {
        records.push(r);
        Ok(())
    })
    .await?;
    Ok((records, counts))
}

/// What the shared (unowned) records look like through the unscoped reads.
async fn shared_view(db: &AgnoDb) -> Result<Vec<serde_json::Value>> {
    let mut view = Vec::new();
    let sessions = db.sessions()?.get_sessions(SessionQuery::default()).await;
    for s in sessions?.items.into_iter().filter(|s| s.user_id.is_none()) {
        view.push(json!({"session": s.session_id, "data": s.session_data}));
    }
    if let Ok(m) = db.memories() {
        let page = m.get_memories(MemoryQuery::default()).await?;
        view.extend(
            page.items
                .into_iter()
                .filter(|m| m.user_id.is_none())
                .map(|m| json!({"memory": m.memory_id})),
        );
    }
    if let Ok(k) = db.knowledge() {
        let page = k.get_knowledge_contents(KnowledgeQuery::default()).await?;
        view.extend(
            page.items
                .into_iter()
                .filter(|k| k.user_id.is_none())
                .map(|k| json!({"knowledge": k.id})),
        );
    }
    if let Ok(j) = db.jobs() {
        let page = j.list_jobs(JobQuery::default()).await?;
        view.extend(
            page.items
                .into_iter()
                .filter(|j| j.user_id.is_none())
                .map(|j| json!({"job": j.id, "status": j.status})),
        );
    }
    if let Ok(metrics) = db.metrics() {
        let rows = metrics.get_metrics(Default::default()).await?.rows;
        view.extend(
            rows.into_iter()
                .filter(|r| r.user_id.is_none())
                .map(|r| json!({"metrics": r.date, "sessions": r.agent_sessions_count})),
        );
    }
    view.sort_by_key(|v| v.to_string());
    Ok(view)
}

/// Export carries every record the user owns in every domain the backend stores, and only
/// theirs; erase deletes exactly that (its counts equal the export's), leaves every other
/// user's export byte-identical and the shared records as they were, and no read (scoped or
/// unscoped) returns anything of the erased user after; a second erase deletes nothing.
pub(crate) async fn erase_removes_one_user_and_only_that_user(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (alice, bob) = (uid("alice"), uid("bob"));
    let mut expected = write_user(&db, Some(&alice)).await?;
    write_user(&db, Some(&bob)).await?;
    write_user(&db, None).await?;
    if let (Ok(sessions), Ok(metrics)) = (db.sessions(), db.metrics()) {
        calculate_metrics(sessions, metrics, chrono::Utc::now().date_naive()).await?;
        expected.insert(UserDomain::Metrics, 1);
    }

    let (records, counts) = exported(&db, &alice).await?;
    ensure_eq(&counts, &expected, "alice's export, records per domain")?;
    for record in &records {
        let owner = record.record.as_ref().and_then(|r| r["user_id"].as_str());
        ensure(
            owner == Some(alice.as_str()),
            format!("alice's export carries a record of {owner:?}: {record:?}"),
        )?;
    }
    let (bob_before, _) = exported(&db, &bob).await?;
    let shared_before = shared_view(&db).await?;

    let erased = erase_user(&db, &alice).await?;
    ensure_eq(&erased, &expected, "records erased per domain")?;
    ensure_eq(
        exported(&db, &alice).await?.1,
        DomainCounts::new(),
        "alice's export after the erase",
    )?;
    ensure_eq(
        erase_user(&db, &alice).await?,
        DomainCounts::new(),
        "a second erase",
    )?;
    ensure_eq(exported(&db, &bob).await?.0, bob_before, "bob's export")?;
    ensure_eq(shared_view(&db).await?, shared_before, "the shared records")?;

    // Unscoped reads (an operator's) find nothing of alice's either.
    let everyone = db.sessions()?.get_sessions(SessionQuery::default()).await?;
    ensure(
        everyone
            .items
            .iter()
            .all(|s| s.user_id.as_deref() != Some(&alice)),
        "an unscoped session list still has alice's session",
    )?;
    if let Ok(runs) = db.runs() {
        let all = runs.get_runs(RunQuery::default()).await?;
        ensure(
            all.items
                .iter()
                .all(|r| r.user_id.as_deref() != Some(&alice)),
            "an unscoped run list still has alice's runs",
        )?;
    }
    if let Ok(jobs) = db.jobs() {
        let all = jobs.list_jobs(JobQuery::default()).await?;
        ensure(
            all.items
                .iter()
                .all(|j| j.user_id.as_deref() != Some(&alice)),
            "an unscoped job list still has alice's job",
        )?;
    }
    if let Ok(metrics) = db.metrics() {
        let rows = metrics.get_metrics(Default::default()).await?.rows;
        ensure(
            rows.iter().all(|r| r.user_id.as_deref() != Some(&alice)),
            "alice's metrics rows are still there",
        )?;
    }
    Ok(())
}
