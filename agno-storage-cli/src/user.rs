//! `user export` and `user erase`: one user's data across every domain the backend stores.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::Path;
use std::time::Duration;

use agno_storage_core::{erase_user, export_user, DomainCounts, ErrorKind};
use indicatif::ProgressBar;

use crate::target::{self, BackendUrl};
use crate::Error;

/// `user export`: every record `user_id` owns as JSON lines (`{"domain", "record"}`, or
/// `{"domain", "unreadable": {"id", "error"}}` for a row that does not decode) into
/// `output`, or stdout. Returns the summary: for stdout, empty (the summary goes to stderr,
/// so stdout stays pure JSON lines).
pub async fn export(
    url: &BackendUrl,
    user_id: &str,
    output: Option<&Path>,
) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    let mut sink: Box<dyn Write + Send> = match output {
        Some(path) => {
            Box::new(BufWriter::new(File::create(path).map_err(|e| {
                Error::new(format!("cannot create {}: {e}", path.display()))
            })?))
        }
        None => Box::new(BufWriter::new(io::stdout())),
    };
    let bar = spinner("exported");
    let counts = export_user(&db, user_id, |record| {
        let line = serde_json::to_string(&record).map_err(|e| {
            agno_storage_core::Error::new(ErrorKind::Unexpected, format!("encode a record: {e}"))
        })?;
        writeln!(sink, "{line}").map_err(|e| write_error(output, e))?;
        bar.inc(1);
        Ok(())
    })
    .await;
    bar.finish_and_clear();
    let counts = counts?;
    sink.flush()
        .map_err(|e| Error::new(write_error(output, e).message()))?;
    let total = counts.values().sum::<u64>();
    let report = report(
        &format!("Exported user {user_id:?} from {url}"),
        &counts,
        total,
    );
    match output {
        Some(path) => Ok(format!("{report}  -> {}\n", path.display())),
        None => {
            eprint!("{report}");
            Ok(String::new())
        }
    }
}

/// `user erase`: deletes every record `user_id` owns; refuses without `yes`.
pub async fn erase(url: &BackendUrl, user_id: &str, yes: bool) -> Result<String, Error> {
    if !yes {
        return Err(Error::new(format!(
            "erasing deletes every record of user {user_id:?} in {url} and cannot be undone; \
             export it first (`agno-storage user export {url} {user_id} -o FILE`), then run \
             again with --yes"
        )));
    }
    let db = target::open_existing(url).await?;
    let bar = spinner("erasing");
    let counts = erase_user(&db, user_id).await;
    bar.finish_and_clear();
    let counts = counts?;
    let total = counts.values().sum::<u64>();
    Ok(report(
        &format!("Erased user {user_id:?} from {url}"),
        &counts,
        total,
    ))
}

/// The heading with its total, then one line per domain.
fn report(heading: &str, counts: &DomainCounts, total: u64) -> String {
    let mut out = format!("{heading}: {total} record(s)\n");
    for (domain, n) in counts {
        let _ = writeln!(out, "  {:20} {n:>7}", domain.as_str());
    }
    out
}

fn write_error(output: Option<&Path>, e: io::Error) -> agno_storage_core::Error {
    let to = output.map_or_else(|| "stdout".to_owned(), |p| p.display().to_string());
    agno_storage_core::Error::new(ErrorKind::Unexpected, format!("cannot write to {to}: {e}"))
}

/// A spinner on stderr counting records; hidden when stderr is not a terminal.
fn spinner(what: &'static str) -> ProgressBar {
    if !io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {pos} ({elapsed})")
    {
        bar.set_style(style);
    }
    bar.set_message(what);
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}
