//! `copy`: copies every record of every domain both backends support, reading [`PAGE_SIZE`]
//! rows at a time and writing the bulk domains' records several at once
//! ([`WRITES_IN_FLIGHT`], one at a time into JSON documents).
//!
//! Order: sessions, then their runs (with their `run_index`), memories, metrics, eval runs,
//! knowledge, schedules with their runs, learnings, jobs. Upserting domains overwrite a
//! record with the same id in the destination; insert-only domains (eval runs, schedules,
//! schedule runs, jobs) skip a record the destination already has, so a copy can be
//! re-run. Jobs: `enqueue_job` always stores a job as queued with `attempt = 0`, so only
//! queued jobs are copied; running and finished ones are counted as skipped. Legacy runs
//! blobs are not copied: migrate the source first.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::time::Instant;

use agno_storage_core::{
    AgnoDb, EnqueueRejection, ErrorKind, EvalQuery, JobQuery, JobStatus, KnowledgeQuery,
    LearningQuery, MemoryQuery, MetricsQuery, Page, Pagination, RunQuery, SessionQuery, Sort,
    SortOrder, Unreadable,
};
use futures::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressStyle};

use crate::target::{self, BackendUrl};
use crate::Error;

/// Rows read per call.
pub const PAGE_SIZE: u64 = 500;

/// Walks a list call page by page ([`PAGE_SIZE`] rows, 1-indexed).
#[derive(Debug)]
pub struct Pager {
    page: u64,
    done: bool,
}

impl Pager {
    /// Starts at page 1.
    pub fn new() -> Self {
        Pager {
            page: 1,
            done: false,
        }
    }

    /// The pagination of the next call, or `None` when every page was read.
    pub fn next_page(&self) -> Option<Pagination> {
        (!self.done).then(|| Pagination::page(PAGE_SIZE, self.page))
    }

    /// Records a page that came back with `rows` rows out of `total`; a short page, or one
    /// reaching `total`, is the last.
    pub fn saw(&mut self, rows: usize, total: u64) {
        let read = self.page.saturating_mul(PAGE_SIZE);
        self.done = (rows as u64) < PAGE_SIZE || read >= total;
        self.page += 1;
    }
}

/// What happened to one domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// Domain name as printed.
    pub domain: &'static str,
    /// Records written to the destination.
    pub copied: u64,
    /// Records not written (already present, or not copyable); `note` says why.
    pub skipped: u64,
    /// Why records or the whole domain were skipped.
    pub note: Option<String>,
    /// Source records that could not be decoded, so were not copied (see
    /// [`Page::unreadable`]); the copy reports them and fails after copying the rest.
    pub unreadable: Vec<Unreadable>,
}

impl Tally {
    fn new(domain: &'static str) -> Self {
        Tally {
            domain,
            copied: 0,
            skipped: 0,
            note: None,
            unreadable: Vec::new(),
        }
    }

    fn skip_domain(domain: &'static str, why: String) -> Self {
        Tally {
            note: Some(why),
            ..Tally::new(domain)
        }
    }
}

/// Copies `src` into `dst` and prints per-domain counts.
pub async fn run(src_url: &BackendUrl, dst_url: &BackendUrl) -> Result<String, Error> {
    if src_url == dst_url && *src_url != BackendUrl::Memory {
        return Err(Error::new(format!(
            "source and destination are the same database ({src_url}); nothing to copy"
        )));
    }
    let started = Instant::now();
    // The source is only read: opened without creating anything, so a mistyped source is
    // an error rather than an empty database copied.
    let src = target::open_existing(src_url).await?;
    let dst = target::open(dst_url).await?;
    let bar = progress_bar();
    let tallies = copy_all(&src, &dst, &bar, writes_in_flight(dst_url)).await;
    bar.finish_and_clear();
    let tallies = tallies?;
    let mut out = format!(
        "Copied {src_url} ({}) -> {dst_url} ({}) in {:.2?}:\n",
        src.backend(),
        dst.backend(),
        started.elapsed()
    );
    for tally in &tallies {
        let _ = write!(out, "  {:14} {:>7}", tally.domain, tally.copied);
        if tally.skipped > 0 {
            let _ = write!(out, "  ({} skipped)", tally.skipped);
        }
        if let Some(note) = &tally.note {
            let _ = write!(out, "  {note}");
        }
        out.push('\n');
    }
    let unreadable: Vec<String> = tallies
        .iter()
        .flat_map(|t| {
            t.unreadable
                .iter()
                .map(move |u| format!("{} {} ({})", t.domain, u.id, u.error))
        })
        .collect();
    if unreadable.is_empty() {
        return Ok(out);
    }
    print!("{out}");
    Err(Error::new(format!(
        "copy incomplete: {} source record(s) could not be read and were not copied, \
         everything else was: {}",
        unreadable.len(),
        unreadable.join("; ")
    )))
}

