//! Runs the built `agno-storage` binary as scripts do.

use std::process::{Command, Output};

fn agno_storage(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agno-storage"))
        .args(args)
        .output()
        .expect("the agno-storage binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Exit 1 with exactly one `error: …` line on stderr and nothing on stdout; returns it.
fn one_error_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(output));
    let err = stderr(output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(output.stdout.is_empty(), "{}", stdout(output));
    err
}

#[test]
fn demo_on_memory_summarizes_every_domain() {
    let output = agno_storage(&["demo", "memory://"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let out = stdout(&output);
    for word in [
        "sessions", "runs", "metrics", "memories", "(shared)", "Done in",
    ] {
        assert!(out.contains(word), "missing {word:?} in:\n{out}");
    }
}

#[test]
fn demo_defaults_to_sqlite_in_the_working_directory() {
    let dir = std::env::temp_dir().join(format!("agno-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let in_dir = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agno-storage"))
            .args(args)
            .current_dir(&dir)
            .output()
            .expect("the agno-storage binary runs")
    };
    for _ in 0..2 {
        let output = in_dir(&["demo"]);
        assert!(output.status.success(), "stderr: {}", stderr(&output));
        assert!(
            stdout(&output).contains("sqlite://agno.db"),
            "{}",
            stdout(&output)
        );
    }
    assert!(
        dir.join("agno.db").exists(),
        "agno.db written in the working directory"
    );
    let status = in_dir(&["status", "sqlite://agno.db", "--json"]);
    assert!(status.status.success(), "stderr: {}", stderr(&status));
    let tables: serde_json::Value = serde_json::from_slice(&status.stdout).expect("JSON status");
    assert!(
        tables
            .as_array()
            .is_some_and(|t| t.len() == 8 && t.iter().all(|t| t["version"] == "3.0.0")),
        "{tables}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn status_json_lists_eight_tables_at_latest() {
    let output = agno_storage(&["status", "memory://", "--json"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let tables: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    let tables = tables.as_array().expect("a JSON array");
    assert_eq!(tables.len(), 8);
    for table in tables {
        assert_eq!(table["version"], "3.0.0", "{table}");
        assert!(
            table["table"].is_string() && table["table_type"].is_string(),
            "{table}"
        );
    }
    assert!(tables
        .iter()
        .any(|t| t["table"] == "agno_sessions" && t["table_type"] == "sessions"));
}

#[test]
fn status_text() {
    let output = agno_storage(&["status", "memory://"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(stdout(&output).contains("agno_schedule_runs"));
}

#[test]
fn migrate_dry_run_and_up() {
    let output = agno_storage(&["migrate", "memory://", "--dry-run"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(
        stdout(&output).contains("Nothing to migrate"),
        "{}",
        stdout(&output)
    );
    let output = agno_storage(&["migrate", "memory://"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
}

#[test]
fn cleanup_legacy_runs_has_nothing_to_clean() {
    let output = agno_storage(&["cleanup-legacy-runs", "memory://"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(
        stdout(&output).contains("Nothing to clean"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn copy_memory_to_memory() {
    let output = agno_storage(&["copy", "memory://", "memory://"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let out = stdout(&output);
    assert!(out.contains("sessions") && out.contains("jobs"), "{out}");
}

#[test]
fn bad_url_is_one_error_line() {
    let err = one_error_line(&agno_storage(&["status", "nope://x"]));
    assert!(err.contains("unknown backend URL scheme"), "{err}");
    assert!(err.contains("sqlite://PATH"), "{err}");
}

#[test]
#[cfg_attr(
    all(feature = "surreal", feature = "dynamo", feature = "postgres"),
    ignore = "this build compiles every backend in"
)]
fn uncompiled_backend_names_its_feature() {
    let (url, feature) = [
        (
            "surrealdb://localhost",
            "surreal",
            cfg!(feature = "surreal"),
        ),
        ("dynamodb://us-east-1", "dynamo", cfg!(feature = "dynamo")),
        (
            "postgres://localhost/db",
            "postgres",
            cfg!(feature = "postgres"),
        ),
    ]
    .into_iter()
    .find(|(_, _, compiled)| !compiled)
    .map(|(url, feature, _)| (url, feature))
    .unwrap_or(("surrealdb://localhost", "surreal"));
    let err = one_error_line(&agno_storage(&["status", url]));
    assert!(err.contains("not compiled"), "{err}");
    assert!(err.contains(&format!("--features {feature}")), "{err}");
}

#[test]
fn unreachable_server_is_one_error_line() {
    let err = one_error_line(&agno_storage(&[
        "status",
        "postgres://nobody@127.0.0.1:1/db",
    ]));
    assert!(err.contains("postgres"), "{err}");
}

#[test]
fn copy_refuses_the_same_database() {
    let err = one_error_line(&agno_storage(&["copy", "sqlite://a.db", "sqlite://a.db"]));
    assert!(err.contains("same database"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let output = agno_storage(&["migrate"]);
    assert_eq!(output.status.code(), Some(2));
    let output = agno_storage(&["frobnicate"]);
    assert_eq!(output.status.code(), Some(2));
}

/// The server URLs the test script exports, as CLI URLs for a fresh namespace `ns`; a
/// missing variable skips that backend, except under `CI=true` where it fails.
fn server_urls(ns: &str) -> Vec<String> {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let var = |name: &str| match std::env::var(name) {
        Ok(v) if !v.is_empty() => Some(v),
        _ if ci => panic!("{name} is not set and CI=true: the test script starts every server"),
        _ => {
            eprintln!("skipping the backend of {name}: not set");
            None
        }
    };
    let with_query = |url: &str, query: &str| {
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}{query}")
    };
    let host_port = |url: &str| {
        url.split_once("://")
            .map_or(url, |(_, rest)| rest)
            .trim_end_matches('/')
            .to_owned()
    };
    let mut urls = Vec::new();
    if let Some(url) = var("AGNO_TEST_POSTGRES_URL") {
        urls.push(with_query(&url, &format!("schema={ns}")));
    }
    if let Some(url) = var("AGNO_TEST_MYSQL_URL") {
        urls.push(with_query(&url, &format!("schema={ns}")));
    }
    if let Some(url) = var("AGNO_TEST_MONGODB_URL") {
        let rest = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
        let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
        let url = format!("mongodb://{host}/{ns}");
        urls.push(match path.split_once('?') {
            Some((_, query)) => with_query(&url, query),
            None => url,
        });
    }
    if let Some(url) = var("AGNO_TEST_REDIS_URL") {
        urls.push(with_query(&url, &format!("prefix={ns}")));
    }
    if let Some(url) = var("AGNO_TEST_DYNAMODB_URL") {
        urls.push(format!(
            "dynamodb://test:test@{}?prefix={ns}_",
            host_port(&url)
        ));
    }
    if var("FIRESTORE_EMULATOR_HOST").is_some() {
        urls.push(format!("firestore://{}", ns.replace('_', "-")));
    }
    urls
}

/// `(domain, records copied)` of each line of a `copy` report (notes about skipped records
/// dropped).
fn copied_counts(output: &Output) -> Vec<(String, u64)> {
    assert!(output.status.success(), "stderr: {}", stderr(output));
    stdout(output)
        .lines()
        .skip(1)
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words
                .iter()
                .position(|w| w.parse::<u64>().is_ok())
                .unwrap_or_else(|| panic!("no count in {line:?}"));
            (words[..at].join(" "), words[at].parse().unwrap_or_default())
        })
        .collect()
}

/// `demo` data goes SQLite → each server → SQLite, and every domain arrives whole.
#[test]
#[cfg_attr(
    not(all(
        feature = "postgres",
        feature = "mysql",
        feature = "mongo",
        feature = "redis",
        feature = "dynamo",
        feature = "firestore"
    )),
    ignore = "needs every server backend compiled in (--features full)"
)]
fn copy_round_trips_through_every_server_backend() {
    let dir = std::env::temp_dir().join(format!("agno-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let origin = format!("sqlite://{}", dir.join("origin.db").display());
    let output = agno_storage(&["demo", &origin]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let expected = copied_counts(&agno_storage(&["copy", &origin, "memory://"]));
    let ns = format!("cli_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    for (i, server) in server_urls(&ns).iter().enumerate() {
        let there = copied_counts(&agno_storage(&["copy", &origin, server]));
        assert_eq!(there, expected, "SQLite -> {server}");
        let back = format!("sqlite://{}", dir.join(format!("back-{i}.db")).display());
        let returned = copied_counts(&agno_storage(&["copy", server, &back]));
        assert_eq!(returned, expected, "{server} -> SQLite");
        let status = agno_storage(&["status", server]);
        assert!(status.status.success(), "{server}: {}", stderr(&status));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `demo` data goes SQLite → `s3://BUCKET/PREFIX` (the moto server the test script starts,
/// reached through the `AWS_*` variables a user sets) → SQLite, every domain whole.
#[test]
#[cfg_attr(not(feature = "s3"), ignore = "needs the s3 feature (--features full)")]
fn copy_round_trips_through_s3() {
    let ci = std::env::var("CI").is_ok_and(|v| v == "true");
    let Ok(endpoint) = std::env::var("AGNO_TEST_S3_URL") else {
        assert!(
            !ci,
            "AGNO_TEST_S3_URL is not set and CI=true: the test script starts moto"
        );
        eprintln!("skipping: AGNO_TEST_S3_URL is not set");
        return;
    };
    let bucket = std::env::var("AGNO_TEST_S3_BUCKET").unwrap_or_else(|_| "agno-test".into());
    let s3 = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agno-storage"))
            .args(args)
            .env("AWS_ENDPOINT", &endpoint)
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("AWS_REGION", "us-east-1")
            .output()
            .expect("the agno-storage binary runs")
    };
    let dir = temp_dir();
    let origin = format!("sqlite://{}", dir.join("origin.db").display());
    let output = agno_storage(&["demo", &origin]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let expected = copied_counts(&agno_storage(&["copy", &origin, "memory://"]));
    let url = format!(
        "s3://{bucket}/cli-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    assert_eq!(copied_counts(&s3(&["copy", &origin, &url])), expected);
    let back = format!("sqlite://{}", dir.join("back.db").display());
    assert_eq!(copied_counts(&s3(&["copy", &url, &back])), expected);
    let status = s3(&["status", &url]);
    assert!(status.status.success(), "{}", stderr(&status));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `user export` writes the demo user's records as JSON lines, one domain per line's
/// `domain`, all theirs; `user erase` refuses without `--yes`, then deletes as many as were
/// exported; the other user keeps every record, and a second erase deletes nothing.
#[test]
fn user_export_then_erase() {
    let dir = temp_dir();
    let url = format!("sqlite://{}", dir.join("agno.db").display());
    assert!(agno_storage(&["demo", &url]).status.success());
    let export = |user: &str, file: &str| -> Vec<serde_json::Value> {
        let path = dir.join(file);
        let path = path.display().to_string();
        let output = agno_storage(&["user", "export", &url, user, "-o", &path]);
        assert!(output.status.success(), "{}", stderr(&output));
        std::fs::read_to_string(&path)
            .expect("the export file")
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect()
    };
    let alice = export("alice@example.com", "alice.jsonl");
    let domains: std::collections::BTreeSet<&str> =
        alice.iter().filter_map(|l| l["domain"].as_str()).collect();
    for domain in [
        "sessions",
        "runs",
        "memories",
        "schedules",
        "jobs",
        "metrics",
    ] {
        assert!(
            domains.contains(domain),
            "{domain} missing from {domains:?}"
        );
    }
    for line in &alice {
        assert_eq!(line["record"]["user_id"], "alice@example.com", "{line}");
    }
    let bob = export("bob@example.com", "bob-before.jsonl");
    assert!(!bob.is_empty());

    let refused = agno_storage(&["user", "erase", &url, "alice@example.com"]);
    assert!(!refused.status.success());
    assert!(one_error_line(&refused).contains("--yes"));
    assert_eq!(
        export("alice@example.com", "again.jsonl").len(),
        alice.len()
    );

    let erased = agno_storage(&["user", "erase", &url, "alice@example.com", "--yes"]);
    assert!(erased.status.success(), "{}", stderr(&erased));
    assert!(
        stdout(&erased).starts_with(&format!(
            "Erased user \"alice@example.com\" from {url}: {} record(s)",
            alice.len()
        )),
        "{}",
        stdout(&erased)
    );
    assert!(export("alice@example.com", "after.jsonl").is_empty());
    assert_eq!(export("bob@example.com", "bob-after.jsonl"), bob);
    let again = agno_storage(&["user", "erase", &url, "alice@example.com", "--yes"]);
    assert!(
        stdout(&again).contains(": 0 record(s)"),
        "{}",
        stdout(&again)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lines `user export` writes for `user` in `url`.
fn exported_lines(url: &str, user: &str, dir: &std::path::Path) -> Vec<String> {
    let path = dir.join(format!("export-{}.jsonl", uuid::Uuid::new_v4().simple()));
    let path = path.display().to_string();
    let output = agno_storage(&["user", "export", url, user, "-o", &path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let lines = std::fs::read_to_string(&path).expect("the export file");
    let _ = std::fs::remove_file(&path);
    lines.lines().map(str::to_owned).collect()
}

/// Crash trial: `user erase` is SIGKILLed at random points of its run over a SQLite file
/// holding a few hundred of the user's records; whatever the kill left, running it again
/// finishes the erase: nothing of the user is left and the other user's export is
/// byte-identical. At least one kill must land part-way (some records gone, some left).
#[test]
fn an_erase_killed_part_way_is_finished_by_running_it_again() {
    const USER: &str = "alice@example.com";
    let dir = temp_dir();
    let base = dir.join("base.db");
    let base_url = format!("sqlite://{}", base.display());
    for _ in 0..40 {
        assert!(agno_storage(&["demo", &base_url]).status.success());
    }
    let full = exported_lines(&base_url, USER, &dir).len();
    let bob = exported_lines(&base_url, "bob@example.com", &dir);
    let copy_of_base = |name: &str| {
        let path = dir.join(name);
        std::fs::copy(&base, &path).expect("copy the database");
        format!("sqlite://{}", path.display())
    };
    // How long one erase takes, start to exit.
    let timed = copy_of_base("timed.db");
    let started = std::time::Instant::now();
    assert!(agno_storage(&["user", "erase", &timed, USER, "--yes"])
        .status
        .success());
    let whole = started.elapsed().as_micros().max(1);
    let mut part_way = 0;
    for trial in 0..12 {
        let url = copy_of_base(&format!("trial-{trial}.db"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_agno-storage"))
            .args(["user", "erase", &url, USER, "--yes"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the agno-storage binary runs");
        let at = uuid::Uuid::new_v4().as_u128() % whole;
        std::thread::sleep(std::time::Duration::from_micros(at as u64));
        let _ = child.kill();
        let _ = child.wait();
        let left = exported_lines(&url, USER, &dir).len();
        if left > 0 && left < full {
            part_way += 1;
        }
        let rerun = agno_storage(&["user", "erase", &url, USER, "--yes"]);
        assert!(rerun.status.success(), "trial {trial}: {}", stderr(&rerun));
        assert!(
            exported_lines(&url, USER, &dir).is_empty(),
            "trial {trial}: the re-run left records of {USER}"
        );
        assert_eq!(
            exported_lines(&url, "bob@example.com", &dir),
            bob,
            "trial {trial}"
        );
    }
    eprintln!("{part_way} of 12 kills landed part-way through an erase of {full} records");
    assert!(
        part_way > 0,
        "no kill of 12 landed part-way through an erase of {full} records ({whole} µs)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh empty directory under the system temp dir.
fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agno-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// The names and sizes of the entries of `dir`, sorted: what "nothing written" compares.
fn listing(dir: &std::path::Path) -> Vec<(String, u64)> {
    let mut entries: Vec<(String, u64)> = std::fs::read_dir(dir)
        .expect("list the temp dir")
        .map(|e| {
            let e = e.expect("a directory entry");
            let len = e.metadata().map(|m| m.len()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), len)
        })
        .collect();
    entries.sort();
    entries
}

/// Every read-only command on `url`: `status`, `status --json`, `migrate --dry-run`,
/// `cleanup-legacy-runs` (unforced), and `copy` from it.
fn read_only_commands(url: &str) -> Vec<Vec<String>> {
    let owned = |args: &[&str]| args.iter().map(|a| (*a).to_owned()).collect::<Vec<_>>();
    vec![
        owned(&["status", url]),
        owned(&["status", url, "--json"]),
        owned(&["migrate", url, "--dry-run"]),
        owned(&["cleanup-legacy-runs", url]),
        owned(&["copy", url, "memory://"]),
    ]
}

/// Runs every read-only command on `url`: each exits 1 with one `error:` line containing
/// every word of `expect`, and the directory `dir` is byte-for-byte as it was.
fn refused_without_writing(dir: &std::path::Path, url: &str, expect: &[&str]) {
    let before = listing(dir);
    for args in read_only_commands(url) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let err = one_error_line(&agno_storage(&args));
        for word in expect {
            assert!(err.contains(word), "{args:?}: {word:?} missing in {err}");
        }
        assert!(!err.contains("copied"), "{args:?}: {err}");
        assert_eq!(
            listing(dir),
            before,
            "{args:?} wrote into {}",
            dir.display()
        );
    }
}

#[test]
fn read_only_commands_refuse_a_missing_sqlite_file_and_create_nothing() {
    let dir = temp_dir();
    let path = dir.join("typo.db");
    let url = format!("sqlite://{}", path.display());
    refused_without_writing(
        &dir,
        &url,
        &[
            "no agno database at",
            "does not exist",
            &format!("agno-storage migrate {url}"),
        ],
    );
    assert!(!path.exists());
    // A missing directory is not created either.
    let nested = dir.join("no-such-dir").join("agno.db");
    refused_without_writing(
        &dir,
        &format!("sqlite://{}", nested.display()),
        &["does not exist"],
    );
    assert!(!dir.join("no-such-dir").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_commands_refuse_an_empty_sqlite_file_and_leave_it_empty() {
    let dir = temp_dir();
    let path = dir.join("empty.db");
    std::fs::write(&path, b"").expect("zero-byte file");
    let url = format!("sqlite://{}", path.display());
    refused_without_writing(&dir, &url, &["empty (zero bytes)", "agno-storage migrate"]);
    assert_eq!(std::fs::metadata(&path).map(|m| m.len()).ok(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_commands_refuse_a_corrupt_sqlite_file_and_leave_it_alone() {
    let dir = temp_dir();
    let path = dir.join("random.db");
    // 8 KiB of deterministic noise: not a SQLite header.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..8192)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    std::fs::write(&path, &noise).expect("noise file");
    let url = format!("sqlite://{}", path.display());
    refused_without_writing(
        &dir,
        &url,
        &["not a usable SQLite database", "check the URL"],
    );
    assert_eq!(std::fs::read(&path).ok(), Some(noise));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_commands_refuse_a_missing_json_directory_and_create_nothing() {
    let dir = temp_dir();
    let data = dir.join("agno-data");
    let url = format!("file://{}", data.display());
    refused_without_writing(
        &dir,
        &url,
        &[
            "no agno database at",
            "directory does not exist",
            "agno-storage migrate",
        ],
    );
    assert!(!data.exists());
    // An empty directory holds no agno table: refused, and still empty.
    std::fs::create_dir_all(&data).expect("empty data dir");
    refused_without_writing(&data, &url, &["none of agno's table files"]);
    assert!(listing(&data).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_only_commands_work_on_an_existing_database_and_keep_its_files() {
    let dir = temp_dir();
    let sqlite = format!("sqlite://{}", dir.join("agno.db").display());
    let output = agno_storage(&["demo", &sqlite]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let json = format!("file://{}", dir.join("json").display());
    let output = agno_storage(&["copy", &sqlite, &json]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    for url in [&sqlite, &json] {
        let before = listing(&dir);
        for args in read_only_commands(url) {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let output = agno_storage(&args);
            assert!(output.status.success(), "{args:?}: {}", stderr(&output));
        }
        assert_eq!(listing(&dir), before, "{url}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run the source holds but this code cannot decode (here a lone surrogate, which agno
/// writes for file names decoded with `surrogateescape`) is not silently dropped by `copy`:
/// everything else is copied, the summary is printed, and the command fails naming the run.
#[test]
fn copy_names_an_unreadable_source_run_and_fails_after_copying_the_rest() {
    let dir = temp_dir();
    let src = dir.join("src.db");
    let src_url = format!("sqlite://{}", src.display());
    let demo = agno_storage(&["demo", &src_url]);
    assert!(demo.status.success(), "stderr: {}", stderr(&demo));
    // Python's sqlite3 module: the test needs no SQLite client of its own.
    let edit = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             (run_id,) = c.execute('SELECT run_id FROM agno_runs ORDER BY run_id LIMIT 1').fetchone()\n\
             c.execute(\"UPDATE agno_runs SET run_data = replace(run_data, '\\\"run_id\\\"', '\\\"file\\\": \\\"caf\\\\udce9.txt\\\", \\\"run_id\\\"') WHERE run_id = ?\", (run_id,))\n\
             c.commit()\n\
             print(run_id)",
        ])
        .arg(&src)
        .output()
        .expect("python3 runs");
    assert!(
        edit.status.success(),
        "{}",
        String::from_utf8_lossy(&edit.stderr)
    );
    let bad_run = String::from_utf8_lossy(&edit.stdout).trim().to_owned();

    let dst_url = format!("sqlite://{}", dir.join("dst.db").display());
    let output = agno_storage(&["copy", &src_url, &dst_url]);
    assert_eq!(output.status.code(), Some(1), "stderr: {}", stderr(&output));
    let err = stderr(&output);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("runs {bad_run}")), "{err}");
    assert!(err.contains("surrogate"), "{err}");
    let out = stdout(&output);
    let runs = out
        .lines()
        .find_map(|line| line.trim().strip_prefix("runs "))
        .map(|rest| rest.split_whitespace().collect::<Vec<_>>());
    assert_eq!(
        runs.as_deref(),
        Some(&["6", "(1", "skipped)"][..]),
        "the demo's other runs are copied: {out}"
    );
}

/// A table that lacks a column every agno release creates is damage, not a pending
/// migration: `status` prints the versions, marks the table and fails naming the repair;
/// `migrate` refuses instead of saying there is nothing to migrate.
#[test]
fn status_and_migrate_report_a_damaged_table() {
    let dir = temp_dir();
    let db = dir.join("damaged.db");
    let url = format!("sqlite://{}", db.display());
    let demo = agno_storage(&["demo", &url]);
    assert!(demo.status.success(), "stderr: {}", stderr(&demo));
    let drop_column = Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys\n\
             c = sqlite3.connect(sys.argv[1])\n\
             c.execute('ALTER TABLE agno_sessions DROP COLUMN session_data')\n\
             c.commit()",
        ])
        .arg(&db)
        .output()
        .expect("python3 runs");
    assert!(
        drop_column.status.success(),
        "{}",
        String::from_utf8_lossy(&drop_column.stderr)
    );

    let status = agno_storage(&["status", &url]);
    assert_eq!(status.status.code(), Some(1), "stderr: {}", stderr(&status));
    let out = stdout(&status);
    let sessions_line = out
        .lines()
        .find(|l| l.trim_start().starts_with("agno_sessions "))
        .unwrap_or_else(|| panic!("no agno_sessions line in {out}"));
    assert!(sessions_line.contains("DAMAGED"), "{out}");
    let err = stderr(&status);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("session_data") && err.contains("ADD COLUMN"),
        "{err}"
    );

    let migrate = agno_storage(&["migrate", &url]);
    let err = one_error_line(&migrate);
    assert!(
        err.contains("session_data") && !err.contains("Nothing to migrate"),
        "{err}"
    );
}

/// `jobs` and `schedules` on the demo's SQLite file: the stats, the lists, and refusals
/// that name the job's state.
#[test]
fn jobs_and_schedules_commands_report_the_queue() {
    let dir = std::env::temp_dir().join(format!("agno-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let url = format!("sqlite://{}", dir.join("queue.db").display());
    let json = |args: &[&str]| -> serde_json::Value {
        let output = agno_storage(args);
        assert!(output.status.success(), "stderr: {}", stderr(&output));
        serde_json::from_slice(&output.stdout).expect("JSON report")
    };
    assert!(agno_storage(&["demo", &url]).status.success());
    let stats = json(&["jobs", "stats", &url, "--json"]);
    assert_eq!(stats["counts"]["completed"], 1, "{stats}");
    assert_eq!(stats["oldest_queued_age_seconds"], serde_json::Value::Null);
    let list = json(&["jobs", "list", &url, "--json"]);
    assert_eq!(list["total"], 1, "{list}");
    let id = list["jobs"][0]["id"].as_str().expect("a job id").to_owned();
    assert_eq!(list["jobs"][0]["status"], "completed");
    let none = json(&["jobs", "list", &url, "--status", "queued", "--json"]);
    assert_eq!(none["total"], 0, "{none}");
    let text = stdout(&agno_storage(&["jobs", "list", &url]));
    assert!(text.contains(&id) && text.contains("completed"), "{text}");

    let err = one_error_line(&agno_storage(&["jobs", "requeue", &url, &id]));
    assert!(err.contains("this one is completed"), "{err}");
    let err = one_error_line(&agno_storage(&["jobs", "cancel", &url, &id]));
    assert!(err.contains("queued or paused"), "{err}");
    let err = one_error_line(&agno_storage(&["jobs", "cancel", &url, "no-such-job"]));
    assert!(err.contains("no job no-such-job"), "{err}");
    let err = one_error_line(&agno_storage(&["jobs", "list", &url, "--status", "done"]));
    assert!(err.contains("queued, running, completed"), "{err}");

    let schedules = json(&["schedules", "list", &url, "--json"]);
    assert_eq!(schedules["total"], 1, "{schedules}");
    assert_eq!(schedules["schedules"][0]["enabled"], true);
    let text = stdout(&agno_storage(&["schedules", "list", &url, "--enabled"]));
    assert!(
        text.contains("enabled") && text.contains("next 20"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `jobs cancel` and `jobs requeue` change a job that is waiting, and print it.
#[cfg(feature = "sqlite")]
#[test]
fn jobs_cancel_then_requeue_a_waiting_job() {
    use agno_storage_core::Job;
    let dir = std::env::temp_dir().join(format!("agno-cli-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("queue.db");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let db = agno_storage_sql::SqlDb::open_sqlite(&path, Default::default())
            .await
            .expect("open")
            .agno_db();
        let job = Job::new("job-1", "agent", "agent-1", "s1", serde_json::json!({}));
        let outcome = db.jobs().expect("jobs").enqueue_job(job, 0).await;
        assert!(outcome.expect("enqueue").rejection.is_none());
    });
    let url = format!("sqlite://{}", path.display());
    let output = agno_storage(&["jobs", "cancel", &url, "job-1"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    assert!(
        stdout(&output).starts_with("cancelled job job-1"),
        "{}",
        stdout(&output)
    );
    let output = agno_storage(&["jobs", "requeue", &url, "job-1", "--json"]);
    assert!(output.status.success(), "stderr: {}", stderr(&output));
    let job: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON job");
    assert_eq!(
        (job["status"].as_str(), job["max_attempts"].as_i64()),
        (Some("queued"), Some(1))
    );
    let err = one_error_line(&agno_storage(&[
        "jobs", "requeue", &url, "job-1", "--user", "bob",
    ]));
    assert!(err.contains("no job job-1 owned by bob"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
