//! Input the rules of `agno_storage_core::guard` govern on every backend: NUL and other
//! control characters in identifiers, identifiers at and over the backend's declared
//! maximum, and JSON nesting at and over the depth limit.

use agno_storage_core::{
    AgnoDb, ErrorKind, Job, KnowledgeContent, MemoryQuery, RunQuery, Schedule, SessionQuery,
    SessionRead, SessionType, UserMemory,
};
use serde_json::{json, Value};

use super::{learnings::entity, run_row, scoping::eval, session, uid};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx, Failure};

/// An `InvalidInput` error whose message names `field`.
fn refused<T: std::fmt::Debug>(
    result: agno_storage_core::Result<T>,
    field: &str,
    what: &str,
) -> CaseResult {
    let e = expect_err(result, ErrorKind::InvalidInput, what)?;
    ensure(
        e.message().contains(field),
        format!("{what}: the error must name {field:?}: {e}"),
    )
}

/// A session and a run of `user`, and a memory when the backend has memories.
async fn seed(db: &AgnoDb, user: &str) -> std::result::Result<String, Failure> {
    let s = session(SessionType::Agent, Some(user));
    db.sessions()?.upsert_session(s.clone()).await?;
    db.runs()?
        .upsert_run(run_row(&s, &uid("r"), "COMPLETED"))
        .await?;
    if db.capabilities().memories {
        let m = UserMemory::new(uid("m"), Some(user.to_owned()), format!("memory of {user}"));
        db.memories()?.upsert_memory(m).await?;
    }
    Ok(s.session_id)
}

/// What `user` sees: session ids, run ids and memory ids, sorted.
async fn seen_by(db: &AgnoDb, user: &str) -> std::result::Result<Vec<String>, Failure> {
    let who = Some(user.to_owned());
    let sessions = db
        .sessions()?
        .get_sessions(SessionQuery {
            user_id: who.clone(),
            ..Default::default()
        })
        .await?;
    let runs = db
        .runs()?
        .get_runs(RunQuery {
            user_id: who.clone(),
            ..Default::default()
        })
        .await?;
    let mut seen: Vec<String> = sessions.items.into_iter().map(|s| s.session_id).collect();
    seen.extend(runs.items.into_iter().map(|r| r.run_id));
    if db.capabilities().memories {
        let memories = db
            .memories()?
            .get_memories(MemoryQuery {
                user_id: who,
                ..Default::default()
            })
            .await?;
        seen.extend(memories.items.into_iter().map(|m| m.memory_id));
    }
    seen.sort();
    Ok(seen)
}

