//! Schema versions and the migration manager.

use std::sync::Arc;

use agno_storage_core::legacy::cleanup_legacy_runs;
use agno_storage_core::migration::{MigrationLock, MigrationStep, StepOutcome, TableRef};
use agno_storage_core::{
    async_trait, AgnoDb, Error, ErrorKind, MigrationManager, MigrationTarget, Result, RunQuery,
    SchemaVersion, SchemaVersionStore, SessionRead, SessionType, TableType,
};
use serde_json::{json, Value};

use super::{run_dict, run_ids, run_row, session};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx, Failure, LegacyDb};

/// Writes `n` legacy sessions with 3 runs each; returns their ids.
async fn seed_legacy(legacy: &LegacyDb, n: usize) -> std::result::Result<Vec<String>, Failure> {
    let mut ids = Vec::new();
    for i in 0..n {
        let s = session(SessionType::Agent, Some(&format!("user-{i}")));
        let p = &s.session_id;
        let blob = json!([
            run_dict(&format!("{p}-0"), "COMPLETED"),
            run_dict(&format!("{p}-1"), "COMPLETED"),
            run_dict(&format!("{p}-2"), "ERROR")
        ]);
        // Half as agno 2.x SQLite wrote it: a JSON string holding the array.
        let blob = if i % 2 == 0 {
            blob
        } else {
            Value::String(blob.to_string())
        };
        legacy.writer.write_legacy_session(s.clone(), blob).await?;
        ids.push(s.session_id);
    }
    Ok(ids)
}

async fn stamps(db: &AgnoDb) -> std::result::Result<Vec<(String, Option<SchemaVersion>)>, Failure> {
    let target = db.migrations()?;
    let mut out = Vec::new();
    for t in target.tables() {
        out.push((
            t.name.clone(),
            target.versions().get_schema_version(&t.name).await?,
        ));
    }
    Ok(out)
}

async fn run_count(db: &AgnoDb) -> std::result::Result<u64, Failure> {
    Ok(db.runs()?.get_runs(RunQuery::default()).await?.total)
}

fn table_name(db: &AgnoDb, t: TableType) -> std::result::Result<String, Failure> {
    db.migrations()?
        .tables()
        .into_iter()
        .find(|r| r.table_type == t)
        .map(|r| r.name)
        .ok_or_else(|| Failure::from(format!("the migration target lists no {t:?} table")))
}

/// `up()` on a legacy database copies runs and stamps every table; a second `up()` does nothing.
pub(crate) async fn up_twice_is_idempotent(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    seed_legacy(&legacy, 3).await?;
    let target = legacy.db.migrations()?;
    let first = MigrationManager::new(target)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    ensure(
        first
            .applied
            .iter()
            .any(|s| s.outcome == StepOutcome::Applied),
        "the first up() applied a step",
    )?;
    ensure(
        stamps(&legacy.db)
            .await?
            .iter()
            .all(|(_, v)| *v == Some(SchemaVersion::LATEST)),
        "every table stamped 3.0.0",
    )?;
    ensure_eq(run_count(&legacy.db).await?, 9, "runs after the first up()")?;
    let second = MigrationManager::new(target)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    ensure_eq(
        (second.applied.len(), second.stamped.len()),
        (0, 0),
        "steps and stamps of the second up()",
    )?;
    ensure_eq(
        run_count(&legacy.db).await?,
        9,
        "runs after the second up()",
    )?;
    Ok(())
}

struct FailingStep;

#[async_trait]
impl MigrationStep for FailingStep {
    fn version(&self) -> SchemaVersion {
        SchemaVersion::LATEST
    }
    fn description(&self) -> String {
        "injected failure".into()
    }
    fn applies_to(&self, table: TableType) -> bool {
        table == TableType::Sessions
    }
    async fn up(&self, _table: &TableRef) -> Result<StepOutcome> {
        Err(Error::new(
            ErrorKind::Unavailable,
            "injected failure after the copy",
        ))
    }
    async fn down(&self, _table: &TableRef) -> Result<StepOutcome> {
        Ok(StepOutcome::NothingToDo)
    }
}

/// The backend's target plus a step that fails on the sessions table after the real ones.
struct Faulty<'a>(&'a dyn MigrationTarget);

