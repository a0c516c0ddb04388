//! A user's data across every domain: exported record by record, erased in one call.
//!
//! Both walk the domains through the store traits, so every backend gets them without code
//! of its own; a domain the backend does not store is skipped. Only records whose `user_id`
//! is the user's are touched: the shared (unowned) records and every other user's stay as
//! they are, and each delete is scoped to the user by the store as well.
//!
//! [`export_user`] reads one page at a time, so its memory does not grow with the user's
//! data. [`erase_user`] is idempotent: after a crash part-way, running it again deletes
//! what is left, and a second run over an erased user deletes nothing.

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::{
    AgnoDb, Error, ErrorKind, EvalQuery, JobQuery, KnowledgeQuery, LearningQuery, MemoryQuery,
    MetricsQuery, Page, Pagination, Result, RunQuery, SessionQuery, Unreadable,
};

/// Rows read per page while walking a domain.
const PAGE: u64 = 200;

/// The domains a user's records live in, in the order [`export_user`] visits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UserDomain {
    /// Sessions the user owns (`agno_sessions`).
    Sessions,
    /// Runs the user owns (`agno_runs`).
    Runs,
    /// Memories (`agno_memories`).
    Memories,
    /// Eval runs (`agno_eval_runs`).
    EvalRuns,
    /// Knowledge contents (`agno_knowledge`).
    KnowledgeContents,
    /// Schedules (`agno_schedules`).
    Schedules,
    /// The runs of the user's schedules (`agno_schedule_runs`).
    ScheduleRuns,
    /// Learnings (`agno_learnings`).
    Learnings,
    /// Jobs (`agno_jobs`).
    Jobs,
    /// The user's daily metrics rows (`agno_metrics`).
    Metrics,
}

impl UserDomain {
    /// Every domain, in export order.
    pub const ALL: [UserDomain; 10] = [
        UserDomain::Sessions,
        UserDomain::Runs,
        UserDomain::Memories,
        UserDomain::EvalRuns,
        UserDomain::KnowledgeContents,
        UserDomain::Schedules,
        UserDomain::ScheduleRuns,
        UserDomain::Learnings,
        UserDomain::Jobs,
        UserDomain::Metrics,
    ];

    /// The name used in exports and reports (`sessions`, `eval_runs`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            UserDomain::Sessions => "sessions",
            UserDomain::Runs => "runs",
            UserDomain::Memories => "memories",
            UserDomain::EvalRuns => "eval_runs",
            UserDomain::KnowledgeContents => "knowledge_contents",
            UserDomain::Schedules => "schedules",
            UserDomain::ScheduleRuns => "schedule_runs",
            UserDomain::Learnings => "learnings",
            UserDomain::Jobs => "jobs",
            UserDomain::Metrics => "metrics",
        }
    }
}

impl fmt::Display for UserDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One exported item: a record in agno's JSON encoding, or a row of the user's that could
/// not be decoded (named, so the export says what it could not carry).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UserRecord {
    /// Where it lives.
    pub domain: UserDomain,
    /// The record as agno encodes it; absent for an unreadable row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<Value>,
    /// The id and decode error of an unreadable row.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<UnreadableRow>,
}

/// A row [`export_user`] met but could not decode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnreadableRow {
    /// The row's id.
    pub id: String,
    /// Why it could not be decoded.
    pub error: String,
}

/// Records per domain, of an export or an erase; domains with none are absent.
pub type DomainCounts = BTreeMap<UserDomain, u64>;

/// Streams every record `user_id` owns to `emit`, domain by domain in
/// [`UserDomain::ALL`] order, one page in memory at a time. Returns the records emitted per
/// domain. An error from `emit` stops the export and is returned.
pub async fn export_user<F>(db: &AgnoDb, user_id: &str, mut emit: F) -> Result<DomainCounts>
where
    F: FnMut(UserRecord) -> Result<()> + Send,
{
    let user = checked_user(user_id)?;
    let mut counts = DomainCounts::new();
    let mut out = |domain: UserDomain, item: Item| -> Result<()> {
        *counts.entry(domain).or_default() += 1;
        emit(match item {
            Item::Record(record) => UserRecord {
                domain,
                record: Some(record),
                unreadable: None,
            },
            Item::Unreadable(u) => UserRecord {
                domain,
                record: None,
                unreadable: Some(UnreadableRow {
                    id: u.id,
                    error: u.error,
                }),
            },
        })
    };
    for domain in UserDomain::ALL {
        match domain {
            // Emitted with their schedules.
            UserDomain::ScheduleRuns => {}
            UserDomain::Metrics => {
                let Some(metrics) = supported(db.metrics())? else {
                    continue;
                };
                let query = MetricsQuery {
                    user_id: Some(user.to_owned()),
                    ..Default::default()
                };
                for row in metrics.get_metrics(query).await?.rows {
                    if row.user_id.as_deref() == Some(user) {
                        out(domain, Item::Record(to_value(&row)?))?;
                    }
                }
            }
            _ => {
                let mut number = 1;
                while let Some(page) = list(db, domain, user, number).await? {
                    for (id, item) in page.items {
                        out(domain, item)?;
                        if domain == UserDomain::Schedules {
                            let schedules = db.schedules()?;
                            let mut run_page = 1;
                            loop {
                                let runs = schedules
                                    .get_schedule_runs(&id, Some(user), page_of(run_page))
                                    .await?;
                                let len = (runs.items.len() + runs.unreadable.len()) as u64;
                                for (_, run) in
                                    owned(runs, user, |r| (&r.id, r.user_id.as_deref()))?
                                {
                                    out(UserDomain::ScheduleRuns, run)?;
                                }
                                if len < PAGE {
                                    break;
                                }
                                run_page += 1;
                            }
                        }
                    }
                    if !page.full {
                        break;
                    }
                    number += 1;
                }
            }
        }
    }
    Ok(counts)
}

