#!/usr/bin/env bash
# `agno-storage copy` throughput benchmark, run on demand: SQLite -> PostgreSQL and
# SQLite -> SQLite, each beside a plain one-INSERT-per-row loop over the same rows
# (agno-storage-sql/benches/copy.rs has the method).
#
# The source: an agno 2.x database (agno 2.9.0's tables from interop/agno_driver.py write-v2,
# filled by scripts/bench-seed-v2.py with BENCH_SESSIONS sessions, default 2,000, of
# BENCH_RUNS runs each, default 10, and BENCH_MEMORIES memories, default 2,000), migrated to
# v3 by `agno-storage migrate` and cleared of the legacy blobs (`cleanup-legacy-runs --force`),
# so runs are rows of agno_runs.
#
#   source /tmp/agno-env   # AGNO_TEST_POSTGRES_URL, AGNO_TEST_PYTHON_V2
#   CARGO_TARGET_DIR=$HOME/.cache/agno-storage/target scripts/bench-copy.sh
#
# BENCH_DIR (default $TMPDIR/agno-bench-copy) holds the files and is removed afterwards;
# BENCH_ROUNDS (default 2) alternations of the four contenders. AGNO_STORAGE_BIN overrides the
# binary (built with --features postgres; default: a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGNO_TEST_PYTHON_V2:?set AGNO_TEST_PYTHON_V2 (agno 2.9.0 venv python)}"
: "${AGNO_TEST_POSTGRES_URL:?set AGNO_TEST_POSTGRES_URL}"
SESSIONS=${BENCH_SESSIONS:-2000}
RUNS=${BENCH_RUNS:-10}
MEMORIES=${BENCH_MEMORIES:-2000}
export BENCH_DIR=${BENCH_DIR:-${TMPDIR:-/tmp}/agno-bench-copy}
TARGET=${CARGO_TARGET_DIR:-target}
if [[ -z "${AGNO_STORAGE_BIN:-}" ]]; then
  nice -n 5 cargo build --release -q -p agno-storage-cli --features postgres
fi
export AGNO_STORAGE_BIN=${AGNO_STORAGE_BIN:-$(cd "$TARGET" && pwd)/release/agno-storage}
rm -rf "$BENCH_DIR" && mkdir -p "$BENCH_DIR"
export BENCH_COPY_SRC="$BENCH_DIR/source.db"

echo "seeding: $SESSIONS sessions x $RUNS runs, $MEMORIES memories (agno 2.x), migrated to v3"
"$AGNO_TEST_PYTHON_V2" interop/agno_driver.py write-v2 "sqlite:$BENCH_COPY_SRC" 2>/dev/null
"$AGNO_TEST_PYTHON_V2" scripts/bench-seed-v2.py "$BENCH_COPY_SRC" "$SESSIONS" "$RUNS" "$MEMORIES"
"$AGNO_STORAGE_BIN" migrate "sqlite://$BENCH_COPY_SRC" >/dev/null
"$AGNO_STORAGE_BIN" cleanup-legacy-runs "sqlite://$BENCH_COPY_SRC" --force >/dev/null

nice -n 5 cargo bench -q -p agno-storage-sql --features sqlite,postgres --bench copy
rm -rf "$BENCH_DIR"