#[async_trait]
impl MigrationTarget for Faulty<'_> {
    fn tables(&self) -> Vec<TableRef> {
        self.0.tables()
    }
    fn versions(&self) -> &dyn SchemaVersionStore {
        self.0.versions()
    }
    fn steps(&self) -> Vec<Arc<dyn MigrationStep>> {
        let mut steps = self.0.steps();
        steps.push(Arc::new(FailingStep));
        steps
    }
    async fn lock(&self) -> Result<MigrationLock> {
        self.0.lock().await
    }
}

/// A failing step stops `up()` before the failing table is stamped and reports what ran;
/// a clean `up()` afterwards completes with every run present exactly once.
pub(crate) async fn failure_aborts_before_stamp(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    seed_legacy(&legacy, 2).await?;
    let target = legacy.db.migrations()?;
    let sessions_table = table_name(&legacy.db, TableType::Sessions)?;
    let failure = match MigrationManager::new(&Faulty(target)).up().await {
        Ok(report) => return Err(format!("up() with a failing step succeeded: {report:?}").into()),
        Err(f) => f,
    };
    ensure(
        failure.to_string().contains("injected failure"),
        format!("failure names its cause: {failure}"),
    )?;
    ensure(
        failure
            .report
            .stamped
            .iter()
            .all(|(t, _)| t != &sessions_table),
        "the failing table was stamped",
    )?;
    ensure(
        failure
            .report
            .applied
            .iter()
            .any(|s| s.table == sessions_table),
        "the report lists the sessions steps that ran before the failure",
    )?;
    ensure_eq(
        target
            .versions()
            .get_schema_version(&sessions_table)
            .await?,
        None,
        "sessions stamp after the failure",
    )?;
    let after = stamps(&legacy.db).await?;
    let later_stamped = after
        .iter()
        .skip_while(|(t, _)| t != &sessions_table)
        .skip(1)
        .any(|(_, v)| v.is_some());
    ensure(!later_stamped, "tables after the failing one were stamped")?;
    MigrationManager::new(target)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    ensure_eq(
        target
            .versions()
            .get_schema_version(&sessions_table)
            .await?,
        Some(SchemaVersion::LATEST),
        "sessions stamp after a clean up()",
    )?;
    ensure_eq(
        run_count(&legacy.db).await?,
        6,
        "runs after the retry (each exactly once)",
    )?;
    Ok(())
}

/// An unstamped database is planned and migrated; a run already in the runs store wins over
/// its legacy copy; positions and owners come from the blob.
pub(crate) async fn unstamped_database_is_migrated(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let s = session(SessionType::Agent, Some("alice"));
    let p = s.session_id.clone();
    legacy
        .writer
        .write_legacy_session(
            s.clone(),
            json!([
                run_dict(&format!("{p}-1"), "PAUSED"),
                run_dict(&format!("{p}-2"), "COMPLETED")
            ]),
        )
        .await?;
    let mut newer = run_row(&s, &format!("{p}-1"), "COMPLETED");
    newer.run_index = Some(0);
    legacy.db.runs()?.upsert_run(newer).await?;
    let target = legacy.db.migrations()?;
    let manager = MigrationManager::new(target);
    let plan = manager.plan().await?;
    ensure(
        plan.iter().any(|t| {
            t.table_type == TableType::Sessions && t.current.is_none() && !t.steps.is_empty()
        }),
        "plan lists the unstamped sessions table with steps",
    )?;
    manager.up().await.map_err(|f| f.to_string())?;
    let runs = legacy.db.runs()?;
    let r1 = runs
        .get_run(&format!("{p}-1"), None)
        .await?
        .ok_or("run 1 missing")?;
    ensure_eq(
        r1.status.as_deref(),
        Some("COMPLETED"),
        "the newer run was not overwritten by its legacy copy",
    )?;
    let r2 = runs
        .get_run(&format!("{p}-2"), None)
        .await?
        .ok_or("run 2 not copied")?;
    ensure_eq(
        (r2.run_index, r2.user_id.as_deref()),
        (Some(1), Some("alice")),
        "copied run index and owner",
    )?;
    let read = legacy
        .db
        .sessions()?
        .get_session(&p, SessionRead::for_user("alice"))
        .await?
        .ok_or("session vanished")?;
    ensure_eq(
        run_ids(read.runs.as_deref().unwrap_or_default()),
        vec![format!("{p}-1"), format!("{p}-2")],
        "merged runs after migration",
    )?;
    ensure(
        manager.plan().await?.is_empty(),
        "nothing planned after up()",
    )?;
    Ok(())
}