/// Deletes every record `user_id` owns in every domain the backend stores, and the user's
/// metrics rows, and returns the records deleted per domain. Idempotent: safe to run again
/// after a crash part-way, and a run over an erased user returns no counts.
///
/// Dependent records go first (jobs, schedules with their runs, …), sessions and their runs
/// near the end, metrics last, so an interrupted erase never leaves metrics counting
/// sessions that are gone while the sessions are there to be recounted. A job of the user
/// that a worker is running is deleted too: the worker's fenced completion then finds no
/// job and records nothing.
pub async fn erase_user(db: &AgnoDb, user_id: &str) -> Result<DomainCounts> {
    let user = checked_user(user_id)?;
    let mut counts = DomainCounts::new();
    let mut add = |domain: UserDomain, n: u64| {
        if n > 0 {
            *counts.entry(domain).or_default() += n;
        }
    };
    for domain in ERASE_ORDER {
        match domain {
            // Counted and deleted with their schedules.
            UserDomain::ScheduleRuns => {}
            UserDomain::Metrics => {
                if let Some(metrics) = supported(db.metrics())? {
                    add(domain, metrics.delete_user_metrics(user).await?);
                }
            }
            UserDomain::Jobs => {
                if let Some(jobs) = supported(db.jobs())? {
                    add(domain, jobs.delete_user_jobs(user).await?);
                }
            }
            _ => {
                // Ids first, then the deletes: deleting while paging would shift the pages.
                let mut ids = Vec::new();
                let mut number = 1;
                while let Some(page) = list(db, domain, user, number).await? {
                    ids.extend(page.items.into_iter().map(|(id, _)| id));
                    if !page.full {
                        break;
                    }
                    number += 1;
                }
                if domain == UserDomain::Schedules {
                    let Some(schedules) = supported(db.schedules())? else {
                        continue;
                    };
                    for id in ids {
                        let runs = schedules
                            .get_schedule_runs(&id, Some(user), Pagination::limit(1))
                            .await?
                            .total;
                        if schedules.delete_schedule(&id, Some(user)).await? {
                            add(UserDomain::Schedules, 1);
                            add(UserDomain::ScheduleRuns, runs);
                        }
                    }
                } else {
                    for chunk in ids.chunks(PAGE as usize) {
                        add(domain, delete(db, domain, user, chunk).await?);
                    }
                }
            }
        }
    }
    Ok(counts)
}

/// The order [`erase_user`] deletes in.
const ERASE_ORDER: [UserDomain; 10] = [
    UserDomain::Jobs,
    UserDomain::Schedules,
    UserDomain::ScheduleRuns,
    UserDomain::Learnings,
    UserDomain::KnowledgeContents,
    UserDomain::EvalRuns,
    UserDomain::Memories,
    UserDomain::Runs,
    UserDomain::Sessions,
    UserDomain::Metrics,
];

/// A readable record or an unreadable row of a page.
enum Item {
    Record(Value),
    Unreadable(Unreadable),
}

fn checked_user(user_id: &str) -> Result<&str> {
    if user_id.is_empty() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "a user's data is exported or erased by a non-empty user_id; the unowned (shared) \
             records belong to no user and are never touched",
        ));
    }
    Ok(user_id)
}

/// The store, `None` where the backend does not have the domain.
fn supported<T>(store: Result<T>) -> Result<Option<T>> {
    match store {
        Ok(store) => Ok(Some(store)),
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(None),
        Err(e) => Err(e),
    }
}

fn page_of(number: u64) -> Pagination {
    Pagination {
        limit: Some(PAGE),
        page: Some(number),
    }
}

