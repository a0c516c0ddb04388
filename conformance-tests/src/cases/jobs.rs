//! The durable job queue: exactly-once claims, fencing, idempotency, retries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agno_storage_core::{
    AgnoDb, ContinueOutcome, EnqueueRejection, ErrorKind, Job, JobCompletion, JobQuery, JobStatus,
};
use futures::StreamExt;
use serde_json::json;
use tokio::task::JoinHandle;

use super::{uid, Rng};
use crate::{ensure, ensure_eq, expect_err, CaseResult, Ctx, Failure, JobStress};

fn job() -> Job {
    Job::new(
        uid("job"),
        "agent",
        "agent-1",
        uid("s"),
        json!({"input": "hello", "stream": false}),
    )
}

/// 8 concurrent workers drain 200 jobs: every job is claimed and completed exactly once.
pub(crate) async fn jobs_claimed_exactly_once(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut ids = Vec::new();
    for _ in 0..200 {
        let j = job();
        ids.push(j.id.clone());
        let outcome = store.enqueue_job(j, 0).await?;
        ensure(outcome.rejection.is_none(), "enqueue accepted")?;
    }
    let mut workers = Vec::new();
    for w in 0..8 {
        let db = db.clone();
        workers.push(tokio::spawn(async move {
            let worker = format!("worker-{w}");
            let mut done = Vec::new();
            while let Some(j) = db.jobs()?.claim_job(&worker, 60, None).await? {
                db.jobs()?
                    .complete_job(&j.id, &worker, j.attempt, JobStatus::Completed, None)
                    .await?;
                done.push(j.id);
            }
            Ok::<_, agno_storage_core::Error>(done)
        }));
    }
    let mut counts: HashMap<String, u32> = HashMap::new();
    for w in workers {
        for id in w.await.map_err(|e| format!("worker panicked: {e}"))?? {
            *counts.entry(id).or_default() += 1;
        }
    }
    ensure_eq(counts.len(), 200, "distinct jobs completed")?;
    ensure(
        counts.values().all(|&c| c == 1),
        "a job was completed twice",
    )?;
    let completed = store
        .list_jobs(JobQuery {
            status: Some(JobStatus::Completed),
            ..Default::default()
        })
        .await?;
    ensure_eq(completed.total, 200, "jobs in state completed")?;
    Ok(())
}

/// A worker whose lease was taken over cannot complete, retry or heartbeat the job.
pub(crate) async fn stale_worker_is_fenced(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut j = job();
    j.max_attempts = 2;
    store.enqueue_job(j.clone(), 0).await?;
    let first = store
        .claim_job("slow", 60, None)
        .await?
        .ok_or("first claim")?;
    ensure_eq(first.attempt, 1, "first attempt")?;
    ensure(
        store.claim_job("eager", 60, None).await?.is_none(),
        "a fresh lease is not reclaimable",
    )?;
    let second = store
        .claim_job("eager", 0, None)
        .await?
        .ok_or("reclaim of a stale lease")?;
    ensure_eq(
        (second.attempt, second.locked_by.as_deref()),
        (2, Some("eager")),
        "second claim",
    )?;
    expect_err(
        store
            .complete_job(&j.id, "slow", 1, JobStatus::Completed, None)
            .await,
        ErrorKind::LeaseLost,
        "stale completion",
    )?;
    expect_err(
        store.retry_or_fail_job(&j.id, "slow", 1, None, 0).await,
        ErrorKind::LeaseLost,
        "stale retry",
    )?;
    ensure_eq(
        store
            .heartbeat_jobs("slow", std::slice::from_ref(&j.id))
            .await?,
        0,
        "stale heartbeat",
    )?;
    ensure_eq(
        store
            .heartbeat_jobs("eager", std::slice::from_ref(&j.id))
            .await?,
        1,
        "holder heartbeat",
    )?;
    let done = store
        .complete_job(&j.id, "eager", 2, JobStatus::Completed, None)
        .await?;
    ensure_eq(done.status, JobStatus::Completed, "holder completion")?;
    ensure(
        done.completed_at.is_some() && done.locked_by.is_none(),
        "completion clears the lease",
    )?;
    ensure(
        store.claim_job("eager", 0, None).await?.is_none(),
        "a completed job is never claimed again",
    )?;
    Ok(())
}

/// Concurrent resubmissions with one idempotency key create one job per user.
pub(crate) async fn idempotency_key_deduplicates_concurrent_submissions(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let key = uid("idem");
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (db, key) = (db.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let mut j = job();
            j.user_id = Some("alice".into());
            j.idempotency_key = Some(key);
            db.jobs()?.enqueue_job(j, 0).await
        }));
    }
    let mut accepted = Vec::new();
    let mut duplicates = Vec::new();
    for t in tasks {
        let outcome = t.await.map_err(|e| format!("submitter panicked: {e}"))??;
        let id = outcome.job.map(|j| j.id).ok_or("outcome without a job")?;
        match outcome.rejection {
            None => accepted.push(id),
            Some(EnqueueRejection::Duplicate) => duplicates.push(id),
            Some(other) => return Err(format!("unexpected rejection {other:?}").into()),
        }
    }
    ensure_eq(accepted.len(), 1, "accepted submissions")?;
    ensure(
        duplicates.iter().all(|d| d == &accepted[0]),
        "duplicates return the original job",
    )?;
    let mut bobs = job();
    bobs.user_id = Some("bob".into());
    bobs.idempotency_key = Some(key);
    let outcome = db.jobs()?.enqueue_job(bobs, 0).await?;
    ensure(
        outcome.rejection.is_none(),
        "the same key from another user is a new job",
    )?;
    Ok(())
}

