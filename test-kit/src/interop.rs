//! Interop with the real agno package from PyPI, shared by every adapter's interop test:
//! finding the test venvs' pythons, running a Python driver, the records an adapter writes
//! for agno 3.1.10 to read back (and what agno must find), and what an adapter must find in
//! the records a driver's `write-v3` command wrote through agno 3.1.10.
//!
//! The drivers themselves (`interop/agno_*driver.py` in the repository) print agno's view of
//! a database as JSON; each adapter's test says where its database is.

use std::ffi::OsStr;
use std::process::Command;

use agno_storage_core::{
    AgnoDb, EvalRun, EvalType, Job, JobStatus, KnowledgeContent, RunRecord, Session, SessionRead,
    SessionType, UserMemory,
};
use serde_json::{json, Value};

use crate::servers::ci;

/// The python executable in the environment variable `var` (`AGNO_TEST_PYTHON_V2` or
/// `AGNO_TEST_PYTHON_V3`, venvs with agno 2.9.0 / 3.1.10 that `./scripts/test.sh` builds);
/// `None`, with a note, when it is unset.
///
/// # Panics
///
/// Under `CI=true` when `var` is unset: interop is never skipped there.
pub fn agno_python(var: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(python) => Some(python),
        Err(_) if ci() => panic!("CI=true but {var} is not set; run ./scripts/test.sh"),
        Err(_) => {
            eprintln!("note: {var} is not set; skipping agno interop (./scripts/test.sh sets it)");
            None
        }
    }
}

/// Runs `python` with `args` (a driver script and its arguments) and returns its stdout.
/// It runs with `TZ=UTC`: agno writes some timestamps (JsonDb's memories, say) in the host's
/// local time without an offset and reads them back as UTC.
/// `AWS_EC2_METADATA_DISABLED=true` keeps boto3 (agno's `DynamoDb`) from probing for
/// instance credentials.
///
/// # Panics
///
/// When python cannot start or exits unsuccessfully; the message carries its stderr.
pub fn run_driver<S: AsRef<OsStr>>(python: &str, args: &[S]) -> String {
    let out = Command::new(python)
        .args(args)
        .env("TZ", "UTC")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .output()
        .expect("python runs");
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        shown.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`run_driver`]'s stdout as JSON: its last non-blank line (agno may log before it).
///
/// # Panics
///
/// As [`run_driver`], and when the last line is not JSON.
pub fn run_driver_json<S: AsRef<OsStr>>(python: &str, args: &[S]) -> Value {
    let out = run_driver(python, args);
    let last = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| panic!("driver output is not JSON ({e}): {out}"))
}

