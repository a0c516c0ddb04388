//! `demo`: writes a realistic Agno workload into every domain the backend offers, reads it
//! back and prints a short summary.
//!
//! Every record gets a fresh uuid (the entity memory's id is deterministic by design, so a
//! second run updates it), so running the demo twice against a persistent database adds a
//! second workload beside the first. The demo claims only the schedule and job it created:
//! when older work is due in the database, it records that and leaves the claim out.

use std::fmt::Write as _;
use std::time::Instant;

use agno_storage_core::learning::entity_learning_id;
use agno_storage_core::metrics::calculate_metrics;
use agno_storage_core::{
    AgnoDb, EvalQuery, EvalRun, EvalType, Job, JobQuery, JobStatus, JobStore, KnowledgeContent,
    KnowledgeQuery, Learning, LearningQuery, MemoryQuery, MetricsQuery, MetricsRecord, Pagination,
    RunQuery, RunRecord, Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate, Session,
    SessionQuery, SessionType, UserMemory,
};
use chrono::{DateTime, NaiveDate, Utc};
use serde_json::{json, Map, Value};
use uuid::Uuid;

use crate::copy::Pager;
use crate::target::{self, BackendUrl};
use crate::Error;

/// The URL `demo` uses when none is given.
pub const DEFAULT_URL: &str = "sqlite://agno.db";

/// The two users owning the workload (the workflow session is unowned).
const USERS: [&str; 2] = ["alice@example.com", "bob@example.com"];
/// The worker id the demo claims its schedule and job as.
const WORKER: &str = "agno-storage-demo";
/// The demo job's deployment: workers of real deployments never claim it.
const DEPLOYMENT: &str = "agno-storage-demo";
/// Claims older than this may be taken over.
const LOCK_GRACE_SECONDS: i64 = 300;

/// What one demo run wrote.
#[derive(Debug, Default)]
pub struct Workload {
    /// `(session_id, label)` of each session written, in order.
    pub sessions: Vec<(String, String)>,
    /// Runs written.
    pub runs: u64,
    /// Memories written.
    pub memories: u64,
    /// Eval runs written.
    pub evals: u64,
    /// Knowledge contents written.
    pub knowledge: u64,
    /// Schedules written.
    pub schedules: u64,
    /// Learnings written.
    pub learnings: u64,
    /// Jobs written.
    pub jobs: u64,
    /// Metrics rows written for today.
    pub metrics: Vec<MetricsRecord>,
    /// What happened to the schedule and the job.
    pub notes: Vec<String>,
    /// Domains the backend does not offer.
    pub skipped: Vec<&'static str>,
}

/// Writes the workload into the backend at `url` and prints the summary.
pub async fn run(url: &BackendUrl) -> Result<String, Error> {
    let started = Instant::now();
    let db = target::open(url).await?;
    let workload = write_workload(&db).await?;
    summarize(url, &db, &workload, started).await
}

fn new_id() -> String {
    Uuid::new_v4().to_string()
}

/// The first 8 characters of an id, for display.
fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

/// Writes the whole workload, skipping domains the backend lacks.
pub async fn write_workload(db: &AgnoDb) -> Result<Workload, Error> {
    let caps = db.capabilities();
    let now = agno_storage_core::now_epoch_seconds();
    let mut w = Workload::default();
    if caps.sessions {
        write_sessions(db, &mut w, now).await?;
    } else {
        w.skipped.extend(["sessions", "runs"]);
    }
    let agent_session = w.sessions.first().map(|(id, _)| id.clone());
    if caps.memories {
        write_memories(db, &mut w, now).await?;
    } else {
        w.skipped.push("memories");
    }
    if caps.evals {
        write_evals(db, &mut w, now).await?;
    } else {
        w.skipped.push("evals");
    }
    if caps.knowledge {
        write_knowledge(db, &mut w, now).await?;
    } else {
        w.skipped.push("knowledge");
    }
    if caps.schedules {
        write_schedule(db, &mut w, now, agent_session.as_deref()).await?;
    } else {
        w.skipped.push("schedules");
    }
    if caps.learnings {
        write_learning(db, &mut w, now, agent_session.as_deref()).await?;
    } else {
        w.skipped.push("learnings");
    }
    if caps.jobs {
        write_job(db, &mut w, now, agent_session.as_deref()).await?;
    } else {
        w.skipped.push("jobs");
    }
    if caps.sessions && caps.metrics {
        let today = Utc::now().date_naive();
        w.metrics = calculate_metrics(db.sessions()?, db.metrics()?, today).await?;
        w.metrics.retain(|r| r.date == today);
    } else {
        w.skipped.push("metrics");
    }
    Ok(w)
}

