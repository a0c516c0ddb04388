//! agno 3.1.10's bulk and per-owner store calls beyond the single-record ones: bulk session
//! and memory upserts, `clear_memories`, per-owner learning deletes and stats, the latest
//! run of each schedule, an eval run's owner, old schedule runs deleted, provenance stamps
//! and schedules disabled with their target.

use agno_storage_core::{
    EntityKey, EntityMemories, ErrorKind, LearningQuery, MemoryQuery, Pagination, RunQuery,
    SessionQuery, SessionRead, SessionType, Sort, SortOrder, UserMemory,
};
use serde_json::json;

use super::scoping::learning;
use super::{run_row, schedule_run, session, uid};
use crate::{ensure, ensure_eq, CaseResult, Ctx};

/// `upsert_sessions` and `upsert_memories` check the owner of every row: a row another user
/// owns, or one breaking the input rules, is refused alone and leaves the stored row as it
/// was; the others are written, results in order. (agno's bulk paths skipped the check.)
pub(crate) async fn bulk_upserts_check_the_owner_per_row(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let sessions = db.sessions()?;
    let alices = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(alices.clone()).await?;
    let mut hijack = alices.clone();
    hijack.user_id = Some("bob".into());
    hijack.session_data = Some(json!({"session_name": "taken"}));
    let mine = session(SessionType::Agent, Some("bob"));
    let mut bad = session(SessionType::Agent, Some("bob"));
    bad.session_id = "bad\0id".into();
    let results = sessions
        .upsert_sessions(vec![mine.clone(), hijack, bad])
        .await?;
    ensure_eq(results.len(), 3, "one result per session")?;
    ensure(
        results[0].is_ok(),
        format!("bob's own session: {:?}", results[0]),
    )?;
    let kinds: Vec<Option<ErrorKind>> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    ensure_eq(
        kinds,
        vec![
            None,
            Some(ErrorKind::PermissionDenied),
            Some(ErrorKind::InvalidInput),
        ],
        "per-row outcomes",
    )?;
    let kept = sessions
        .get_session(&alices.session_id, SessionRead::for_user("alice"))
        .await?
        .ok_or("alice's session is gone")?;
    ensure_eq(
        kept.session_data,
        alices.session_data,
        "alice's session data",
    )?;
    ensure(
        sessions
            .get_session(&mine.session_id, SessionRead::for_user("bob"))
            .await?
            .is_some(),
        "bob's session was not written",
    )?;

    let memories = db.memories()?;
    let theirs = UserMemory::new(uid("m"), Some("alice".into()), "alice likes tea");
    memories.upsert_memory(theirs.clone()).await?;
    let mut taken = theirs.clone();
    taken.user_id = Some("bob".into());
    taken.memory = "bob was here".into();
    let own = UserMemory::new(uid("m"), Some("bob".into()), "bob likes coffee");
    let results = memories.upsert_memories(vec![taken, own.clone()]).await?;
    let kinds: Vec<Option<ErrorKind>> = results
        .iter()
        .map(|r| r.as_ref().err().map(|e| e.kind()))
        .collect();
    ensure_eq(
        kinds,
        vec![Some(ErrorKind::PermissionDenied), None],
        "memory outcomes",
    )?;
    let kept = memories
        .get_memory(&theirs.memory_id, Some("alice"))
        .await?
        .ok_or("alice's memory is gone")?;
    ensure_eq(kept.memory.as_str(), "alice likes tea", "alice's memory")?;
    ensure(
        memories
            .get_memory(&own.memory_id, Some("bob"))
            .await?
            .is_some(),
        "bob's memory was not written",
    )
}

/// `clear_memories` deletes every user's memories and the shared ones, and says how many.
pub(crate) async fn clear_memories_deletes_every_memory(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let memories = db.memories()?;
    for user in [Some("alice"), Some("bob"), None] {
        let memory = UserMemory::new(uid("m"), user.map(str::to_owned), "a fact");
        memories.upsert_memory(memory).await?;
    }
    ensure_eq(memories.clear_memories().await?, 3, "memories cleared")?;
    ensure_eq(
        memories.get_memories(MemoryQuery::default()).await?.total,
        0,
        "memories left",
    )?;
    ensure_eq(memories.clear_memories().await?, 0, "a second clear")
}