/// Writes, through `db`, what agno 3.1.10 then reads back ([`assert_agno_read_fixture`]):
/// user `dave`'s agent session `rs-s1` (named "Written by Rust ✓") with runs `rs-r0`
/// (COMPLETED) and `rs-r1` (ERROR), team session `rs-s2` with team run `rs-t0` and its
/// member run `rs-t0-m`, memory `rs-m1`, reliability eval `rs-e1` and knowledge `rs-k1`.
///
/// # Panics
///
/// When a write fails.
pub async fn write_fixture(db: &AgnoDb) {
    let mut s = Session::new("rs-s1", SessionType::Agent, "agent-rs").with_user("dave");
    s.session_data = Some(json!({"session_name": "Written by Rust ✓", "session_state": {"n": 1}}));
    s.created_at = 1_720_000_000;
    db.sessions().unwrap().upsert_session(s).await.unwrap();
    let mut team = Session::new("rs-s2", SessionType::Team, "team-rs").with_user("dave");
    team.created_at = 1_720_000_100;
    db.sessions().unwrap().upsert_session(team).await.unwrap();
    for (i, status) in ["COMPLETED", "ERROR"].iter().enumerate() {
        let run = RunRecord::from_run_data(
            "rs-s1",
            Some("dave".into()),
            json!({
                "run_id": format!("rs-r{i}"), "agent_id": "agent-rs", "session_id": "rs-s1",
                "user_id": "dave", "status": status, "content": format!("rust answer {i}"),
                "created_at": 1_720_000_000 + i as i64
            }),
        )
        .unwrap();
        db.runs().unwrap().upsert_run(run).await.unwrap();
    }
    for (id, data) in [
        (
            "rs-t0",
            json!({"run_id": "rs-t0", "team_id": "team-rs", "session_id": "rs-s2", "status": "COMPLETED", "content": "team"}),
        ),
        (
            "rs-t0-m",
            json!({"run_id": "rs-t0-m", "agent_id": "member", "session_id": "rs-s2", "parent_run_id": "rs-t0", "status": "COMPLETED", "content": "member"}),
        ),
    ] {
        let run = RunRecord::from_run_data("rs-s2", Some("dave".into()), data).unwrap();
        assert_eq!(db.runs().unwrap().upsert_run(run).await.unwrap().run_id, id);
    }
    let mut m = UserMemory::new(
        "rs-m1",
        Some("dave".into()),
        "Rust remembers \"quotes\" and ü",
    );
    m.topics = Some(vec!["rust".into()]);
    m.created_at = 1_720_000_200;
    db.memories().unwrap().upsert_memory(m).await.unwrap();
    db.evals()
        .unwrap()
        .create_eval_run(EvalRun {
            run_id: "rs-e1".into(),
            eval_type: EvalType::Reliability,
            eval_data: json!({"passed": true}),
            eval_input: None,
            name: Some("tools".into()),
            agent_id: Some("agent-rs".into()),
            team_id: None,
            workflow_id: None,
            model_id: None,
            model_provider: None,
            evaluated_component_name: None,
            user_id: Some("dave".into()),
            created_at: 1_720_000_300,
            updated_at: None,
        })
        .await
        .unwrap();
    let mut k = KnowledgeContent::new("rs-k1", "notes.md", "rust notes");
    k.user_id = Some("dave".into());
    db.knowledge()
        .unwrap()
        .upsert_knowledge_content(k)
        .await
        .unwrap();
}

/// How an agno 3.1.10 adapter hands back [`write_fixture`]'s records, where adapters differ.
#[derive(Debug, Clone)]
pub struct FixtureReadBack {
    /// agno's session read carries the session's `runs` (FirestoreDb's does not: its
    /// ordered runs query needs an undeclared composite index, so runs are checked in the
    /// dump's `runs` only).
    pub runs_on_sessions: bool,
    /// The memory's `created_at` as agno returns it, or `None` when the dump's memories do
    /// not carry it (the caller checks it another way).
    pub memory_created_at: Option<Value>,
    /// agno's read of the schema stamps is this database's (agno's `DynamoDb` reads one
    /// unprefixed stamps table whatever the tables' prefix, so a prefixed test database's
    /// stamps are not what it dumps).
    pub stamps_read: bool,
}

impl Default for FixtureReadBack {
    /// Runs on sessions, the memory's `created_at` as epoch seconds, the stamps read.
    fn default() -> Self {
        FixtureReadBack {
            runs_on_sessions: true,
            memory_created_at: Some(json!(1_720_000_200)),
            stamps_read: true,
        }
    }
}

