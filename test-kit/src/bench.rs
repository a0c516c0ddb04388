//! The append-runs workload, shared by every backend's on-demand benchmark.
//!
//! [`append_runs`] creates one session, appends N runs of ~2 KB one call at a time
//! (`RunStore::upsert_run`, the run payload of [`run_data`], the same shape as
//! `agno-storage-sql/benches/append_runs.rs`), records each append's latency, then reads the
//! session back with its runs. [`agno_append_runs`] runs the same workload through agno
//! 3.1.10 (`interop/bench_agno.py` in the venv named by `AGNO_TEST_PYTHON_V3`), so a bench
//! prints both side by side with [`print_figures`] and [`print_comparison`].
//!
//! Flatness is the median of the last 10 appends over the median of the first 10
//! ([`AppendFigures::flatness`]): near 1 when an append costs the same however long the
//! session's history is, growing with N when every append rewrites or scans the history.
//!
//! ```no_run
//! use agno_storage_doc::InMemoryDb;
//! use agno_storage_testkit::bench;
//!
//! # async fn example() -> agno_storage_core::Result<()> {
//! for n in bench::sizes("10,1000") {
//!     let ours = bench::append_runs(&InMemoryDb::new().agno_db(), n).await?;
//!     bench::print_figures("memory ours", &ours);
//! }
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use agno_storage_core::SessionType;
use agno_storage_core::{AgnoDb, Error, ErrorKind, Result, RunRecord, Session, SessionRead};
use serde_json::{json, Value};

/// The session every append goes to.
pub const SESSION_ID: &str = "bench";
/// The session's user.
pub const USER_ID: &str = "bench-user";
/// The session's agent.
pub const AGENT_ID: &str = "bench-agent";

/// What one append-runs pass measured. Times are in seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendFigures {
    /// Runs appended.
    pub n: usize,
    /// Wall time of all appends over `n`.
    pub wall_per_run: f64,
    /// Runs appended per second of wall time.
    pub runs_per_second: f64,
    /// Median latency of the first 10 appends (of all when fewer).
    pub first10: f64,
    /// Median latency of the last 10 appends.
    pub last10: f64,
    /// Reading the session back with its `n` runs.
    pub read: f64,
    /// Each append's latency, in order.
    pub laps: Vec<f64>,
}

impl AppendFigures {
    /// Last-10 over first-10 median append latency: ~1 when appending is flat in history
    /// length.
    pub fn flatness(&self) -> f64 {
        self.last10 / self.first10.max(1e-9)
    }

    /// Figures from per-append latencies, the total append wall time and the read time.
    pub fn from_laps(laps: &[f64], wall: f64, read: f64) -> Self {
        let n = laps.len();
        AppendFigures {
            n,
            wall_per_run: wall / n.max(1) as f64,
            runs_per_second: n as f64 / wall.max(1e-9),
            first10: median(&laps[..n.min(10)]),
            last10: median(&laps[n.saturating_sub(10)..]),
            read,
            laps: laps.to_vec(),
        }
    }

    /// The append latency that fraction `q` of the appends do not exceed (nearest rank;
    /// 0 without laps): `quantile(0.99)` is the p99.
    pub fn quantile(&self, q: f64) -> f64 {
        let mut v = self.laps.clone();
        v.sort_by(|a, b| a.total_cmp(b));
        let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len().max(1));
        v.get(rank - 1).copied().unwrap_or_default()
    }

    /// The median append of the last tenth over that of the first (0 with fewer than 10
    /// laps): flatness that a few slow appends among the first or last 10 do not swing.
    pub fn tenth_flatness(&self) -> f64 {
        match self.tenths().as_slice() {
            [first, .., last] if self.laps.len() >= 10 => last / first.max(1e-12),
            _ => 0.0,
        }
    }

    /// Median append latency in each tenth of the session's history (fewer parts when
    /// fewer than 10 laps): where along the history an append got slower.
    pub fn tenths(&self) -> Vec<f64> {
        let parts = self.laps.len().min(10);
        (0..parts)
            .map(|k| {
                let (a, b) = (
                    k * self.laps.len() / parts,
                    (k + 1) * self.laps.len() / parts,
                );
                median(&self.laps[a..b])
            })
            .collect()
    }
}