/// `delete_user_learnings` deletes one owner's learnings (of one type when given) and
/// nobody else's, unowned ones included; `get_learnings_user_stats` gives each owner's
/// latest `updated_at`, leaves the unowned out, sorts and pages.
pub(crate) async fn learnings_per_owner_stats_and_deletes(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let mut written = Vec::new();
    for (user, kind) in [
        (Some("alice"), "user_profile"),
        (Some("alice"), "session_context"),
        (Some("bob"), "user_profile"),
        (None, "user_profile"),
    ] {
        let mut l = learning(&uid("l"), user);
        l.learning_type = kind.into();
        written.push(store.upsert_learning(l).await?);
    }
    let latest = |user: &str| {
        written
            .iter()
            .filter(|l| l.user_id.as_deref() == Some(user))
            .map(|l| l.updated_at)
            .max()
            .flatten()
    };
    let by_user = Sort::by("user_id", SortOrder::Asc);
    let stats = store
        .get_learnings_user_stats(None, None, by_user.clone(), Pagination::default())
        .await?;
    let rows: Vec<(String, Option<i64>)> = stats
        .items
        .iter()
        .map(|s| (s.user_id.clone(), s.last_learning_updated_at))
        .collect();
    ensure_eq(
        rows,
        vec![
            ("alice".into(), latest("alice")),
            ("bob".into(), latest("bob")),
        ],
        "stats per owner",
    )?;
    ensure_eq(stats.total, 2, "owners counted")?;
    let one = store
        .get_learnings_user_stats(Some("session_context"), None, by_user, Pagination::limit(1))
        .await?;
    ensure_eq(one.items.len(), 1, "one owner has a session_context")?;
    ensure_eq(one.items[0].user_id.as_str(), "alice", "its owner")?;

    ensure_eq(
        store
            .delete_user_learnings("alice", Some("session_context"))
            .await?,
        1,
        "alice's session_context learnings deleted",
    )?;
    ensure_eq(
        store.delete_user_learnings("alice", None).await?,
        1,
        "alice's rest",
    )?;
    ensure_eq(
        store.delete_user_learnings("alice", None).await?,
        0,
        "again",
    )?;
    let left = store
        .list_learnings(LearningQuery {
            include_global: true,
            ..Default::default()
        })
        .await?;
    let mut owners: Vec<Option<String>> = left.items.into_iter().map(|l| l.user_id).collect();
    owners.sort();
    ensure_eq(owners, vec![None, Some("bob".into())], "learnings left")
}

/// `get_latest_schedule_runs` gives each schedule's latest run (by `triggered_at`, then
/// `created_at`, then id), omits schedules without runs, and sees only `user_id`'s.
pub(crate) async fn latest_run_of_each_schedule(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mut ids = Vec::new();
    for owner in ["alice", "alice", "bob"] {
        let mut s =
            agno_storage_core::Schedule::new(uid("sch"), uid("n"), "/agents/a/runs", "0 0 * * *");
        s.user_id = Some(owner.into());
        ids.push(store.create_schedule(s).await?.id);
    }
    let run = |schedule: &str, triggered_at: Option<i64>, created_at: i64| {
        schedule_run(schedule, triggered_at, None, created_at)
    };
    // Created later but triggered earlier: the trigger time decides.
    let early = run(&ids[0], Some(1_000), 2_000);
    let late = run(&ids[0], Some(1_500), 1_900);
    let untriggered = run(&ids[0], None, 3_000);
    let bobs = run(&ids[2], Some(1_000), 1_000);
    for r in [&early, &late, &untriggered, &bobs] {
        store.create_schedule_run(r.clone()).await?;
    }
    let latest = store.get_latest_schedule_runs(&ids, None).await?;
    ensure_eq(latest.len(), 2, "schedules with runs")?;
    ensure_eq(
        latest.get(&ids[0]).map(|r| r.id.clone()),
        Some(late.id.clone()),
        "the latest triggered run",
    )?;
    ensure_eq(
        latest.get(&ids[2]).map(|r| r.id.clone()),
        Some(bobs.id.clone()),
        "bob's schedule's run",
    )?;
    let alices = store.get_latest_schedule_runs(&ids, Some("alice")).await?;
    ensure(
        alices.len() == 1 && alices.contains_key(&ids[0]),
        format!(
            "alice sees only her schedule's latest run: {:?}",
            alices.keys()
        ),
    )
}

