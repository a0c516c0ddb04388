//! Interop with the real agno package from PyPI, through agno's own `RedisDb`, on Redis and
//! (when `AGNO_TEST_VALKEY_URL` is set) Valkey: agno 2.9.0 writes a legacy prefix, we
//! migrate it and agno 3.1.10 reads it back exactly as its own migration of a copy; agno
//! 3.1.10 reads what we write; we read (and, after indexing, list) what it writes.
//!
//! Needs `AGNO_TEST_PYTHON_V2` and `AGNO_TEST_PYTHON_V3` (python executables of venvs with
//! agno 2.9.0 / 3.1.10 and `redis`; `./scripts/test.sh` builds them) and
//! `AGNO_TEST_REDIS_URL`. Without them the tests are skipped with a note, except under
//! `CI=true`, where they fail.

mod common;

use std::path::{Path, PathBuf};

use agno_storage_core::{
    AgnoDb, EnqueueRejection, Job, JobQuery, JobStatus, MigrationManager, SessionQuery, SessionRead,
};
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_testkit::interop::{
    agno_python, assert_agno_read_fixture, read_agno_fixture, run_driver, write_fixture,
    FixtureReadBack,
};
use serde_json::{json, Value};

fn env(var: &str) -> Option<String> {
    match common::url(var) {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_redis_driver.py")
}

/// Runs the agno driver and returns its stdout.
fn agno(python: &str, command: &str, target: &str) -> String {
    run_driver(
        python,
        &[driver().as_os_str(), command.as_ref(), target.as_ref()],
    )
}

fn dump(python: &str, target: &str) -> Value {
    serde_json::from_str(&agno(python, "dump-v3", target)).expect("dump-v3 prints JSON")
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// One key prefix on one server, reachable from both sides; its keys go when dropped.
struct Target {
    url: String,
    prefix: String,
}

impl Target {
    fn new(url: &str, name: &str) -> Target {
        Target {
            url: url.to_owned(),
            prefix: format!("{}_{name}", common::run_stem()),
        }
    }

    fn for_python(&self) -> String {
        format!("redis:{}#{}", self.url, self.prefix)
    }

    async fn kv(&self, stamp_new: bool) -> KvDb {
        let options = KvOptions {
            prefix: self.prefix.clone(),
            stamp_new,
        };
        KvDb::connect(&self.url, options)
            .await
            .expect("connect to the server")
    }

    async fn open(&self) -> AgnoDb {
        self.kv(true).await.agno_db()
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        let (url, pattern) = (self.url.clone(), format!("{}:*", self.prefix));
        let cleaned = std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = common::connection(&url).await?;
                common::delete_matching(&mut conn, &pattern).await
            })
        })
        .join();
        if !matches!(cleaned, Ok(Ok(_))) {
            eprintln!("warning: could not delete the keys of {}", self.prefix);
        }
    }
}

/// The servers to run on: Redis, and Valkey when configured.
fn servers() -> Vec<String> {
    let mut urls: Vec<String> = env("AGNO_TEST_REDIS_URL").into_iter().collect();
    if let Ok(v) = std::env::var("AGNO_TEST_VALKEY_URL") {
        urls.push(v);
    }
    urls
}