/// The upper median (`v[len / 2]` once sorted, as `bench_agno.py` takes it); 0 when empty.
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Run `i`'s `run_data`: ~2 KB of one string by default; with `BENCH_RUN=realistic`, agno's
/// own `RunOutput.to_dict()` of a travel-agent run (`interop/realistic_run.json`, ~9 KB:
/// eleven messages with tool calls and their metrics, tool executions, run metrics,
/// metadata and session state), the run `interop/bench_agno.py` writes with the same
/// setting.
pub fn run_data(i: usize) -> Value {
    if realistic() {
        let mut run = realistic_run().clone();
        run["run_id"] = json!(format!("run-{i}"));
        run["created_at"] = json!(1_700_000_000 + i as i64);
        return run;
    }
    json!({"run_id": format!("run-{i}"), "agent_id": AGENT_ID, "session_id": SESSION_ID, "user_id": USER_ID,
           "content": "x".repeat(2000), "content_type": "str", "status": "COMPLETED", "model": "gpt-4o",
           "model_provider": "OpenAI", "created_at": 1_700_000_000 + i as i64})
}

/// Whether `BENCH_RUN=realistic` asks for [`run_data`]'s realistic run.
pub fn realistic() -> bool {
    std::env::var("BENCH_RUN").is_ok_and(|v| v == "realistic")
}

fn realistic_run() -> &'static Value {
    static RUN: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    RUN.get_or_init(|| {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/realistic_run.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let mut run: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
        run["session_id"] = json!(SESSION_ID);
        run["user_id"] = json!(USER_ID);
        run["agent_id"] = json!(AGENT_ID);
        run
    })
}

/// The sizes to run: `BENCH_N` (comma-separated) if set, else `default`.
pub fn sizes(default: &str) -> Vec<usize> {
    std::env::var("BENCH_N")
        .unwrap_or_else(|_| default.to_owned())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

/// A fresh name for one bench's database, key prefix or directory:
/// `agno_ct_<epoch>_bench_<what>_<random>` (the suites' leftover sweep drops it after three
/// hours if the bench dies before cleaning up).
pub fn fresh_name(what: &str) -> String {
    format!(
        "{}{}_bench_{what}_{}",
        crate::servers::TEST_STEM,
        agno_storage_core::now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Reads of the bench session per sample, ours and agno's alike; the figure is their median.
const READS: usize = 5;

/// Creates the bench session in `db`, appends `n` runs one call at a time, then reads the
/// session back ([`READS`] times, the median counts). Fails if any call fails or the session does not come back with `n` runs.
///
/// The store assigns each `run_index`; with `BENCH_RUN_INDEX=given` the bench passes
/// `run_index = i` itself, as agno's callers do (and as the agno side of the bench always
/// does), so the two sides do the same work.
pub async fn append_runs(db: &AgnoDb, n: usize) -> Result<AppendFigures> {
    let given = std::env::var("BENCH_RUN_INDEX").is_ok_and(|v| v == "given");
    db.sessions()?
        .upsert_session(Session::new(SESSION_ID, SessionType::Agent, AGENT_ID).with_user(USER_ID))
        .await?;
    let runs = db.runs()?;
    let mut laps = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let mut run = RunRecord::from_run_data(SESSION_ID, Some(USER_ID.into()), run_data(i))?;
        if given {
            run.run_index = Some(i as i64);
        }
        let t = Instant::now();
        runs.upsert_run(run).await?;
        laps.push(t.elapsed().as_secs_f64());
    }
    // A realistic run takes a while to build; as on agno's side, only the writes count.
    let wall = if realistic() {
        laps.iter().sum()
    } else {
        start.elapsed().as_secs_f64()
    };
    let mut reads = Vec::with_capacity(READS);
    for _ in 0..READS {
        let t = Instant::now();
        let session = db
            .sessions()?
            .get_session(SESSION_ID, SessionRead::for_user(USER_ID))
            .await?;
        reads.push(t.elapsed().as_secs_f64());
        let got = session.and_then(|s| s.runs).map(|r| r.len());
        if got != Some(n) {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("the bench session came back with {got:?} runs, not {n}"),
            ));
        }
    }
    Ok(AppendFigures::from_laps(&laps, wall, median(&reads)))
}

/// `interop/bench_agno.py` of this workspace (`AGNO_BENCH_SCRIPT` overrides).
fn agno_script() -> PathBuf {
    std::env::var_os("AGNO_BENCH_SCRIPT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../interop/bench_agno.py")
        })
}

