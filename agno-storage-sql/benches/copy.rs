//! `agno-storage copy` throughput, run on demand through `scripts/bench-copy.sh` (which seeds
//! the source and builds the CLI), or directly:
//!
//! ```sh
//! AGNO_STORAGE_BIN=…/release/agno-storage BENCH_COPY_SRC=/path/v3.db \
//! AGNO_TEST_POSTGRES_URL=postgres://… cargo bench -p agno-storage-sql --features sqlite,postgres --bench copy
//! ```
//!
//! Copies the agno v3 SQLite database `BENCH_COPY_SRC` (read-only here) and reports records
//! per second (rows of every agno table but the schema stamps) of four contenders, alternated
//! for `BENCH_ROUNDS` rounds (default 2):
//!
//! - ours → PostgreSQL: `agno-storage copy sqlite://SRC postgres://…?schema=S`, S fresh;
//! - bare → PostgreSQL: every row read with rusqlite and written by one plain
//!   `INSERT` through sqlx, autocommitted, one after the other, into tables `agno-storage
//!   migrate` created in another fresh schema (the same layout);
//! - ours → SQLite: `agno-storage copy sqlite://SRC sqlite://DST`, DST a fresh file;
//! - bare → SQLite: the same plain-`INSERT` loop through rusqlite into a fresh file with our
//!   tables, in WAL mode at `synchronous=FULL` (what ours opens with), one commit per row.
//!
//! Every destination is counted against the source and then dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use agno_storage_core::now_epoch_seconds;
use serde_json::Value;
use sqlx::postgres::PgPoolOptions;
use sqlx::{PgPool, Row};

/// Tables in an order that keeps foreign keys satisfied.
fn tables(conn: &rusqlite::Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'agno_%' AND name <> 'agno_schema_versions'")
        .unwrap();
    let mut names: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let rank = |n: &str| match n {
        "agno_sessions" => 0,
        "agno_runs" => 1,
        "agno_schedules" => 2,
        "agno_schedule_runs" => 3,
        _ => 4,
    };
    names.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.cmp(b)));
    names
}

fn counts(conn: &rusqlite::Connection) -> HashMap<String, i64> {
    tables(conn)
        .into_iter()
        .map(|t| {
            let n = conn
                .query_row(&format!("SELECT count(*) FROM \"{t}\""), [], |r| r.get(0))
                .unwrap();
            (t, n)
        })
        .collect()
}

async fn pg_counts(
    pool: &PgPool,
    schema: &str,
    want: &HashMap<String, i64>,
) -> HashMap<String, i64> {
    let mut out = HashMap::new();
    for t in want.keys() {
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM \"{schema}\".\"{t}\""
        )))
        .fetch_one(pool)
        .await
        .map(|r| r.get(0))
        .unwrap_or(-1);
        out.insert(t.clone(), n);
    }
    out
}

fn cli(bin: &Path, args: &[&str]) -> Duration {
    let start = Instant::now();
    let out = Command::new(bin).args(args).output().unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}",
        bin.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn pg_url(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}schema={schema}")
}

fn fresh_schema(tag: &str) -> String {
    format!(
        "agno_ct_{}_{tag}_{}",
        now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

fn fresh_file(dir: &Path, tag: &str) -> PathBuf {
    dir.join(format!("{tag}-{}.db", uuid::Uuid::new_v4().simple()))
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal", ".migrate.lock"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

async fn drop_schema(pool: &PgPool, schema: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"
    )))
    .execute(pool)
    .await
    .unwrap();
}

fn text(v: rusqlite::types::Value) -> Option<String> {
    use rusqlite::types::Value as V;
    match v {
        V::Null => None,
        V::Integer(i) => Some(i.to_string()),
        V::Real(f) => Some(f.to_string()),
        V::Text(s) => Some(s),
        V::Blob(b) => Some(String::from_utf8_lossy(&b).into_owned()),
    }
}

/// A JSON column's text as PostgreSQL takes it: SQLite holds some JSON values encoded twice
/// (agno's layout), which is undone once, as the adapters do when they read.
fn json_text(s: String) -> String {
    match serde_json::from_str::<Value>(&s) {
        Ok(Value::String(inner)) if serde_json::from_str::<Value>(&inner).is_ok() => inner,
        _ => s,
    }
}

