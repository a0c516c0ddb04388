//! Run events on Redis and Valkey in agno 3.1.10's layout: indices, tails from an offset,
//! the writer-generation fence, terminal sentinels, a retry's reset; and agno's own
//! `RedisEventStream` tailing what we publish and the other way round, and its
//! `RedisRunCancellationManager`'s flags read by ours (`AGNO_TEST_PYTHON_V3`). Skipped with a note when a server or the venv is not set,
//! failing under `CI=true`.

use std::process::Command;
use std::time::Duration;

use agno_storage_core::run_events::{
    format_sse, EventTail, RunCancellations, RunEvents, StreamStatus,
};
use agno_storage_redis_events::Coordination;
use agno_storage_testkit::interop::{agno_python, runtime};
use agno_storage_testkit::servers::{self, run_stem, Backend};
use serde_json::{json, Value};

fn servers() -> Vec<String> {
    servers::urls_blocking(&[Backend::Redis, Backend::Valkey])
}

async fn drain(tail: &mut Box<dyn EventTail>) -> Vec<(i64, Value)> {
    let mut out = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(20), tail.next())
        .await
        .expect("the tail ends at the terminal status")
    {
        let event = event.expect("an event");
        out.push((event.index, event.data().expect("agno's SSE form")));
    }
    out
}

#[test]
fn events_are_indexed_fenced_and_tailed_from_an_offset() {
    for url in servers() {
        runtime().block_on(async {
            let prefix = run_stem();
            let events = Coordination::new(&url, &prefix).unwrap();
            let run = "run-1";
            events.begin_attempt(run, 1).await.unwrap();
            assert!(events
                .set_run_status(run, StreamStatus::Running, Some(1))
                .await
                .unwrap());
            for i in 0..3 {
                let index = events
                    .add_event(run, &json!({"event": "RunContent", "content": i}), Some(1))
                    .await
                    .unwrap();
                assert_eq!(index, Some(i));
            }
            // A live tail from index 0 gets 1 and 2 now, and 3 once it is published.
            let mut tail = events.tail(run, Some(0)).await.unwrap();
            let first = tail.next().await.unwrap().unwrap();
            assert_eq!(first.index, 1);
            assert_eq!(
                first.sse,
                format!("event: RunContent\ndata: {{\"event\":\"RunContent\",\"content\":1,\"event_index\":1,\"run_id\":\"{run}\"}}\n\n")
            );
            assert_eq!(tail.next().await.unwrap().unwrap().index, 2);
            let publisher = Coordination::new(&url, &prefix).unwrap();
            let later = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                publisher
                    .add_event("run-1", &json!({"event": "RunContent", "content": 3}), Some(1))
                    .await
                    .unwrap()
            });
            assert_eq!(tail.next().await.unwrap().unwrap().index, 3);
            assert_eq!(later.await.unwrap(), Some(3));

            // A retry: attempt 2 takes over; attempt 1 is fenced out; the events of
            // attempt 1 go, the indices go on.
            events.begin_attempt(run, 2).await.unwrap();
            assert!(events.reset_run_events(run, Some(2)).await.unwrap());
            assert_eq!(
                events.add_event(run, &json!({"event": "stale"}), Some(1)).await.unwrap(),
                None
            );
            assert!(!events.complete_run(run, StreamStatus::Error, Some(1)).await.unwrap());
            assert_eq!(
                events
                    .add_event(run, &json!({"event": "RunContent", "content": "retry"}), Some(2))
                    .await
                    .unwrap(),
                Some(4),
                "a refused event takes no index (agno's fence runs before its INCR)"
            );
            assert!(events.complete_run(run, StreamStatus::Completed, Some(2)).await.unwrap());
            assert_eq!(
                events.get_run_status(run).await.unwrap(),
                Some(StreamStatus::Completed)
            );
            let seen = drain(&mut events.tail(run, None).await.unwrap()).await;
            assert_eq!(seen.len(), 1, "{seen:?}");
            assert_eq!((seen[0].0, &seen[0].1["content"]), (4, &json!("retry")));
            // The live tail from before the retry ends too.
            assert_eq!(drain(&mut tail).await.len(), 1);

            let bad = events.add_event(run, &json!("text"), None).await.unwrap_err();
            assert_eq!(bad.kind(), agno_storage_core::ErrorKind::InvalidInput);
            events.cleanup_run(run).await.unwrap();
            assert_eq!(events.get_run_status(run).await.unwrap(), None);
        });
    }
}

