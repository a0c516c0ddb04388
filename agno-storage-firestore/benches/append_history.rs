//! Append cost against a session's history.
//!
//! ```sh
//! FIRESTORE_EMULATOR_HOST=127.0.0.1:58080 cargo bench -p agno-storage-firestore --features firestore
//! ```
//!
//! One fresh emulator project per phase. In the first, a new session gets `BENCH_APPENDS`
//! runs (50) appended one call at a time; in the second, the same appends go to a session
//! that already holds `BENCH_HISTORY` runs (2,000; written with explicit indexes first).
//! A store that reads the session's runs on every append slows down with the history;
//! flat means the "history / empty" ratio stays near 1. The first append is shown apart:
//! it seeds the session's run counter (one read of its runs) when none exists yet.

use std::time::{Duration, Instant};

use agno_storage_core::{RunRecord, RunStore, Session, SessionStore, SessionType};
use agno_storage_doc::Docs;
use agno_storage_firestore::{FirestoreDb, FirestoreOptions};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(session: &str, id: &str, i: usize) -> RunRecord {
    let data = json!({
        "run_id": id, "agent_id": "bench-agent", "session_id": session, "user_id": "bench",
        "status": "COMPLETED", "created_at": 1_700_000_000 + i,
        "content": format!("answer {i}: {}", "lorem ipsum dolor sit amet ".repeat(30)),
        "messages": [{"role": "user", "content": "question"}, {"role": "assistant", "content": "answer"}],
    });
    RunRecord::from_run_data(session, Some("bench".into()), data).expect("a run row")
}

/// Appends `appends` runs to a session holding `history` runs: the time of the first append
/// (which may seed a run counter) and of the others.
async fn phase(history: usize, appends: usize) -> (Duration, Duration) {
    let project = format!(
        "agno-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let db = Docs(
        FirestoreDb::connect(&project, FirestoreOptions::default())
            .await
            .expect("connect"),
    );
    let s = Session::new("target", SessionType::Agent, "bench-agent").with_user("bench");
    db.upsert_session(s).await.expect("session");
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..history {
        let db = db.clone();
        tasks.spawn(async move {
            let mut r = run("target", &format!("hist-{i}"), i);
            r.run_index = Some(i as i64);
            db.upsert_run(r).await.expect("history run");
        });
        while tasks.len() >= 8 {
            tasks
                .join_next()
                .await
                .expect("task")
                .expect("history writer");
        }
    }
    while let Some(t) = tasks.join_next().await {
        t.expect("history writer");
    }
    let mut first = Duration::ZERO;
    let start = Instant::now();
    for i in 0..appends {
        let written = db
            .upsert_run(run("target", &format!("new-{i}"), history + i))
            .await
            .expect("append");
        assert_eq!(
            written.run_index,
            Some((history + i) as i64),
            "gap-free run_index"
        );
        if i == 0 {
            first = start.elapsed();
        }
    }
    (first, start.elapsed() - first)
}

fn main() {
    if std::env::var("FIRESTORE_EMULATOR_HOST").is_err() {
        eprintln!("note: FIRESTORE_EMULATOR_HOST is not set; nothing to measure");
        return;
    }
    let history = env_usize("BENCH_HISTORY", 2000);
    let appends = env_usize("BENCH_APPENDS", 50);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let empty = rt.block_on(phase(0, appends));
    let full = rt.block_on(phase(history, appends));
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let rest = (appends.max(2) - 1) as f64;
    println!("appends per phase: {appends}");
    println!("| figure | new session | session with {history} runs | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| first append, ms | {:.2} | {:.2} | {:.2}x |",
        ms(empty.0),
        ms(full.0),
        ms(full.0) / ms(empty.0)
    );
    println!(
        "| later appends, ms per run | {:.2} | {:.2} | {:.2}x |",
        ms(empty.1) / rest,
        ms(full.1) / rest,
        ms(full.1) / ms(empty.1)
    );
}