/// `update_eval_run_user_id` gives an unowned eval run its owner (AgentOS calls it after
/// creating one), is a no-op for the same owner, refuses to take a run from its owner
/// (agno overwrites), and is false for a run that does not exist.
pub(crate) async fn eval_run_owner_is_given_once(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.evals()?;
    let mut run = super::scoping::eval("nobody");
    run.user_id = None;
    store.create_eval_run(run.clone()).await?;
    ensure(
        store.update_eval_run_user_id(&run.run_id, "alice").await?,
        "the unowned run takes its owner",
    )?;
    ensure(
        store.update_eval_run_user_id(&run.run_id, "alice").await?,
        "the same owner again",
    )?;
    let taken = store.update_eval_run_user_id(&run.run_id, "bob").await;
    crate::expect_err(taken, ErrorKind::PermissionDenied, "bob takes alice's run")?;
    ensure(
        store
            .get_eval_run(&run.run_id, Some("alice"))
            .await?
            .is_some(),
        "alice owns the run",
    )?;
    ensure(
        store
            .get_eval_run(&run.run_id, Some("bob"))
            .await?
            .is_none(),
        "bob does not",
    )?;
    ensure(
        !store.update_eval_run_user_id(&uid("e"), "alice").await?,
        "a missing run",
    )
}

/// `delete_schedule_runs` deletes the runs of one schedule that completed before a time,
/// keeps runs not completed, and only deletes what `user_id` may see.
pub(crate) async fn schedule_runs_deleted_before_a_time(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mut s =
        agno_storage_core::Schedule::new(uid("sch"), uid("n"), "/agents/a/runs", "0 0 * * *");
    s.user_id = Some("alice".into());
    let s = store.create_schedule(s).await?;
    let run = |completed_at: Option<i64>| schedule_run(&s.id, Some(50), completed_at, 50);
    let open = run(None);
    for r in [run(Some(100)), run(Some(200)), open.clone()] {
        store.create_schedule_run(r).await?;
    }
    ensure_eq(
        store.delete_schedule_runs(&s.id, 150, Some("bob")).await?,
        0,
        "bob deletes alice's runs",
    )?;
    ensure_eq(
        store
            .delete_schedule_runs(&s.id, 150, Some("alice"))
            .await?,
        1,
        "runs completed before 150",
    )?;
    ensure_eq(
        store.delete_schedule_runs(&s.id, i64::MAX, None).await?,
        1,
        "every completed run",
    )?;
    let left = store
        .get_schedule_runs(&s.id, None, Pagination::default())
        .await?;
    let ids: Vec<String> = left.items.into_iter().map(|r| r.id).collect();
    ensure_eq(ids, vec![open.id], "the run not completed is kept")
}

/// The eight provenance columns round-trip: `stamp_schedule_provenance` writes the seven
/// of its allow-list on any owner's schedule and refuses anything else, naming it;
/// `disable_schedules_for_target` disables every enabled schedule of one target (by its
/// target columns or by its run endpoint, any owner) and records `disabled_reason`.
pub(crate) async fn provenance_round_trips_and_targets_are_disabled(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let schedule = |owner: &str, endpoint: &str| {
        let mut s = agno_storage_core::Schedule::new(uid("sch"), uid("n"), endpoint, "0 0 * * *");
        s.user_id = Some(owner.into());
        s
    };
    let stamped = store
        .create_schedule(schedule("alice", "/teams/t9/runs"))
        .await?;
    let by_endpoint = store
        .create_schedule(schedule("bob", "/agents/a1/runs/"))
        .await?;
    let other = store
        .create_schedule(schedule("bob", "/agents/a2/runs"))
        .await?;
    let mut columns = serde_json::Map::new();
    for (i, column) in agno_storage_core::schedule::SCHEDULE_STAMP_COLUMNS
        .iter()
        .enumerate()
    {
        let value = match *column {
            "target_type" => "agent".to_owned(),
            "target_id" => "a1".to_owned(),
            _ => format!("{column}-{i}"),
        };
        columns.insert((*column).into(), json!(value));
    }
    let stamp = agno_storage_core::ScheduleUpdate::provenance(columns.clone())?;
    ensure(
        store
            .stamp_schedule_provenance(&stamped.id, stamp.clone())
            .await?,
        "stamped",
    )?;
    ensure(
        !store.stamp_schedule_provenance(&uid("sch"), stamp).await?,
        "a missing schedule",
    )?;
    let mut bad = serde_json::Map::new();
    bad.insert("managed_by".into(), json!("studio"));
    bad.insert("disabled_reason".into(), json!("x"));
    bad.insert("user_id".into(), json!("mallory"));
    let refused = agno_storage_core::ScheduleUpdate::provenance(bad);
    let message = crate::expect_err(refused, ErrorKind::InvalidInput, "a stamp of other columns")?
        .to_string();
    ensure(
        message.contains("disabled_reason") && message.contains("user_id"),
        format!("the refusal names both columns: {message}"),
    )?;
    let read = store
        .get_schedule(&stamped.id, None)
        .await?
        .ok_or("the stamped schedule is gone")?;
    let stored = serde_json::to_value(&read).map_err(|e| e.to_string())?;
    for (column, value) in &columns {
        ensure_eq(&stored[column.as_str()], value, column)?;
    }

    // The stamped schedule targets agent a1 by its columns, bob's by its endpoint.
    let disabled = store
        .disable_schedules_for_target("agent", "a1", Some("agent a1 was deleted"))
        .await?;
    ensure_eq(disabled, 2, "schedules of agent a1 disabled")?;
    for id in [&stamped.id, &by_endpoint.id] {
        let s = store
            .get_schedule(id, None)
            .await?
            .ok_or("a schedule is gone")?;
        ensure(!s.enabled, format!("{id} still enabled"))?;
        ensure_eq(
            s.disabled_reason.as_deref(),
            Some("agent a1 was deleted"),
            "disabled_reason",
        )?;
    }
    let kept = store
        .get_schedule(&other.id, None)
        .await?
        .ok_or("a2's schedule is gone")?;
    ensure(kept.enabled, "agent a2's schedule stays enabled")?;
    ensure_eq(
        store
            .disable_schedules_for_target("agent", "a1", None)
            .await?,
        0,
        "nothing left to disable",
    )
}