/// A producer keeps its quiet runs alive (`keep_alive` renews a running run's keys, not a
/// finished one's); a tail of a running run whose producer stopped renewing ends.
#[test]
fn quiet_runs_are_kept_alive_and_dead_producers_end_tails() {
    for url in servers() {
        runtime().block_on(async {
            let prefix = run_stem();
            let events = Coordination::new(&url, &prefix)
                .unwrap()
                .with_tail_block(Duration::from_millis(200));
            let mut conn = redis::Client::open(url.as_str())
                .unwrap()
                .get_connection_manager()
                .await
                .unwrap();
            let status_key = |run: &str| format!("{prefix}:os:events:{run}:status");
            let reader = conn.clone();
            let ttl = |key: String| {
                let mut conn = reader.clone();
                async move {
                    redis::cmd("TTL")
                        .arg(key)
                        .query_async::<i64>(&mut conn)
                        .await
                        .unwrap()
                }
            };
            for (run, status) in [
                ("quiet", StreamStatus::Running),
                ("done", StreamStatus::Completed),
            ] {
                events.begin_attempt(run, 1).await.unwrap();
                events.set_run_status(run, status, Some(1)).await.unwrap();
                redis::cmd("EXPIRE")
                    .arg(status_key(run))
                    .arg(100)
                    .query_async::<i64>(&mut conn)
                    .await
                    .unwrap();
            }
            // Nothing refreshed yet: the quiet run looks dead to a tail.
            let mut tail = events.tail("quiet", None).await.unwrap();
            let ended = tokio::time::timeout(Duration::from_secs(5), tail.next()).await;
            assert!(
                matches!(ended, Ok(None)),
                "the tail of a dead producer's run ends"
            );

            let ids = ["quiet".to_owned(), "done".to_owned()];
            events.keep_alive(&ids).await.unwrap();
            assert!(
                ttl(status_key("quiet")).await > 1_700,
                "a running run's keys renewed"
            );
            assert!(
                ttl(status_key("done")).await <= 100,
                "a finished run's keys left to expire"
            );
            // Alive again: a tail waits for the run instead of ending.
            let mut tail = events.tail("quiet", None).await.unwrap();
            let waited = tokio::time::timeout(Duration::from_millis(800), tail.next()).await;
            assert!(waited.is_err(), "a tail of a live quiet run keeps waiting");
        });
    }
}

fn agno_events(python: &str, args: &[&str]) -> Value {
    let driver = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../interop/agno_events_driver.py"
    );
    let out = Command::new(python)
        .arg(driver)
        .args(args)
        .output()
        .expect("run the agno events driver");
    assert!(
        out.status.success(),
        "agno events driver {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the driver prints JSON")
}

#[test]
fn agno_tails_our_events_and_we_tail_agnos() {
    let Some(python) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    for url in servers() {
        runtime().block_on(async {
            let prefix = run_stem();
            let agno_prefix = format!("{prefix}:os:events:");
            let events = Coordination::new(&url, &prefix).unwrap();

            // Ours, tailed by agno from index 0.
            events.begin_attempt("rs-run", 1).await.unwrap();
            events
                .set_run_status("rs-run", StreamStatus::Running, Some(1))
                .await
                .unwrap();
            for i in 0..3 {
                events
                    .add_event(
                        "rs-run",
                        &json!({"event": "RunContent", "content": format!("rs-{i}")}),
                        Some(1),
                    )
                    .await
                    .unwrap();
            }
            events
                .complete_run("rs-run", StreamStatus::Completed, Some(1))
                .await
                .unwrap();
            let tailed = agno_events(&python, &["tail", &url, &agno_prefix, "rs-run", "0"]);
            let ours: Vec<(i64, String)> = {
                let mut tail = events.tail("rs-run", Some(0)).await.unwrap();
                let mut v = Vec::new();
                while let Some(e) = tail.next().await {
                    let e = e.unwrap();
                    v.push((e.index, e.sse));
                }
                v
            };
            assert_eq!(tailed, json!(ours), "agno reads our stream as we do");
            assert_eq!(ours.len(), 2);

            // agno's, tailed by us.
            let indices = agno_events(&python, &["publish", &url, &agno_prefix, "py-run"]);
            assert_eq!(indices, json!([0, 1, 2]));
            assert_eq!(
                events.get_run_status("py-run").await.unwrap(),
                Some(StreamStatus::Completed)
            );
            let seen = drain(&mut events.tail("py-run", None).await.unwrap()).await;
            let contents: Vec<&Value> = seen.iter().map(|(_, e)| &e["content"]).collect();
            assert_eq!(contents, [&json!("py-0"), &json!("py-1"), &json!("py-2")]);
            assert_eq!(seen[2].1["event"], "RunContent");
            assert_eq!(seen[2].1["event_index"], 2);
            // Our SSE text of agno's event is agno's, byte for byte.
            let mut tail = events.tail("py-run", None).await.unwrap();
            while let Some(event) = tail.next().await {
                let event = event.unwrap();
                let mut data = event.data().unwrap();
                let data = data.as_object_mut().unwrap();
                data.shift_remove("event_index");
                assert_eq!(format_sse("py-run", data, event.index), event.sse);
            }
            // agno's cancellation flag is ours.
            agno_events(
                &python,
                &[
                    "cancel",
                    &url,
                    &format!("{prefix}:run:cancellation:"),
                    "py-run",
                ],
            );
            let ids = ["py-run".to_owned(), "rs-run".to_owned()];
            assert_eq!(
                RunCancellations::cancelled(&events, &ids).await.unwrap(),
                ["py-run"]
            );
            // agno refuses our stale writer too: its generation is recorded.
            assert_eq!(
                events
                    .add_event("py-run", &json!({"event": "late"}), Some(0))
                    .await
                    .unwrap(),
                None
            );
        });
    }
}