/// One run of the workload.
struct RunSpec<'a> {
    /// `agent`, `team` or `workflow`.
    kind: &'a str,
    /// Component id and display name.
    component: (&'a str, &'a str),
    /// `(model, provider)`; workflows have none.
    model: Option<(&'a str, &'a str)>,
    input: &'a str,
    content: &'a str,
    /// Input and output tokens.
    tokens: (i64, i64),
}

/// A run dict as agno's `RunOutput.to_dict()` shapes it.
fn run_dict(
    run_id: &str,
    session: &Session,
    spec: &RunSpec<'_>,
    parent_run_id: Option<&str>,
    now: i64,
) -> Value {
    let (input_tokens, output_tokens) = spec.tokens;
    let mut run = Map::new();
    run.insert("run_id".into(), json!(run_id));
    run.insert(format!("{}_id", spec.kind), json!(spec.component.0));
    run.insert(format!("{}_name", spec.kind), json!(spec.component.1));
    run.insert("session_id".into(), json!(session.session_id));
    run.insert("user_id".into(), json!(session.user_id));
    if let Some(parent) = parent_run_id {
        run.insert("parent_run_id".into(), json!(parent));
    }
    if let Some((model, provider)) = spec.model {
        run.insert("model".into(), json!(model));
        run.insert("model_provider".into(), json!(provider));
    }
    run.insert("input".into(), json!({ "input_content": spec.input }));
    run.insert("content".into(), json!(spec.content));
    run.insert("content_type".into(), json!("str"));
    run.insert("status".into(), json!("COMPLETED"));
    run.insert(
        "metrics".into(),
        json!({
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
        }),
    );
    run.insert("created_at".into(), json!(now));
    Value::Object(run)
}

