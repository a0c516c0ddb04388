//! Runs: one row per run, atomic run_index, filters, merging with legacy blobs.

use agno_storage_core::{Content, ErrorKind, Pagination, RunQuery, SessionRead, SessionType};
use serde_json::{json, Value};

use super::{run_dict, run_ids, run_row, session, uid};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx, Failure};

/// Each upsert writes one row; re-upserting updates it in place and keeps its index; the
/// session lists its runs in order; saving the session leaves the runs alone.
pub(crate) async fn runs_written_one_row_per_run(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let s = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(s.clone()).await?;
    for id in ["r-a", "r-b", "r-c"] {
        let run_id = format!("{}{id}", s.session_id);
        let written = runs.upsert_run(run_row(&s, &run_id, "RUNNING")).await?;
        ensure(written.run_index.is_some(), "run_index assigned on write")?;
        ensure_eq(
            Some(written),
            runs.get_run(&run_id, None).await?,
            "upsert_run returns the run as stored (insert)",
        )?;
    }
    let first = format!("{}r-a", s.session_id);
    let mut update = run_row(&s, &first, "COMPLETED");
    update.run_index = Some(99);
    update.created_at -= 100;
    let updated = runs.upsert_run(update).await?;
    ensure_eq(
        updated.run_index,
        Some(0),
        "stored run_index kept on update",
    )?;
    ensure_eq(
        updated.status.as_deref(),
        Some("COMPLETED"),
        "status updated",
    )?;
    ensure_eq(
        Some(updated),
        runs.get_run(&first, None).await?,
        "upsert_run returns the run as stored (update)",
    )?;
    let all = runs
        .get_runs(RunQuery {
            session_id: Some(s.session_id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(all.total, 3, "rows after 4 upserts of 3 runs")?;
    ensure_eq(
        all.items.iter().map(|r| r.run_index).collect::<Vec<_>>(),
        vec![Some(0), Some(1), Some(2)],
        "run_index order",
    )?;
    let one = runs
        .get_run(&first, None)
        .await?
        .ok_or("get_run of a written run")?;
    ensure_eq(
        one.run_data["status"].clone(),
        json!("COMPLETED"),
        "run_data replaced",
    )?;
    ensure_eq(
        one.session_id.clone(),
        s.session_id.clone(),
        "session_id kept",
    )?;

    let mut resaved = s.clone();
    resaved.session_data = Some(json!({"session_name": "again"}));
    sessions.upsert_session(resaved).await?;
    let read = sessions
        .get_session(&s.session_id, SessionRead::default())
        .await?
        .ok_or("session vanished")?;
    let expected: Vec<String> = ["r-a", "r-b", "r-c"]
        .iter()
        .map(|r| format!("{}{r}", s.session_id))
        .collect();
    ensure_eq(
        run_ids(read.runs.as_deref().unwrap_or_default()),
        expected,
        "session.runs after saving the session",
    )?;
    Ok(())
}

/// Concurrent appends to one session get distinct, gap-free indexes.
pub(crate) async fn run_index_assigned_atomically(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let s = session(SessionType::Agent, None);
    db.sessions()?.upsert_session(s.clone()).await?;
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (db, row) = (
            db.clone(),
            run_row(&s, &format!("{}-{i}", s.session_id), "COMPLETED"),
        );
        tasks.push(tokio::spawn(
            async move { db.runs()?.upsert_run(row).await },
        ));
    }
    let mut indexes = Vec::new();
    for t in tasks {
        let run = t
            .await
            .map_err(|e| format!("writer task panicked: {e}"))??;
        indexes.push(run.run_index.ok_or("run_index missing")?);
    }
    indexes.sort_unstable();
    ensure_eq(
        indexes,
        (0..16).collect::<Vec<i64>>(),
        "run_index of 16 concurrent appends",
    )?;
    Ok(())
}

/// A session holding more than a megabyte of runs (300 runs of ~5 KB, with escapes and
/// non-ASCII text) reads back whole, every run exactly as written and in order: stores that
/// page their reads or decode large results in parts must stitch them back together. Read
/// as typed views (`Session::run_views`, and shared: `shared_run_views`), every run gives
/// its id, status and content.
pub(crate) async fn long_session_reads_back_whole(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let s = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(s.clone()).await?;
    let mut written = Vec::new();
    for i in 0..300 {
        let mut row = run_row(&s, &format!("{}-{i}", s.session_id), "COMPLETED");
        row.run_data["content"] = json!(format!("{i}: {}", "é🍵\"x\n".repeat(200)));
        written.push(row.run_data.clone());
        runs.upsert_run(row).await?;
    }
    let read = sessions
        .get_session(&s.session_id, SessionRead::default())
        .await?
        .ok_or("the long session is missing")?;
    let views = read.run_views()?;
    ensure_eq(
        views.len(),
        written.len(),
        "views of the long session's runs",
    )?;
    ensure(
        views.iter().zip(&written).all(|(view, run)| {
            view.run_id.as_deref() == run["run_id"].as_str()
                && view.status.as_deref() == run["status"].as_str()
                && view.content.as_ref().map(Content::to_value).as_ref() == run.get("content")
        }),
        "every run of the long session reads as a view with its id, status and content",
    )?;
    let shared = read.shared_run_views()?;
    ensure(
        shared.iter().map(|v| v.get()).eq(views.iter()),
        "shared views of the long session's runs are its views",
    )?;
    drop((views, shared));
    let read_runs = read.runs.unwrap_or_default();
    ensure_eq(read_runs.len(), written.len(), "runs of the long session")?;
    ensure(
        read_runs == written,
        "every run of the long session reads back as written, in order",
    )?;
    let page = runs
        .get_runs(RunQuery {
            session_id: Some(s.session_id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(page.total, 300, "get_runs total of the long session")?;
    ensure(
        page.items.iter().map(|r| &r.run_data).eq(written.iter()),
        "get_runs returns every run as written, in order",
    )?;
    ensure_eq(
        page.items.iter().map(|r| r.run_index).collect::<Vec<_>>(),
        (0..300).map(Some).collect::<Vec<_>>(),
        "run_index of 300 appends",
    )?;
    Ok(())
}

/// A session read right after another one sees every write made in between: an added run,
/// an updated run, a deleted run, and a session without runs (stores that reuse the runs of
/// recently read sessions must notice each change). Each read is made twice, parsed per
/// call (`Session::run_values`) and parsed once and shared (`Session::shared_run_values`,
/// which a store may hand over from a parse an earlier read made): both give the same runs.
pub(crate) async fn session_reads_see_each_write_between_them(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let s = session(SessionType::Agent, Some("alice"));
    sessions.upsert_session(s.clone()).await?;
    let read = || async {
        let read = sessions
            .get_session(&s.session_id, SessionRead::for_user("alice"))
            .await?
            .ok_or("the session reads back")?;
        let again = sessions
            .get_session(&s.session_id, SessionRead::for_user("alice"))
            .await?
            .ok_or("the session reads back again")?;
        let values = read.run_values()?;
        let shared: Vec<Value> = again
            .shared_run_values()?
            .iter()
            .map(|v| v.as_ref().clone())
            .collect();
        ensure_eq(&shared, &values, "runs parsed per call and shared")?;
        Ok::<_, Failure>(values)
    };
    ensure_eq(read().await?.len(), 0, "runs of a new session")?;
    let id = |n: &str| format!("{}{n}", s.session_id);
    for n in ["a", "b"] {
        runs.upsert_run(run_row(&s, &id(n), "RUNNING")).await?;
        read().await?;
    }
    ensure_eq(read().await?.len(), 2, "runs after two writes, each read")?;
    read().await?;
    runs.upsert_run(run_row(&s, &id("a"), "COMPLETED")).await?;
    ensure_eq(
        read().await?[0]["status"].clone(),
        json!("COMPLETED"),
        "an update right after a read",
    )?;
    runs.upsert_run(run_row(&s, &id("c"), "RUNNING")).await?;
    ensure_eq(
        read()
            .await?
            .iter()
            .map(|r| r["run_id"].clone())
            .collect::<Vec<_>>(),
        vec![json!(id("a")), json!(id("b")), json!(id("c"))],
        "an added run right after a read",
    )?;
    runs.delete_runs(&[id("b")], Some("alice")).await?;
    ensure_eq(
        read()
            .await?
            .iter()
            .map(|r| r["run_id"].clone())
            .collect::<Vec<_>>(),
        vec![json!(id("a")), json!(id("c"))],
        "a deleted run right after a read",
    )?;
    runs.delete_runs(&[id("a"), id("c")], Some("alice")).await?;
    ensure_eq(
        read().await?.len(),
        0,
        "every run deleted right after a read",
    )?;
    Ok(())
}

/// `get_runs` filters by session, user and status, and honours limit and page.
pub(crate) async fn get_runs_filters(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let (sessions, runs) = (db.sessions()?, db.runs()?);
    let a = session(SessionType::Agent, Some("alice"));
    let b = session(SessionType::Agent, Some("bob"));
    sessions.upsert_session(a.clone()).await?;
    sessions.upsert_session(b.clone()).await?;
    for (s, n) in [(&a, 5), (&b, 2)] {
        for i in 0..n {
            let status = if i % 2 == 0 { "COMPLETED" } else { "ERROR" };
            runs.upsert_run(run_row(s, &format!("{}-{i}", s.session_id), status))
                .await?;
        }
    }
    let by_session = runs
        .get_runs(RunQuery {
            session_id: Some(a.session_id.clone()),
            ..Default::default()
        })
        .await?;
    ensure_eq(by_session.total, 5, "runs of alice's session")?;
    let by_user = runs
        .get_runs(RunQuery {
            user_id: Some("bob".into()),
            ..Default::default()
        })
        .await?;
    ensure(
        by_user
            .items
            .iter()
            .all(|r| r.user_id.as_deref() == Some("bob")),
        "user filter returns only bob's runs",
    )?;
    ensure_eq(by_user.total, 2, "bob's runs")?;
    let errors = runs
        .get_runs(RunQuery {
            session_id: Some(a.session_id.clone()),
            status: Some("ERROR".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(errors.total, 2, "ERROR runs of alice's session")?;
    let limited = runs
        .get_runs(RunQuery {
            session_id: Some(a.session_id.clone()),
            pagination: Pagination::limit(2),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        (limited.items.len(), limited.total),
        (2, 5),
        "limit 2: rows and total",
    )?;
    let page = runs
        .get_runs(RunQuery {
            session_id: Some(a.session_id.clone()),
            pagination: Pagination::page(2, 3),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        page.items.iter().map(|r| r.run_index).collect::<Vec<_>>(),
        vec![Some(4)],
        "page 3 of 2",
    )?;
    Ok(())
}

/// A run cannot be written before its session.
pub(crate) async fn run_requires_its_session(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let ghost = session(SessionType::Agent, None);
    expect_err(
        db.runs()?
            .upsert_run(run_row(&ghost, &uid("r"), "RUNNING"))
            .await,
        ErrorKind::NotFound,
        "run of a missing session",
    )?;
    Ok(())
}

/// Legacy blob and runs store merge: store wins on a duplicate run_id, blob order first,
/// store-only runs after; malformed blob entries are dropped.
pub(crate) async fn legacy_blob_merge(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let s = session(SessionType::Agent, Some("alice"));
    let p = &s.session_id;
    let blob = json!([run_dict(&format!("{p}-1"), "PAUSED"), "junk", {"no_run_id": true}, run_dict(&format!("{p}-2"), "COMPLETED")]);
    legacy.writer.write_legacy_session(s.clone(), blob).await?;
    let runs = legacy.db.runs()?;
    let mut newer = run_row(&s, &format!("{p}-1"), "COMPLETED");
    newer.run_index = Some(0);
    runs.upsert_run(newer).await?;
    let mut store_only = run_row(&s, &format!("{p}-3"), "COMPLETED");
    store_only.run_index = Some(5);
    runs.upsert_run(store_only).await?;
    let read = legacy
        .db
        .sessions()?
        .get_session(p, SessionRead::for_user("alice"))
        .await?
        .ok_or("legacy session not found")?;
    let merged = read.runs.unwrap_or_default();
    ensure_eq(
        run_ids(&merged),
        vec![format!("{p}-1"), format!("{p}-2"), format!("{p}-3")],
        "merged run order",
    )?;
    ensure_eq(
        merged[0].to_value()?["status"].clone(),
        json!("COMPLETED"),
        "runs store wins on a duplicate run_id",
    )?;
    let limited = legacy
        .db
        .sessions()?
        .get_session(
            p,
            SessionRead {
                runs_limit: Some(1),
                ..Default::default()
            },
        )
        .await?
        .ok_or("legacy session not found")?;
    ensure_eq(
        run_ids(limited.runs.as_deref().unwrap_or_default()),
        vec![format!("{p}-3")],
        "runs_limit keeps the last context run",
    )?;
    Ok(())
}

/// Deleting a run also removes it from the legacy blob, so the merge cannot bring it back.
pub(crate) async fn deleted_run_not_resurrected_by_blob(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let s = session(SessionType::Agent, Some("alice"));
    let p = &s.session_id;
    legacy
        .writer
        .write_legacy_session(
            s.clone(),
            json!([
                run_dict(&format!("{p}-1"), "COMPLETED"),
                run_dict(&format!("{p}-2"), "COMPLETED")
            ]),
        )
        .await?;
    let runs = legacy.db.runs()?;
    let mut copy = run_row(&s, &format!("{p}-1"), "COMPLETED");
    copy.run_index = Some(0);
    runs.upsert_run(copy).await?;
    let deleted = runs.delete_runs(&[format!("{p}-1")], Some("alice")).await?;
    ensure_eq(deleted, 1, "rows deleted")?;
    let read = legacy
        .db
        .sessions()?
        .get_session(p, SessionRead::default())
        .await?
        .ok_or("session vanished")?;
    ensure_eq(
        run_ids(read.runs.as_deref().unwrap_or_default()),
        vec![format!("{p}-2")],
        "runs after deleting run 1",
    )?;
    Ok(())
}

/// Renaming an unmigrated session keeps its legacy runs (agno's Redis adapter drops them).
pub(crate) async fn rename_keeps_legacy_runs(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let s = session(SessionType::Team, Some("alice"));
    let p = &s.session_id;
    legacy
        .writer
        .write_legacy_session(s.clone(), json!([run_dict(&format!("{p}-1"), "COMPLETED")]))
        .await?;
    let sessions = legacy.db.sessions()?;
    ensure(
        sessions
            .rename_session(p, "new name", Some("bob"))
            .await?
            .is_none(),
        "bob cannot rename alice's session",
    )?;
    let renamed = sessions
        .rename_session(p, "new name", Some("alice"))
        .await?
        .ok_or("rename returned nothing")?;
    ensure_eq(renamed.session_name(), Some("new name"), "new name")?;
    ensure_eq(
        run_ids(renamed.runs.as_deref().unwrap_or_default()),
        vec![format!("{p}-1")],
        "legacy runs after rename",
    )?;
    let count = legacy.db.legacy()?.count_legacy_runs().await?;
    ensure_eq(count, 1, "sessions still carrying a legacy blob")?;
    Ok(())
}