/// Retries re-queue until attempts run out, then the job fails; the queue depth cap holds;
/// cleanup removes finished jobs.
pub(crate) async fn retry_then_fail_and_cleanup(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut j = job();
    j.max_attempts = 2;
    store.enqueue_job(j.clone(), 0).await?;
    let full = store.enqueue_job(job(), 1).await?;
    ensure_eq(
        full.rejection,
        Some(EnqueueRejection::QueueFull),
        "enqueue past max_depth",
    )?;
    let c1 = store.claim_job("w", 60, None).await?.ok_or("claim 1")?;
    let retried = store
        .retry_or_fail_job(&j.id, "w", c1.attempt, Some("boom".into()), 0)
        .await?;
    ensure_eq(retried.status, JobStatus::Queued, "after the first failure")?;
    let c2 = store.claim_job("w", 60, None).await?.ok_or("claim 2")?;
    ensure_eq(c2.attempt, 2, "second attempt")?;
    let failed = store
        .retry_or_fail_job(&j.id, "w", c2.attempt, Some("boom again".into()), 0)
        .await?;
    ensure_eq(
        (failed.status, failed.error.as_deref()),
        (JobStatus::Failed, Some("boom again")),
        "after the last failure",
    )?;
    expect_err(
        store.enqueue_job(j.clone(), 0).await,
        ErrorKind::AlreadyExists,
        "reusing a job id",
    )?;
    ensure_eq(store.cleanup_jobs(0).await?, 1, "jobs cleaned up")?;
    ensure(
        store.get_job(&j.id, None).await?.is_none(),
        "cleaned job is gone",
    )?;
    Ok(())
}

/// Eight workers race for one job: exactly one gets it.
pub(crate) async fn two_claimers_of_one_job_one_winner(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    db.jobs()?.enqueue_job(job(), 0).await?;
    let mut tasks = Vec::new();
    for w in 0..8 {
        let db = db.clone();
        tasks.push(tokio::spawn(async move {
            db.jobs()?.claim_job(&format!("racer-{w}"), 60, None).await
        }));
    }
    let mut winners = 0;
    for t in tasks {
        if t.await
            .map_err(|e| format!("claimer panicked: {e}"))??
            .is_some()
        {
            winners += 1;
        }
    }
    ensure_eq(winners, 1, "claimers that got the job")
}

/// Batches: one `enqueue_jobs` call submits 120 jobs (a reused id in it is that job's
/// `AlreadyExists` alone); four workers drain them with `claim_jobs` of up to 7 and
/// `complete_jobs`: each batch is at most 7 jobs in claim order, each job with its own lease
/// at attempt 1, and every job is claimed and completed exactly once.
pub(crate) async fn batch_claims_and_completions_exactly_once(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let jobs: Vec<Job> = (0..120).map(|_| job()).collect();
    let mut submitted = jobs.clone();
    submitted.insert(60, jobs[3].clone());
    let outcomes = store.enqueue_jobs(submitted, 0).await?;
    ensure_eq(outcomes.len(), 121, "one outcome per submitted job")?;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match (i, outcome) {
            (60, Err(e)) => ensure_eq(e.kind(), ErrorKind::AlreadyExists, "the reused id")?,
            (60, Ok(o)) => return Err(format!("a reused id was accepted: {o:?}").into()),
            (_, Ok(o)) => ensure(o.rejection.is_none(), format!("job {i} accepted"))?,
            (_, Err(e)) => return Err(format!("job {i} refused: {e}").into()),
        }
    }
    ensure(
        store.claim_jobs("idle", 60, None, 0).await?.is_empty(),
        "a claim of none claims nothing",
    )?;
    let mut workers = Vec::new();
    for w in 0..4 {
        let db = db.clone();
        workers.push(tokio::spawn(async move {
            let worker = format!("batcher-{w}");
            let mut done = Vec::new();
            loop {
                let batch = db.jobs()?.claim_jobs(&worker, 60, None, 7).await?;
                if batch.is_empty() {
                    return Ok::<_, Failure>(done);
                }
                ensure(batch.len() <= 7, "a batch holds at most its limit")?;
                ensure(
                    batch
                        .windows(2)
                        .all(|p| (p[0].created_at, &p[0].id) < (p[1].created_at, &p[1].id)),
                    "a batch comes in claim order",
                )?;
                ensure(
                    batch.iter().all(|j| j.is_held_by(&worker, 1)),
                    "each claimed job runs under the claimer's lease at attempt 1",
                )?;
                let completions = batch
                    .iter()
                    .map(|j| JobCompletion::of(j, JobStatus::Completed, None))
                    .collect();
                let results = db.jobs()?.complete_jobs(&worker, completions).await?;
                ensure_eq(results.len(), batch.len(), "one result per completion")?;
                for (job, result) in batch.into_iter().zip(results) {
                    result?;
                    done.push(job.id);
                }
            }
        }));
    }
    let mut counts: HashMap<String, u32> = HashMap::new();
    for w in workers {
        for id in w.await.map_err(|e| format!("worker panicked: {e}"))?? {
            *counts.entry(id).or_default() += 1;
        }
    }
    ensure_eq(counts.len(), 120, "distinct jobs completed")?;
    ensure(
        counts.values().all(|&c| c == 1),
        "a job was completed twice",
    )?;
    let completed = store
        .list_jobs(JobQuery {
            status: Some(JobStatus::Completed),
            ..Default::default()
        })
        .await?;
    ensure_eq(completed.total, 120, "jobs in state completed")?;
    Ok(())
}