/// A session of `kind` named `name`, with token counters summed over `specs`.
fn session(
    kind: SessionType,
    component: (&str, &str),
    user: Option<&str>,
    name: &str,
    specs: &[&RunSpec<'_>],
    now: i64,
) -> Session {
    let mut s = Session::new(new_id(), kind, component.0);
    s.user_id = user.map(str::to_owned);
    s.created_at = now;
    let input: i64 = specs.iter().map(|r| r.tokens.0).sum();
    let output: i64 = specs.iter().map(|r| r.tokens.1).sum();
    s.session_data = Some(json!({
        "session_name": name,
        "session_state": {},
        "session_metrics": {
            "input_tokens": input,
            "output_tokens": output,
            "total_tokens": input + output,
        },
    }));
    let config = json!({ "name": component.1, "id": component.0 });
    match kind {
        SessionType::Agent => s.agent_data = Some(config),
        SessionType::Team => s.team_data = Some(config),
        SessionType::Workflow => s.workflow_data = Some(config),
    }
    s
}

/// The three sessions with their run dicts, in run order.
fn demo_sessions(now: i64) -> Vec<(Session, Vec<Value>)> {
    let [alice, bob] = USERS;
    let planner = ("travel-planner", "Travel Planner");
    let gpt = Some(("gpt-4o", "OpenAI"));
    let turn = |input, content, tokens| RunSpec {
        kind: "agent",
        component: planner,
        model: gpt,
        input,
        content,
        tokens,
    };
    let agent_turns = [
        turn(
            "Plan a weekend in Lisbon for two in May.",
            "Day 1: Alfama, the Sé and sunset at the Miradouro da Senhora do Monte. \
             Day 2: Belém, pastéis de nata and the MAAT.",
            (812, 164),
        ),
        turn(
            "Which neighbourhood should we stay in?",
            "Chiado: central, walkable and close to the tram 28 line.",
            (1020, 118),
        ),
        turn(
            "Any vegetarian restaurants near Chiado?",
            "Try Ao 26 Vegan Food Project and Jardim das Cerejas.",
            (1190, 142),
        ),
    ];
    let agent = session(
        SessionType::Agent,
        planner,
        Some(alice),
        "Weekend in Lisbon",
        &agent_turns.iter().collect::<Vec<_>>(),
        now,
    );
    let agent_runs = agent_turns
        .iter()
        .map(|spec| run_dict(&new_id(), &agent, spec, None, now))
        .collect();

    let team_spec = RunSpec {
        kind: "team",
        component: ("research-team", "Research Team"),
        model: Some(("claude-sonnet-4-20250514", "Anthropic")),
        input: "Summarize the European heat pump market in 2025.",
        content: "Sales recovered in H2 after subsidy changes; Poland and Italy grew fastest.",
        tokens: (2410, 388),
    };
    let members = [
        RunSpec {
            kind: "agent",
            component: ("web-researcher", "Web Researcher"),
            model: gpt,
            input: "Find 2025 heat pump sales figures for the EU.",
            content: "EHPA reports 2.3M units sold in 2025.",
            tokens: (1530, 210),
        },
        RunSpec {
            kind: "agent",
            component: ("data-analyst", "Data Analyst"),
            model: gpt,
            input: "Compare year-on-year growth by country.",
            content: "Poland +31%, Italy +18%, Germany -4%.",
            tokens: (980, 156),
        },
    ];
    let team = session(
        SessionType::Team,
        team_spec.component,
        Some(bob),
        "Heat pump market scan",
        &[&team_spec, &members[0], &members[1]],
        now,
    );
    let team_run_id = new_id();
    let mut team_runs = vec![run_dict(&team_run_id, &team, &team_spec, None, now)];
    team_runs.extend(
        members
            .iter()
            .map(|spec| run_dict(&new_id(), &team, spec, Some(&team_run_id), now)),
    );

    let workflow_spec = RunSpec {
        kind: "workflow",
        component: ("blog-post-generator", "Blog Post Generator"),
        model: None,
        input: "Write a post about vector databases.",
        content: "# Vector databases, explained\n\nA vector database stores embeddings…",
        tokens: (3120, 940),
    };
    let workflow = session(
        SessionType::Workflow,
        workflow_spec.component,
        None,
        "Blog post: vector databases",
        &[&workflow_spec],
        now,
    );
    let workflow_runs = vec![run_dict(&new_id(), &workflow, &workflow_spec, None, now)];

    vec![
        (agent, agent_runs),
        (team, team_runs),
        (workflow, workflow_runs),
    ]
}

async fn write_sessions(db: &AgnoDb, w: &mut Workload, now: i64) -> Result<(), Error> {
    let sessions = db.sessions()?;
    let runs = if db.capabilities().runs {
        Some(db.runs()?)
    } else {
        w.skipped.push("runs");
        None
    };
    for (session, run_dicts) in demo_sessions(now) {
        let label = format!(
            "{:8} \"{}\" ({})",
            session.session_type.as_str(),
            session.session_name().unwrap_or_default(),
            session.user_id.as_deref().unwrap_or("unowned")
        );
        let (id, user) = (session.session_id.clone(), session.user_id.clone());
        sessions.upsert_session(session).await?;
        if let Some(runs) = runs {
            for run_data in run_dicts {
                runs.upsert_run(RunRecord::from_run_data(&id, user.clone(), run_data)?)
                    .await?;
                w.runs += 1;
            }
        }
        w.sessions.push((id, label));
    }
    Ok(())
}

async fn write_memories(db: &AgnoDb, w: &mut Workload, now: i64) -> Result<(), Error> {
    let [alice, bob] = USERS;
    // (owner, memory, topics, agent, the message it was learned from)
    let memories: [(&str, &str, &[&str], &str, &str); 4] = [
        (
            alice,
            "Prefers window seats on long-haul flights",
            &["travel", "preferences"],
            "travel-planner",
            "Book me a window seat, I can't sleep otherwise.",
        ),
        (
            alice,
            "Is vegetarian",
            &["food", "preferences"],
            "travel-planner",
            "Any vegetarian restaurants near Chiado?",
        ),
        (
            bob,
            "Works on the climate research team",
            &["work"],
            "web-researcher",
            "I'm on the climate research team, we track heat pumps.",
        ),
        (
            bob,
            "Wants summaries under 200 words",
            &["preferences", "writing"],
            "data-analyst",
            "Keep it under 200 words please.",
        ),
    ];
    let store = db.memories()?;
    for (user, text, topics, agent, input) in memories {
        let mut memory = UserMemory::new(new_id(), Some(user.to_owned()), text);
        memory.topics = Some(topics.iter().map(|t| (*t).to_owned()).collect());
        memory.agent_id = Some(agent.to_owned());
        memory.input = Some(input.to_owned());
        memory.created_at = now;
        store.upsert_memory(memory).await?;
        w.memories += 1;
    }
    Ok(())
}

/// One accuracy eval per user.
struct EvalSpec<'a> {
    user: &'a str,
    name: &'a str,
    /// `(agent_id, team_id)`: the evaluated component.
    component: (Option<&'a str>, Option<&'a str>),
    component_name: &'a str,
    input: &'a str,
    expected: &'a str,
    score: f64,
}