/// The same workload through agno 3.1.10: runs `interop/bench_agno.py TARGET N` with the
/// Python in `AGNO_TEST_PYTHON_V3` (`Ok(None)` when unset). Targets: `sqlite:PATH`,
/// `postgres:URL#SCHEMA`, `redis:URL#PREFIX`, `mongo:URL#DATABASE`, `json:DIR`, `memory:`
/// (see the script). Blocking: call it outside an async runtime.
pub fn agno_append_runs(target: &str, n: usize) -> Result<Option<AppendFigures>> {
    let Ok(python) = std::env::var("AGNO_TEST_PYTHON_V3") else {
        return Ok(None);
    };
    let failed = |what: String| Error::new(ErrorKind::Unexpected, what);
    let out = Command::new(python)
        .arg(agno_script())
        .arg(target)
        .arg(n.to_string())
        .output()
        .map_err(|e| failed(format!("starting bench_agno.py: {e}")))?;
    if !out.status.success() {
        return Err(failed(format!(
            "bench_agno.py {target} {n} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    // agno may log to stdout first; the figures are the last line.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| failed(format!("bench_agno.py printed no figures: {stdout}")))?;
    let field = |k: &str| {
        v[k].as_f64()
            .ok_or_else(|| failed(format!("bench_agno.py: no `{k}` in {v}")))
    };
    let wall_per_run = field("wall_per_run_s")?;
    Ok(Some(AppendFigures {
        n,
        wall_per_run,
        runs_per_second: 1.0 / wall_per_run.max(1e-12),
        first10: field("first10_s")?,
        last10: field("last10_s")?,
        read: field("read_s")?,
        laps: v["laps_s"]
            .as_array()
            .map(|laps| laps.iter().filter_map(Value::as_f64).collect())
            .unwrap_or_default(),
    }))
}

/// One line of figures: wall per run, runs/s, first-10 and last-10 medians, flatness, read;
/// with `BENCH_LAPS` set, a second line of [`AppendFigures::tenths`].
pub fn print_figures(label: &str, f: &AppendFigures) {
    println!(
        "{label:<24} N={:<6} wall/run {:>9.1} µs  {:>8.0} runs/s  first10 {:>8.1} µs  last10 {:>8.1} µs  last/first {:>5.2}  read {:>9.2} ms",
        f.n,
        f.wall_per_run * 1e6,
        f.runs_per_second,
        f.first10 * 1e6,
        f.last10 * 1e6,
        f.flatness(),
        f.read * 1e3
    );
    if !f.laps.is_empty() {
        println!(
            "    append p50 {:.1} µs, p99 {:.1} µs, p99/p50 {:.2}, last/first tenth {:.2}",
            f.quantile(0.5) * 1e6,
            f.quantile(0.99) * 1e6,
            f.quantile(0.99) / f.quantile(0.5).max(1e-12),
            f.tenth_flatness()
        );
    }
    if std::env::var_os("BENCH_LAPS").is_some() && !f.laps.is_empty() {
        let tenths: Vec<String> = f
            .tenths()
            .iter()
            .map(|t| format!("{:.0}", t * 1e6))
            .collect();
        println!("    median append per tenth of N, µs: {}", tenths.join(" "));
    }
}

/// The ratios of ours against agno's, one indented line, then a Markdown table row
/// (`| backend | N | ours last/first | agno last/first | ours/agno runs/s | agno/ours read |`).
pub fn print_comparison(backend: &str, ours: &AppendFigures, agno: Option<&AppendFigures>) {
    match agno {
        Some(a) => {
            println!(
                "    ours/agno runs/s {:.2}; last/first append ours {:.2}, agno {:.2}; last/first tenth ours {:.2}, agno {:.2}; read agno/ours {:.2}",
                ours.runs_per_second / a.runs_per_second.max(1e-12),
                ours.flatness(),
                a.flatness(),
                ours.tenth_flatness(),
                a.tenth_flatness(),
                a.read / ours.read.max(1e-9)
            );
            println!(
                "| {backend} | {} | {:.2} | {:.2} | {:.2} | {:.2} |",
                ours.n,
                ours.flatness(),
                a.flatness(),
                ours.runs_per_second / a.runs_per_second.max(1e-12),
                a.read / ours.read.max(1e-9)
            );
        }
        None => {
            println!("    last/first append ours {:.2}", ours.flatness());
            println!("| {backend} | {} | {:.2} | | | |", ours.n, ours.flatness());
        }
    }
}

/// Runs agno's side for `target` and prints it and the comparison; a failure is printed, not
/// fatal (the bench still reports ours).
pub fn compare_with_agno(backend: &str, target: &str, ours: &AppendFigures) {
    let agno = match agno_append_runs(target, ours.n) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("agno side of {backend}: {e}");
            None
        }
    };
    if let Some(a) = &agno {
        print_figures(&format!("{backend} agno 3.1.10"), a);
    }
    print_comparison(backend, ours, agno.as_ref());
}
