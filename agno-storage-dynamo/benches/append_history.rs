//! Append cost against table size, and the read capacity of session-scoped reads.
//!
//! ```sh
//! AGNO_TEST_DYNAMODB_URL=http://127.0.0.1:58000 cargo bench -p agno-storage-dynamo --features dynamodb
//! ```
//!
//! Two fresh sets of tables: one empty, one holding `BENCH_HISTORY` runs (2,000 by default)
//! spread over other sessions. In each, one new session gets `BENCH_APPENDS` runs (50) appended
//! one call at a time; then the session is read back (`get_session` with its runs, and
//! `get_runs(session_id)`). Every Scan, Query and GetItem asks DynamoDB for its consumed
//! capacity (`ReturnConsumedCapacity=TOTAL`, set by an SDK interceptor, so the store's own
//! requests are measured as they are), and the read capacity units are summed per phase.
//! Flat means the "history / empty" ratios stay near 1.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agno_storage_core::{
    now_epoch_seconds, RunQuery, RunRecord, Session, SessionRead, SessionType,
};
use agno_storage_dynamo::aws_sdk_dynamodb::config::interceptors::{
    AfterDeserializationInterceptorContextRef, BeforeSerializationInterceptorContextMut,
};
use agno_storage_dynamo::aws_sdk_dynamodb::config::{
    BehaviorVersion, ConfigBag, Credentials, Intercept, Region, RuntimeComponents,
};
use agno_storage_dynamo::aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use agno_storage_dynamo::aws_sdk_dynamodb::operation::query::{QueryInput, QueryOutput};
use agno_storage_dynamo::aws_sdk_dynamodb::operation::scan::{ScanInput, ScanOutput};
use agno_storage_dynamo::aws_sdk_dynamodb::types::{ConsumedCapacity, ReturnConsumedCapacity};
use agno_storage_dynamo::aws_sdk_dynamodb::Client;
use agno_storage_dynamo::{DynamoDb, TableNames};
use serde_json::json;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Read capacity (in thousandths of a unit) and read requests, summed over the requests the
/// client sends.
#[derive(Debug, Default)]
struct Meter {
    milli_rcu: AtomicU64,
    reads: AtomicU64,
}

impl Meter {
    fn take(&self) -> (f64, u64) {
        (
            self.milli_rcu.swap(0, Ordering::SeqCst) as f64 / 1000.0,
            self.reads.swap(0, Ordering::SeqCst),
        )
    }

    fn add(&self, c: Option<&ConsumedCapacity>) {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let units = c
            .and_then(|c| c.read_capacity_units().or(c.capacity_units()))
            .unwrap_or(0.0);
        self.milli_rcu
            .fetch_add((units * 1000.0).round() as u64, Ordering::SeqCst);
    }
}

#[derive(Debug)]
struct CapacityInterceptor(Arc<Meter>);