async fn write_evals(db: &AgnoDb, w: &mut Workload, now: i64) -> Result<(), Error> {
    let [alice, bob] = USERS;
    let store = db.evals()?;
    let evals = [
        EvalSpec {
            user: alice,
            name: "Lisbon itinerary accuracy",
            component: (Some("travel-planner"), None),
            component_name: "Travel Planner",
            input: "Which tram line crosses Alfama?",
            expected: "Tram 28",
            score: 9.0,
        },
        EvalSpec {
            user: bob,
            name: "Market summary accuracy",
            component: (None, Some("research-team")),
            component_name: "Research Team",
            input: "Which EU country grew heat pump sales fastest in 2025?",
            expected: "Poland",
            score: 7.0,
        },
    ];
    for spec in evals {
        let result = json!({
            "input": spec.input,
            "expected_output": spec.expected,
            "score": spec.score,
            "reason": "Names the expected answer; the explanation is brief.",
        });
        store
            .create_eval_run(EvalRun {
                run_id: new_id(),
                eval_type: EvalType::Accuracy,
                eval_data: json!({
                    "results": [result],
                    "avg_score": spec.score,
                    "mean_score": spec.score,
                    "min_score": spec.score,
                    "max_score": spec.score,
                    "std_dev_score": 0.0,
                }),
                eval_input: Some(json!({
                    "input": spec.input,
                    "expected_output": spec.expected,
                    "num_iterations": 1,
                })),
                name: Some(spec.name.to_owned()),
                agent_id: spec.component.0.map(str::to_owned),
                team_id: spec.component.1.map(str::to_owned),
                workflow_id: None,
                model_id: Some("gpt-4o".into()),
                model_provider: Some("OpenAI".into()),
                evaluated_component_name: Some(spec.component_name.to_owned()),
                user_id: Some(spec.user.to_owned()),
                created_at: now,
                updated_at: Some(now),
            })
            .await?;
        w.evals += 1;
    }
    Ok(())
}

async fn write_knowledge(db: &AgnoDb, w: &mut Workload, now: i64) -> Result<(), Error> {
    let mut content = KnowledgeContent::new(
        new_id(),
        "Refund policy",
        "When and how customers are refunded",
    );
    content.content_type = Some("text/markdown".into());
    content.size = Some(4_812);
    content.linked_to = Some("support-kb".into());
    content.status = Some("completed".into());
    content.metadata = Some(json!({"source": "docs/refund-policy.md", "language": "en"}));
    content.created_at = Some(now);
    content.updated_at = Some(now);
    db.knowledge()?.upsert_knowledge_content(content).await?;
    w.knowledge += 1;
    Ok(())
}

/// Next 08:00 UTC after `now`.
fn next_morning(now: i64) -> i64 {
    let at_eight = DateTime::<Utc>::from_timestamp(now, 0)
        .and_then(|t| t.date_naive().and_hms_opt(8, 0, 0))
        .map(|t| t.and_utc().timestamp());
    match at_eight {
        Some(t) if t > now => t,
        Some(t) => t + 86_400,
        None => now + 86_400,
    }
}

