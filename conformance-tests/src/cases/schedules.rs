//! Schedules: the update allow-list, per-user name uniqueness, atomic claims.

use agno_storage_core::{now_epoch_seconds, ErrorKind, Schedule, ScheduleRun, ScheduleUpdate};
use serde_json::{json, Map, Value};

use super::uid;
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx};

fn columns(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

/// Only the 13 mutable columns pass; the error names every rejected column, as agno's.
pub(crate) async fn update_schedule_allow_list(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mut s = Schedule::new(uid("sch"), "report", "/agents/a1/runs", "0 9 * * *");
    s.user_id = Some("alice".into());
    store.create_schedule(s.clone()).await?;
    let err = expect_err(
        ScheduleUpdate::new(columns(json!({"locked_by": "w", "bogus": 1, "name": "x"}))),
        ErrorKind::InvalidInput,
        "update with disallowed columns",
    )?;
    ensure_eq(
        err.message(),
        "update_schedule cannot modify ['bogus', 'locked_by']: only ['cron_expr', 'description', 'disabled_reason', 'enabled', 'endpoint', 'max_retries', 'method', 'name', 'next_run_at', 'payload', 'retry_delay_seconds', 'timeout_seconds', 'timezone'] are mutable; ownership, provenance, trigger and lock state move only through their dedicated APIs",
        "allow-list error text",
    )?;
    for forbidden in ["user_id", "managed_by", "updated_at", "locked_at"] {
        expect_err(
            ScheduleUpdate::new(columns(json!({forbidden: "x"}))),
            ErrorKind::InvalidInput,
            forbidden,
        )?;
    }
    let update = ScheduleUpdate::new(columns(json!({
        "name": "daily report", "cron_expr": "0 10 * * *", "enabled": true, "payload": {"message": "go"},
        "endpoint": "/teams/t9/runs", "target_type": "team", "target_id": "t9"
    })))?;
    let updated = store
        .update_schedule(&s.id, Some("alice"), update)
        .await?
        .ok_or("update returned nothing")?;
    ensure_eq(
        (updated.name.as_str(), updated.cron_expr.as_str()),
        ("daily report", "0 10 * * *"),
        "updated columns",
    )?;
    ensure_eq(
        (updated.target_type.as_deref(), updated.target_id.as_deref()),
        (Some("team"), Some("t9")),
        "target follows the endpoint",
    )?;
    ensure_eq(updated.user_id.as_deref(), Some("alice"), "owner unchanged")?;
    let bad_type = ScheduleUpdate::new(columns(json!({"timeout_seconds": "soon"})))?;
    expect_err(
        store.update_schedule(&s.id, Some("alice"), bad_type).await,
        ErrorKind::InvalidInput,
        "a mistyped column",
    )?;
    Ok(())
}

/// `(user_id, name)` is unique: two users may share a name, one user may not, nor may the
/// unowned bucket; renaming onto a taken name is refused.
pub(crate) async fn schedule_names_unique_per_user(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mk = |user: Option<&str>, name: &str| {
        let mut s = Schedule::new(uid("sch"), name, "/agents/a1/runs", "*/5 * * * *");
        s.user_id = user.map(str::to_owned);
        s
    };
    store.create_schedule(mk(Some("alice"), "sync")).await?;
    store.create_schedule(mk(Some("bob"), "sync")).await?;
    store.create_schedule(mk(None, "sync")).await?;
    expect_err(
        store.create_schedule(mk(Some("alice"), "sync")).await,
        ErrorKind::AlreadyExists,
        "alice's second 'sync'",
    )?;
    expect_err(
        store.create_schedule(mk(None, "sync")).await,
        ErrorKind::AlreadyExists,
        "a second unowned 'sync'",
    )?;
    let other = mk(Some("alice"), "other");
    store.create_schedule(other.clone()).await?;
    let rename = ScheduleUpdate::new(columns(json!({"name": "sync"})))?;
    expect_err(
        store
            .update_schedule(&other.id, Some("alice"), rename)
            .await,
        ErrorKind::AlreadyExists,
        "renaming onto a taken name",
    )?;
    let found = store
        .get_schedule_by_name("sync", Some("bob"))
        .await?
        .ok_or("bob's 'sync' not found by name")?;
    ensure_eq(
        found.user_id.as_deref(),
        Some("bob"),
        "owner of the schedule found by name",
    )?;
    Ok(())
}

/// Concurrent claimers never share a schedule; release needs the holder; a one-shot
/// schedule is not due again after release.
pub(crate) async fn claim_has_one_winner_and_release_needs_holder(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let now = now_epoch_seconds();
    let mut ids = Vec::new();
    for i in 0..6 {
        let mut s = Schedule::new(
            uid("sch"),
            format!("due-{i}"),
            "/agents/a1/runs",
            if i == 0 { "" } else { "* * * * *" },
        );
        s.next_run_at = Some(now - 10 + i);
        s.user_id = Some(format!("user-{}", i % 2));
        store.create_schedule(s.clone()).await?;
        ids.push(s.id);
    }
    let mut not_due = Schedule::new(uid("sch"), "later", "/agents/a1/runs", "* * * * *");
    not_due.next_run_at = Some(now + 3_600);
    store.create_schedule(not_due.clone()).await?;

    let mut tasks = Vec::new();
    for w in 0..2 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            let mut claimed = Vec::new();
            while let Some(s) = db
                .schedules()?
                .claim_due_schedule(&format!("worker-{w}"), 300)
                .await?
            {
                claimed.push(s);
            }
            Ok::<_, agno_storage_core::Error>(claimed)
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        claimed.extend(t.await.map_err(|e| format!("claimer panicked: {e}"))??);
    }
    let mut claimed_ids: Vec<String> = claimed.iter().map(|s| s.id.clone()).collect();
    claimed_ids.sort();
    let mut expected = ids.clone();
    expected.sort();
    ensure_eq(
        claimed_ids,
        expected,
        "each due schedule claimed exactly once across 2 claimers",
    )?;
    ensure(
        claimed
            .iter()
            .all(|s| s.locked_by.is_some() && s.locked_at.is_some()),
        "claims carry locked_by and locked_at",
    )?;

    let first = claimed
        .iter()
        .find(|s| s.id == ids[0])
        .ok_or("one-shot schedule not claimed")?;
    let holder = first.locked_by.clone().unwrap_or_default();
    ensure(
        !store
            .release_schedule(&first.id, "intruder", None, Some(now + 60))
            .await?,
        "release by a non-holder",
    )?;
    ensure(
        !store
            .release_schedule(
                &first.id,
                &holder,
                Some(first.locked_at.unwrap_or_default() - 1),
                None,
            )
            .await?,
        "release with a stale locked_at",
    )?;
    ensure(
        store
            .release_schedule(&first.id, &holder, first.locked_at, Some(now + 60))
            .await?,
        "release by the holder",
    )?;
    let released = store
        .get_schedule(&first.id, None)
        .await?
        .ok_or("released schedule vanished")?;
    ensure_eq(
        (released.locked_by.clone(), released.next_run_at),
        (None, None),
        "one-shot schedule after release",
    )?;
    let second = claimed
        .iter()
        .find(|s| s.id == ids[1])
        .ok_or("schedule 1 not claimed")?;
    store
        .release_schedule(
            &second.id,
            second.locked_by.as_deref().unwrap_or_default(),
            None,
            Some(now + 60),
        )
        .await?;
    let released = store
        .get_schedule(&second.id, None)
        .await?
        .ok_or("released schedule vanished")?;
    ensure_eq(
        released.next_run_at,
        Some(now + 60),
        "next_run_at after release",
    )?;
    ensure(
        store.claim_due_schedule("late", 300).await?.is_none(),
        "nothing due after everything is claimed or released",
    )?;
    Ok(())
}

