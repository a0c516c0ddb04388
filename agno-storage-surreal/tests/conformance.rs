//! The conformance suite against SurrealDB.
//!
//! Always on the embedded in-memory engine (`mem://`, a fresh datastore per case). When
//! `AGNO_TEST_SURREALDB_URL` is set (`ws://[USER:PASS@]HOST:PORT`, e.g.
//! `ws://root:root@127.0.0.1:8000`), the same suite runs again against that server, each
//! case in its own namespace and database; set but unreachable fails the run. Unset, only
//! the server suite is skipped. `AGNO_JOB_STRESS_JOBS=N` sets the job stress case's size.

mod common;

use std::process::ExitCode;
use std::sync::Arc;

use agno_storage_core::{AgnoDb, Capabilities, Result};
use agno_storage_surreal::{SurrealDb, SurrealOptions};
use agno_storage_testkit::default_paths::DefaultPaths;
use common::Writer;
use conformance_tests::{async_trait, Ctx, Harness, JobStress, LegacyDb};

/// One engine: a URL and optional root credentials.
struct Surreal {
    name: &'static str,
    url: String,
    credentials: Option<(String, String)>,
    /// The engine's default paths in place of SurrealDB's native ones (see
    /// `agno_storage_testkit::default_paths`).
    default_paths: bool,
}

impl Surreal {
    fn wire(&self, db: SurrealDb) -> AgnoDb {
        if self.default_paths {
            agno_storage_doc::agno_db(&DefaultPaths(db))
        } else {
            db.agno_db()
        }
    }

    /// A fresh namespace and database per case (`ct_<case>_<random>`).
    fn options(&self, case: &str, stamp: bool) -> SurrealOptions {
        let short: String = case
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .take(40)
            .collect();
        let tag = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let mut o = SurrealOptions::new(format!("ct_{tag}"), format!("{short}_{tag}"));
        o.credentials = self.credentials.clone();
        o.stamp_new_database = stamp;
        o
    }
}

#[async_trait]
impl Harness for Surreal {
    fn name(&self) -> &str {
        self.name
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::all()
    }

    /// 500 jobs (the suite's 2,000 with `AGNO_JOB_STRESS_JOBS=2000`): the engine runs
    /// unoptimized in test builds (about 5 ms for a one-record read), so the full stress
    /// case alone takes minutes; 500 jobs exercise the same races.
    fn job_stress(&self) -> JobStress {
        JobStress {
            jobs: 500,
            ..JobStress::default()
        }
    }

    async fn open(&self, case: &str) -> Result<AgnoDb> {
        Ok(self.wire(SurrealDb::connect(&self.url, self.options(case, true)).await?))
    }

    async fn open_legacy(&self, case: &str) -> Result<LegacyDb> {
        let db = SurrealDb::connect(&self.url, self.options(case, false)).await?;
        Ok(LegacyDb {
            db: self.wire(db.clone()),
            writer: Arc::new(Writer { db }),
        })
    }
}

/// `ws://USER:PASS@HOST:PORT` → (`ws://HOST:PORT`, credentials).
fn split_credentials(url: &str) -> (String, Option<(String, String)>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => {
            let (user, pass) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            (
                format!("{scheme}://{host}"),
                Some((user.to_owned(), pass.to_owned())),
            )
        }
        None => (url.to_owned(), None),
    }
}

fn trials(
    harness: Arc<dyn Harness>,
    runtime: &Arc<tokio::runtime::Runtime>,
) -> Vec<libtest_mimic::Trial> {
    let capabilities = harness.capabilities();
    conformance_tests::all_cases()
        .into_iter()
        .map(|case| {
            let missing: Vec<&str> = case
                .requires
                .iter()
                .copied()
                .filter(|r| !capabilities.has(r))
                .collect();
            let name = format!("{}::{}", harness.name(), case.name);
            let (runtime, harness) = (runtime.clone(), harness.clone());
            let trial = libtest_mimic::Trial::test(name, move || {
                let ctx = Ctx::new(harness, case.name);
                runtime
                    .block_on(case.run(&ctx))
                    .map_err(|f| f.to_string().into())
            });
            if missing.is_empty() {
                trial
            } else {
                trial
                    .with_ignored_flag(true)
                    .with_kind(format!("unsupported: {}", missing.join(",")))
            }
        })
        .collect()
}

fn main() -> ExitCode {
    let args = libtest_mimic::Arguments::from_args();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
    {
        Ok(rt) => Arc::new(rt),
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut all = trials(
        Arc::new(Surreal {
            name: "surrealdb-mem",
            url: "mem://".into(),
            credentials: None,
            default_paths: false,
        }),
        &runtime,
    );
    // The engine's default paths on the same layout pass the same cases.
    all.extend(trials(
        Arc::new(Surreal {
            name: "surrealdb-mem-default-paths",
            url: "mem://".into(),
            credentials: None,
            default_paths: true,
        }),
        &runtime,
    ));
    match std::env::var("AGNO_TEST_SURREALDB_URL") {
        Ok(url) if !url.is_empty() => {
            let (url, credentials) = split_credentials(&url);
            let host = url.split_once("://").map_or(url.as_str(), |(_, h)| h);
            let host = host.split('/').next().unwrap_or(host);
            if std::net::TcpStream::connect(host).is_err() {
                eprintln!("error: AGNO_TEST_SURREALDB_URL is set but {host} is unreachable");
                return ExitCode::FAILURE;
            }
            all.extend(trials(
                Arc::new(Surreal {
                    name: "surrealdb-server",
                    url,
                    credentials,
                    default_paths: false,
                }),
                &runtime,
            ));
        }
        _ => eprintln!(
            "note: AGNO_TEST_SURREALDB_URL is not set; the server suite is skipped (mem:// runs)"
        ),
    }
    libtest_mimic::run(&args, all).exit_code()
}