/// Creates a schedule due now, claims it, records a run and releases it.
async fn write_schedule(
    db: &AgnoDb,
    w: &mut Workload,
    now: i64,
    session_id: Option<&str>,
) -> Result<(), Error> {
    let store = db.schedules()?;
    let id = new_id();
    let mut schedule = Schedule::new(
        &id,
        format!("lisbon-morning-brief-{}", short(&id)),
        "/agents/travel-planner/runs",
        "0 8 * * *",
    );
    schedule.user_id = Some(USERS[0].to_owned());
    schedule.description = Some("Lisbon weather and events every morning".into());
    schedule.payload = Some(json!({"message": "What's on in Lisbon today?", "stream": false}));
    schedule.next_run_at = Some(now);
    schedule.target_type = Some("agent".into());
    schedule.target_id = Some("travel-planner".into());
    schedule.created_by_session_id = session_id.map(str::to_owned);
    schedule.created_at = now;
    store.create_schedule(schedule.clone()).await?;
    w.schedules += 1;

    let ahead = schedules_due_before(store, &schedule).await?;
    if ahead > 0 {
        w.notes.push(format!(
            "schedule: created, not claimed: {ahead} other schedule(s) are due first \
             and the demo claims only its own"
        ));
        return Ok(());
    }
    let Some(claimed) = store.claim_due_schedule(WORKER, LOCK_GRACE_SECONDS).await? else {
        w.notes
            .push("schedule: created, but claim_due_schedule found nothing due".into());
        return Ok(());
    };
    if claimed.id != id {
        put_back_schedule(store, &claimed).await?;
        w.notes.push(format!(
            "schedule: created, not claimed: another schedule ({}) became due first; \
             it was released unchanged",
            claimed.id
        ));
        return Ok(());
    }
    store
        .create_schedule_run(ScheduleRun {
            id: new_id(),
            schedule_id: id.clone(),
            attempt: 1,
            triggered_at: Some(now),
            completed_at: Some(agno_storage_core::now_epoch_seconds()),
            status: "success".into(),
            status_code: Some(200),
            run_id: Some(new_id()),
            session_id: session_id.map(str::to_owned),
            error: None,
            input: schedule.payload.clone(),
            output: Some(json!({"status": "COMPLETED"})),
            requirements: None,
            user_id: None,
            created_at: now,
        })
        .await?;
    let next = next_morning(now);
    let released = store
        .release_schedule(&id, WORKER, claimed.locked_at, Some(next))
        .await?;
    let when = DateTime::<Utc>::from_timestamp(next, 0).map_or_else(
        || next.to_string(),
        |t| t.format("%Y-%m-%d %H:%M UTC").to_string(),
    );
    w.notes.push(if released {
        format!("schedule: claimed by {WORKER}, 1 run recorded, released (next run {when})")
    } else {
        format!("schedule: claimed by {WORKER}, 1 run recorded, but the release was refused (claim lost)")
    });
    Ok(())
}

/// Enabled schedules other than `ours` that `claim_due_schedule` would pick first.
async fn schedules_due_before(store: &dyn ScheduleStore, ours: &Schedule) -> Result<u64, Error> {
    let now = agno_storage_core::now_epoch_seconds();
    let mine = (ours.next_run_at, ours.id.as_str());
    let mut ahead = 0;
    let mut pager = Pager::new();
    while let Some(pagination) = pager.next_page() {
        let page = store.get_schedules(Some(true), None, pagination).await?;
        pager.saw(page.items.len(), page.total);
        ahead += page
            .items
            .iter()
            .filter(|s| s.id != ours.id && s.is_due(now, LOCK_GRACE_SECONDS))
            .filter(|s| (s.next_run_at, s.id.as_str()) < mine)
            .count() as u64;
    }
    Ok(ahead)
}

/// Releases a schedule claimed by mistake, keeping its `next_run_at` (which a release
/// clears on one-shot schedules, so it is written back).
async fn put_back_schedule(store: &dyn ScheduleStore, claimed: &Schedule) -> Result<(), Error> {
    store
        .release_schedule(&claimed.id, WORKER, claimed.locked_at, claimed.next_run_at)
        .await?;
    if claimed.cron_expr.is_empty() {
        if let Some(next) = claimed.next_run_at {
            let mut columns = Map::new();
            columns.insert("next_run_at".into(), json!(next));
            store
                .update_schedule(&claimed.id, None, ScheduleUpdate::new(columns)?)
                .await?;
        }
    }
    Ok(())
}

async fn write_learning(
    db: &AgnoDb,
    w: &mut Workload,
    now: i64,
    session_id: Option<&str>,
) -> Result<(), Error> {
    let alice = USERS[0];
    let learning_id = entity_learning_id("user", Some(alice), "person", "sarah_chen")
        .ok_or_else(|| Error::new("entity_learning_id gave no id for a user-scoped entity"))?;
    db.learnings()?
        .upsert_learning(Learning {
            learning_id,
            learning_type: "entity_memory".into(),
            namespace: Some("user".into()),
            user_id: Some(alice.to_owned()),
            agent_id: Some("travel-planner".into()),
            team_id: None,
            workflow_id: None,
            session_id: session_id.map(str::to_owned),
            entity_id: Some("sarah_chen".into()),
            entity_type: Some("person".into()),
            content: json!({
                "entity_id": "sarah_chen",
                "entity_type": "person",
                "name": "Sarah Chen",
                "description": "Travelling to Lisbon with the user in May",
                "facts": ["Is allergic to shellfish", "Speaks Portuguese"],
                "events": [],
                "relationships": [{"entity_id": "user", "relation": "partner"}],
            }),
            metadata: Some(json!({"source": "agno-storage demo"})),
            created_at: now,
            updated_at: Some(now),
        })
        .await?;
    w.learnings += 1;
    Ok(())
}

