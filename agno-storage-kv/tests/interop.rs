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
    async_trait, AgnoDb, EnqueueRejection, Job, JobQuery, JobStatus, SessionQuery,
};
use agno_storage_kv::{KvDb, KvOptions};
use agno_storage_testkit::interop::{agno, agno_python, runtime, FixtureReadBack, InteropTarget};
use agno_storage_testkit::servers::{self, Backend};
use serde_json::{json, Value};

/// One key prefix on one server, reachable from both sides; its keys go when dropped.
struct Target {
    url: String,
    prefix: String,
    /// Whether we stamp a prefix holding nothing (off where agno 2.x wrote it).
    stamp_new: bool,
}

impl Target {
    fn new(url: &str, name: &str) -> Target {
        Target {
            url: url.to_owned(),
            prefix: format!("{}_{name}", common::run_stem()),
            stamp_new: true,
        }
    }

    /// A prefix agno 2.9.0 fills: opened without stamping.
    fn legacy(url: &str, name: &str) -> Target {
        let mut target = Target::new(url, name);
        target.stamp_new = false;
        target
    }

    async fn kv(&self) -> KvDb {
        let options = KvOptions {
            prefix: self.prefix.clone(),
            stamp_new: self.stamp_new,
            ..Default::default()
        };
        KvDb::connect(&self.url, options)
            .await
            .expect("connect to the server")
    }
}

#[async_trait]
impl InteropTarget for Target {
    fn driver(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_redis_driver.py")
    }

    fn args(&self) -> Vec<String> {
        vec![format!("redis:{}#{}", self.url, self.prefix)]
    }

    async fn open(&self) -> AgnoDb {
        self.kv().await.agno_db()
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
    servers::urls_blocking(&[Backend::Redis, Backend::Valkey])
}

/// agno 2.9.0 writes A and B; we migrate A, agno 3.1.10 migrates B; agno reads both the
/// same. The migration indexed what agno 2.9.0 wrote: our listings find it.
fn v2_migrates_like_agno(url: &str) {
    let (Some(v2), Some(v3)) = (
        agno_python("AGNO_TEST_PYTHON_V2"),
        agno_python("AGNO_TEST_PYTHON_V3"),
    ) else {
        return;
    };
    let (a, b) = (Target::legacy(url, "v2a"), Target::legacy(url, "v2b"));
    agno_storage_testkit::interop::v2_migrates_like_agno(&v2, &v3, &a, &b);
    runtime().block_on(async {
        let db = a.open().await;
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
}

/// We write; agno 3.1.10 reads it back and would encode every record as we did.
fn agno_reads_what_we_write(url: &str) {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let target = Target::new(url, "ours");
    agno_storage_testkit::interop::agno_reads_what_we_write(
        &v3,
        &target,
        &FixtureReadBack::default(),
    );
    let differ = agno(&v3, "check-bytes", &target);
    assert_eq!(differ.trim(), "[]", "records agno would encode differently");
}

/// agno 3.1.10 writes into a prefix we stamped; we read it back by id at once, and list it
/// after indexing.
fn we_read_what_agno_writes(url: &str) {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let target = Target::new(url, "theirs");
    runtime().block_on(async { target.open().await });
    let m = agno_storage_testkit::interop::we_read_what_agno_writes(&v3, &target);
    assert_eq!(m.created_at, 1_710_000_100);
    runtime().block_on(async {
        let kv = target.kv().await;
        let db = kv.agno_db();
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
    let out: Value = serde_json::from_str(&agno(&v3, "jobs-enqueue", &target)).unwrap();
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
    let differ = agno(&v3, "check-bytes", &target);
    assert_eq!(differ.trim(), "[]", "tickets agno would encode differently");
    let worked: Value = serde_json::from_str(&agno(&v3, "jobs-work", &target)).unwrap();
    assert_eq!(worked["id"], "rs-j1", "{worked}");
    let listed: Value = serde_json::from_str(&agno(&v3, "jobs-dump", &target)).unwrap();
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
    let listed: Value = serde_json::from_str(&agno(&v3, "jobs-dump", &target)).unwrap();
    assert_eq!(listed, json!([]));
}

#[test]
fn job_queue_is_shared_with_agno() {
    for url in servers() {
        queue_is_shared(&url);
    }
}

/// The shared queue scenario, with per-session order through agno's session sets.
#[test]
fn job_queue_and_session_order_are_shared_with_agno() {
    let Some(v3) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    for url in servers() {
        let target = Target::new(&url, "session-order");
        let rt = runtime();
        let db = rt.block_on(async { target.open().await });
        agno_storage_testkit::interop::job_queue_is_shared(&v3, &target, &rt, &db);
    }
}
