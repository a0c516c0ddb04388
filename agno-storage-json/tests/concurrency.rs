//! No lost updates: 8 concurrent writers (each with its own handle, so nothing in-process
//! serializes them) upsert into one directory or one in-memory store, and 2 processes
//! write into one directory at once. Every record must survive, and run indexes assigned
//! under contention must be distinct.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use agno_storage_core::{MemoryQuery, RunQuery, RunRecord, Session, SessionType, UserMemory};
use agno_storage_json::object_store::memory::InMemory;
use agno_storage_json::object_store::ObjectStore;
use agno_storage_json::JsonDb;
use serde_json::json;

const WRITERS: usize = 8;
const EACH: usize = 25;
const SESSION: &str = "shared-session";

/// Child-process mode: the directory to write into and this writer's name.
const CHILD_DIR: &str = "AGNO_JSON_CONCURRENCY_CHILD_DIR";
const CHILD_NAME: &str = "AGNO_JSON_CONCURRENCY_CHILD_NAME";

async fn write_batch(db: JsonDb, writer: String) {
    let db = db.agno_db();
    for i in 0..EACH {
        let memory = UserMemory::new(
            format!("{writer}-m{i}"),
            Some("alice".into()),
            format!("fact {i} from {writer}"),
        );
        db.memories()
            .unwrap()
            .upsert_memory(memory)
            .await
            .expect("upsert a memory");
        let run = RunRecord::from_run_data(
            SESSION,
            Some("alice".into()),
            json!({"run_id": format!("{writer}-r{i}"), "agent_id": "a", "status": "COMPLETED"}),
        )
        .unwrap();
        db.runs()
            .unwrap()
            .upsert_run(run)
            .await
            .expect("append a run");
    }
}

async fn seed_session(db: &JsonDb) {
    let s = Session::new(SESSION, SessionType::Agent, "a").with_user("alice");
    db.agno_db()
        .sessions()
        .unwrap()
        .upsert_session(s)
        .await
        .unwrap();
}

/// Checks that `writers × EACH` memories and runs are stored, with distinct run indexes.
async fn check_nothing_lost(db: &JsonDb, writers: usize) {
    let db = db.agno_db();
    let memories = db
        .memories()
        .unwrap()
        .get_memories(MemoryQuery::default())
        .await
        .unwrap();
    assert_eq!(memories.total, (writers * EACH) as u64, "memories kept");
    let runs = db
        .runs()
        .unwrap()
        .get_runs(RunQuery {
            session_id: Some(SESSION.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(runs.total, (writers * EACH) as u64, "runs kept");
    let mut indexes: Vec<i64> = runs.items.iter().filter_map(|r| r.run_index).collect();
    indexes.sort_unstable();
    assert_eq!(
        indexes,
        (0..(writers * EACH) as i64).collect::<Vec<_>>(),
        "run indexes are 0..n, each once"
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn eight_writers_into_one_directory() {
    let dir = common::scratch_dir("concurrent_local");
    runtime().block_on(async {
        seed_session(&JsonDb::open_local(&dir).await.unwrap()).await;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let db = JsonDb::open_local(&dir).await.unwrap();
            tasks.push(tokio::spawn(write_batch(db, format!("w{w}"))));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
        check_nothing_lost(&JsonDb::open_local(&dir).await.unwrap(), WRITERS).await;
    });
}

#[test]
fn eight_writers_into_one_object_store() {
    runtime().block_on(async {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let open = || JsonDb::open_store(store.clone(), "agno/", "json-memory", false);
        seed_session(&open().await.unwrap()).await;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let db = open().await.unwrap();
            tasks.push(tokio::spawn(write_batch(db, format!("w{w}"))));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
        check_nothing_lost(&open().await.unwrap(), WRITERS).await;
    });
}

/// Runs as a child process writing one batch (does nothing in a normal test run).
#[test]
fn child_writer() {
    let (Some(dir), Ok(name)) = (std::env::var_os(CHILD_DIR), std::env::var(CHILD_NAME)) else {
        return;
    };
    runtime().block_on(async {
        let mut tasks = Vec::new();
        for w in 0..WRITERS / 2 {
            let db = JsonDb::open_local(Path::new(&dir)).await.unwrap();
            tasks.push(tokio::spawn(write_batch(db, format!("{name}-w{w}"))));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
    });
}

#[test]
fn two_processes_into_one_directory() {
    let dir = common::scratch_dir("concurrent_processes");
    runtime().block_on(async { seed_session(&JsonDb::open_local(&dir).await.unwrap()).await });
    let exe = std::env::current_exe().expect("the test binary");
    let children: Vec<_> = ["p1", "p2"]
        .iter()
        .map(|name| {
            Command::new(&exe)
                .args(["--exact", "child_writer", "--nocapture", "--test-threads=1"])
                .env(CHILD_DIR, &dir)
                .env(CHILD_NAME, name)
                .spawn()
                .expect("spawn a writer process")
        })
        .collect();
    for mut child in children {
        assert!(child.wait().expect("writer process").success());
    }
    runtime().block_on(async {
        check_nothing_lost(&JsonDb::open_local(&dir).await.unwrap(), WRITERS).await;
    });
}

/// 8 handles on one prefix of a bucket: every write is a conditional put on the version it
/// read, so lost races are retried and nothing is lost.
#[cfg(any(feature = "gcs", feature = "s3"))]
fn eight_writers_into_bucket(store: Arc<dyn ObjectStore>, backend: &'static str) {
    let prefix = format!("{}/", common::scratch_name("concurrency"));
    runtime().block_on(async {
        let open = || JsonDb::open_store(store.clone(), &prefix, backend, true);
        seed_session(&open().await.unwrap()).await;
        let mut tasks = Vec::new();
        for w in 0..WRITERS {
            let db = open().await.unwrap();
            tasks.push(tokio::spawn(write_batch(db, format!("w{w}"))));
        }
        for t in tasks {
            t.await.expect("writer task");
        }
        check_nothing_lost(&open().await.unwrap(), WRITERS).await;
    });
}

#[cfg(feature = "gcs")]
#[test]
fn eight_writers_into_gcs() {
    if let Some(store) = common::gcs_store() {
        eight_writers_into_bucket(store, "gcs-json");
    }
}

#[cfg(feature = "s3")]
#[test]
fn eight_writers_into_s3() {
    if let Some(store) = common::s3_store() {
        eight_writers_into_bucket(store, "s3-json");
    }
}