/// Enqueues a job, claims it and completes it.
async fn write_job(
    db: &AgnoDb,
    w: &mut Workload,
    now: i64,
    session_id: Option<&str>,
) -> Result<(), Error> {
    let store = db.jobs()?;
    let session_id = session_id.map_or_else(new_id, str::to_owned);
    let mut job = Job::new(
        new_id(),
        "agent",
        "travel-planner",
        session_id,
        json!({"input": "Draft a packing list for Lisbon in May", "stream": false}),
    );
    job.user_id = Some(USERS[0].to_owned());
    job.deployment_id = Some(DEPLOYMENT.into());
    job.created_at = now;
    let outcome = store.enqueue_job(job.clone(), 0).await?;
    if let Some(rejection) = outcome.rejection {
        w.notes.push(format!("job: not enqueued ({rejection:?})"));
        return Ok(());
    }
    w.jobs += 1;

    let ahead = jobs_claimable_before(store, &job).await?;
    if ahead > 0 {
        w.notes.push(format!(
            "job: queued, not claimed: {ahead} older job(s) are claimable and the demo claims only its own"
        ));
        return Ok(());
    }
    let Some(claimed) = store
        .claim_job(WORKER, LOCK_GRACE_SECONDS, Some(DEPLOYMENT))
        .await?
    else {
        w.notes
            .push("job: queued, but claim_job found nothing to claim".into());
        return Ok(());
    };
    if claimed.id != job.id {
        store
            .retry_or_fail_job(
                &claimed.id,
                WORKER,
                claimed.attempt,
                Some(format!("claimed by mistake by {WORKER}; returned")),
                0,
            )
            .await?;
        w.notes.push(format!(
            "job: queued, not claimed: another job ({}) was claimable first and was returned",
            claimed.id
        ));
        return Ok(());
    }
    let done = store
        .complete_job(&job.id, WORKER, claimed.attempt, JobStatus::Completed, None)
        .await?;
    w.notes.push(format!(
        "job: enqueued, claimed by {WORKER} (attempt {}) and {}",
        done.attempt,
        done.status.as_str()
    ));
    Ok(())
}

/// Jobs other than `ours` that `claim_job` would pick first for the demo's deployment.
async fn jobs_claimable_before(store: &dyn JobStore, ours: &Job) -> Result<u64, Error> {
    let now = agno_storage_core::now_epoch_seconds();
    let mine = (ours.created_at, ours.id.as_str());
    let mut ahead = 0;
    for status in [JobStatus::Queued, JobStatus::Running] {
        let mut pager = Pager::new();
        while let Some(pagination) = pager.next_page() {
            let page = store
                .list_jobs(JobQuery {
                    status: Some(status),
                    pagination,
                    ..Default::default()
                })
                .await?;
            pager.saw(page.items.len(), page.total);
            ahead += page
                .items
                .iter()
                .filter(|j| j.id != ours.id && (j.created_at, j.id.as_str()) < mine)
                .filter(|j| {
                    j.deployment_id.is_none() || j.deployment_id.as_deref() == Some(DEPLOYMENT)
                })
                .filter(|j| {
                    j.status == JobStatus::Queued
                        || (j.locked_at.is_some_and(|t| t <= now - LOCK_GRACE_SECONDS)
                            && j.attempt < j.max_attempts)
                })
                .count() as u64;
        }
    }
    Ok(ahead)
}

