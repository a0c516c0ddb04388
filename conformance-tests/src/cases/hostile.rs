//! Hostile input: identifiers full of SQL, LIKE, glob and NoSQL syntax, and a property test
//! of user isolation over random operations.

use agno_storage_core::{
    KnowledgeContent, KnowledgeQuery, MemoryQuery, Pagination, RunQuery, Schedule, SessionQuery,
    SessionRead, SessionType, UserMemory,
};
use serde_json::json;

use super::{run_row, session, uid, Rng};
use crate::{ensure, ensure_eq, CaseResult, Ctx};

/// User ids and names that are syntax somewhere: quotes, LIKE wildcards, globs, key
/// separators, JSON/NoSQL operators, SQL injection.
pub(crate) const HOSTILE: &[&str] = &[
    "o'brien",
    "a\"b",
    "%",
    "a_c",
    "*",
    "u:1:runs",
    "{\"$ne\": null}",
    "' OR '1'='1",
    "\\",
    "robert'); DROP TABLE agno_sessions;--",
    "$where",
    "agno:sessions:*",
];

/// Each hostile user owns rows in every user-scoped domain it can reach; each reads back
/// exactly its own, and searches treat wildcards literally.
pub(crate) async fn hostile_identifiers_touch_only_their_rows(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let caps = db.capabilities();
    for user in HOSTILE {
        if caps.sessions && caps.runs {
            let mut s = session(SessionType::Agent, Some(user));
            s.session_data = Some(json!({"session_name": format!("name of {user}")}));
            db.sessions()?.upsert_session(s.clone()).await?;
            db.runs()?
                .upsert_run(run_row(&s, &uid("r"), "COMPLETED"))
                .await?;
        }
        if caps.memories {
            let mut m = UserMemory::new(
                uid("m"),
                Some((*user).to_owned()),
                format!("memory of {user}"),
            );
            m.topics = Some(vec![(*user).to_owned()]);
            db.memories()?.upsert_memory(m).await?;
        }
        if caps.knowledge {
            let mut k = KnowledgeContent::new(uid("k"), format!("doc {user}"), "d");
            k.user_id = Some((*user).to_owned());
            db.knowledge()?.upsert_knowledge_content(k).await?;
        }
        if caps.schedules {
            let mut sch = Schedule::new(uid("sch"), *user, "/agents/a/runs", "* * * * *");
            sch.user_id = Some((*user).to_owned());
            db.schedules()?.create_schedule(sch).await?;
        }
    }
    for user in HOSTILE {
        let who = Some((*user).to_owned());
        if caps.sessions && caps.runs {
            let mine = db
                .sessions()?
                .get_sessions(SessionQuery {
                    user_id: who.clone(),
                    include_runs: true,
                    ..Default::default()
                })
                .await?;
            ensure_eq(mine.total, 1, &format!("sessions of {user:?}"))?;
            ensure(
                mine.items
                    .iter()
                    .all(|s| s.user_id.as_deref() == Some(user)),
                format!("{user:?} sees another user's session"),
            )?;
            let by_name = db
                .sessions()?
                .get_sessions(SessionQuery {
                    session_name: Some((*user).to_owned()),
                    ..Default::default()
                })
                .await?;
            ensure(
                !by_name.items.is_empty()
                    && by_name
                        .items
                        .iter()
                        .all(|s| s.session_name().is_some_and(|n| n.contains(user))),
                format!(
                    "session_name {user:?} must match literally (as a substring), not as a pattern"
                ),
            )?;
            let runs = db
                .runs()?
                .get_runs(RunQuery {
                    user_id: who.clone(),
                    ..Default::default()
                })
                .await?;
            ensure_eq(runs.total, 1, &format!("runs of {user:?}"))?;
            let sid = mine.items[0].session_id.clone();
            let read = db
                .sessions()?
                .get_session(&sid, SessionRead::for_user(*user))
                .await?;
            ensure(read.is_some(), format!("{user:?} reads its own session"))?;
        }
        if caps.memories {
            let mine = db
                .memories()?
                .get_memories(MemoryQuery {
                    user_id: who.clone(),
                    ..Default::default()
                })
                .await?;
            ensure_eq(mine.total, 1, &format!("memories of {user:?}"))?;
            let by_topic = db
                .memories()?
                .get_memories(MemoryQuery {
                    topics: vec![(*user).to_owned()],
                    ..Default::default()
                })
                .await?;
            ensure_eq(by_topic.total, 1, &format!("memories with topic {user:?}"))?;
            let search = db
                .memories()?
                .get_memories(MemoryQuery {
                    search_content: Some(format!("memory of {user}")),
                    ..Default::default()
                })
                .await?;
            ensure(
                search.total >= 1
                    && search
                        .items
                        .iter()
                        .all(|m| m.memory.contains(&format!("memory of {user}"))),
                format!("memory search {user:?} must match literally"),
            )?;
        }
        if caps.knowledge {
            let mine = db
                .knowledge()?
                .get_knowledge_contents(KnowledgeQuery {
                    user_id: who.clone(),
                    ..Default::default()
                })
                .await?;
            ensure_eq(mine.total, 1, &format!("knowledge visible to {user:?}"))?;
        }
        if caps.schedules {
            let mine = db
                .schedules()?
                .get_schedules(None, Some(user), Pagination::default())
                .await?;
            ensure_eq(mine.total, 1, &format!("schedules of {user:?}"))?;
            ensure(
                db.schedules()?
                    .get_schedule_by_name(user, Some(user))
                    .await?
                    .is_some(),
                format!("schedule named {user:?}"),
            )?;
        }
    }
    Ok(())
}

