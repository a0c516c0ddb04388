//! Sessions: round trips, the owner guard, filters.

use agno_storage_core::{ErrorKind, SessionQuery, SessionRead, SessionType, Sort, SortOrder};
use serde_json::json;

use super::session;
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx};

/// The handle's capabilities include everything the harness declared.
pub(crate) async fn capabilities_are_declared_truthfully(ctx: &Ctx) -> CaseResult {
    let declared = ctx.capabilities();
    let actual = ctx.db().await?.capabilities();
    let d = serde_json::to_value(declared).map_err(|e| e.to_string())?;
    let a = serde_json::to_value(actual).map_err(|e| e.to_string())?;
    for (flag, value) in d.as_object().into_iter().flatten() {
        if value == &json!(true) {
            ensure(
                a[flag] == json!(true),
                format!("harness declares `{flag}` but the database handle lacks it"),
            )?;
        }
    }
    Ok(())
}

/// Every session type round-trips every field; `created_at` is kept on update.
pub(crate) async fn session_round_trip_per_type(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.sessions()?;
    for session_type in [SessionType::Agent, SessionType::Team, SessionType::Workflow] {
        let mut s = session(session_type, Some("alice"));
        s.created_at = 1_700_000_000;
        s.metadata = Some(json!({"source": "conformance", "nested": {"n": 1.5, "flag": true}}));
        s.summary = Some(json!({"summary": "talked about tea", "topics": ["tea"]}));
        let data = json!({"name": "component", "model": {"id": "gpt"}});
        match session_type {
            SessionType::Agent => s.agent_data = Some(data),
            SessionType::Team => s.team_data = Some(data),
            SessionType::Workflow => s.workflow_data = Some(data),
        }
        let written = store.upsert_session(s.clone()).await?;
        ensure_eq(
            written.runs.as_deref().map(<[_]>::len),
            Some(0),
            "runs of a new session",
        )?;
        let read = store
            .get_session(&s.session_id, SessionRead::for_user("alice"))
            .await?
            .ok_or("session not found after upsert")?;
        let mut expected = s.clone();
        expected.runs = Some(vec![]);
        expected.updated_at = read.updated_at;
        ensure_eq(&read, &expected, "session read back")?;
        ensure_eq(read.session_name(), Some("conformance"), "session_name")?;

        let mut changed = s.clone();
        changed.created_at = 1;
        changed.session_data = Some(json!({"session_name": "renamed"}));
        let updated = store.upsert_session(changed).await?;
        ensure_eq(
            updated.created_at,
            1_700_000_000,
            "created_at kept on update",
        )?;
        ensure_eq(
            updated.session_name(),
            Some("renamed"),
            "session_data replaced on update",
        )?;
        ensure(
            updated.updated_at.is_some_and(|t| t >= 1_700_000_000),
            "updated_at set on update",
        )?;
        let wrong_type = SessionRead {
            session_type: Some(if session_type == SessionType::Agent {
                SessionType::Team
            } else {
                SessionType::Agent
            }),
            ..Default::default()
        };
        ensure(
            store
                .get_session(&s.session_id, wrong_type)
                .await?
                .is_none(),
            "a session filtered by another type must not be returned",
        )?;
    }
    Ok(())
}

/// An owned session is never overwritten by another user; an unowned one is claimed.
pub(crate) async fn session_owner_guard(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.sessions()?;
    let owned = session(SessionType::Agent, Some("alice"));
    store.upsert_session(owned.clone()).await?;
    let mut stolen = owned.clone();
    stolen.user_id = Some("bob".into());
    stolen.session_data = Some(json!({"session_name": "pwned"}));
    expect_err(
        store.upsert_session(stolen).await,
        ErrorKind::PermissionDenied,
        "bob upserting alice's session",
    )?;
    let mut anonymous = owned.clone();
    anonymous.user_id = None;
    expect_err(
        store.upsert_session(anonymous).await,
        ErrorKind::PermissionDenied,
        "an unowned write onto alice's session",
    )?;
    let kept = store
        .get_session(&owned.session_id, SessionRead::default())
        .await?
        .ok_or("alice's session vanished")?;
    ensure_eq(
        kept.session_name(),
        Some("conformance"),
        "alice's data after refused writes",
    )?;
    ensure_eq(
        kept.user_id.as_deref(),
        Some("alice"),
        "owner after refused writes",
    )?;

    let unowned = session(SessionType::Team, None);
    store.upsert_session(unowned.clone()).await?;
    let mut claimed = unowned.clone();
    claimed.user_id = Some("carol".into());
    store.upsert_session(claimed).await?;
    let read = store
        .get_session(&unowned.session_id, SessionRead::for_user("carol"))
        .await?;
    ensure_eq(
        read.and_then(|s| s.user_id),
        Some("carol".to_owned()),
        "unowned session claimed by its first user",
    )?;
    Ok(())
}

/// Type, component, name, time-range filters; sort by created_at both ways.
pub(crate) async fn get_sessions_filters_and_sorts(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.sessions()?;
    let mut ids = Vec::new();
    for (i, t) in [
        SessionType::Agent,
        SessionType::Team,
        SessionType::Workflow,
        SessionType::Agent,
    ]
    .into_iter()
    .enumerate()
    {
        let mut s = session(t, Some("u1"));
        s.created_at = 1_000 + i as i64;
        s.session_data = Some(json!({"session_name": format!("Chat {i} about Rust")}));
        store.upsert_session(s.clone()).await?;
        ids.push(s);
    }
    let q = |f: fn(&mut SessionQuery)| {
        let mut q = SessionQuery {
            user_id: Some("u1".into()),
            ..Default::default()
        };
        f(&mut q);
        q
    };
    let agents = store
        .get_sessions(q(|q| q.session_type = Some(SessionType::Agent)))
        .await?;
    ensure_eq(agents.total, 2, "agent sessions")?;
    let by_component = store
        .get_sessions(SessionQuery {
            component_id: ids[1].team_id.clone(),
            user_id: Some("u1".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        by_component
            .items
            .iter()
            .map(|s| s.session_id.clone())
            .collect::<Vec<_>>(),
        vec![ids[1].session_id.clone()],
        "by component id",
    )?;
    let named = store
        .get_sessions(q(|q| q.session_name = Some("chat 2".into())))
        .await?;
    ensure_eq(named.total, 1, "case-insensitive session_name filter")?;
    let ranged = store
        .get_sessions(q(|q| {
            q.start_timestamp = Some(1_001);
            q.end_timestamp = Some(1_002);
        }))
        .await?;
    ensure_eq(ranged.total, 2, "created_at range (inclusive)")?;
    let asc = store
        .get_sessions(q(|q| q.sort = Sort::by("created_at", SortOrder::Asc)))
        .await?;
    ensure_eq(
        asc.items.iter().map(|s| s.created_at).collect::<Vec<_>>(),
        vec![1_000, 1_001, 1_002, 1_003],
        "ascending created_at",
    )?;
    let desc = store
        .get_sessions(q(|q| q.sort = Sort::by("created_at", SortOrder::Desc)))
        .await?;
    ensure_eq(
        desc.items.first().map(|s| s.created_at),
        Some(1_003),
        "descending created_at",
    )?;
    ensure(
        desc.items.iter().all(|s| s.runs.is_none()),
        "runs are not attached unless include_runs",
    )?;
    expect_err(
        store
            .get_sessions(q(|q| q.sort = Sort::by("no_such_column", SortOrder::Asc)))
            .await,
        ErrorKind::InvalidInput,
        "sort by an unknown column",
    )?;
    Ok(())
}