fn to_value<T: Serialize>(record: &T) -> Result<Value> {
    serde_json::to_value(record)
        .map_err(|e| Error::new(ErrorKind::Unexpected, format!("encode a record: {e}")))
}

/// The ids and items of `page` that `user` owns (a store may also return shared rows to
/// an owner), then its unreadable rows (the store scoped them to the user).
fn owned<'a, T, K>(
    page: Page<T>,
    user: &'a str,
    key: K,
) -> Result<impl Iterator<Item = (String, Item)> + 'a>
where
    T: Serialize,
    K: Fn(&T) -> (&String, Option<&str>),
{
    let mut kept = Vec::new();
    for record in &page.items {
        let (id, owner) = key(record);
        if owner == Some(user) {
            kept.push((id.clone(), Item::Record(to_value(record)?)));
        }
    }
    let unreadable = page
        .unreadable
        .into_iter()
        .map(|u| (u.id.clone(), Item::Unreadable(u)));
    Ok(kept.into_iter().chain(unreadable))
}

/// One page of a paged domain: the user's items with their ids, and whether the page was
/// full (so another may follow); `None` when the backend does not store the domain.
struct Listed {
    items: Vec<(String, Item)>,
    full: bool,
}

async fn list(db: &AgnoDb, domain: UserDomain, user: &str, number: u64) -> Result<Option<Listed>> {
    let u = Some(user.to_owned());
    let pagination = page_of(number);
    macro_rules! page {
        ($store:expr, $s:ident => $fetch:expr, $key:expr) => {{
            let Some($s) = supported($store)? else {
                return Ok(None);
            };
            let page = $fetch.await?;
            let full = (page.items.len() + page.unreadable.len()) as u64 >= PAGE;
            let items = owned(page, user, $key)?.collect();
            Ok(Some(Listed { items, full }))
        }};
    }
    match domain {
        UserDomain::Sessions => page!(
            db.sessions(),
            s => s.get_sessions(SessionQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |s: &crate::Session| (&s.session_id, s.user_id.as_deref())
        ),
        UserDomain::Runs => page!(
            db.runs(),
            s => s.get_runs(RunQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |r: &crate::RunRecord| (&r.run_id, r.user_id.as_deref())
        ),
        UserDomain::Memories => page!(
            db.memories(),
            s => s.get_memories(MemoryQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |m: &crate::UserMemory| (&m.memory_id, m.user_id.as_deref())
        ),
        UserDomain::EvalRuns => page!(
            db.evals(),
            s => s.get_eval_runs(EvalQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |e: &crate::EvalRun| (&e.run_id, e.user_id.as_deref())
        ),
        UserDomain::KnowledgeContents => page!(
            db.knowledge(),
            s => s.get_knowledge_contents(KnowledgeQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |k: &crate::KnowledgeContent| (&k.id, k.user_id.as_deref())
        ),
        UserDomain::Learnings => page!(
            db.learnings(),
            s => s.list_learnings(LearningQuery {
                user_id: u,
                include_global: false,
                pagination,
                ..Default::default()
            }),
            |l: &crate::Learning| (&l.learning_id, l.user_id.as_deref())
        ),
        UserDomain::Jobs => page!(
            db.jobs(),
            s => s.list_jobs(JobQuery {
                user_id: u,
                pagination,
                ..Default::default()
            }),
            |j: &crate::Job| (&j.id, j.user_id.as_deref())
        ),
        UserDomain::Schedules => page!(
            db.schedules(),
            s => s.get_schedules(None, Some(user), pagination),
            |s: &crate::Schedule| (&s.id, s.user_id.as_deref())
        ),
        UserDomain::ScheduleRuns | UserDomain::Metrics => Ok(None),
    }
}

/// Deletes the records `ids` of `domain` that `user` owns; how many went.
async fn delete(db: &AgnoDb, domain: UserDomain, user: &str, ids: &[String]) -> Result<u64> {
    let u = Some(user);
    Ok(match domain {
        UserDomain::Sessions => db.sessions()?.delete_sessions(ids, u).await?,
        UserDomain::Runs => db.runs()?.delete_runs(ids, u).await?,
        UserDomain::Memories => db.memories()?.delete_memories(ids, u).await?,
        UserDomain::EvalRuns => db.evals()?.delete_eval_runs(ids, u).await?,
        UserDomain::KnowledgeContents => {
            let store = db.knowledge()?;
            let mut n = 0;
            for id in ids {
                n += u64::from(store.delete_knowledge_content(id, u).await?);
            }
            n
        }
        UserDomain::Learnings => {
            let store = db.learnings()?;
            let mut n = 0;
            for id in ids {
                n += u64::from(store.delete_learning(id, u).await?);
            }
            n
        }
        _ => 0,
    })
}