/// The plain-INSERT loop into PostgreSQL; returns the rows written.
async fn bare_pg(src: &Path, pool: &PgPool, schema: &str) -> i64 {
    let conn =
        rusqlite::Connection::open_with_flags(src, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let mut written = 0;
    for t in tables(&conn) {
        let types: HashMap<String, String> = sqlx::query(
            "SELECT column_name, udt_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
        )
        .bind(schema)
        .bind(&t)
        .fetch_all(pool)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
        if types.is_empty() {
            continue;
        }
        let mut stmt = conn.prepare(&format!("SELECT * FROM \"{t}\"")).unwrap();
        let cols: Vec<(usize, String, String)> = stmt
            .column_names()
            .iter()
            .enumerate()
            .filter_map(|(i, c)| types.get(*c).map(|ty| (i, c.to_string(), ty.clone())))
            .collect();
        let sql = format!(
            "INSERT INTO \"{schema}\".\"{t}\" ({}) VALUES ({})",
            cols.iter()
                .map(|c| format!("\"{}\"", c.1))
                .collect::<Vec<_>>()
                .join(", "),
            cols.iter()
                .enumerate()
                .map(|(n, c)| format!("CAST(CAST(${} AS text) AS {})", n + 1, c.2))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
            for (i, _, ty) in &cols {
                let v = text(row.get(*i).unwrap());
                let v = if ty == "jsonb" || ty == "json" {
                    v.map(json_text)
                } else {
                    v
                };
                q = q.bind(v);
            }
            q.execute(pool).await.unwrap();
            written += 1;
        }
    }
    written
}

/// The plain-INSERT loop into SQLite; returns the rows written.
fn bare_sqlite(src: &Path, dst: &Path) -> i64 {
    let from =
        rusqlite::Connection::open_with_flags(src, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    let to = rusqlite::Connection::open(dst).unwrap();
    let _: String = to
        .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
        .unwrap();
    to.pragma_update(None, "synchronous", "FULL").unwrap();
    to.pragma_update(None, "foreign_keys", "ON").unwrap();
    let mut written = 0;
    for t in tables(&from) {
        let dst_cols: Vec<String> = to
            .prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let cols: Vec<String> = from
            .prepare(&format!("SELECT name FROM pragma_table_info('{t}')"))
            .unwrap()
            .query_map([], |r| r.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .filter(|c| dst_cols.contains(c))
            .collect();
        if cols.is_empty() {
            continue;
        }
        let mut stmt = from
            .prepare(&format!(
                "SELECT {} FROM \"{t}\"",
                cols.iter()
                    .map(|c| format!("\"{c}\""))
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
            .unwrap();
        let sql = format!(
            "INSERT INTO \"{t}\" ({}) VALUES ({})",
            cols.iter()
                .map(|c| format!("\"{c}\""))
                .collect::<Vec<_>>()
                .join(", "),
            vec!["?"; cols.len()].join(", ")
        );
        let mut insert = to.prepare(&sql).unwrap();
        let mut rows = stmt.query([]).unwrap();
        while let Some(row) = rows.next().unwrap() {
            let values: Vec<rusqlite::types::Value> =
                (0..cols.len()).map(|i| row.get(i).unwrap()).collect();
            insert.execute(rusqlite::params_from_iter(values)).unwrap();
            written += 1;
        }
    }
    written
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let mid = v.len() / 2;
    if v.len().is_multiple_of(2) {
        (v[mid - 1] + v[mid]) / 2.0
    } else {
        v[mid]
    }
}

/// Ratios of two series round by round (each pair measured back to back).
fn ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x / y).collect()
}

fn show(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn main() {
    let (Ok(bin), Ok(src)) = (
        std::env::var("AGNO_STORAGE_BIN"),
        std::env::var("BENCH_COPY_SRC"),
    ) else {
        eprintln!(
            "copy: set AGNO_STORAGE_BIN and BENCH_COPY_SRC (scripts/bench-copy.sh does); nothing to measure"
        );
        return;
    };
    let Ok(url) = std::env::var("AGNO_TEST_POSTGRES_URL") else {
        eprintln!("copy: AGNO_TEST_POSTGRES_URL is not set; nothing to measure");
        return;
    };
    let (bin, src) = (PathBuf::from(bin), PathBuf::from(src));
    let src_url = format!("sqlite://{}", src.display());
    let dir = std::env::var_os("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("agno-bench"));
    std::fs::create_dir_all(&dir).unwrap();
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let want = counts(&rusqlite::Connection::open(&src).unwrap());
    let records: i64 = want.values().sum();
    let mut listed: Vec<_> = want.iter().filter(|(_, n)| **n > 0).collect();
    listed.sort();
    println!("source {}: {records} records {listed:?}", src.display());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let pool = rt
        .block_on(PgPoolOptions::new().max_connections(1).connect(&url))
        .unwrap();
    let (mut ours_pg, mut bare_pgs, mut ours_sq, mut bare_sqs) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        // ours -> PostgreSQL
        let schema = fresh_schema("copy_ours");
        let took = cli(&bin, &["copy", &src_url, &pg_url(&url, &schema)]);
        let got = rt.block_on(pg_counts(&pool, &schema, &want));
        rt.block_on(drop_schema(&pool, &schema));
        assert_eq!(got, want, "ours -> postgres");
        ours_pg.push(records as f64 / took.as_secs_f64());

        // bare -> PostgreSQL, into the tables `migrate` creates
        let schema = fresh_schema("copy_bare");
        cli(&bin, &["migrate", &pg_url(&url, &schema)]);
        let start = Instant::now();
        let written = rt.block_on(bare_pg(&src, &pool, &schema));
        let took = start.elapsed();
        let got = rt.block_on(pg_counts(&pool, &schema, &want));
        rt.block_on(drop_schema(&pool, &schema));
        assert_eq!(got, want, "bare -> postgres");
        bare_pgs.push(written as f64 / took.as_secs_f64());

        // ours -> SQLite
        let dst = fresh_file(&dir, "copy-ours");
        let took = cli(
            &bin,
            &["copy", &src_url, &format!("sqlite://{}", dst.display())],
        );
        let got = counts(&rusqlite::Connection::open(&dst).unwrap());
        remove_db(&dst);
        assert_eq!(got, want, "ours -> sqlite");
        ours_sq.push(records as f64 / took.as_secs_f64());

        // bare -> SQLite
        let dst = fresh_file(&dir, "copy-bare");
        cli(&bin, &["migrate", &format!("sqlite://{}", dst.display())]);
        let start = Instant::now();
        let written = bare_sqlite(&src, &dst);
        let took = start.elapsed();
        let got = counts(&rusqlite::Connection::open(&dst).unwrap());
        remove_db(&dst);
        assert_eq!(got, want, "bare -> sqlite");
        bare_sqs.push(written as f64 / took.as_secs_f64());

        println!(
            "round {round}: records/s: ours->pg {:.0}, bare->pg {:.0}, ours->sqlite {:.0}, bare->sqlite {:.0}",
            ours_pg[round], bare_pgs[round], ours_sq[round], bare_sqs[round]
        );
    }
    let (op, bp, os, bs) = (
        median(&ours_pg),
        median(&bare_pgs),
        median(&ours_sq),
        median(&bare_sqs),
    );
    println!(
        "median records/s: ours->pg {op:.0}, bare->pg {bp:.0}, ours->sqlite {os:.0}, bare->sqlite {bs:.0}"
    );
    let (rp, rs, rps) = (
        ratios(&ours_pg, &bare_pgs),
        ratios(&ours_sq, &bare_sqs),
        ratios(&ours_pg, &ours_sq),
    );
    println!(
        "per round (median): ours/bare to PostgreSQL {} ({:.2}); ours/bare to SQLite {} ({:.2}); \
         ours to PostgreSQL / ours to SQLite {} ({:.2})",
        show(&rp),
        median(&rp),
        show(&rs),
        median(&rs),
        show(&rps),
        median(&rps)
    );
}