/// U+0000 in any identifier is refused with `InvalidInput` naming the field, on reads and
/// writes of every domain; nothing is written, and `alice\0` never reaches alice's rows.
pub(crate) async fn nul_in_identifiers_is_refused(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let caps = db.capabilities();
    let sid = seed(&db, "alice").await?;
    let before = seen_by(&db, "alice").await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);

    refused(
        sessions
            .get_session(&sid, SessionRead::for_user("alice\0"))
            .await,
        "user_id",
        "get_session as alice\\0",
    )?;
    refused(
        sessions
            .get_session(&format!("{sid}\0"), SessionRead::for_user("alice"))
            .await,
        "session_id",
        "get_session of an id with NUL",
    )?;
    refused(
        sessions
            .get_sessions(SessionQuery {
                user_id: Some("alice\0".into()),
                ..Default::default()
            })
            .await,
        "user_id",
        "get_sessions as alice\\0",
    )?;
    let mut hijack = session(SessionType::Agent, Some("alice\0"));
    hijack.session_id = sid.clone();
    refused(
        sessions.upsert_session(hijack).await,
        "user_id",
        "upsert_session over alice's session as alice\\0",
    )?;
    let mut smuggled = session(SessionType::Agent, Some("bob\0x"));
    let smuggled_id = smuggled.session_id.clone();
    refused(
        sessions.upsert_session(smuggled.clone()).await,
        "user_id",
        "upsert_session for bob\\0x",
    )?;
    smuggled.user_id = Some("bob".into());
    smuggled.session_id = format!("{smuggled_id}\0");
    refused(
        sessions.upsert_session(smuggled).await,
        "session_id",
        "upsert_session with a NUL in its id",
    )?;
    let mut alice_session = session(SessionType::Agent, Some("alice"));
    alice_session.session_id = sid.clone();
    let mut run = run_row(&alice_session, &uid("r"), "COMPLETED");
    run.user_id = Some("alice\0".into());
    refused(
        runs.upsert_run(run.clone()).await,
        "user_id",
        "upsert_run as alice\\0",
    )?;
    run.user_id = Some("alice".into());
    run.run_id.push('\0');
    refused(
        runs.upsert_run(run).await,
        "run_id",
        "upsert_run with a NUL in its id",
    )?;
    refused(
        runs.get_runs(RunQuery {
            session_id: Some(sid.clone()),
            user_id: Some("alice\0".into()),
            ..Default::default()
        })
        .await,
        "user_id",
        "get_runs as alice\\0",
    )?;
    refused(
        runs.get_run("r\0", Some("alice")).await,
        "run_id",
        "get_run with a NUL in its id",
    )?;
    refused(
        sessions
            .delete_sessions(std::slice::from_ref(&sid), Some("alice\0"))
            .await,
        "user_id",
        "delete_sessions as alice\\0",
    )?;
    if caps.memories {
        let m = UserMemory::new(uid("m"), Some("alice\0".into()), "m");
        refused(
            db.memories()?.upsert_memory(m).await,
            "user_id",
            "upsert_memory",
        )?;
        refused(
            db.memories()?.get_memory_topics(Some("alice\0")).await,
            "user_id",
            "get_memory_topics",
        )?;
    }
    if caps.evals {
        refused(
            db.evals()?.create_eval_run(eval("alice\0")).await,
            "user_id",
            "create_eval_run",
        )?;
        refused(
            db.evals()?.get_eval_run("e\0", None).await,
            "run_id",
            "get_eval_run",
        )?;
    }
    if caps.knowledge {
        let mut k = KnowledgeContent::new(uid("k"), "doc", "d");
        k.user_id = Some("alice\0".into());
        refused(
            db.knowledge()?.upsert_knowledge_content(k).await,
            "user_id",
            "upsert_knowledge_content",
        )?;
    }
    if caps.schedules {
        let mut sch = Schedule::new(uid("sch"), "nightly\0", "/agents/a/runs", "* * * * *");
        sch.user_id = Some("alice".into());
        refused(
            db.schedules()?.create_schedule(sch).await,
            "name",
            "create_schedule",
        )?;
        refused(
            db.schedules()?
                .get_schedule_by_name("nightly", Some("alice\0"))
                .await,
            "user_id",
            "get_schedule_by_name",
        )?;
    }
    if caps.learnings {
        refused(
            db.learnings()?
                .upsert_learning(entity("alice\0", uid("l"), "fact"))
                .await,
            "user_id",
            "upsert_learning",
        )?;
    }
    if caps.jobs {
        let mut job = Job::new(uid("j"), "agent", "a", &sid, json!({}));
        job.user_id = Some("alice\0".into());
        refused(
            db.jobs()?.enqueue_job(job, 0).await,
            "user_id",
            "enqueue_job",
        )?;
        refused(
            db.jobs()?.claim_job("w\0", 60, None).await,
            "worker_id",
            "claim_job",
        )?;
    }

    ensure_eq(
        seen_by(&db, "alice").await?,
        before,
        "alice's rows after the refused calls",
    )?;
    ensure_eq(seen_by(&db, "bobx").await?, Vec::new(), "what bobx sees")?;
    ensure_eq(seen_by(&db, "bob").await?, Vec::new(), "what bob sees")?;
    let read = sessions
        .get_session(&smuggled_id, SessionRead::default())
        .await?;
    ensure(
        read.is_none(),
        "a refused session must not be written under any id",
    )
}

/// Other control characters are ordinary characters: each of these users owns and sees
/// exactly its own rows, and `alice` sees none of theirs.
pub(crate) async fn control_characters_in_identifiers_are_kept_and_isolated(
    ctx: &Ctx,
) -> CaseResult {
    let db = ctx.db().await?;
    let users = [
        "alice\u{1}",
        "alice\t",
        "alice\n",
        "alice\u{7f}",
        "alice\u{1b}[0m",
        "alice",
    ];
    let mut sessions = Vec::new();
    for user in users {
        sessions.push(seed(&db, user).await?);
    }
    for (user, sid) in users.iter().zip(&sessions) {
        let seen = seen_by(&db, user).await?;
        let expected = if db.capabilities().memories { 3 } else { 2 };
        ensure_eq(seen.len(), expected, &format!("rows {user:?} sees"))?;
        ensure(seen.contains(sid), format!("{user:?} sees its own session"))?;
        let read = db
            .sessions()?
            .get_session(sid, SessionRead::for_user(*user))
            .await?
            .ok_or_else(|| Failure::from(format!("{user:?} reads its session")))?;
        ensure_eq(
            read.user_id.as_deref(),
            Some(*user),
            "the stored owner, verbatim",
        )?;
        for other in users.iter().filter(|u| *u != user) {
            let foreign = db
                .sessions()?
                .get_session(sid, SessionRead::for_user(*other))
                .await?;
            ensure(
                foreign.is_none(),
                format!("{other:?} reads {user:?}'s session"),
            )?;
        }
    }
    Ok(())
}