/// An error text with what array and list syntaxes quote.
const BOOM: &str = "boom \"q\" \\ {a,b} NULL";

/// `complete_jobs` fences each job on its own: a job reclaimed by another worker is that
/// job's `LeaseLost` while the rest finish (a paused one without `completed_at`); a
/// listing that names a job twice or a status no job finishes in is refused whole. Ids and
/// errors hold what array and list syntaxes quote (`"`, `\`, `,`, braces, `NULL`).
pub(crate) async fn batch_completion_refuses_a_stale_job_alone(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut jobs: Vec<Job> = (0..3)
        .map(|_| {
            let base = job();
            Job {
                id: format!("{} \"q\" \\,{{NULL}}", base.id),
                max_attempts: 2,
                ..base
            }
        })
        .collect();
    jobs.sort_by(|a, b| a.id.cmp(&b.id));
    for outcome in store.enqueue_jobs(jobs.clone(), 0).await? {
        ensure(outcome?.rejection.is_none(), "enqueue accepted")?;
    }
    let held = store.claim_jobs("slow", 60, None, 3).await?;
    ensure_eq(held.len(), 3, "jobs claimed")?;
    let taken = store.claim_jobs("eager", 0, None, 1).await?;
    let stale = match taken.as_slice() {
        [t] if t.attempt == 2 && held.iter().any(|h| h.id == t.id) => t.id.clone(),
        other => {
            return Err(format!("one stale lease reclaimed at attempt 2, got {other:?}").into())
        }
    };
    let mut rest = held.iter().filter(|h| h.id != stale);
    let (failing, pausing) = (rest.next().ok_or("held")?, rest.next().ok_or("held")?);
    let stale_job = held.iter().find(|h| h.id == stale).ok_or("held")?;
    let completions = vec![
        JobCompletion::of(stale_job, JobStatus::Completed, None),
        JobCompletion::of(failing, JobStatus::Failed, Some(BOOM.into())),
        JobCompletion::of(pausing, JobStatus::Paused, None),
    ];
    let mut twice = completions.clone();
    twice.push(completions[1].clone());
    expect_err(
        store.complete_jobs("slow", twice).await,
        ErrorKind::InvalidInput,
        "a job listed twice",
    )?;
    let mut queued = completions.clone();
    queued[1].status = JobStatus::Queued;
    expect_err(
        store.complete_jobs("slow", queued).await,
        ErrorKind::InvalidInput,
        "a status no job finishes in",
    )?;
    ensure_eq(
        store
            .heartbeat_jobs("slow", std::slice::from_ref(&failing.id))
            .await?,
        1,
        "a refused listing wrote nothing",
    )?;
    let results = store.complete_jobs("slow", completions).await?;
    ensure_eq(results.len(), 3, "one result per completion")?;
    let mut results = results.into_iter();
    expect_err(
        results.next().ok_or("first result")?,
        ErrorKind::LeaseLost,
        "the reclaimed job",
    )?;
    results.next().ok_or("second result")??;
    results.next().ok_or("third result")??;
    let failed = store
        .get_job(&failing.id, None)
        .await?
        .ok_or("failed job")?;
    ensure_eq(
        (
            failed.status,
            failed.error.as_deref(),
            failed.locked_by.is_none(),
        ),
        (JobStatus::Failed, Some(BOOM), true),
        "the failed job",
    )?;
    ensure(
        failed.completed_at.is_some(),
        "a failed job records completed_at",
    )?;
    let paused = store
        .get_job(&pausing.id, None)
        .await?
        .ok_or("paused job")?;
    ensure_eq(
        (paused.status, paused.completed_at, paused.locked_by),
        (JobStatus::Paused, None, None),
        "the paused job",
    )?;
    let reclaimed = store.get_job(&stale, None).await?.ok_or("reclaimed job")?;
    ensure(
        reclaimed.is_held_by("eager", 2),
        "the reclaimed job still runs under the new lease",
    )?;
    Ok(())
}