/// A table stamped newer than the code is refused, and nothing is changed.
pub(crate) async fn newer_database_is_refused(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let target = db.migrations()?;
    let sessions_table = table_name(&db, TableType::Sessions)?;
    let future = SchemaVersion::new(9, 0, 0);
    target
        .versions()
        .set_schema_version(&sessions_table, future)
        .await?;
    let failure = match MigrationManager::new(target).up().await {
        Ok(report) => return Err(format!("up() on a newer database succeeded: {report:?}").into()),
        Err(f) => f,
    };
    ensure_eq(
        failure.error.kind(),
        ErrorKind::SchemaMismatch,
        "error kind",
    )?;
    ensure(
        failure.error.message().contains("newer"),
        format!("message says the database is newer: {}", failure.error),
    )?;
    ensure_eq(
        target
            .versions()
            .get_schema_version(&sessions_table)
            .await?,
        Some(future),
        "stamp left alone",
    )?;
    expect_err(
        MigrationManager::new(target).plan().await,
        ErrorKind::SchemaMismatch,
        "plan() on a newer database",
    )?;
    Ok(())
}

/// Unforced cleanup refuses while blobs remain, naming how many; forced cleanup drops them
/// and every run stays readable.
pub(crate) async fn cleanup_legacy_runs_refuses_unforced(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let ids = seed_legacy(&legacy, 2).await?;
    MigrationManager::new(legacy.db.migrations()?)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    let store = legacy.db.legacy()?;
    let sessions_table = table_name(&legacy.db, TableType::Sessions)?;
    let err = expect_err(
        cleanup_legacy_runs(store, &sessions_table, false).await,
        ErrorKind::Conflict,
        "unforced cleanup",
    )?;
    ensure(
        err.message().contains("2 session(s)"),
        format!("refusal names the count: {}", err.message()),
    )?;
    ensure_eq(
        cleanup_legacy_runs(store, &sessions_table, true).await?,
        2,
        "sessions cleaned",
    )?;
    ensure_eq(store.count_legacy_runs().await?, 0, "blobs left")?;
    ensure_eq(
        cleanup_legacy_runs(store, &sessions_table, false).await?,
        0,
        "unforced cleanup with nothing left",
    )?;
    for id in ids {
        let s = legacy
            .db
            .sessions()?
            .get_session(&id, SessionRead::default())
            .await?
            .ok_or("session vanished")?;
        ensure_eq(
            s.runs.map(|r| r.len()),
            Some(3),
            "runs of a cleaned session",
        )?;
    }
    Ok(())
}

/// The learnings step re-keys pre-v3 entity rows per user, quarantines contaminated rows,
/// and refuses to go down.
pub(crate) async fn learnings_rekey_migrates_and_refuses_down(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let target = db.migrations()?;
    let learnings_table = table_name(&db, TableType::Learnings)?;
    let pre_v3 = SchemaVersion::new(2, 5, 6);
    target
        .versions()
        .set_schema_version(&learnings_table, pre_v3)
        .await?;
    let store = db.learnings()?;
    store
        .upsert_learning(super::learnings::entity(
            "alice",
            "entity_user_person_sarah_chen".into(),
            "manager",
        ))
        .await?;
    let mut contaminated =
        super::learnings::entity("bob", "entity_user_project_apollo".into(), "launch");
    contaminated.entity_id = Some("apollo".into());
    contaminated.entity_type = Some("project".into());
    contaminated.content = json!({"name": "Apollo", "user_id": "alice"});
    store.upsert_learning(contaminated).await?;
    MigrationManager::new(target)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    let new_id = "entity_user_2bd806c97f0e00af_person_sarah_chen";
    let moved = store
        .get_learning(new_id, Some("alice"))
        .await?
        .ok_or("re-keyed learning not found")?;
    ensure_eq(
        moved.content["facts"].clone(),
        json!(["manager"]),
        "content carried over",
    )?;
    ensure(
        store
            .get_learning("entity_user_person_sarah_chen", None)
            .await?
            .is_none(),
        "the pre-v3 row was removed",
    )?;
    let q = store
        .get_learning("entity_quarantined_user_project_apollo", None)
        .await?
        .ok_or("contaminated row not quarantined")?;
    ensure_eq(
        q.namespace.as_deref(),
        Some("quarantined_user"),
        "quarantine namespace",
    )?;
    let failure = match MigrationManager::new(target)
        .down(pre_v3, Some(TableType::Learnings))
        .await
    {
        Ok(report) => return Err(format!("down() past the re-key succeeded: {report:?}").into()),
        Err(f) => f,
    };
    ensure_eq(
        failure.error.kind(),
        ErrorKind::Unsupported,
        "down() error kind",
    )?;
    ensure(
        failure.error.message().contains("cannot be reverted"),
        format!("down() says why: {}", failure.error),
    )?;
    ensure_eq(
        target
            .versions()
            .get_schema_version(&learnings_table)
            .await?,
        Some(SchemaVersion::LATEST),
        "learnings stamp after refused down()",
    )?;
    Ok(())
}