/// agno 2.9.0 writes A and B; we migrate A, agno 3.1.10 migrates B; agno reads both the same.
fn v2_migrates_like_agno(url: &str) {
    let (Some(v2), Some(v3)) = (
        agno_python("AGNO_TEST_PYTHON_V2"),
        agno_python("AGNO_TEST_PYTHON_V3"),
    ) else {
        return;
    };
    let (a, b) = (Target::new(url, "v2a"), Target::new(url, "v2b"));
    agno(&v2, "write-v2", &a.for_python());
    agno(&v2, "write-v2", &b.for_python());
    runtime().block_on(async {
        let kv = a.kv(false).await;
        let db = kv.agno_db();
        let report = MigrationManager::new(db.migrations().unwrap())
            .up()
            .await
            .expect("our migration");
        assert_eq!(report.stamped.len(), 8, "{report:?}");
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
        // The migration indexed what agno 2.9.0 wrote: listings find it.
        let alice = db
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery {
                user_id: Some("alice".into()),
                include_runs: true,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(alice.total, 1);
        assert_eq!(alice.items[0].runs.as_ref().map(Vec::len), Some(3));
        let memories = db
            .memories()
            .unwrap()
            .get_memories(agno_storage_core::MemoryQuery {
                user_id: Some("alice".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(memories.total, 1);
        // Unforced cleanup refuses: the blobs are the migration's backup.
        let refused = agno_storage_core::legacy::cleanup_legacy_runs(
            db.legacy().unwrap(),
            "agno_sessions",
            false,
        )
        .await;
        assert!(refused.is_err());
    });
    agno(&v3, "migrate-v3", &b.for_python());
    let (ours, theirs) = (dump(&v3, &a.for_python()), dump(&v3, &b.for_python()));
    assert_eq!(
        ours, theirs,
        "agno 3.1.10 reads our migration differently from its own"
    );
    assert_eq!(ours["runs"].as_array().map(Vec::len), Some(5), "{ours}");
    assert!(
        ours["versions"]
            .as_object()
            .unwrap()
            .values()
            .all(|v| v == "3.0.0"),
        "{ours}"
    );
}

/// We write; agno 3.1.10 reads it back.
fn agno_reads_what_we_write(url: &str) {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let target = Target::new(url, "ours");
    runtime().block_on(async {
        let db = target.open().await;
        write_fixture(&db).await;
    });
    let differ = agno(&v3, "check-bytes", &target.for_python());
    assert_eq!(differ.trim(), "[]", "records agno would encode differently");
    let d = dump(&v3, &target.for_python());
    assert_agno_read_fixture(&d, &FixtureReadBack::default());
}

/// agno 3.1.10 writes; we read it back by id at once, and list it after indexing.
fn we_read_what_agno_writes(url: &str) {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let target = Target::new(url, "theirs");
    runtime().block_on(async { target.open().await });
    agno(&v3, "write-v3", &target.for_python());
    runtime().block_on(async {
        let kv = target.kv(true).await;
        let db = kv.agno_db();
        let m = read_agno_fixture(&db).await;
        assert_eq!(m.created_at, 1_710_000_100);
        let carol = SessionQuery {
            user_id: Some("carol".into()),
            ..Default::default()
        };
        let before = db
            .sessions()
            .unwrap()
            .get_sessions(carol.clone())
            .await
            .unwrap();
        assert_eq!(before.total, 0, "agno's writes are not in our indexes yet");
        let report = kv.rebuild_indexes().await.unwrap();
        // One session and its two runs.
        assert!(
            report
                .tables
                .iter()
                .any(|(t, n)| t == "agno_sessions" && *n == 3),
            "{report:?}"
        );
        let after = db.sessions().unwrap().get_sessions(carol).await.unwrap();
        assert_eq!(after.total, 1);
        assert_eq!(after.items[0].session_id, "py-s1");
    });
}

#[test]
fn v2_prefix_migrates_like_agno() {
    for url in servers() {
        v2_migrates_like_agno(&url);
    }
}

#[test]
fn agno_reads_our_writes() {
    for url in servers() {
        agno_reads_what_we_write(&url);
    }
}

#[test]
fn we_read_and_list_what_agno_writes() {
    for url in servers() {
        we_read_what_agno_writes(&url);
    }
}

/// agno's workers and ours share one queue: agno's idempotency keys deduplicate our
/// submissions, each side claims and completes the other's jobs, both list the outcome.
fn queue_is_shared(url: &str) {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let target = Target::new(url, "jobs");
    // One runtime: the connection's driver task lives on it.
    let rt = runtime();
    let db = rt.block_on(async { target.open().await });
    let out: Value =
        serde_json::from_str(&agno(&v3, "jobs-enqueue", &target.for_python())).unwrap();
    assert_eq!(out["accepted"], true, "{out}");
    rt.block_on(async {
        let jobs = db.jobs().unwrap();
        let mut ours = Job::new(
            "rs-j1",
            "agent",
            "agent-rs",
            "rs-s1",
            json!({"input": "from rust"}),
        );
        ours.user_id = Some("dave".into());
        assert!(jobs.enqueue_job(ours, 0).await.unwrap().rejection.is_none());
        let mut again = Job::new("rs-dup", "agent", "agent-py", "py-s1", json!({}));
        again.user_id = Some("carol".into());
        again.idempotency_key = Some("k1".into());
        let dup = jobs.enqueue_job(again, 0).await.unwrap();
        assert_eq!(dup.rejection, Some(EnqueueRejection::Duplicate));
        assert_eq!(dup.job.map(|j| j.id).as_deref(), Some("py-j1"));
        let claimed = jobs
            .claim_job("rs-worker", 60, None)
            .await
            .unwrap()
            .expect("python's job");
        assert_eq!((claimed.id.as_str(), claimed.attempt), ("py-j1", 1));
        assert_eq!(claimed.payload["input"], "from python ü");
        jobs.complete_job("py-j1", "rs-worker", 1, JobStatus::Completed, None)
            .await
            .unwrap();
    });
    let differ = agno(&v3, "check-bytes", &target.for_python());
    assert_eq!(differ.trim(), "[]", "tickets agno would encode differently");
    let worked: Value =
        serde_json::from_str(&agno(&v3, "jobs-work", &target.for_python())).unwrap();
    assert_eq!(worked["id"], "rs-j1", "{worked}");
    let listed: Value =
        serde_json::from_str(&agno(&v3, "jobs-dump", &target.for_python())).unwrap();
    let statuses: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["status"].as_str().unwrap()))
        .collect();
    assert_eq!(statuses, [("py-j1", "completed"), ("rs-j1", "completed")]);
    rt.block_on(async {
        let jobs = db.jobs().unwrap();
        let done = jobs
            .get_job("rs-j1", Some("dave"))
            .await
            .unwrap()
            .expect("our job");
        assert_eq!(
            (done.status, done.locked_by.as_deref()),
            (JobStatus::Completed, None)
        );
        assert!(done.completed_at.is_some());
        let completed = jobs
            .list_jobs(JobQuery {
                status: Some(JobStatus::Completed),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(completed.total, 2);
        assert_eq!(jobs.cleanup_jobs(0).await.unwrap(), 2);
    });
    let listed: Value =
        serde_json::from_str(&agno(&v3, "jobs-dump", &target.for_python())).unwrap();
    assert_eq!(listed, json!([]));
}

#[test]
fn job_queue_is_shared_with_agno() {
    for url in servers() {
        queue_is_shared(&url);
    }
}