/// `release_job` hands back a claimed job that never started: queued again at the attempt
/// it had, claimable at once; a stale holder's release is `LeaseLost` and changes nothing.
pub(crate) async fn released_claim_costs_no_attempt(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let j = job();
    store.enqueue_job(j.clone(), 0).await?;
    let held = store.claim_job("early", 60, None).await?.ok_or("claim")?;
    let released = store.release_job(&j.id, "early", held.attempt).await?;
    ensure_eq(
        (
            released.status,
            released.attempt,
            released.locked_by.as_deref(),
        ),
        (JobStatus::Queued, 0, None),
        "released job",
    )?;
    expect_err(
        store.release_job(&j.id, "early", held.attempt).await,
        ErrorKind::LeaseLost,
        "a second release",
    )?;
    let again = store
        .claim_job("next", 60, None)
        .await?
        .ok_or("claim after release")?;
    ensure_eq(
        (again.attempt, again.is_held_by("next", 1)),
        (1, true),
        "the next worker runs it at attempt 1",
    )?;
    expect_err(
        store.release_job(&j.id, "early", 1).await,
        ErrorKind::LeaseLost,
        "a release by a worker that no longer holds it",
    )?;
    let row = store.get_job(&j.id, None).await?.ok_or("job")?;
    ensure(row.is_held_by("next", 1), "the holder keeps it")?;
    Ok(())
}

/// agno's operator calls: `requeue_job` gives a failed or cancelled job one more attempt
/// (and refuses other states and other users), `settle_paused_job` ends a paused job once
/// (and refuses a non-terminal status), and `queue_stats` / `count_queued_jobs` count what
/// is there.
pub(crate) async fn requeue_settle_and_queue_stats(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let owned = |mut j: Job| {
        j.user_id = Some("alice".into());
        j
    };
    let (failing, pausing, waiting) = (owned(job()), owned(job()), owned(job()));
    for j in [&failing, &pausing, &waiting] {
        store.enqueue_job(j.clone(), 0).await?;
    }
    let empty = agno_storage_core::QueueStats::default();
    ensure(store.queue_stats().await? != empty, "stats see the jobs")?;
    ensure_eq(store.count_queued_jobs().await?, 3, "queued jobs")?;
    let stats = store.queue_stats().await?;
    ensure_eq(
        stats.counts.get("queued").copied(),
        Some(3),
        "queued in stats",
    )?;
    ensure(
        stats
            .oldest_queued_age_seconds
            .is_some_and(|age| (0..3_600).contains(&age)),
        format!("oldest queued age {:?}", stats.oldest_queued_age_seconds),
    )?;
    let held = store.claim_jobs("w", 60, None, 3).await?;
    ensure_eq(held.len(), 3, "claimed")?;
    for c in &held {
        if c.id == waiting.id {
            store.release_job(&c.id, "w", c.attempt).await?;
        } else {
            let status = if c.id == failing.id {
                JobStatus::Failed
            } else {
                JobStatus::Paused
            };
            store
                .complete_job(&c.id, "w", c.attempt, status, None)
                .await?;
        }
    }
    ensure(
        !store.requeue_job(&waiting.id, None).await?,
        "a queued job is not requeued",
    )?;
    ensure(
        !store.requeue_job(&failing.id, Some("mallory")).await?,
        "another user's job is not requeued",
    )?;
    ensure(
        store.requeue_job(&failing.id, Some("alice")).await?,
        "requeue",
    )?;
    let requeued = store
        .get_job(&failing.id, None)
        .await?
        .ok_or("requeued job")?;
    ensure_eq(
        (
            requeued.status,
            requeued.attempt,
            requeued.max_attempts,
            requeued.completed_at,
        ),
        (JobStatus::Queued, 1, 2, None),
        "one more attempt",
    )?;
    expect_err(
        store
            .settle_paused_job(&pausing.id, JobStatus::Queued, None)
            .await,
        ErrorKind::InvalidInput,
        "settling in a non-terminal state",
    )?;
    ensure(
        !store
            .settle_paused_job(&waiting.id, JobStatus::Cancelled, None)
            .await?,
        "only a paused job is settled",
    )?;
    ensure(
        store
            .settle_paused_job(&pausing.id, JobStatus::Failed, Some("abandoned".into()))
            .await?,
        "settle",
    )?;
    ensure(
        !store
            .settle_paused_job(&pausing.id, JobStatus::Completed, None)
            .await?,
        "settled once",
    )?;
    let settled = store
        .get_job(&pausing.id, None)
        .await?
        .ok_or("settled job")?;
    ensure_eq(
        (
            settled.status,
            settled.error.as_deref(),
            settled.completed_at.is_some(),
        ),
        (JobStatus::Failed, Some("abandoned"), true),
        "the settled job",
    )?;
    let stats = store.queue_stats().await?;
    ensure_eq(
        (
            stats.counts.get("queued").copied(),
            stats.counts.get("failed").copied(),
        ),
        (Some(2), Some(1)),
        "counts after",
    )?;
    ensure_eq(stats.counts.get("paused"), None, "no paused job left")?;
    Ok(())
}

/// How long a killed worker's claim stays leased before another worker may take it over.
const STRESS_GRACE_SECONDS: i64 = 2;

/// What the stress workers share: successful completions per job, and the claims of
/// workers that died holding a job (id, attempt, worker).
#[derive(Default)]
struct StressLedger {
    completions: HashMap<String, u32>,
    abandoned: Vec<(String, i64, String)>,
    claims: u64,
}