/// Asserts that `dump` (a driver's `dump-v3` output: agno 3.1.10's reads of `sessions`,
/// `runs`, `memories`, `evals`, `knowledge` and `versions`) holds [`write_fixture`]'s
/// records as agno sees them.
///
/// # Panics
///
/// On the first difference.
pub fn assert_agno_read_fixture(dump: &Value, expect: &FixtureReadBack) {
    let d = dump;
    let sessions = d["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{d}");
    assert_eq!(
        sessions[0]["session_data"]["session_name"],
        "Written by Rust ✓"
    );
    assert_eq!(sessions[0]["user_id"], "dave");
    let table_runs = d["runs"].as_array().expect("runs");
    let run_ids = |runs: &[Value]| -> Vec<String> {
        runs.iter()
            .map(|r| r["run_id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    if expect.runs_on_sessions {
        let runs = sessions[0]["runs"].as_array().expect("session runs");
        assert_eq!(run_ids(runs), ["rs-r0", "rs-r1"]);
        assert_eq!(sessions[0]["runs"][1]["status"], "ERROR");
        assert_eq!(sessions[1]["runs"][1]["parent_run_id"], "rs-t0");
    } else {
        assert_eq!(run_ids(table_runs), ["rs-r0", "rs-r1", "rs-t0", "rs-t0-m"]);
        assert_eq!(table_runs[1]["status"], "ERROR");
        assert_eq!(table_runs[3]["parent_run_id"], "rs-t0");
    }
    assert_eq!(
        table_runs
            .iter()
            .map(|r| r["run_index"].as_i64())
            .collect::<Vec<_>>(),
        [Some(0), Some(1), Some(0), Some(1)]
    );
    assert_eq!(table_runs[2]["run_type"], "team");
    assert_eq!(
        d["memories"][0]["memory"],
        "Rust remembers \"quotes\" and ü"
    );
    if let Some(created_at) = &expect.memory_created_at {
        assert_eq!(&d["memories"][0]["created_at"], created_at);
    }
    assert_eq!(d["evals"][0]["eval_type"], "reliability");
    assert_eq!(d["evals"][0]["user_id"], "dave");
    assert_eq!(d["knowledge"][0]["user_id"], "dave");
    assert!(
        !expect.stamps_read
            || d["versions"]
                .as_object()
                .expect("versions")
                .values()
                .all(|v| v == "3.0.0"),
        "{d}"
    );
}

/// Asserts that `db` reads what a driver's `write-v3` command wrote through agno 3.1.10:
/// user `carol`'s agent session `py-s1` named "From Python" with runs "python answer 0" and
/// "python answer 1", run `py-r1` at index 1, COMPLETED. Returns memory `py-m1` (written
/// by python, topic `interop`), whose `created_at` adapters store differently, for the
/// caller to check.
///
/// # Panics
///
/// On the first difference, or when a read fails.
pub async fn read_agno_fixture(db: &AgnoDb) -> UserMemory {
    let s = db
        .sessions()
        .unwrap()
        .get_session("py-s1", SessionRead::for_user("carol"))
        .await
        .unwrap()
        .expect("python's session");
    assert_eq!(s.session_type, SessionType::Agent);
    assert_eq!(s.session_name(), Some("From Python"));
    let runs = s.run_values().unwrap();
    assert_eq!(
        runs.iter()
            .map(|r| r["content"].as_str().unwrap_or_default())
            .collect::<Vec<_>>(),
        ["python answer 0", "python answer 1"]
    );
    let r1 = db
        .runs()
        .unwrap()
        .get_run("py-r1", Some("carol"))
        .await
        .unwrap()
        .expect("python's run");
    assert_eq!(
        (r1.run_index, r1.status.as_deref()),
        (Some(1), Some("COMPLETED"))
    );
    let m = db
        .memories()
        .unwrap()
        .get_memory("py-m1", Some("carol"))
        .await
        .unwrap()
        .expect("python's memory");
    assert_eq!(m.memory, "written by python");
    assert_eq!(m.topics, Some(vec!["interop".to_owned()]));
    m
}

/// What a driver's `read-surrogates` prints after `write-surrogates`, with the session's
/// name and any runs appended after the three agno wrote.
pub fn agno_surrogate_read_back(session_name: &str, appended: &[&str]) -> String {
    let mut contents = vec![
        r#""plain.txt""#.to_owned(),
        r#""caf\udce9.txt""#.to_owned(),
        r#""also plain.txt""#.to_owned(),
    ];
    contents.extend(appended.iter().map(|c| format!("{c:?}")));
    format!(
        r#"{{"session_name": "{session_name}", "contents": [{}]}}"#,
        contents.join(", ")
    )
}

/// Checks what an adapter reads of the session a driver's `write-surrogates` command wrote
/// through agno 3.1.10 (three runs of `dave`'s `sur-s1`, the middle one holding the lone
/// surrogate `"caf\udce9.txt"`): the session read hands over all three, the middle one as
/// stored text holding agno's escape (its value is a `Serialization` error, for that run
/// alone); `get_runs` lists the other two and names `sur-r1` in `unreadable`. Returns the
/// middle run's text, for the caller to compare with what is stored.
///
/// # Panics
///
/// On the first difference, or when a read fails.
pub async fn assert_surrogate_reads(db: &AgnoDb) -> String {
    let session = db
        .sessions()
        .unwrap()
        .get_session("sur-s1", SessionRead::for_user("dave"))
        .await
        .expect("one undecodable run does not fail the session read")
        .expect("the session exists");
    let runs = session.runs.expect("runs");
    assert_eq!(runs.len(), 3);
    let text = runs[1].json_text().expect("well-formed JSON").into_owned();
    assert!(text.contains(r"caf\udce9.txt"), "{text}");
    let err = runs[1]
        .to_value()
        .expect_err("a Rust string holds no lone surrogate");
    assert_eq!(err.kind(), agno_storage_core::ErrorKind::Serialization);
    assert_eq!(
        runs[2].to_value().expect("plain")["content"],
        "also plain.txt"
    );
    let page = db
        .runs()
        .unwrap()
        .get_runs(agno_storage_core::RunQuery {
            session_id: Some("sur-s1".into()),
            ..Default::default()
        })
        .await
        .expect("one unreadable run does not fail the list");
    let ids: Vec<_> = page.items.iter().map(|r| r.run_id.as_str()).collect();
    assert_eq!(ids, ["sur-r0", "sur-r2"]);
    assert_eq!(page.unreadable.len(), 1, "{:?}", page.unreadable);
    assert_eq!(page.unreadable[0].id, "sur-r1");
    assert!(
        page.unreadable[0].error.contains("surrogate"),
        "{}",
        page.unreadable[0].error
    );
    text
}

/// One database that both agno (through a driver script) and this crate open: a backend's
/// side of the shared interop scenarios ([`v2_migrates_like_agno`],
/// [`agno_reads_what_we_write`], [`we_read_what_agno_writes`]). Make a fresh one per
/// scenario.
#[agno_storage_core::async_trait]
pub trait InteropTarget: Sync {
    /// The driver script (`interop/agno_*driver.py`).
    fn driver(&self) -> std::path::PathBuf;

    /// The driver's arguments after the command that name this database.
    fn args(&self) -> Vec<String>;

    /// Our handle on this database.
    async fn open(&self) -> AgnoDb;

    /// Whether agno's read of the schema stamps is this database's (see
    /// [`FixtureReadBack::stamps_read`]).
    fn agno_reads_our_stamps(&self) -> bool {
        true
    }
}

/// Runs `command` of `target`'s driver with `python`: its stdout.
///
/// # Panics
///
/// As [`run_driver`].
pub fn agno<T: InteropTarget + ?Sized>(python: &str, command: &str, target: &T) -> String {
    let mut args = vec![target.driver().into_os_string(), command.into()];
    args.extend(target.args().into_iter().map(Into::into));
    run_driver(python, &args)
}

/// [`agno`]'s stdout as JSON (its last line).
///
/// # Panics
///
/// As [`run_driver_json`].
pub fn agno_json<T: InteropTarget + ?Sized>(python: &str, command: &str, target: &T) -> Value {
    let mut args = vec![target.driver().into_os_string(), command.into()];
    args.extend(target.args().into_iter().map(Into::into));
    run_driver_json(python, &args)
}

/// A two-thread runtime for a scenario's own calls.
///
/// # Panics
///
/// When the runtime cannot start.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// agno 2.9.0 writes `a` and `b`; we migrate `a` (and read its team session's runs), agno
/// 3.1.10 migrates `b`; agno 3.1.10 reads both the same, five runs, every table at 3.0.0.
/// Returns agno's read of `a` (`dump-v3`).
///
/// # Panics
///
/// On the first difference.
pub fn v2_migrates_like_agno<T: InteropTarget>(v2: &str, v3: &str, a: &T, b: &T) -> Value {
    agno(v2, "write-v2", a);
    agno(v2, "write-v2", b);
    runtime().block_on(async {
        let db = a.open().await;
        let report = agno_storage_core::MigrationManager::new(db.migrations().unwrap())
            .up()
            .await
            .expect("our migration");
        assert!(!report.stamped.is_empty(), "{report:?}");
        let s = db
            .sessions()
            .unwrap()
            .get_session("v2-s-team", SessionRead::for_user("bob"))
            .await
            .unwrap()
            .expect("team session");
        let ids: Vec<String> = s
            .runs
            .as_deref()
            .unwrap_or_default()
            .iter()
            .filter_map(agno_storage_core::RunJson::run_id)
            .collect();
        assert_eq!(ids, ["v2-t0", "v2-t0-m1"]);
    });
    agno(v3, "migrate-v3", b);
    let (ours, theirs) = (agno_json(v3, "dump-v3", a), agno_json(v3, "dump-v3", b));
    assert_eq!(
        ours, theirs,
        "agno 3.1.10 reads our migration differently from its own"
    );
    assert_eq!(ours["runs"].as_array().map(Vec::len), Some(5), "{ours}");
    assert!(
        !a.agno_reads_our_stamps()
            || ours["versions"]
                .as_object()
                .is_some_and(|v| v.values().all(|v| v == "3.0.0")),
        "{ours}"
    );
    ours
}

/// We write [`write_fixture`] into `target`; agno 3.1.10 reads it back as `expect` says.
/// Returns agno's read (`dump-v3`).
///
/// # Panics
///
/// On the first difference.
pub fn agno_reads_what_we_write<T: InteropTarget>(
    v3: &str,
    target: &T,
    expect: &FixtureReadBack,
) -> Value {
    runtime().block_on(async { write_fixture(&target.open().await).await });
    let dump = agno_json(v3, "dump-v3", target);
    assert_agno_read_fixture(&dump, expect);
    dump
}

/// agno 3.1.10 writes its fixture into `target`; we read it back ([`read_agno_fixture`]).
/// Returns the memory read, whose timestamps differ per agno adapter.
///
/// # Panics
///
/// On the first difference.
pub fn we_read_what_agno_writes<T: InteropTarget>(v3: &str, target: &T) -> UserMemory {
    agno(v3, "write-v3", target);
    runtime().block_on(async { read_agno_fixture(&target.open().await).await })
}

/// Asserts that a driver's `raw` output (the stored documents by collection name) holds
/// [`write_fixture`]'s records in agno's document shapes: agent session `rs-s1`'s fields,
/// every run's, every schema stamp's. Fields in `ignore` (a document id a driver adds) are
/// left out.
///
/// # Panics
///
/// On the first document whose fields differ.
pub fn assert_agno_document_shapes(raw: &Value, ignore: &[&str]) {
    let keys = |doc: &Value| -> Vec<String> {
        let mut k: Vec<String> = doc
            .as_object()
            .map(|m| {
                m.keys()
                    .filter(|k| !ignore.contains(&k.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        k.sort();
        k
    };
    let sorted = |names: &[&str]| -> Vec<String> {
        let mut k: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        k.sort();
        k
    };
    let session = raw["agno_sessions"]
        .as_array()
        .and_then(|all| all.iter().find(|s| s["session_id"] == "rs-s1"))
        .unwrap_or_else(|| panic!("no session rs-s1 in {raw}"));
    assert_eq!(
        keys(session),
        sorted(&[
            "session_id",
            "session_type",
            "agent_id",
            "user_id",
            "agent_data",
            "session_data",
            "summary",
            "metadata",
            "created_at",
            "updated_at",
        ]),
        "agent session document: {session}"
    );
    let run_fields = sorted(&[
        "run_id",
        "session_id",
        "run_type",
        "run_index",
        "user_id",
        "agent_id",
        "team_id",
        "workflow_id",
        "parent_run_id",
        "status",
        "run_data",
        "created_at",
        "updated_at",
    ]);
    for r in raw["agno_runs"].as_array().into_iter().flatten() {
        assert_eq!(keys(r), run_fields, "run document: {r}");
    }
    for s in raw["agno_schema_versions"].as_array().into_iter().flatten() {
        assert_eq!(
            keys(s),
            sorted(&["table_name", "updated_at", "version"]),
            "schema stamp: {s}"
        );
    }
}

/// Asserts that after [`v2_migrates_like_agno`] the stored documents (a driver's `raw`
/// output) of our migration and agno's agree: the copied runs are the ones agno's migration
/// writes and the sessions are untouched by both, but for `updated_at` (a copy time) and
/// the session fields in `session_ids` (ids a server assigns apart).
///
/// # Panics
///
/// On the first difference.
pub fn assert_raw_migrations_agree(ours: &Value, theirs: &Value, session_ids: &[&str]) {
    let strip = |raw: &Value, coll: &str| -> Vec<Value> {
        let mut docs = raw[coll].as_array().cloned().unwrap_or_default();
        for d in &mut docs {
            if let Some(m) = d.as_object_mut() {
                m.remove("updated_at");
                if coll == "agno_sessions" {
                    for k in session_ids {
                        m.remove(*k);
                    }
                }
            }
        }
        docs.sort_by_key(Value::to_string);
        docs
    };
    assert_eq!(strip(ours, "agno_runs"), strip(theirs, "agno_runs"));
    assert_eq!(strip(ours, "agno_sessions"), strip(theirs, "agno_sessions"));
}

/// agno 3.1.10's job-queue calls and ours share one queue on `target` (a fresh one, `db`
/// open on it, `rt` the runtime `db` lives on): a job agno enqueues we claim and complete,
/// one we enqueue agno claims and completes; and per-session order holds across both:
/// agno enqueues serialized ticket `py-t1` of session `mix-s`, ours goes behind it
/// (`session_seq` 2); while agno runs `py-t1` we claim nothing; once agno finishes it we
/// claim ours, and then agno claims nothing.
///
/// # Panics
///
/// On the first difference.
pub fn job_queue_is_shared<T: InteropTarget>(
    v3: &str,
    target: &T,
    rt: &tokio::runtime::Runtime,
    db: &AgnoDb,
) {
    let jobs = db.jobs().expect("a job store");
    let out = agno_json(v3, "jobs-enqueue", target);
    assert_eq!(out["accepted"], true, "{out}");
    rt.block_on(async {
        let claimed = jobs
            .claim_job("rs-worker", 60, None)
            .await
            .expect("claim")
            .expect("agno's job");
        assert_eq!((claimed.id.as_str(), claimed.attempt), ("py-j1", 1));
        assert_eq!(claimed.payload["input"], "from python \u{fc}");
        jobs.complete_job("py-j1", "rs-worker", 1, JobStatus::Completed, None)
            .await
            .expect("complete agno's job");
        let ours = Job::new(
            "rs-j1",
            "agent",
            "agent-rs",
            "rs-s1",
            json!({"input": "from rust"}),
        );
        assert!(jobs
            .enqueue_job(ours, 0)
            .await
            .expect("enqueue")
            .rejection
            .is_none());
    });
    let worked = agno_json(v3, "jobs-work", target);
    assert_eq!(worked["id"], "rs-j1", "{worked}");

    let out = agno_json(v3, "session-enqueue", target);
    assert_eq!(out["accepted"], true, "{out}");
    assert_eq!(out["job"]["payload"]["session_seq"], 1, "{out}");
    rt.block_on(async {
        let second = Job::new(
            "rs-t2",
            "agent",
            "agent-rs",
            "mix-s",
            json!({"input": "second", "serialize_session": true}),
        );
        assert!(jobs
            .enqueue_job(second, 0)
            .await
            .expect("enqueue")
            .rejection
            .is_none());
        let stored = jobs
            .get_job("rs-t2", None)
            .await
            .expect("read")
            .expect("ours");
        assert_eq!(stored.session_seq(), 2, "ours goes behind agno's ticket");
    });
    let claimed = agno_json(v3, "jobs-claim", target);
    assert_eq!(claimed["id"], "py-t1", "{claimed}");
    rt.block_on(async {
        let none = jobs.claim_job("rs-worker", 60, None).await.expect("claim");
        assert_eq!(none, None, "ours waits while agno runs its ticket");
        let blocker = jobs.session_blocker("rs-t2").await.expect("blocker");
        assert_eq!(blocker.as_deref(), Some("py-t1"));
    });
    let finished = agno_json(v3, "session-finish", target);
    assert_eq!(finished["status"], "completed", "{finished}");
    rt.block_on(async {
        let next = jobs.claim_job("rs-worker", 60, None).await.expect("claim");
        assert_eq!(
            next.map(|j| j.id).as_deref(),
            Some("rs-t2"),
            "ours runs next"
        );
    });
    let claimed = agno_json(v3, "jobs-claim", target);
    assert_eq!(claimed, Value::Null, "agno waits while ours runs");
    rt.block_on(async {
        jobs.complete_job("rs-t2", "rs-worker", 1, JobStatus::Completed, None)
            .await
            .expect("complete ours");
    });
}