/// A blob that cannot be decoded is reported with its session id; every other session is
/// still copied, the sessions table stays unstamped, and the session itself stays readable.
pub(crate) async fn malformed_blob_is_reported_and_others_copied(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    seed_legacy(&legacy, 2).await?;
    let broken = session(SessionType::Agent, Some("mallory"));
    legacy
        .writer
        .write_legacy_session(
            broken.clone(),
            Value::String("[{\"run_id\": \"cut-off\", \"status\": \"COMPL".into()),
        )
        .await?;
    let target = legacy.db.migrations()?;
    let sessions_table = table_name(&legacy.db, TableType::Sessions)?;
    let failure = match MigrationManager::new(target).up().await {
        Ok(report) => {
            return Err(format!("up() with a malformed blob succeeded: {report:?}").into())
        }
        Err(f) => f,
    };
    ensure(
        failure.error.message().contains(&broken.session_id),
        format!("the error names the session: {}", failure.error),
    )?;
    ensure_eq(
        run_count(&legacy.db).await?,
        6,
        "runs copied from the well-formed sessions",
    )?;
    ensure_eq(
        target
            .versions()
            .get_schema_version(&sessions_table)
            .await?,
        None,
        "sessions stamp",
    )?;
    let read = legacy
        .db
        .sessions()?
        .get_session(&broken.session_id, SessionRead::default())
        .await?;
    ensure(
        read.is_some_and(|s| s.runs.is_some_and(|r| r.is_empty())),
        "the broken session reads back with no runs",
    )?;
    Ok(())
}

/// A `run_id` found in two legacy sessions (corrupt data; the migration copies a page of
/// sessions in one batch) is copied once, from one of the two, owned by that session's
/// owner; the migration completes and stamps, and the other session keeps its blob copy.
pub(crate) async fn run_in_two_legacy_sessions_is_copied_once(ctx: &Ctx) -> CaseResult {
    let legacy = ctx.legacy().await?;
    let a = session(SessionType::Agent, Some("user-a"));
    let b = session(SessionType::Agent, Some("user-b"));
    let shared = format!("{}-shared", a.session_id);
    let own = format!("{}-own", b.session_id);
    legacy
        .writer
        .write_legacy_session(a.clone(), json!([run_dict(&shared, "COMPLETED")]))
        .await?;
    legacy
        .writer
        .write_legacy_session(
            b.clone(),
            json!([run_dict(&shared, "COMPLETED"), run_dict(&own, "COMPLETED")]),
        )
        .await?;
    MigrationManager::new(legacy.db.migrations()?)
        .up()
        .await
        .map_err(|f| f.to_string())?;
    ensure_eq(run_count(&legacy.db).await?, 2, "runs in the runs table")?;
    let stored = legacy
        .db
        .runs()?
        .get_run(&shared, None)
        .await?
        .ok_or("the shared run is stored")?;
    let owner = if stored.session_id == a.session_id {
        &a
    } else {
        &b
    };
    ensure_eq(
        (stored.session_id.as_str(), stored.user_id.as_deref()),
        (owner.session_id.as_str(), owner.user_id.as_deref()),
        "the shared run's session and owner",
    )?;
    ensure(
        stamps(&legacy.db)
            .await?
            .iter()
            .all(|(_, v)| *v == Some(SchemaVersion::LATEST)),
        "every table stamped 3.0.0",
    )?;
    for s in [&a, &b] {
        let read = legacy
            .db
            .sessions()?
            .get_session(&s.session_id, SessionRead::default())
            .await?
            .ok_or("the session reads back")?;
        ensure(
            run_ids(read.runs.as_deref().unwrap_or_default()).contains(&shared),
            format!("session {} still lists the shared run", s.session_id),
        )?;
    }
    Ok(())
}
