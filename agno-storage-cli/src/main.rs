//! `agno-storage`: the command line of agno-storage.
//!
//! It opens a backend by URL (`sqlite://PATH`, `memory://`, `postgres://…`, … see
//! [`target`]) and runs one subcommand:
//!
//! - `demo [URL]` writes a realistic Agno workload and prints a summary;
//! - `migrate URL [--dry-run]` applies (or only plans) the schema migrations;
//! - `status URL [--json]` prints the schema version of every migrated table;
//! - `cleanup-legacy-runs URL [--force]` drops the pre-v3 runs blobs once migrated;
//! - `copy SRC_URL DST_URL` copies every record between two backends;
//! - `jobs stats|list|cancel|requeue URL …` inspects and operates the durable job queue;
//! - `schedules list URL` lists the schedules.
//!
//! Each command writes its report to stdout in one go when it is done. A failure prints a
//! single `error: …` line on stderr and exits 1; usage errors (from clap) exit 2.

mod cleanup;
mod copy;
mod demo;
mod jobs;
mod migrate;
mod schedules;
mod status;
mod target;
mod user;

use std::fmt;
use std::io::{self, Write};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::target::BackendUrl;

/// The URL forms, shown under `--help`.
const URL_HELP: &str = "\
Backend URLs:
  sqlite://PATH          SQLite file: sqlite://agno.db (relative), sqlite:///var/lib/agno.db
  memory://              in-process memory: starts empty, gone when the command exits
  postgres://…  mysql://…  mongodb://…  redis://…  valkey://…
  dynamodb://…  firestore://…  surrealdb://…
                         server databases (the URL goes to the driver as given)
  file://DIR             JSON files in a local directory
  gs://BUCKET/PREFIX     JSON files in a Google Cloud Storage bucket
  s3://BUCKET/PREFIX     JSON files in an Amazon S3 bucket (AWS_* from the environment;
                         AWS_ENDPOINT for an S3-compatible server)
  surrealdb://[USER:PASS@]HOST:PORT/NS/DB   SurrealDB server over WebSocket (NS/DB default agno)
  surrealkv://PATH       SurrealDB embedded in a SurrealKV file
  surrealdb+mem://       SurrealDB embedded in memory";