/// A bar on stderr; hidden when stderr is not a terminal.
fn progress_bar() -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{msg:>14} [{bar:30}] {pos}/{len} ({elapsed})")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Sort by `column` ascending, for stable paging.
fn by(column: &str) -> Sort {
    Sort::by(column, SortOrder::Asc)
}

/// Counts the first page's total into the bar.
fn track<T>(bar: &ProgressBar, pager: &mut Pager, page: &Page<T>) {
    if pager.page == 1 {
        bar.inc_length(page.total);
    }
    // Unreadable rows fill their places in the page too.
    pager.saw(page.items.len() + page.unreadable.len(), page.total);
}

/// Whether `e` says the destination already holds the record.
fn already_there(e: &agno_storage_core::Error) -> bool {
    e.kind() == ErrorKind::AlreadyExists
}

/// Copies every domain, writing up to `in_flight` records of a bulk domain at once; one
/// [`Tally`] per domain, in copy order.
pub async fn copy_all(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Vec<Tally>, Error> {
    let (s, d) = (src.capabilities(), dst.capabilities());
    let lacks = |domain: &str| -> Option<String> {
        match (s.has(domain), d.has(domain)) {
            (true, true) => None,
            (false, _) => Some(format!(
                "skipped: the source ({}) has no {domain}",
                src.backend()
            )),
            (true, false) => Some(format!(
                "skipped: the destination ({}) has no {domain}",
                dst.backend()
            )),
        }
    };
    // A domain whose table the source lacks (it was opened without creating any) has
    // nothing to copy: skipped with the source's reason instead of failing the copy.
    let mut absent = std::collections::HashMap::new();
    for domain in [
        "sessions",
        "runs",
        "memories",
        "metrics",
        "evals",
        "knowledge",
        "schedules",
        "learnings",
        "jobs",
    ] {
        if s.has(domain) && d.has(domain) {
            if let Some(why) = source_lacks_table(src, domain).await? {
                absent.insert(domain, why);
            }
        }
    }
    let lacks = |domain: &str| lacks(domain).or_else(|| absent.get(domain).cloned());
    let mut tallies = Vec::new();

    let sessions_ok = lacks("sessions");
    match &sessions_ok {
        Some(why) => tallies.push(Tally::skip_domain("sessions", why.clone())),
        None => tallies.push(copy_sessions(src, dst, bar, in_flight).await?),
    }
    match (sessions_ok, lacks("runs")) {
        (None, None) => tallies.push(copy_runs(src, dst, bar, in_flight).await?),
        (_, Some(why)) => tallies.push(Tally::skip_domain("runs", why)),
        (Some(_), None) => tallies.push(Tally::skip_domain(
            "runs",
            "skipped: runs need sessions on both sides".to_owned(),
        )),
    }
    let steps: [(&str, &'static str); 7] = [
        ("memories", "memories"),
        ("metrics", "metrics"),
        ("evals", "eval runs"),
        ("knowledge", "knowledge"),
        ("schedules", "schedules"),
        ("learnings", "learnings"),
        ("jobs", "jobs"),
    ];
    for (capability, domain) in steps {
        if let Some(why) = lacks(capability) {
            tallies.push(Tally::skip_domain(domain, why));
            if capability == "schedules" {
                tallies.push(Tally::skip_domain(
                    "schedule runs",
                    "skipped: no schedules".into(),
                ));
            }
            continue;
        }
        match capability {
            "memories" => tallies.push(copy_memories(src, dst, bar, in_flight).await?),
            "metrics" => tallies.push(copy_metrics(src, dst, bar).await?),
            "evals" => tallies.push(copy_evals(src, dst, bar).await?),
            "knowledge" => tallies.push(copy_knowledge(src, dst, bar, in_flight).await?),
            "schedules" => tallies.extend(copy_schedules(src, dst, bar).await?),
            "learnings" => tallies.push(copy_learnings(src, dst, bar, in_flight).await?),
            _ => tallies.push(copy_jobs(src, dst, bar).await?),
        }
    }
    Ok(tallies)
}

/// `Some(why)` when reading `domain` from the source answers `NotFound`: its table does
/// not exist in a database opened without creating tables.
async fn source_lacks_table(src: &AgnoDb, domain: &str) -> Result<Option<String>, Error> {
    let one = Pagination::limit(1);
    let read = match domain {
        "sessions" => src
            .sessions()?
            .get_sessions(SessionQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        "runs" => src
            .runs()?
            .get_runs(RunQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        "memories" => src
            .memories()?
            .get_memories(MemoryQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        "metrics" => src
            .metrics()?
            .get_metrics(MetricsQuery::default())
            .await
            .map(drop),
        "evals" => src
            .evals()?
            .get_eval_runs(EvalQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        "knowledge" => src
            .knowledge()?
            .get_knowledge_contents(KnowledgeQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        "schedules" => src
            .schedules()?
            .get_schedules(None, None, one)
            .await
            .map(drop),
        "learnings" => src
            .learnings()?
            .list_learnings(LearningQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
        _ => src
            .jobs()?
            .list_jobs(JobQuery {
                pagination: one,
                ..Default::default()
            })
            .await
            .map(drop),
    };
    match read {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(Some(format!(
            "skipped: the source has none ({})",
            e.message()
        ))),
        Err(e) => Err(e.into()),
        Ok(()) => Ok(None),
    }
}

/// Records of one page written at once: concurrent writes share commits (SQLite's group
/// commit) and connections (a server's pool), where one at a time each waits for its own.
const WRITES_IN_FLIGHT: usize = 16;

/// How many records `copy` writes at once into `dst`: one for JSON documents (every write
/// rewrites its table's whole file or object, so concurrent ones would only conflict) and
/// for memory; [`WRITES_IN_FLIGHT`] for the rest.
fn writes_in_flight(dst: &BackendUrl) -> usize {
    match dst {
        BackendUrl::JsonDir { .. }
        | BackendUrl::Gcs { .. }
        | BackendUrl::S3 { .. }
        | BackendUrl::Memory => 1,
        _ => WRITES_IN_FLIGHT,
    }
}

/// Copies a domain page by page: `read` fetches one page of the source, `write` stores one
/// record in the destination, up to `in_flight` at once (records of one domain do not depend
/// on each other); each written record counts as copied. The first failed write stops the
/// copy.
async fn copy_pages<T>(
    domain: &'static str,
    bar: &ProgressBar,
    in_flight: usize,
    mut read: impl AsyncFnMut(Pagination) -> Result<Page<T>, Error>,
    write: impl AsyncFn(T) -> Result<(), Error>,
) -> Result<Tally, Error> {
    let mut tally = Tally::new(domain);
    bar.set_message(domain);
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let mut page = read(pagination).await?;
        track(bar, &mut pager, &page);
        tally.skipped += page.unreadable.len() as u64;
        tally.unreadable.append(&mut page.unreadable);
        let mut writes = stream::iter(page.items)
            .map(|record| write(record))
            .buffer_unordered(in_flight.max(1));
        while let Some(written) = writes.next().await {
            written?;
            tally.copied += 1;
            bar.inc(1);
        }
    }
    Ok(tally)
}

async fn copy_sessions(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Tally, Error> {
    let (from, to) = (src.sessions()?, dst.sessions()?);
    let read = async |pagination| {
        Ok(from
            .get_sessions(SessionQuery {
                pagination,
                sort: by("session_id"),
                ..Default::default()
            })
            .await?)
    };
    let mut tally = copy_pages("sessions", bar, in_flight, read, async |session| {
        Ok(to.upsert_session(session).await.map(drop)?)
    })
    .await?;
    if src.capabilities().legacy_runs {
        let legacy = src.legacy()?.count_legacy_runs().await?;
        if legacy > 0 {
            tally.note = Some(format!(
                "{legacy} source session(s) still keep runs in a legacy blob, which is not \
                 copied: run `agno-storage migrate` on the source first"
            ));
        }
    }
    Ok(tally)
}

async fn copy_runs(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Tally, Error> {
    let (from, to) = (src.runs()?, dst.runs()?);
    let read = async |pagination| {
        Ok(from
            .get_runs(RunQuery {
                pagination,
                sort: by("run_id"),
                ..Default::default()
            })
            .await?)
    };
    // run_index is Some on every stored run, so the destination keeps it.
    copy_pages("runs", bar, in_flight, read, async |run| {
        Ok(to.upsert_run(run).await.map(drop)?)
    })
    .await
}

async fn copy_memories(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Tally, Error> {
    let (from, to) = (src.memories()?, dst.memories()?);
    let read = async |pagination| {
        Ok(from
            .get_memories(MemoryQuery {
                pagination,
                sort: by("memory_id"),
                ..Default::default()
            })
            .await?)
    };
    copy_pages("memories", bar, in_flight, read, async |memory| {
        Ok(to.upsert_memory(memory).await.map(drop)?)
    })
    .await
}

/// `get_metrics` has no paging: the rows are read at once and written 500 at a time.
async fn copy_metrics(src: &AgnoDb, dst: &AgnoDb, bar: &ProgressBar) -> Result<Tally, Error> {
    let (from, to) = (src.metrics()?, dst.metrics()?);
    let mut tally = Tally::new("metrics");
    bar.set_message("metrics");
    let mut rows = from.get_metrics(MetricsQuery::default()).await?.rows;
    bar.inc_length(rows.len() as u64);
    while !rows.is_empty() {
        let rest = rows.split_off(rows.len().min(PAGE_SIZE as usize));
        let written = to.upsert_metrics(rows).await?.len() as u64;
        tally.copied += written;
        bar.inc(written);
        rows = rest;
    }
    Ok(tally)
}

async fn copy_evals(src: &AgnoDb, dst: &AgnoDb, bar: &ProgressBar) -> Result<Tally, Error> {
    let (from, to) = (src.evals()?, dst.evals()?);
    let mut tally = Tally::new("eval runs");
    bar.set_message("eval runs");
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let page = from
            .get_eval_runs(EvalQuery {
                pagination,
                sort: by("run_id"),
                ..Default::default()
            })
            .await?;
        track(bar, &mut pager, &page);
        for run in page.items {
            match to.create_eval_run(run).await {
                Ok(_) => tally.copied += 1,
                Err(e) if already_there(&e) => tally.skipped += 1,
                Err(e) => return Err(e.into()),
            }
            bar.inc(1);
        }
    }
    if tally.skipped > 0 {
        tally.note = Some("already in the destination".into());
    }
    Ok(tally)
}

async fn copy_knowledge(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Tally, Error> {
    let (from, to) = (src.knowledge()?, dst.knowledge()?);
    let read = async |pagination| {
        Ok(from
            .get_knowledge_contents(KnowledgeQuery {
                pagination,
                sort: by("id"),
                ..Default::default()
            })
            .await?)
    };
    copy_pages("knowledge", bar, in_flight, read, async |content| {
        Ok(to.upsert_knowledge_content(content).await.map(drop)?)
    })
    .await
}

/// Schedules, then each copied schedule's runs. A schedule whose id is taken in the
/// destination keeps its runs copied into it; one refused for its `(user_id, name)` is
/// skipped with its runs.
async fn copy_schedules(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
) -> Result<[Tally; 2], Error> {
    let (from, to) = (src.schedules()?, dst.schedules()?);
    let mut schedules = Tally::new("schedules");
    let mut runs = Tally::new("schedule runs");
    let (mut present, mut name_taken) = (0u64, 0u64);
    bar.set_message("schedules");
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let page = from.get_schedules(None, None, pagination).await?;
        track(bar, &mut pager, &page);
        for schedule in page.items {
            let id = schedule.id.clone();
            let copy_runs = match to.create_schedule(schedule).await {
                Ok(_) => {
                    schedules.copied += 1;
                    true
                }
                Err(e) if already_there(&e) => {
                    schedules.skipped += 1;
                    // Taken id: the same schedule; taken name: another one.
                    let same = to.get_schedule(&id, None).await?.is_some();
                    if same {
                        present += 1;
                    } else {
                        name_taken += 1;
                    }
                    same
                }
                Err(e) => return Err(e.into()),
            };
            bar.inc(1);
            copy_schedule_runs(src, dst, &id, copy_runs, &mut runs, bar).await?;
        }
    }
    let mut why = Vec::new();
    if present > 0 {
        why.push(format!("{present} already in the destination"));
    }
    if name_taken > 0 {
        why.push(format!(
            "{name_taken} refused: the destination has another schedule of that name and owner"
        ));
    }
    if !why.is_empty() {
        schedules.note = Some(why.join("; "));
    }
    if runs.skipped > 0 {
        runs.note = Some("already in the destination, or their schedule was skipped".into());
    }
    Ok([schedules, runs])
}

async fn copy_schedule_runs(
    src: &AgnoDb,
    dst: &AgnoDb,
    schedule_id: &str,
    write: bool,
    tally: &mut Tally,
    bar: &ProgressBar,
) -> Result<(), Error> {
    let (from, to) = (src.schedules()?, dst.schedules()?);
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let page = from
            .get_schedule_runs(schedule_id, None, pagination)
            .await?;
        track(bar, &mut pager, &page);
        for run in page.items {
            if !write {
                tally.skipped += 1;
            } else {
                match to.create_schedule_run(run).await {
                    Ok(_) => tally.copied += 1,
                    Err(e) if already_there(&e) => tally.skipped += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            bar.inc(1);
        }
    }
    Ok(())
}

async fn copy_learnings(
    src: &AgnoDb,
    dst: &AgnoDb,
    bar: &ProgressBar,
    in_flight: usize,
) -> Result<Tally, Error> {
    let (from, to) = (src.learnings()?, dst.learnings()?);
    let read = async |pagination| {
        Ok(from
            .list_learnings(LearningQuery {
                pagination,
                sort: by("learning_id"),
                ..Default::default()
            })
            .await?)
    };
    copy_pages("learnings", bar, in_flight, read, async |learning| {
        Ok(to.upsert_learning(learning).await.map(drop)?)
    })
    .await
}

/// Queued jobs only: `enqueue_job` re-queues whatever it is given.
async fn copy_jobs(src: &AgnoDb, dst: &AgnoDb, bar: &ProgressBar) -> Result<Tally, Error> {
    let (from, to) = (src.jobs()?, dst.jobs()?);
    let mut tally = Tally::new("jobs");
    bar.set_message("jobs");
    let all = from
        .list_jobs(JobQuery {
            pagination: Pagination::limit(1),
            ..Default::default()
        })
        .await?
        .total;
    let (mut duplicates, mut queued) = (0u64, 0u64);
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let page = from
            .list_jobs(JobQuery {
                status: Some(JobStatus::Queued),
                pagination,
                ..Default::default()
            })
            .await?;
        track(bar, &mut pager, &page);
        for job in page.items {
            queued += 1;
            match to.enqueue_job(job, 0).await {
                Ok(outcome) if outcome.rejection.is_none() => tally.copied += 1,
                Ok(outcome) => {
                    duplicates += 1;
                    if outcome.rejection == Some(EnqueueRejection::QueueFull) {
                        return Err(Error::new("the destination job queue is full"));
                    }
                }
                Err(e) if already_there(&e) => duplicates += 1,
                Err(e) => return Err(e.into()),
            }
            bar.inc(1);
        }
    }
    let not_queued = all.saturating_sub(queued);
    tally.skipped = duplicates + not_queued;
    let mut why = Vec::new();
    if not_queued > 0 {
        why.push(format!(
            "{not_queued} not queued (running or finished): enqueue would reset them to queued"
        ));
    }
    if duplicates > 0 {
        why.push(format!("{duplicates} already in the destination"));
    }
    if !why.is_empty() {
        tally.note = Some(why.join("; "));
    }
    Ok(tally)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agno_storage_core::Job;
    use agno_storage_doc::InMemoryDb;
    use serde_json::json;

    fn tally<'a>(tallies: &'a [Tally], domain: &str) -> &'a Tally {
        tallies
            .iter()
            .find(|t| t.domain == domain)
            .unwrap_or_else(|| panic!("no tally for {domain}"))
    }

    #[test]
    fn pager_stops_on_short_or_last_page() {
        let mut pager = Pager::new();
        assert_eq!(pager.next_page(), Some(Pagination::page(500, 1)));
        pager.saw(500, 1200);
        assert_eq!(pager.next_page(), Some(Pagination::page(500, 2)));
        pager.saw(500, 1200);
        pager.saw(200, 1200);
        assert_eq!(pager.next_page(), None);
        let mut exact = Pager::new();
        exact.saw(500, 500);
        assert_eq!(exact.next_page(), None);
    }

    #[tokio::test]
    async fn copies_the_demo_workload_and_can_run_again() {
        let src = InMemoryDb::new().agno_db();
        let dst = InMemoryDb::new().agno_db();
        let workload = crate::demo::write_workload(&src).await.unwrap();
        let queued = Job::new("queued-job", "agent", "a1", "s1", json!({"input": "hi"}));
        src.jobs().unwrap().enqueue_job(queued, 0).await.unwrap();

        let bar = ProgressBar::hidden();
        let tallies = copy_all(&src, &dst, &bar, WRITES_IN_FLIGHT).await.unwrap();
        let copied = |d: &str| tally(&tallies, d).copied;
        assert_eq!(copied("sessions"), 3);
        assert_eq!(copied("runs"), 7);
        assert_eq!(copied("memories"), 4);
        assert_eq!(copied("metrics"), 3);
        assert_eq!(copied("eval runs"), 2);
        assert_eq!(copied("knowledge"), 1);
        assert_eq!(copied("schedules"), 1);
        assert_eq!(copied("schedule runs"), 1);
        assert_eq!(copied("learnings"), 1);
        assert_eq!(copied("jobs"), 1);
        assert_eq!(tally(&tallies, "jobs").skipped, 1, "the completed demo job");

        // Run order survives: same run_index per run on both sides.
        for (session_id, _) in &workload.sessions {
            let query = || RunQuery {
                session_id: Some(session_id.clone()),
                ..Default::default()
            };
            let a = src.runs().unwrap().get_runs(query()).await.unwrap().items;
            let b = dst.runs().unwrap().get_runs(query()).await.unwrap().items;
            let key = |runs: &[agno_storage_core::RunRecord]| {
                runs.iter()
                    .map(|r| (r.run_id.clone(), r.run_index))
                    .collect::<Vec<_>>()
            };
            assert_eq!(key(&a), key(&b));
        }

        let again = copy_all(&src, &dst, &bar, WRITES_IN_FLIGHT).await.unwrap();
        assert_eq!(tally(&again, "eval runs").skipped, 2);
        assert_eq!(tally(&again, "schedules").skipped, 1);
        assert_eq!(tally(&again, "schedule runs").skipped, 1);
        assert_eq!(tally(&again, "jobs").skipped, 2);
        assert_eq!(tally(&again, "sessions").copied, 3);
    }

    #[tokio::test]
    async fn skips_domains_a_side_lacks() {
        let memory = InMemoryDb::new();
        let src = memory.agno_db();
        let sessions_only = AgnoDb::builder("partial")
            .sessions(std::sync::Arc::new(memory.stores()))
            .build();
        let tallies = copy_all(
            &src,
            &sessions_only,
            &ProgressBar::hidden(),
            WRITES_IN_FLIGHT,
        )
        .await
        .unwrap();
        assert!(tally(&tallies, "learnings")
            .note
            .as_deref()
            .is_some_and(|n| n.contains("destination (partial) has no learnings")));
        assert!(tally(&tallies, "schedule runs").note.is_some());
    }
}