/// Random users perform random writes, reads, renames and deletes on sessions, runs and
/// memories; no read ever returns a row of another user, and an unscoped count matches.
pub(crate) async fn user_isolation_holds_under_random_operations(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let users = ["alice", "bob", "o'brien", "%"];
    let seed = 0x5eed_u64 ^ agno_storage_core::now_epoch_seconds() as u64;
    let mut rng = Rng(seed | 1);
    let mut sessions: Vec<(String, &str)> = Vec::new();
    let mut memories: Vec<(String, &str)> = Vec::new();
    for step in 0..120 {
        let user = *rng.pick(&users);
        let fail = |what: String| format!("seed {seed:#x}, step {step}, user {user:?}: {what}");
        match rng.next() % 6 {
            0 => {
                let s = session(SessionType::Agent, Some(user));
                db.sessions()?.upsert_session(s.clone()).await?;
                sessions.push((s.session_id, user));
            }
            1 => {
                let own: Vec<&(String, &str)> =
                    sessions.iter().filter(|(_, o)| *o == user).collect();
                if let Some((sid, _)) = own.first() {
                    let mut probe = session(SessionType::Agent, Some(user));
                    probe.session_id = sid.clone();
                    db.runs()?
                        .upsert_run(run_row(&probe, &uid("r"), "COMPLETED"))
                        .await?;
                }
            }
            2 if !sessions.is_empty() => {
                let (sid, owner) = rng.pick(&sessions).clone();
                let read = db
                    .sessions()?
                    .get_session(&sid, SessionRead::for_user(user))
                    .await?;
                ensure(
                    read.is_some() == (owner == user),
                    fail(format!(
                        "read of {owner:?}'s session returned {}",
                        read.is_some()
                    )),
                )?;
                if read.is_some() {
                    let runs = db
                        .runs()?
                        .get_runs(RunQuery {
                            session_id: Some(sid.clone()),
                            user_id: Some(user.to_owned()),
                            ..Default::default()
                        })
                        .await?;
                    ensure(
                        runs.items
                            .iter()
                            .all(|r| r.user_id.as_deref() == Some(user)),
                        fail("a run of another user".into()),
                    )?;
                }
            }
            3 => {
                let m =
                    UserMemory::new(uid("m"), Some(user.to_owned()), format!("fact for {user}"));
                db.memories()?.upsert_memory(m.clone()).await?;
                memories.push((m.memory_id, user));
            }
            4 if !memories.is_empty() => {
                let (mid, owner) = rng.pick(&memories).clone();
                let deleted = db
                    .memories()?
                    .delete_memories(std::slice::from_ref(&mid), Some(user))
                    .await?;
                ensure(
                    deleted == 0 || owner == user,
                    fail(format!("deleted {owner:?}'s memory")),
                )?;
                if deleted > 0 {
                    memories.retain(|(m, _)| m != &mid);
                }
            }
            _ => {
                let mine = db
                    .sessions()?
                    .get_sessions(SessionQuery {
                        user_id: Some(user.to_owned()),
                        include_runs: true,
                        ..Default::default()
                    })
                    .await?;
                ensure(
                    mine.items
                        .iter()
                        .all(|s| s.user_id.as_deref() == Some(user)),
                    fail("listing returned another user's session".into()),
                )?;
                let expected = sessions.iter().filter(|(_, o)| *o == user).count() as u64;
                ensure_eq(mine.total, expected, &fail("session count".into()))?;
                let mems = db
                    .memories()?
                    .get_memories(MemoryQuery {
                        user_id: Some(user.to_owned()),
                        ..Default::default()
                    })
                    .await?;
                ensure(
                    mems.items
                        .iter()
                        .all(|m| m.user_id.as_deref() == Some(user)),
                    fail("memory listing leaked".into()),
                )?;
                ensure_eq(
                    mems.total,
                    memories.iter().filter(|(_, o)| *o == user).count() as u64,
                    &fail("memory count".into()),
                )?;
            }
        }
    }
    Ok(())
}