#[derive(Debug, Parser)]
#[command(
    name = "agno-storage",
    version,
    about = "Inspect, migrate and copy Agno storage on any backend",
    after_help = URL_HELP
)]
struct Cli {
    /// Log every store call on stderr (its backend, domain, operation, rows and time):
    /// `-v` store calls, `-vv` also the drivers' own logs. `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a realistic workload (sessions, runs, memories, evals, knowledge, a schedule,
    /// a learning, a job, metrics), read it back and print a summary.
    #[command(after_help = URL_HELP)]
    Demo {
        /// Backend URL.
        #[arg(default_value = demo::DEFAULT_URL)]
        url: String,
    },
    /// Bring every table to the latest schema version.
    #[command(after_help = URL_HELP)]
    Migrate {
        /// Backend URL.
        url: String,
        /// Print the plan (per table: current stamp, target, steps) and change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Print the schema version of every migrated table.
    #[command(after_help = URL_HELP)]
    Status {
        /// Backend URL.
        url: String,
        /// Print a JSON array of {"table", "table_type", "version"} and nothing else.
        #[arg(long)]
        json: bool,
    },
    /// Drop the pre-v3 runs blobs from sessions (after `migrate` copied them).
    #[command(after_help = URL_HELP)]
    CleanupLegacyRuns {
        /// Backend URL.
        url: String,
        /// Drop them even if some were never migrated.
        #[arg(long)]
        force: bool,
    },
    /// Copy every record of every domain both backends support.
    #[command(after_help = URL_HELP)]
    Copy {
        /// Backend URL to read from.
        src_url: String,
        /// Backend URL to write to.
        dst_url: String,
    },
    /// Inspect and operate the durable job queue.
    Jobs {
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Inspect the schedules.
    Schedules {
        #[command(subcommand)]
        command: SchedulesCommand,
    },
    /// Export or erase one user's data across every domain.
    User {
        #[command(subcommand)]
        command: UserCommand,
    },
}

#[derive(Debug, Subcommand)]
enum UserCommand {
    /// Every record the user owns (sessions, runs, memories, eval runs, knowledge,
    /// schedules and their runs, learnings, jobs, metrics rows), as JSON lines
    /// `{"domain", "record"}` in agno's encodings.
    #[command(after_help = URL_HELP)]
    Export {
        /// Backend URL.
        url: String,
        /// The user's id.
        user_id: String,
        /// Write the lines to this file instead of stdout.
        #[arg(short, long)]
        output: Option<std::path::PathBuf>,
    },
    /// Delete every record the user owns and their metrics rows; other users' records and
    /// the shared ones are left as they are. Safe to run again.
    #[command(after_help = URL_HELP)]
    Erase {
        /// Backend URL.
        url: String,
        /// The user's id.
        user_id: String,
        /// Confirm: the records are deleted for good.
        #[arg(long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum JobsCommand {
    /// Jobs per state and the age of the oldest queued one.
    #[command(after_help = URL_HELP)]
    Stats {
        /// Backend URL.
        url: String,
        /// Print agno's queue_stats object: {"counts", "oldest_queued_age_seconds"}.
        #[arg(long)]
        json: bool,
    },
    /// One page of jobs, newest first.
    #[command(after_help = URL_HELP)]
    List {
        /// Backend URL.
        url: String,
        /// Only jobs in this state: queued, running, completed, failed, cancelled, paused.
        #[arg(long)]
        status: Option<String>,
        /// Only this session's jobs.
        #[arg(long)]
        session: Option<String>,
        /// Only this user's jobs.
        #[arg(long)]
        user: Option<String>,
        /// Jobs per page.
        #[arg(long, default_value_t = 20)]
        limit: u64,
        /// Page, from 1.
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Print {"total", "page", "limit", "jobs"}, each job as agno stores it.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a queued or paused job.
    #[command(after_help = URL_HELP)]
    Cancel {
        /// Backend URL.
        url: String,
        /// The job's id.
        id: String,
        /// Only if this user owns it.
        #[arg(long)]
        user: Option<String>,
        /// Print the job after, as agno stores it.
        #[arg(long)]
        json: bool,
    },
    /// Give a failed or cancelled job one more attempt.
    #[command(after_help = URL_HELP)]
    Requeue {
        /// Backend URL.
        url: String,
        /// The job's id.
        id: String,
        /// Only if this user owns it.
        #[arg(long)]
        user: Option<String>,
        /// Print the job after, as agno stores it.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SchedulesCommand {
    /// One page of schedules, newest first.
    #[command(after_help = URL_HELP)]
    List {
        /// Backend URL.
        url: String,
        /// Only this user's schedules.
        #[arg(long)]
        user: Option<String>,
        /// Only enabled schedules.
        #[arg(long)]
        enabled: bool,
        /// Schedules per page.
        #[arg(long, default_value_t = 20)]
        limit: u64,
        /// Page, from 1.
        #[arg(long, default_value_t = 1)]
        page: u64,
        /// Print {"total", "page", "limit", "schedules"}, each as agno stores it.
        #[arg(long)]
        json: bool,
    },
}

/// A failure of the command line: one line for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

impl Error {
    /// An error with `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Error {
            message: message.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<agno_storage_core::Error> for Error {
    fn from(error: agno_storage_core::Error) -> Self {
        Error::new(error.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    match run(cli.command) {
        Ok(report) => print_report(&report),
        Err(error) => {
            // One line, whatever the message holds.
            let line = error
                .message
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            let _ = writeln!(io::stderr(), "error: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Sends `tracing` output to stderr: what `RUST_LOG` selects, else per `-v` (store calls'
/// spans as they close, then also every crate's debug events); nothing without either.
fn init_tracing(verbose: u8) {
    use tracing_subscriber::fmt::format::FmtSpan;
    use tracing_subscriber::EnvFilter;
    let filter = match (std::env::var("RUST_LOG"), verbose) {
        (Ok(directives), _) => EnvFilter::new(directives),
        (Err(_), 0) => return,
        (Err(_), 1) => EnvFilter::new("agno_storage_core=debug"),
        (Err(_), _) => EnvFilter::new("debug"),
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(FmtSpan::CLOSE)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .with_writer(io::stderr)
        .try_init();
}

/// Runs one subcommand on a fresh multi-thread runtime (so the SQLite executor runs its
/// calls on the calling worker, in `block_in_place`, instead of hopping to the blocking
/// pool and back for each); returns its stdout report.
fn run(command: Command) -> Result<String, Error> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::new(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(dispatch(command))
}

async fn dispatch(command: Command) -> Result<String, Error> {
    match command {
        Command::Demo { url } => demo::run(&target::parse(&url)?).await,
        Command::Migrate { url, dry_run } => migrate::run(&target::parse(&url)?, dry_run).await,
        Command::Status { url, json } => status::run(&target::parse(&url)?, json).await,
        Command::CleanupLegacyRuns { url, force } => {
            cleanup::run(&target::parse(&url)?, force).await
        }
        Command::Copy { src_url, dst_url } => {
            let src: BackendUrl = target::parse(&src_url)?;
            let dst: BackendUrl = target::parse(&dst_url)?;
            copy::run(&src, &dst).await
        }
        Command::Jobs { command } => match command {
            JobsCommand::Stats { url, json } => jobs::stats(&target::parse(&url)?, json).await,
            JobsCommand::List {
                url,
                status,
                session,
                user,
                limit,
                page,
                json,
            } => {
                let filter = jobs::ListFilter {
                    status,
                    session_id: session,
                    user_id: user,
                    limit,
                    page,
                };
                jobs::list(&target::parse(&url)?, filter, json).await
            }
            JobsCommand::Cancel {
                url,
                id,
                user,
                json,
            } => jobs::cancel(&target::parse(&url)?, &id, user.as_deref(), json).await,
            JobsCommand::Requeue {
                url,
                id,
                user,
                json,
            } => jobs::requeue(&target::parse(&url)?, &id, user.as_deref(), json).await,
        },
        Command::Schedules {
            command:
                SchedulesCommand::List {
                    url,
                    user,
                    enabled,
                    limit,
                    page,
                    json,
                },
        } => {
            let enabled = enabled.then_some(true);
            let url = target::parse(&url)?;
            schedules::list(&url, user.as_deref(), enabled, (limit, page), json).await
        }
        Command::User { command } => match command {
            UserCommand::Export {
                url,
                user_id,
                output,
            } => user::export(&target::parse(&url)?, &user_id, output.as_deref()).await,
            UserCommand::Erase { url, user_id, yes } => {
                user::erase(&target::parse(&url)?, &user_id, yes).await
            }
        },
    }
}

/// An epoch-seconds time as `2026-12-06 09:30:00Z` (the number itself when out of range).
pub fn timestamp(epoch_seconds: i64) -> String {
    chrono::DateTime::from_timestamp(epoch_seconds, 0).map_or_else(
        || epoch_seconds.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%SZ").to_string(),
    )
}

/// Writes the report to stdout. A closed pipe (`| head`) ends the command quietly.
fn print_report(report: &str) -> ExitCode {
    let mut out = io::stdout().lock();
    match out.write_all(report.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: cannot write to stdout: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn subcommands_and_flags_parse() {
        let cli = Cli::try_parse_from(["agno-storage", "demo"]).unwrap();
        assert!(matches!(cli.command, Command::Demo { url } if url == demo::DEFAULT_URL));
        let cli =
            Cli::try_parse_from(["agno-storage", "migrate", "memory://", "--dry-run"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Migrate { dry_run: true, .. }
        ));
        let cli = Cli::try_parse_from(["agno-storage", "status", "memory://", "--json"]).unwrap();
        assert!(matches!(cli.command, Command::Status { json: true, .. }));
        let cli = Cli::try_parse_from([
            "agno-storage",
            "cleanup-legacy-runs",
            "memory://",
            "--force",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::CleanupLegacyRuns { force: true, .. }
        ));
        let cli = Cli::try_parse_from(["agno-storage", "copy", "memory://", "file://x"]).unwrap();
        assert!(matches!(cli.command, Command::Copy { .. }));
        assert!(Cli::try_parse_from(["agno-storage", "copy", "memory://"]).is_err());
        let cli = Cli::try_parse_from([
            "agno-storage",
            "jobs",
            "list",
            "memory://",
            "--status",
            "failed",
            "--json",
        ])
        .unwrap();
        assert!(matches!(
            cli.command,
            Command::Jobs {
                command: JobsCommand::List { json: true, status: Some(s), limit: 20, page: 1, .. }
            } if s == "failed"
        ));
        let cli = Cli::try_parse_from(["agno-storage", "schedules", "list", "memory://"]).unwrap();
        assert!(matches!(
            cli.command,
            Command::Schedules {
                command: SchedulesCommand::List { enabled: false, .. }
            }
        ));
        assert!(Cli::try_parse_from(["agno-storage", "jobs", "cancel", "memory://"]).is_err());
    }
}