impl Intercept for CapacityInterceptor {
    fn name(&self) -> &'static str {
        "CapacityInterceptor"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let input = context.input_mut();
        let total = Some(ReturnConsumedCapacity::Total);
        if let Some(i) = input.downcast_mut::<ScanInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<QueryInput>() {
            i.return_consumed_capacity = total;
        } else if let Some(i) = input.downcast_mut::<GetItemInput>() {
            i.return_consumed_capacity = total;
        }
        Ok(())
    }

    fn read_after_deserialization(
        &self,
        context: &AfterDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        _: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Ok(output) = context.output_or_error() else {
            return Ok(());
        };
        if let Some(o) = output.downcast_ref::<ScanOutput>() {
            self.0.add(o.consumed_capacity());
        } else if let Some(o) = output.downcast_ref::<QueryOutput>() {
            self.0.add(o.consumed_capacity());
        } else if let Some(o) = output.downcast_ref::<GetItemOutput>() {
            self.0.add(o.consumed_capacity());
        }
        Ok(())
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run(session: &str, id: &str, i: usize) -> RunRecord {
    let data = json!({
        "run_id": id, "agent_id": "bench-agent", "session_id": session, "user_id": "bench",
        "status": "COMPLETED", "created_at": now_epoch_seconds(),
        "content": format!("answer {i}: {}", "lorem ipsum dolor sit amet ".repeat(30)),
        "messages": [{"role": "user", "content": "question"}, {"role": "assistant", "content": "answer"}],
    });
    RunRecord::from_run_data(session, Some("bench".into()), data).expect("a run row")
}

/// One phase's figures.
#[derive(Debug, Clone, Copy)]
struct Figures {
    append: Duration,
    append_rcu: f64,
    append_reads: u64,
    read_session_rcu: f64,
    get_runs_rcu: f64,
    read_session: Duration,
}

async fn phase(
    client: &Client,
    meter: &Meter,
    prefix: &str,
    history: usize,
    appends: usize,
) -> Figures {
    let store = DynamoDb::open(client.clone(), TableNames::with_prefix(prefix))
        .await
        .expect("open");
    let db = store.agno_db();
    let (sessions, runs) = (db.sessions().expect("sessions"), db.runs().expect("runs"));
    // History: other sessions, runs written with explicit indexes (no counter involved).
    let per_session = 50;
    let mut tasks = tokio::task::JoinSet::new();
    for chunk in 0..history.div_ceil(per_session) {
        let db = db.clone();
        let n = per_session.min(history - chunk * per_session);
        tasks.spawn(async move {
            let sid = format!("hist-{chunk}");
            let s = Session::new(&sid, SessionType::Agent, "bench-agent").with_user("bench");
            db.sessions()
                .expect("sessions")
                .upsert_session(s)
                .await
                .expect("session");
            for i in 0..n {
                let mut r = run(&sid, &format!("{sid}-r{i}"), i);
                r.run_index = Some(i as i64);
                db.runs()
                    .expect("runs")
                    .upsert_run(r)
                    .await
                    .expect("history run");
            }
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
    let s = Session::new("target", SessionType::Agent, "bench-agent").with_user("bench");
    sessions.upsert_session(s).await.expect("target session");
    meter.take();
    let start = Instant::now();
    for i in 0..appends {
        let written = runs
            .upsert_run(run("target", &format!("target-r{i}"), i))
            .await
            .expect("append");
        assert_eq!(written.run_index, Some(i as i64), "gap-free run_index");
    }
    let append = start.elapsed();
    let (append_rcu, append_reads) = meter.take();
    let start = Instant::now();
    let read = sessions
        .get_session("target", SessionRead::for_user("bench"))
        .await
        .expect("read")
        .expect("target session");
    let read_session = start.elapsed();
    assert_eq!(read.runs.map(|r| r.len()), Some(appends));
    let (read_session_rcu, _) = meter.take();
    let page = runs
        .get_runs(RunQuery {
            session_id: Some("target".into()),
            ..Default::default()
        })
        .await
        .expect("get_runs");
    assert_eq!(page.items.len(), appends);
    let (get_runs_rcu, _) = meter.take();
    drop_tables(client, prefix).await;
    Figures {
        append,
        append_rcu,
        append_reads,
        read_session_rcu,
        get_runs_rcu,
        read_session,
    }
}

async fn drop_tables(client: &Client, prefix: &str) {
    let mut start = None;
    loop {
        let out = client
            .list_tables()
            .set_exclusive_start_table_name(start.take())
            .send()
            .await
            .expect("list tables");
        for name in out.table_names().iter().filter(|n| n.starts_with(prefix)) {
            client
                .delete_table()
                .table_name(name)
                .send()
                .await
                .expect("drop");
        }
        match out.last_evaluated_table_name() {
            Some(n) => start = Some(n.to_owned()),
            None => break,
        }
    }
}

fn main() {
    let Ok(url) = std::env::var("AGNO_TEST_DYNAMODB_URL") else {
        eprintln!("note: AGNO_TEST_DYNAMODB_URL is not set; nothing to measure");
        return;
    };
    let history = env_usize("BENCH_HISTORY", 2000);
    let appends = env_usize("BENCH_APPENDS", 50);
    let meter = Arc::new(Meter::default());
    let conf = agno_storage_dynamo::aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new("test", "test", None, None, "bench"))
        .interceptor(CapacityInterceptor(meter.clone()))
        .build();
    let client = Client::from_conf(conf);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let tag = |what: &str| {
        format!(
            "agno_bench_{}_{}_{what}_",
            now_epoch_seconds(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        )
    };
    let empty = rt.block_on(phase(&client, &meter, &tag("empty"), 0, appends));
    let full = rt.block_on(phase(&client, &meter, &tag("hist"), history, appends));
    let per = |d: Duration| d.as_secs_f64() * 1000.0 / appends as f64;
    println!("appends per phase: {appends}; history: {history} runs in other sessions");
    println!("| figure | empty table | {history} runs | ratio |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| append, ms per run | {:.2} | {:.2} | {:.2}x |",
        per(empty.append),
        per(full.append),
        per(full.append) / per(empty.append)
    );
    println!(
        "| append, read capacity units per run | {:.2} | {:.2} | {:.2}x |",
        empty.append_rcu / appends as f64,
        full.append_rcu / appends as f64,
        full.append_rcu / empty.append_rcu.max(1e-9)
    );
    println!(
        "| append, read requests per run | {:.2} | {:.2} | |",
        empty.append_reads as f64 / appends as f64,
        full.append_reads as f64 / appends as f64
    );
    println!(
        "| get_session with runs, RCU | {:.1} | {:.1} | {:.2}x |",
        empty.read_session_rcu,
        full.read_session_rcu,
        full.read_session_rcu / empty.read_session_rcu.max(1e-9)
    );
    println!(
        "| get_session with runs, ms | {:.1} | {:.1} | {:.2}x |",
        empty.read_session.as_secs_f64() * 1000.0,
        full.read_session.as_secs_f64() * 1000.0,
        full.read_session.as_secs_f64() / empty.read_session.as_secs_f64()
    );
    println!(
        "| get_runs(session_id), RCU | {:.1} | {:.1} | {:.2}x |",
        empty.get_runs_rcu,
        full.get_runs_rcu,
        full.get_runs_rcu / empty.get_runs_rcu.max(1e-9)
    );
}