/// A schedule run records its schedule's owner, whatever the caller passed; runs go with
/// their schedule.
pub(crate) async fn schedule_runs_carry_owner(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.schedules()?;
    let mut s = Schedule::new(uid("sch"), "owned", "/agents/a1/runs", "* * * * *");
    s.user_id = Some("alice".into());
    store.create_schedule(s.clone()).await?;
    let run = ScheduleRun {
        id: uid("sr"),
        schedule_id: s.id.clone(),
        attempt: 1,
        triggered_at: Some(now_epoch_seconds()),
        completed_at: None,
        status: "running".into(),
        status_code: None,
        run_id: None,
        session_id: None,
        error: None,
        input: Some(json!({"message": "go"})),
        output: None,
        requirements: None,
        user_id: Some("mallory".into()),
        created_at: now_epoch_seconds(),
    };
    let stored = store.create_schedule_run(run.clone()).await?;
    ensure_eq(
        stored.user_id.as_deref(),
        Some("alice"),
        "schedule run owner",
    )?;
    ensure(
        store
            .get_schedule_run(&run.id, Some("mallory"))
            .await?
            .is_none(),
        "mallory reads alice's schedule run",
    )?;
    let mut done = stored.clone();
    done.status = "success".into();
    done.status_code = Some(200);
    done.completed_at = Some(now_epoch_seconds());
    ensure(
        store
            .update_schedule_run(done.clone(), Some("mallory"))
            .await?
            .is_none(),
        "mallory updates alice's schedule run",
    )?;
    let updated = store
        .update_schedule_run(done, Some("alice"))
        .await?
        .ok_or("update returned nothing")?;
    ensure_eq(
        (updated.status.as_str(), updated.status_code),
        ("success", Some(200)),
        "updated run",
    )?;
    let listed = store
        .get_schedule_runs(
            &s.id,
            Some("alice"),
            agno_storage_core::Pagination::default(),
        )
        .await?;
    ensure_eq(listed.total, 1, "alice's schedule runs")?;
    ensure(
        store.delete_schedule(&s.id, Some("alice")).await?,
        "delete the schedule",
    )?;
    ensure(
        store.get_schedule_run(&run.id, None).await?.is_none(),
        "runs deleted with their schedule",
    )?;
    let orphan = ScheduleRun {
        id: uid("sr"),
        schedule_id: "missing".into(),
        ..run
    };
    expect_err(
        store.create_schedule_run(orphan).await,
        ErrorKind::NotFound,
        "a run of a missing schedule",
    )?;
    Ok(())
}

/// Eight tasks create one owner's schedule name at once: exactly one wins, the others get
/// `AlreadyExists`, for an owned and for an unowned name.
pub(crate) async fn schedule_names_unique_under_concurrent_creates(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    for owner in [Some("alice"), None] {
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                tokio::spawn(async move {
                    let mut s =
                        Schedule::new(uid("sch"), "nightly", "/agents/a1/runs", "0 3 * * *");
                    s.user_id = owner.map(str::to_owned);
                    db.schedules()?.create_schedule(s).await
                })
            })
            .collect();
        let (mut won, mut refused) = (0, 0);
        for t in tasks {
            match t.await.map_err(|e| format!("create task panicked: {e}"))? {
                Ok(_) => won += 1,
                Err(e) if e.kind() == ErrorKind::AlreadyExists => refused += 1,
                Err(e) => return Err(e.into()),
            }
        }
        ensure_eq(
            (won, refused),
            (1, 7),
            &format!("creates of {owner:?}'s 'nightly'"),
        )?;
        ensure(
            db.schedules()?
                .get_schedule_by_name("nightly", owner)
                .await?
                .is_some(),
            "the winner is stored",
        )?;
    }
    Ok(())
}