/// Reads everything back and formats the summary.
async fn summarize(
    url: &BackendUrl,
    db: &AgnoDb,
    w: &Workload,
    started: Instant,
) -> Result<String, Error> {
    let caps = db.capabilities();
    let one = Pagination::limit(1);
    let mut out = format!("agno-storage demo on {url} ({} backend)\n\n", db.backend());
    out.push_str("Wrote (this run / now in the database):\n");
    let mut line = |domain: &str, wrote: u64, total: u64| {
        let _ = writeln!(out, "  {domain:12} {wrote:>4} / {total}");
    };
    if caps.sessions {
        let total = db
            .sessions()?
            .get_sessions(SessionQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("sessions", w.sessions.len() as u64, total);
    }
    if caps.sessions && caps.runs {
        let total = db
            .runs()?
            .get_runs(RunQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("runs", w.runs, total);
    }
    if caps.memories {
        let total = db
            .memories()?
            .get_memories(MemoryQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("memories", w.memories, total);
    }
    if caps.evals {
        let total = db
            .evals()?
            .get_eval_runs(EvalQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("eval runs", w.evals, total);
    }
    if caps.knowledge {
        let total = db
            .knowledge()?
            .get_knowledge_contents(KnowledgeQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("knowledge", w.knowledge, total);
    }
    if caps.schedules {
        let total = db.schedules()?.get_schedules(None, None, one).await?.total;
        line("schedules", w.schedules, total);
    }
    if caps.learnings {
        let total = db
            .learnings()?
            .list_learnings(LearningQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("learnings", w.learnings, total);
    }
    if caps.jobs {
        let total = db
            .jobs()?
            .list_jobs(JobQuery {
                pagination: one,
                ..Default::default()
            })
            .await?
            .total;
        line("jobs", w.jobs, total);
    }
    let today = Utc::now().date_naive();
    let metrics = if caps.sessions && caps.metrics {
        let rows = db
            .metrics()?
            .get_metrics(MetricsQuery {
                starting_date: Some(today),
                ending_date: Some(today),
                user_id: None,
            })
            .await?
            .rows;
        line("metrics", w.metrics.len() as u64, rows.len() as u64);
        rows
    } else {
        Vec::new()
    };

    if caps.sessions && caps.runs {
        out.push_str("\nRuns per session, in order:\n");
        for (session_id, label) in &w.sessions {
            let runs = db
                .runs()?
                .get_runs(RunQuery {
                    session_id: Some(session_id.clone()),
                    ..Default::default()
                })
                .await?
                .items;
            let _ = writeln!(out, "  {label}: {} run(s)", runs.len());
            for run in &runs {
                let index = run
                    .run_index
                    .map_or_else(|| "-".to_owned(), |i| i.to_string());
                let model = run
                    .run_data
                    .get("model")
                    .and_then(Value::as_str)
                    .unwrap_or("-");
                let _ = write!(
                    out,
                    "    #{index} {:8} {:9} {}  {model}",
                    run.run_type.as_str(),
                    run.status.as_deref().unwrap_or("-"),
                    short(&run.run_id)
                );
                if let Some(parent) = &run.parent_run_id {
                    let _ = write!(out, "  (member of {})", short(parent));
                }
                out.push('\n');
            }
        }
    }

    if caps.memories {
        out.push_str("\nMemory topics:\n");
        for user in USERS {
            let topics = db.memories()?.get_memory_topics(Some(user)).await?;
            let _ = writeln!(out, "  {user:20} {}", topics.join(", "));
        }
    }

    if !metrics.is_empty() {
        write_metrics(&mut out, today, &metrics);
    }

    if !w.notes.is_empty() {
        out.push('\n');
        for note in &w.notes {
            let _ = writeln!(out, "{note}");
        }
    }
    if !w.skipped.is_empty() {
        let _ = writeln!(
            out,
            "\nSkipped (the {} backend does not offer them): {}",
            db.backend(),
            w.skipped.join(", ")
        );
    }
    if !caps.durable {
        let _ = writeln!(
            out,
            "\nThe {} backend is not durable: this data is gone when the command exits.",
            db.backend()
        );
    }
    let _ = writeln!(out, "\nDone in {:.2?}.", started.elapsed());
    Ok(out)
}

/// Today's per-user metrics rows; the shared bucket shows as `(shared)`.
fn write_metrics(out: &mut String, today: NaiveDate, rows: &[MetricsRecord]) {
    let _ = writeln!(out, "\nMetrics for {today} (daily, per user):");
    let _ = writeln!(
        out,
        "  {:20} {:>8} {:>5} {:>7}  models",
        "user", "sessions", "runs", "tokens"
    );
    for row in rows {
        let sessions =
            row.agent_sessions_count + row.team_sessions_count + row.workflow_sessions_count;
        let runs = row.agent_runs_count + row.team_runs_count + row.workflow_runs_count;
        let tokens = row
            .token_metrics
            .get("total_tokens")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let models: Vec<String> = row
            .model_metrics
            .as_array()
            .map(|models| {
                models
                    .iter()
                    .map(|m| {
                        format!(
                            "{} x{}",
                            m.get("model_id").and_then(Value::as_str).unwrap_or("?"),
                            m.get("count").and_then(Value::as_i64).unwrap_or(0)
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let models = if models.is_empty() {
            "-".to_owned()
        } else {
            models.join(", ")
        };
        let _ = writeln!(
            out,
            "  {:20} {sessions:>8} {runs:>5} {tokens:>7}  {models}",
            row.user_id.as_deref().unwrap_or("(shared)"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agno_storage_core::SessionRead;
    use agno_storage_doc::InMemoryDb;

    #[tokio::test]
    async fn writes_every_domain_and_claims_its_own_work() {
        let db = InMemoryDb::new().agno_db();
        let w = write_workload(&db).await.unwrap();
        assert_eq!(
            (w.sessions.len(), w.runs, w.memories, w.evals),
            (3, 7, 4, 2)
        );
        assert_eq!(
            (w.knowledge, w.schedules, w.learnings, w.jobs),
            (1, 1, 1, 1)
        );
        assert!(w.skipped.is_empty());
        assert_eq!(w.metrics.len(), 3, "alice, bob and the shared bucket");
        assert!(w
            .metrics
            .iter()
            .any(|r| r.user_id.is_none() && r.workflow_runs_count == 1));
        let bob = w
            .metrics
            .iter()
            .find(|r| r.user_id.as_deref() == Some(USERS[1]))
            .unwrap();
        assert_eq!(bob.team_runs_count, 3, "team run plus two member runs");

        let team = db
            .sessions()
            .unwrap()
            .get_session(&w.sessions[1].0, SessionRead::default())
            .await
            .unwrap()
            .unwrap();
        let runs = team.run_values().unwrap();
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[1]["parent_run_id"], runs[0]["run_id"]);
        assert!(
            w.notes.iter().any(|n| n.starts_with("schedule: claimed")),
            "{:?}",
            w.notes
        );
        assert!(
            w.notes.iter().any(|n| n.contains("completed")),
            "{:?}",
            w.notes
        );
        let jobs = db
            .jobs()
            .unwrap()
            .list_jobs(JobQuery::default())
            .await
            .unwrap()
            .items;
        assert_eq!(jobs[0].status, JobStatus::Completed);
        let schedules = db
            .schedules()
            .unwrap()
            .get_schedules(None, None, Pagination::default())
            .await
            .unwrap()
            .items;
        assert!(schedules[0].locked_by.is_none());
        assert!(schedules[0]
            .next_run_at
            .is_some_and(|t| t > schedules[0].created_at));
    }

    #[tokio::test]
    async fn second_run_adds_a_second_workload() {
        let db = InMemoryDb::new().agno_db();
        write_workload(&db).await.unwrap();
        let w = write_workload(&db).await.unwrap();
        assert!(
            w.notes.iter().any(|n| n.starts_with("schedule: claimed")),
            "{:?}",
            w.notes
        );
        let total = db
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery::default())
            .await
            .unwrap()
            .total;
        assert_eq!(total, 6);
        let out = summarize(&BackendUrl::Memory, &db, &w, Instant::now())
            .await
            .unwrap();
        assert!(out.contains("sessions        3 / 6"), "{out}");
        assert!(out.contains("(shared)"), "{out}");
    }

    #[tokio::test]
    async fn leaves_older_due_work_alone() {
        let db = InMemoryDb::new().agno_db();
        let mut other = Schedule::new("aaa-other", "other", "/agents/x/runs", "");
        other.next_run_at = Some(1);
        db.schedules()
            .unwrap()
            .create_schedule(other)
            .await
            .unwrap();
        let mut job = Job::new("aaa-job", "agent", "x", "s", json!({}));
        job.created_at = 1;
        db.jobs().unwrap().enqueue_job(job, 0).await.unwrap();

        let w = write_workload(&db).await.unwrap();
        assert!(
            w.notes
                .iter()
                .any(|n| n.starts_with("schedule: created, not claimed")),
            "{:?}",
            w.notes
        );
        assert!(
            w.notes
                .iter()
                .any(|n| n.starts_with("job: queued, not claimed")),
            "{:?}",
            w.notes
        );
        let other = db
            .schedules()
            .unwrap()
            .get_schedule("aaa-other", None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((other.locked_by, other.next_run_at), (None, Some(1)));
    }

    #[test]
    fn next_morning_is_after_now() {
        let now = 1_767_312_000; // 2026-01-02 00:00 UTC
        assert_eq!(next_morning(now), now + 8 * 3600);
        assert_eq!(next_morning(now + 9 * 3600), now + 32 * 3600);
    }
}