/// `reassign_session_owner` hands an idle session to its new owner, as agno's: only from
/// the owner named, never while a run of it is in flight; its runs keep their `user_id`.
pub(crate) async fn idle_session_changes_hands(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let idle = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(idle.clone()).await?;
    runs.upsert_run(run_row(&idle, &uid("r"), "COMPLETED"))
        .await?;
    let busy = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(busy.clone()).await?;
    runs.upsert_run(run_row(&busy, &uid("r"), "RUNNING"))
        .await?;
    let id = &idle.session_id;
    ensure(
        !sessions
            .reassign_session_owner(id, "bob", Some("carol"))
            .await?,
        "a session changed hands from an owner it does not have",
    )?;
    ensure(
        !sessions
            .reassign_session_owner(&uid("missing"), "alice", Some("bob"))
            .await?,
        "a missing session changed hands",
    )?;
    ensure(
        !sessions
            .reassign_session_owner(&busy.session_id, "alice", Some("bob"))
            .await?,
        "a session with a running run changed hands",
    )?;
    ensure(
        sessions
            .reassign_session_owner(id, "alice", Some("bob"))
            .await?,
        "the idle session did not change hands",
    )?;
    let taken = sessions
        .get_session(id, SessionRead::for_user("bob"))
        .await?
        .ok_or("the new owner cannot read the session")?;
    ensure_eq(taken.runs.map(|r| r.len()), Some(1), "its runs came along")?;
    ensure(
        sessions
            .get_session(id, SessionRead::for_user("alice"))
            .await?
            .is_none(),
        "the previous owner still reads the session",
    )?;
    let listed = |user: &str| {
        let query = SessionQuery {
            user_id: Some(user.to_owned()),
            ..Default::default()
        };
        async move {
            let ids: Vec<String> = sessions
                .get_sessions(query)
                .await?
                .items
                .into_iter()
                .map(|s| s.session_id)
                .collect();
            Ok::<_, agno_storage_core::Error>(ids)
        }
    };
    ensure_eq(listed("bob").await?, vec![id.clone()], "bob's sessions")?;
    ensure_eq(
        listed("alice").await?,
        vec![busy.session_id.clone()],
        "alice's sessions",
    )?;
    let history = runs
        .get_runs(RunQuery {
            session_id: Some(id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        history
            .items
            .iter()
            .map(|r| r.user_id.as_deref())
            .collect::<Vec<_>>(),
        vec![Some("alice")],
        "the run keeps the user who ran it",
    )?;
    ensure(
        sessions.reassign_session_owner(id, "bob", None).await?,
        "bob could not give the session up",
    )?;
    let shared = sessions
        .get_session(id, SessionRead::default())
        .await?
        .ok_or("the session is gone")?;
    ensure_eq(shared.user_id, None, "the session is unowned")?;
    Ok(())
}

/// `search_learnings` finds a text in the content's values whatever its case and its
/// separators (spaces, underscores, hyphens), within the filters; `%` is a plain character
/// and a text of nothing but separators finds nothing.
pub(crate) async fn learnings_found_by_text(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let with = |user: &str, content| {
        let mut l = learning(&uid("l"), Some(user));
        l.content = content;
        l
    };
    let display = with(
        "alice",
        json!({"name": "Sarah Chen", "facts": ["leads multi-tenant billing"]}),
    );
    let slug = with("alice", json!({"entity": {"slug": "sarah__chen"}}));
    let others = with("bob", json!({"name": "SARAH-CHEN"}));
    let key_only = with("alice", json!({"sarah chen": "100% sure"}));
    for l in [&display, &slug, &others, &key_only] {
        store.upsert_learning(l.clone()).await?;
    }
    let alices = LearningQuery {
        user_id: Some("alice".into()),
        ..Default::default()
    };
    let found = |text: &'static str, filters: LearningQuery| async move {
        let page = store.search_learnings(text, filters).await?;
        let mut ids: Vec<String> = page.items.into_iter().map(|l| l.learning_id).collect();
        ids.sort();
        Ok::<_, agno_storage_core::Error>((ids, page.total))
    };
    let mut sarah = vec![display.learning_id.clone(), slug.learning_id.clone()];
    sarah.sort();
    ensure_eq(
        found("  sarah CHEN ", alices.clone()).await?,
        (sarah, 2),
        "alice's learnings naming Sarah Chen",
    )?;
    ensure_eq(
        found("Multi Tenant", alices.clone()).await?,
        (vec![display.learning_id.clone()], 1),
        "separators cross",
    )?;
    ensure_eq(
        found("sarah chen", LearningQuery::default()).await?.1,
        3,
        "every owner's, unfiltered",
    )?;
    ensure_eq(
        found("100%", alices.clone()).await?,
        (vec![key_only.learning_id.clone()], 1),
        "% is a plain character",
    )?;
    for nothing in ["%", " _ -", ""] {
        ensure_eq(
            found(nothing, alices.clone()).await?,
            (vec![], 0),
            "a text of separators finds nothing",
        )?;
    }
    let one = LearningQuery {
        pagination: Pagination::limit(1),
        ..alices
    };
    let page = store.search_learnings("sarah chen", one).await?;
    ensure_eq(
        (page.items.len(), page.total),
        (1, 2),
        "a page of the matches",
    )?;
    Ok(())
}

/// Entity memories in namespace `user` are per user: without the user's id every call is
/// refused (`InvalidInput`) rather than reaching any user's entity, and each user reaches
/// only their own; in namespace `global` the entity is shared and unowned.
pub(crate) async fn entity_memories_in_namespace_user_need_the_user(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let entities = EntityMemories::new(store);
    let key = |namespace, user_id| EntityKey {
        namespace,
        user_id,
        entity_type: "person",
        entity_id: "sarah_chen",
    };
    entities
        .upsert(key("user", Some("alice")), json!({"note": "alice's"}))
        .await?;
    entities
        .upsert(key("user", Some("bob")), json!({"note": "bob's"}))
        .await?;
    let anonymous = key("user", None);
    for (call, refused) in [
        ("get", entities.get(anonymous).await.err()),
        ("delete", entities.delete(anonymous).await.err()),
        ("upsert", entities.upsert(anonymous, json!({})).await.err()),
    ] {
        ensure_eq(
            refused.map(|e| e.kind()),
            Some(ErrorKind::InvalidInput),
            &format!("{call} without a user in namespace user"),
        )?;
    }
    let alices = entities
        .get(key("user", Some("alice")))
        .await?
        .ok_or("alice's entity is gone")?;
    ensure_eq(alices.content, json!({"note": "alice's"}), "alice's entity")?;
    ensure(
        entities.delete(key("user", Some("alice"))).await?,
        "alice could not delete her entity",
    )?;
    let bobs = entities
        .get(key("user", Some("bob")))
        .await?
        .ok_or("bob's entity went with alice's")?;
    ensure_eq(bobs.content, json!({"note": "bob's"}), "bob's entity")?;
    let shared = entities
        .upsert(key("global", Some("alice")), json!({"note": "everyone's"}))
        .await?;
    ensure_eq(shared.user_id, None, "a global entity has no owner")?;
    ensure(
        entities.get(key("global", None)).await?.is_some(),
        "a global entity is read without a user",
    )?;
    Ok(())
}