/// Identifiers of exactly the declared maximum (in characters, some of them multi-byte)
/// are stored and read back; one more character is `InvalidInput` and writes nothing.
pub(crate) async fn identifiers_at_and_over_the_maximum(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let Some(max) = db.capabilities().max_id_chars else {
        return Ok(());
    };
    let long = |c: char| -> String {
        let mut id = uid("x");
        while id.chars().count() < max {
            id.push(c);
        }
        id
    };
    let user = long('é');
    let mut s = session(SessionType::Agent, Some(&user));
    s.session_id = long('s');
    db.sessions()?.upsert_session(s.clone()).await?;
    let mut run = run_row(&s, &long('r'), "COMPLETED");
    run.run_data["run_id"] = json!(run.run_id);
    db.runs()?.upsert_run(run.clone()).await?;
    let read = db
        .sessions()?
        .get_session(&s.session_id, SessionRead::for_user(user.clone()))
        .await?
        .ok_or("a session with ids at the maximum reads back")?;
    ensure_eq(
        read.user_id.as_deref(),
        Some(user.as_str()),
        "owner at the maximum",
    )?;
    let got = db.runs()?.get_run(&run.run_id, Some(&user)).await?;
    ensure_eq(
        got.map(|r| r.run_id),
        Some(run.run_id.clone()),
        "run id at the maximum",
    )?;

    let over = |id: &str| format!("{id}z");
    let mut too_long = session(SessionType::Agent, Some(&over(&user)));
    refused(
        db.sessions()?.upsert_session(too_long.clone()).await,
        "user_id",
        "owner over the maximum",
    )?;
    too_long.user_id = Some(user.clone());
    too_long.session_id = over(&s.session_id);
    refused(
        db.sessions()?.upsert_session(too_long).await,
        "session_id",
        "session id over the maximum",
    )?;
    refused(
        db.sessions()?
            .get_session(&over(&s.session_id), SessionRead::default())
            .await,
        "session_id",
        "reading a session id over the maximum",
    )?;
    let mut run_over = run_row(&s, &over(&run.run_id), "COMPLETED");
    run_over.run_data["run_id"] = json!(run_over.run_id);
    refused(
        db.runs()?.upsert_run(run_over).await,
        "run_id",
        "run id over the maximum",
    )?;
    let all = db.sessions()?.get_sessions(SessionQuery::default()).await?;
    ensure_eq(all.total, 1, "sessions after the refused writes")?;
    let runs = db.runs()?.get_runs(RunQuery::default()).await?;
    ensure_eq(runs.total, 1, "runs after the refused writes")
}

/// `{"d": {"d": ...}}` nested `levels` deep (an empty object at the bottom). Objects, not
/// lists: Firestore cannot hold a list directly inside a list, whatever the depth.
fn nested(levels: usize) -> Value {
    let mut value = Value::Object(serde_json::Map::new());
    for _ in 1..levels {
        value = Value::Object(serde_json::Map::from_iter([("d".to_owned(), value)]));
    }
    value
}

/// JSON nested as deep as the backend's limit (1,000 levels, what Python's `json` reads
/// and writes, unless the backend declares less) is written and read back whole; one
/// level more, and 100,000 levels, are `InvalidInput` before anything is written. Runs on
/// a runtime worker thread (a 2 MiB stack), where a recursive reader or writer would crash.
pub(crate) async fn json_nesting_limit_holds_on_a_small_stack(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    match tokio::spawn(json_nesting(db)).await {
        Ok(result) => result,
        Err(e) => Err(format!("the case's task failed: {e}").into()),
    }
}