/// One worker: claims and completes until it is aborted; every 97th claim (counted over all
/// workers) it dies holding the job, as a process killed between claim and completion would.
async fn stress_worker(
    db: AgnoDb,
    worker: String,
    ledger: Arc<Mutex<StressLedger>>,
) -> agno_storage_core::Result<()> {
    let store = db.jobs()?;
    loop {
        let Some(j) = store.claim_job(&worker, STRESS_GRACE_SECONDS, None).await? else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let dies = {
            let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
            ledger.claims += 1;
            let dies = ledger.claims % 97 == 13;
            if dies {
                ledger
                    .abandoned
                    .push((j.id.clone(), j.attempt, worker.clone()));
            }
            dies
        };
        if dies {
            return Ok(());
        }
        match store
            .complete_job(&j.id, &worker, j.attempt, JobStatus::Completed, None)
            .await
        {
            Ok(_) => {
                let mut ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
                *ledger.completions.entry(j.id).or_default() += 1;
            }
            // Our lease ran out and another worker took the job over: move on.
            Err(e) if e.kind() == ErrorKind::LeaseLost => {}
            Err(e) => return Err(e),
        }
    }
}

/// The stress trial: 2,000 jobs (fewer where the harness says so), each submitted
/// twice at once under one idempotency key; 8 workers drain them while workers are aborted
/// at random points (mid-claim, mid-completion) and others die holding a job, and are
/// restarted. Exactly one submission per key is accepted, every job completes exactly once,
/// none is lost, and every dead worker's late completion is refused with `LeaseLost`.
pub(crate) async fn stress_exactly_once_with_killed_workers(ctx: &Ctx) -> CaseResult {
    let JobStress { jobs: n, workers } = ctx.job_stress();
    let db = ctx.db().await?;
    let session_id = uid("s");
    let seed = 0x10b5_u64 ^ agno_storage_core::now_epoch_seconds() as u64;
    let mut rng = Rng(seed | 1);
    let fail = |what: String| format!("seed {seed:#x}: {what}");

    let submissions = futures::stream::iter(0..n)
        .map(|i| {
            let (db, session_id) = (db.clone(), session_id.clone());
            async move {
                let submit = |copy: usize| {
                    let mut j = job();
                    j.session_id = session_id.clone();
                    j.user_id = Some("stress-user".into());
                    j.idempotency_key = Some(format!("key-{i}"));
                    j.max_attempts = 1_000;
                    j.id = format!("{}-{copy}", j.id);
                    let db = db.clone();
                    async move { db.jobs()?.enqueue_job(j, 0).await }
                };
                let (a, b) = futures::join!(submit(0), submit(1));
                Ok::<_, agno_storage_core::Error>((a?, b?))
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await;
    let mut accepted = 0;
    for result in submissions {
        let (a, b) = result?;
        let (kept, dup) = match (a.rejection, b.rejection) {
            (None, Some(EnqueueRejection::Duplicate)) => (a, b),
            (Some(EnqueueRejection::Duplicate), None) => (b, a),
            other => {
                return Err(fail(format!(
                    "two concurrent submissions under one key: expected one accepted and one duplicate, got {other:?}"
                ))
                .into())
            }
        };
        let id = |o: &agno_storage_core::EnqueueOutcome| o.job.as_ref().map(|j| j.id.clone());
        ensure_eq(
            id(&dup),
            id(&kept),
            "the duplicate returns the original job",
        )?;
        accepted += 1;
    }
    ensure_eq(accepted, n, "accepted submissions")?;

    let ledger = Arc::new(Mutex::new(StressLedger::default()));
    let spawn = |slot: usize, generation: usize| {
        tokio::spawn(stress_worker(
            db.clone(),
            format!("worker-{slot}-{generation}"),
            ledger.clone(),
        ))
    };
    let mut pool: Vec<(usize, JoinHandle<_>)> = (0..workers).map(|s| (0, spawn(s, 0))).collect();
    let mut kills = 0;
    let store = db.jobs()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(600);
    let completed = JobQuery {
        status: Some(JobStatus::Completed),
        pagination: agno_storage_core::Pagination::limit(1),
        ..Default::default()
    };
    loop {
        tokio::time::sleep(Duration::from_millis(20 + rng.next() % 80)).await;
        // Abort one worker wherever it is, at most four times per worker slot.
        if kills < 4 * workers {
            let slot = (rng.next() % workers as u64) as usize;
            pool[slot].1.abort();
            kills += 1;
        }
        for (slot, (generation, handle)) in pool.iter_mut().enumerate() {
            if handle.is_finished() {
                let finished = std::mem::replace(handle, spawn(slot, *generation + 1));
                *generation += 1;
                match finished.await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(fail(format!("worker failed: {e}")).into()),
                    Err(e) if e.is_cancelled() => {}
                    Err(e) => return Err(fail(format!("worker panicked: {e}")).into()),
                }
            }
        }
        if store.list_jobs(completed.clone()).await?.total as usize == n {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(fail("the jobs were not all completed within 10 minutes".into()).into());
        }
    }
    for (_, handle) in &pool {
        handle.abort();
    }

    let (completions, abandoned) = {
        let ledger = ledger.lock().unwrap_or_else(|p| p.into_inner());
        (ledger.completions.clone(), ledger.abandoned.clone())
    };
    if let Some((id, count)) = completions.iter().find(|(_, &c)| c > 1) {
        return Err(fail(format!("job {id} was completed {count} times")).into());
    }
    let all = store
        .list_jobs(JobQuery {
            pagination: agno_storage_core::Pagination::limit(1),
            ..Default::default()
        })
        .await?;
    ensure_eq(
        all.total as usize,
        n,
        "jobs stored (none lost, none duplicated)",
    )?;
    ensure(
        n < 100 || !abandoned.is_empty(),
        fail("no worker died holding a job; the trial did not test takeover".into()),
    )?;
    for (id, attempt, worker) in abandoned {
        expect_err(
            store
                .complete_job(&id, &worker, attempt, JobStatus::Completed, None)
                .await,
            ErrorKind::LeaseLost,
            &fail(format!("late completion of {id} by dead {worker}")),
        )?;
    }
    Ok(())
}

/// agno's per-session ordering: serialized tickets of one session take `session_seq`
/// 1, 2, 3 at enqueue and run one at a time in that order (a running or paused ticket
/// holds the session; `session_blocker` names what a ticket waits behind); a ticket that
/// is not serialized runs beside them; a requeued one rejoins behind the live ones; the
/// sequence starts again at 1 once none is live.
pub(crate) async fn serialized_session_runs_one_ticket_at_a_time(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let session = uid("s");
    let ticket = |serialized: bool| {
        let mut j = job();
        j.session_id = session.clone();
        if serialized {
            j.payload = json!({"input": "hi", "serialize_session": true});
        }
        j
    };
    let (a, b, free, c) = (ticket(true), ticket(true), ticket(false), ticket(true));
    for j in [&a, &b, &free, &c] {
        store.enqueue_job(j.clone(), 0).await?;
    }
    let seq = |id: String| {
        let store = db.jobs();
        async move {
            let job = store?.get_job(&id, None).await?.ok_or("ticket")?;
            Ok::<_, Failure>((job.payload.get("session_seq").cloned(), job.session_seq()))
        }
    };
    ensure_eq(seq(a.id.clone()).await?.1, 1, "first ticket's session_seq")?;
    ensure_eq(seq(b.id.clone()).await?.1, 2, "second ticket's session_seq")?;
    ensure_eq(seq(c.id.clone()).await?.1, 3, "third ticket's session_seq")?;
    ensure_eq(
        seq(free.id.clone()).await?.0,
        None,
        "a free ticket gets no sequence",
    )?;
    ensure_eq(
        store.session_blocker(&b.id).await?,
        Some(a.id.clone()),
        "b waits behind a",
    )?;
    ensure_eq(
        store.session_blocker(&c.id).await?,
        Some(a.id.clone()),
        "c waits behind a",
    )?;
    ensure_eq(store.session_blocker(&a.id).await?, None, "a may run")?;
    ensure_eq(
        store.session_blocker(&free.id).await?,
        None,
        "a free ticket never waits",
    )?;

    let mut claimed: Vec<String> = store
        .claim_jobs("w", 60, None, 10)
        .await?
        .into_iter()
        .map(|j| j.id)
        .collect();
    claimed.sort();
    let mut expected = vec![a.id.clone(), free.id.clone()];
    expected.sort();
    ensure_eq(
        claimed,
        expected,
        "the session's head and the free ticket are claimed",
    )?;
    ensure(
        store.claim_job("w", 60, None).await?.is_none(),
        "b waits while a runs",
    )?;
    ensure_eq(
        store.session_blocker(&b.id).await?,
        Some(a.id.clone()),
        "a running holds the session",
    )?;
    store
        .complete_job(&a.id, "w", 1, JobStatus::Paused, None)
        .await?;
    ensure(
        store.claim_job("w", 60, None).await?.is_none(),
        "b waits while a is paused",
    )?;
    ensure_eq(
        store.session_blocker(&c.id).await?,
        Some(a.id.clone()),
        "a paused holds the session",
    )?;
    store
        .settle_paused_job(&a.id, JobStatus::Completed, None)
        .await?;

    let next = store
        .claim_job("w", 60, None)
        .await?
        .ok_or("b is claimed")?;
    ensure_eq(next.id, b.id.clone(), "b runs after a")?;
    ensure_eq(
        store.session_blocker(&c.id).await?,
        Some(b.id.clone()),
        "c waits behind b",
    )?;
    store
        .complete_job(&b.id, "w", 1, JobStatus::Failed, Some("x".into()))
        .await?;
    let next = store
        .claim_job("w", 60, None)
        .await?
        .ok_or("c is claimed")?;
    ensure_eq(next.id, c.id.clone(), "c runs after b")?;
    ensure(store.requeue_job(&b.id, None).await?, "b requeued")?;
    ensure_eq(
        seq(b.id.clone()).await?.1,
        4,
        "a requeued ticket goes behind the live ones",
    )?;
    ensure_eq(
        store.session_blocker(&b.id).await?,
        Some(c.id.clone()),
        "b waits behind c",
    )?;
    ensure(
        store.claim_job("w", 60, None).await?.is_none(),
        "b waits while c runs",
    )?;
    store
        .complete_job(&c.id, "w", 1, JobStatus::Completed, None)
        .await?;
    let next = store
        .claim_job("w", 60, None)
        .await?
        .ok_or("b is claimed again")?;
    ensure_eq(next.id, b.id.clone(), "b runs after c")?;
    store
        .complete_job(&b.id, "w", 2, JobStatus::Completed, None)
        .await?;

    let d = ticket(true);
    store.enqueue_job(d.clone(), 0).await?;
    ensure_eq(
        seq(d.id.clone()).await?.1,
        1,
        "the sequence restarts once none is live",
    )?;
    Ok(())
}

/// agno's `continue_job` (a paused job queued again with one more attempt and its
/// `payload.continue` replaced; attach while queued or running; conflict once finished,
/// absent or another user's) and its sweep of exhausted leases (`sweep_exhausted_jobs`
/// lists them, `acquire_sweep` has one winner while the lease is stale,
/// `settle_swept_job` ends the job only for the sweeper holding it).
pub(crate) async fn continue_and_sweep_as_agno(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut paused = job();
    paused.user_id = Some("alice".into());
    store.enqueue_job(paused.clone(), 0).await?;
    let held = store.claim_job("w", 60, None).await?.ok_or("claim")?;
    store
        .complete_job(&held.id, "w", held.attempt, JobStatus::Paused, None)
        .await?;
    let c = store
        .continue_job(&paused.id, Some("mallory"), json!({"answer": 1}))
        .await?;
    ensure_eq(
        (c.outcome, c.job),
        (ContinueOutcome::Conflict, None),
        "another user's job",
    )?;
    let c = store
        .continue_job(&paused.id, Some("alice"), json!({"answer": 42}))
        .await?;
    ensure_eq(c.outcome, ContinueOutcome::Queued, "a paused job continues")?;
    let row = store.get_job(&paused.id, None).await?.ok_or("job")?;
    ensure_eq(
        (
            row.status,
            row.max_attempts,
            row.payload.get("continue").cloned(),
        ),
        (JobStatus::Queued, 2, Some(json!({"answer": 42}))),
        "queued with one more attempt and the continue's inputs",
    )?;
    ensure_eq(
        row.payload.get("input").cloned(),
        Some(json!("hello")),
        "submit inputs kept",
    )?;
    ensure_eq(Some(row), c.job, "the job returned is the job stored")?;
    let c = store
        .continue_job(&paused.id, None, json!({"answer": 7}))
        .await?;
    ensure_eq(
        c.outcome,
        ContinueOutcome::Attach,
        "a queued job is attached to",
    )?;
    let held = store.claim_job("w", 60, None).await?.ok_or("claim again")?;
    ensure_eq(held.attempt, 2, "the second attempt")?;
    let c = store.continue_job(&paused.id, None, json!({})).await?;
    ensure_eq(
        c.outcome,
        ContinueOutcome::Attach,
        "a running job is attached to",
    )?;
    store
        .complete_job(&held.id, "w", 2, JobStatus::Completed, None)
        .await?;
    let c = store.continue_job(&paused.id, None, json!({})).await?;
    ensure_eq(
        c.outcome,
        ContinueOutcome::Conflict,
        "a finished job conflicts",
    )?;
    let c = store.continue_job(&uid("absent"), None, json!({})).await?;
    ensure_eq(
        (c.outcome, c.job),
        (ContinueOutcome::Conflict, None),
        "an absent job",
    )?;

    let exhausted = job();
    let mut spare = job();
    spare.max_attempts = 2;
    store.enqueue_job(exhausted.clone(), 0).await?;
    store.enqueue_job(spare.clone(), 0).await?;
    ensure_eq(
        store.claim_jobs("w", 60, None, 2).await?.len(),
        2,
        "both claimed",
    )?;
    let swept: Vec<String> = store
        .sweep_exhausted_jobs(0, 10)
        .await?
        .into_iter()
        .map(|j| j.id)
        .collect();
    ensure_eq(
        swept,
        vec![exhausted.id.clone()],
        "only the job with no attempt left",
    )?;
    ensure(
        store.sweep_exhausted_jobs(3_600, 10).await?.is_empty(),
        "a fresh lease is not swept",
    )?;
    ensure(
        store.acquire_sweep(&exhausted.id, "sweeper", 0).await?,
        "acquire",
    )?;
    ensure(
        !store.acquire_sweep(&exhausted.id, "other", 3_600).await?,
        "a just-acquired sweep is not taken again",
    )?;
    ensure(
        !store.acquire_sweep(&spare.id, "sweeper", 0).await?,
        "a job with attempts left is not swept",
    )?;
    expect_err(
        store
            .settle_swept_job(&exhausted.id, "sweeper", JobStatus::Queued, None)
            .await,
        ErrorKind::InvalidInput,
        "settling as queued",
    )?;
    ensure(
        !store
            .settle_swept_job(&exhausted.id, "other", JobStatus::Failed, None)
            .await?,
        "only the sweeper settles",
    )?;
    ensure(
        store
            .settle_swept_job(
                &exhausted.id,
                "sweeper",
                JobStatus::Failed,
                Some("lost".into()),
            )
            .await?,
        "settle",
    )?;
    let row = store
        .get_job(&exhausted.id, None)
        .await?
        .ok_or("swept job")?;
    ensure_eq(
        (
            row.status,
            row.error.as_deref(),
            row.locked_by.is_none(),
            row.completed_at.is_some(),
        ),
        (JobStatus::Failed, Some("lost"), true, true),
        "failed, released, finished",
    )?;
    Ok(())
}

/// Serialized tickets of one session enqueued at the same moment by many callers each
/// take their own place (`session_seq` 1..=n, none shared: agno's advisory lock on
/// PostgreSQL, a per-session guard on the compare-and-set backends), and concurrent
/// claimers then run them one at a time, in that order.
pub(crate) async fn serialized_tickets_enqueued_at_once_take_distinct_places(
    ctx: &Ctx,
) -> CaseResult {
    const N: usize = 10;
    let db = ctx.db().await?;
    let session = uid("s");
    let mut enqueues: Vec<JoinHandle<Result<(), Failure>>> = Vec::new();
    for _ in 0..N {
        let (db, session) = (db.clone(), session.clone());
        enqueues.push(tokio::spawn(async move {
            let mut j = job();
            j.session_id = session;
            j.payload = json!({"input": "hi", "serialize_session": true});
            let outcome = db.jobs()?.enqueue_job(j, 0).await?;
            ensure(outcome.rejection.is_none(), "enqueue accepted")
        }));
    }
    for e in enqueues {
        e.await
            .map_err(|e| Failure::from(format!("an enqueue task: {e}")))??;
    }
    let store = db.jobs()?;
    let query = JobQuery {
        session_id: Some(session.clone()),
        ..Default::default()
    };
    let mut tickets: Vec<(i64, String)> = store
        .list_jobs(query.clone())
        .await?
        .items
        .iter()
        .map(|j| (j.session_seq(), j.id.clone()))
        .collect();
    tickets.sort();
    let seqs: Vec<i64> = tickets.iter().map(|t| t.0).collect();
    ensure_eq(
        seqs,
        (1..=N as i64).collect::<Vec<_>>(),
        "each ticket's session_seq (concurrent enqueues)",
    )?;

    let running = Arc::new(Mutex::new((0usize, 0usize, Vec::new())));
    let mut claimers: Vec<JoinHandle<Result<(), Failure>>> = Vec::new();
    for w in 0..4 {
        let (db, running) = (db.clone(), running.clone());
        claimers.push(tokio::spawn(async move {
            let store = db.jobs()?;
            let worker = format!("w{w}");
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if running.lock().map_err(|_| "poisoned")?.2.len() == N {
                    return Ok(());
                }
                ensure(
                    std::time::Instant::now() < deadline,
                    "the tickets were drained in time",
                )?;
                let Some(j) = store.claim_job(&worker, 60, None).await? else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                {
                    let mut r = running.lock().map_err(|_| "poisoned")?;
                    r.0 += 1;
                    r.1 = r.1.max(r.0);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                {
                    let mut r = running.lock().map_err(|_| "poisoned")?;
                    r.0 -= 1;
                    r.2.push(j.id.clone());
                }
                store
                    .complete_job(&j.id, &worker, j.attempt, JobStatus::Completed, None)
                    .await?;
            }
        }));
    }
    for c in claimers {
        c.await
            .map_err(|e| Failure::from(format!("a claimer task: {e}")))??;
    }
    let (_, peak, order) = running.lock().map_err(|_| "poisoned")?.clone();
    ensure_eq(peak, 1, "tickets of the session running at once")?;
    let in_seq: Vec<String> = tickets.into_iter().map(|t| t.1).collect();
    ensure_eq(order, in_seq, "tickets ran in session_seq order")
}

/// `cancel_running_job`: a running job is cancelled by anyone holding the store (its
/// owner, or any caller without a user), not by another user; its holder's heartbeat then
/// renews nothing and its result is refused; queued or finished jobs are left alone.
pub(crate) async fn running_job_cancelled_from_anywhere(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.jobs()?;
    let mut j = job();
    j.user_id = Some("alice".into());
    store.enqueue_job(j.clone(), 0).await?;
    ensure(
        !store.cancel_running_job(&j.id, None).await?,
        "a queued job is not cancelled as running",
    )?;
    let held = store.claim_job("w", 60, None).await?.ok_or("claim")?;
    ensure(
        !store.cancel_running_job(&j.id, Some("mallory")).await?,
        "another user cannot cancel it",
    )?;
    ensure(
        store.cancel_running_job(&j.id, Some("alice")).await?,
        "cancel",
    )?;
    ensure_eq(
        store
            .heartbeat_jobs("w", std::slice::from_ref(&j.id))
            .await?,
        0,
        "the holder's heartbeat renews nothing",
    )?;
    expect_err(
        store
            .complete_job(&j.id, "w", held.attempt, JobStatus::Completed, None)
            .await,
        ErrorKind::LeaseLost,
        "the holder's result",
    )?;
    let row = store.get_job(&j.id, None).await?.ok_or("job")?;
    ensure_eq(
        (
            row.status,
            row.locked_by.is_none(),
            row.completed_at.is_some(),
        ),
        (JobStatus::Cancelled, true, true),
        "cancelled and released",
    )?;
    ensure(
        !store.cancel_running_job(&j.id, None).await?,
        "a finished job is not cancelled again",
    )?;
    Ok(())
}