/// `reopen_run` on agno's layout both ways: agno reopens a run we paused (and seeds its
/// counter from a floor after the keys expired), and agno's tail reads a run we paused and
/// reopened through both legs, skipping our reopen marker as its own.
#[test]
fn agno_and_we_reopen_each_others_paused_runs() {
    let Some(python) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    for url in servers() {
        runtime().block_on(async {
            let prefix = run_stem();
            let agno_prefix = format!("{prefix}:os:events:");
            let events = Coordination::new(&url, &prefix).unwrap();
            let leg = |run: &'static str, content: &'static str| {
                let events = &events;
                async move {
                    events.begin_attempt(run, 1).await.unwrap();
                    events
                        .set_run_status(run, StreamStatus::Running, Some(1))
                        .await
                        .unwrap();
                    events
                        .add_event(
                            run,
                            &json!({"event": "RunContent", "content": content}),
                            Some(1),
                        )
                        .await
                        .unwrap();
                }
            };

            // Paused by us, reopened by agno: pending, and our tail stays open.
            leg("paused-run", "leg-1").await;
            events
                .complete_run("paused-run", StreamStatus::Paused, Some(1))
                .await
                .unwrap();
            let reopened = agno_events(&python, &["reopen", &url, &agno_prefix, "paused-run"]);
            assert_eq!(reopened, json!(true));
            assert_eq!(
                events.get_run_status("paused-run").await.unwrap(),
                Some(StreamStatus::Pending)
            );
            // Refused by agno once the run is past the pause.
            events
                .complete_run("paused-run", StreamStatus::Completed, Some(1))
                .await
                .unwrap();
            let refused = agno_events(&python, &["reopen", &url, &agno_prefix, "paused-run"]);
            assert_eq!(refused, json!(false));

            // Paused and reopened by us, tailed by agno through both legs.
            leg("our-run", "leg-1").await;
            events
                .complete_run("our-run", StreamStatus::Paused, Some(1))
                .await
                .unwrap();
            assert!(events.reopen_run("our-run", false, None).await.unwrap());
            leg("our-run", "leg-2").await;
            events
                .complete_run("our-run", StreamStatus::Completed, Some(1))
                .await
                .unwrap();
            let tailed = agno_events(&python, &["tail", &url, &agno_prefix, "our-run"]);
            let contents: Vec<String> = tailed
                .as_array()
                .unwrap()
                .iter()
                .map(|pair| pair[1].as_str().unwrap().to_owned())
                .collect();
            assert_eq!(contents.len(), 2, "{tailed}");
            assert!(
                contents[0].contains("leg-1") && contents[1].contains("leg-2"),
                "{tailed}"
            );
            let ours = drain(&mut events.tail("our-run", None).await.unwrap()).await;
            assert_eq!(ours.len(), 2);

            // A run agno forgot (expired keys), reopened by agno with a floor: our next
            // event comes after it.
            let seeded = agno_events(&python, &["reopen", &url, &agno_prefix, "gone-run", "41"]);
            assert_eq!(seeded, json!(true));
            let next = events
                .add_event("gone-run", &json!({"event": "RunContent"}), None)
                .await
                .unwrap();
            assert_eq!(next, Some(42));
        });
    }
}