async fn json_nesting(db: AgnoDb) -> CaseResult {
    let limit = db.capabilities().json_depth_limit();
    let s = session(SessionType::Agent, Some("deep"));
    db.sessions()?.upsert_session(s.clone()).await?;

    // run_data is an object (one level) holding `limit - 1` levels of objects.
    let mut deep = run_row(&s, &uid("r"), "COMPLETED");
    deep.run_data["deep"] = nested(limit - 1);
    db.runs()?.upsert_run(deep.clone()).await?;
    let got = db
        .runs()?
        .get_run(&deep.run_id, Some("deep"))
        .await?
        .ok_or("a run nested to the limit reads back")?;
    ensure(
        got.run_data == deep.run_data,
        "run_data nested to the limit reads back equal",
    )?;
    let read = db
        .sessions()?
        .get_session(&s.session_id, SessionRead::for_user("deep"))
        .await?
        .ok_or("the session reads back")?;
    let runs = read.runs.unwrap_or_default();
    ensure_eq(runs.len(), 1, "runs of the session")?;
    ensure(
        runs[0].to_value()? == deep.run_data,
        "the session's run nested to the limit reads back equal",
    )?;

    for levels in [limit + 1, 100_000] {
        let mut too_deep = run_row(&s, &uid("r"), "COMPLETED");
        too_deep.run_data["deep"] = nested(levels);
        let id = too_deep.run_id.clone();
        refused(
            db.runs()?.upsert_run(too_deep).await,
            "run_data",
            "run_data over the limit",
        )?;
        ensure(
            db.runs()?.get_run(&id, None).await?.is_none(),
            "a refused run must not be written",
        )?;
        let mut session_over = session(SessionType::Agent, Some("deep"));
        // Not `json!`: it would serialize the value recursively, in the test itself.
        let state = serde_json::Map::from_iter([("state".to_owned(), nested(levels))]);
        session_over.session_data = Some(Value::Object(state));
        let sid = session_over.session_id.clone();
        refused(
            db.sessions()?.upsert_session(session_over).await,
            "session_data",
            "session_data over the limit",
        )?;
        ensure(
            db.sessions()?
                .get_session(&sid, SessionRead::default())
                .await?
                .is_none(),
            "a refused session must not be written",
        )?;
    }
    let page = db
        .runs()?
        .get_runs(RunQuery {
            session_id: Some(s.session_id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(page.total, 1, "runs after the refused writes")
}

/// A run another writer left in a form this code cannot decode (agno's lone surrogates,
/// or nesting past the limit) never hides its neighbours: `get_runs` lists the others and
/// names it in `unreadable` (to its owner and unscoped callers, nobody else), and the
/// session read hands over every run, that one failing only when its value is asked for.
pub(crate) async fn undecodable_run_never_hides_its_neighbours(ctx: &Ctx) -> CaseResult {
    let crate::RawRunsDb { db, writer } = ctx.raw_runs().await?;
    let s = session(SessionType::Agent, Some("ursula"));
    db.sessions()?.upsert_session(s.clone()).await?;
    let ids = [uid("r"), uid("bad"), uid("r")];
    for id in &ids {
        db.runs()?.upsert_run(run_row(&s, id, "COMPLETED")).await?;
    }
    writer.make_undecodable(&ids[1]).await?;
    let query = |user: Option<&str>| RunQuery {
        session_id: Some(s.session_id.clone()),
        user_id: user.map(str::to_owned),
        ..Default::default()
    };
    for user in [Some("ursula"), None] {
        let page = db.runs()?.get_runs(query(user)).await?;
        let mut listed: Vec<&str> = page.items.iter().map(|r| r.run_id.as_str()).collect();
        listed.sort();
        let mut readable = vec![ids[0].as_str(), ids[2].as_str()];
        readable.sort();
        ensure_eq(listed, readable, &format!("runs listed for {user:?}"))?;
        let named: Vec<&str> = page.unreadable.iter().map(|u| u.id.as_str()).collect();
        ensure_eq(named, vec![ids[1].as_str()], "the run named unreadable")?;
    }
    let other = db.runs()?.get_runs(query(Some("mallory"))).await?;
    ensure(
        other.items.is_empty() && other.unreadable.is_empty(),
        format!("another user sees nothing of ursula's runs: {other:?}"),
    )?;
    let read = db
        .sessions()?
        .get_session(&s.session_id, SessionRead::for_user("ursula"))
        .await?
        .ok_or("the session reads back")?;
    let runs = read.runs.unwrap_or_default();
    ensure_eq(runs.len(), 3, "runs of the session read")?;
    let failing: Vec<bool> = runs.iter().map(|r| r.to_value().is_err()).collect();
    ensure_eq(
        failing,
        vec![false, true, false],
        "which runs fail to decode",
    )
}
