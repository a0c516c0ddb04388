#!/usr/bin/env bash
# v2 -> v3 migration benchmark, run on demand: time and peak memory (max RSS from
# /usr/bin/time -v) of `agno-storage migrate sqlite://A` against agno 3.1.10's own
# MigrationManager (interop/agno_driver.py migrate-v3) on an identical copy B of one agno 2.x
# SQLite database.
#
# The database: agno 2.9.0 (interop/agno_driver.py write-v2, from $AGNO_TEST_PYTHON_V2) creates
# its tables and a few rows (one memory, eval run and knowledge content; its two sessions are
# deleted), then BENCH_SESSIONS sessions (default 10,000) with BENCH_RUNS runs each (default
# 10) are inserted by scripts/bench-seed-v2.py in the encoding agno 2.9.0's SqliteDb writes
# (JSON columns double-encoded, runs as one blob per session): 9 in 10 sessions are agent
# sessions, 1 in 10 team sessions whose runs alternate team run / member run (parent_run_id).
# Each run carries ~1 KB (content, two messages, metrics), as a chat turn does.
#
# Both results are checked to hold BENCH_SESSIONS x BENCH_RUNS rows in agno_runs, the same ones
# (run_id, session, type, run_index, parent, user, status). A third run times agno's start-up
# alone (the interpreter importing agno), which its figure includes.
#
#   source /tmp/agno-env   # AGNO_TEST_PYTHON_V2, AGNO_TEST_PYTHON_V3
#   CARGO_TARGET_DIR=$HOME/.cache/agno-storage/target scripts/bench-migration.sh
#
# BENCH_DIR (default $TMPDIR/agno-bench-migration) holds the files; it is emptied afterwards
# unless BENCH_KEEP=1. AGNO_STORAGE_BIN overrides the binary (default: release build).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${AGNO_TEST_PYTHON_V2:?set AGNO_TEST_PYTHON_V2 (agno 2.9.0 venv python)}"
: "${AGNO_TEST_PYTHON_V3:?set AGNO_TEST_PYTHON_V3 (agno 3.1.10 venv python)}"
SESSIONS=${BENCH_SESSIONS:-10000}
RUNS=${BENCH_RUNS:-10}
DIR=${BENCH_DIR:-${TMPDIR:-/tmp}/agno-bench-migration}
TARGET=${CARGO_TARGET_DIR:-target}
BIN=${AGNO_STORAGE_BIN:-$TARGET/release/agno-storage}
if [[ -z "${AGNO_STORAGE_BIN:-}" ]]; then
  nice -n 5 cargo build --release -q -p agno-storage-cli --features postgres
fi
rm -rf "$DIR" && mkdir -p "$DIR"
SEED="$DIR/v2.db"

echo "seeding an agno 2.x database: $SESSIONS sessions x $RUNS runs"
"$AGNO_TEST_PYTHON_V2" interop/agno_driver.py write-v2 "sqlite:$SEED" 2>/dev/null
"$AGNO_TEST_PYTHON_V2" scripts/bench-seed-v2.py "$SEED" "$SESSIONS" "$RUNS" 0
cp "$SEED" "$DIR/A.db"
cp "$SEED" "$DIR/B.db"
echo "database: $(du -h "$SEED" | cut -f1)"

measure() { # label, command...
  local label=$1; shift
  sync
  /usr/bin/time -v "$@" >"$DIR/$label.out" 2>"$DIR/$label.time" || {
    cat "$DIR/$label.out" "$DIR/$label.time" >&2; exit 1; }
  local wall rss
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$DIR/$label.time")
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$DIR/$label.time")
  local user sys
  user=$(sed -n 's/.*User time (seconds): //p' "$DIR/$label.time")
  sys=$(sed -n 's/.*System time (seconds): //p' "$DIR/$label.time")
  local secs
  secs=$(awk -F: '{ if (NF == 3) print $1*3600 + $2*60 + $3; else print $1*60 + $2 }' <<<"$wall")
  echo "$label $secs $rss $user $sys" >>"$DIR/results"
  printf '%-28s wall %8.1f s  user %7.1f s  sys %6.1f s  max RSS %8.1f MB\n' "$label" "$secs" "$user" "$sys" "$(awk "BEGIN{print $rss/1024}")"
}

measure "ours" "$BIN" migrate "sqlite://$DIR/A.db"
measure "agno-3.1.10" "$AGNO_TEST_PYTHON_V3" interop/agno_driver.py migrate-v3 "sqlite:$DIR/B.db"
# what of agno's figure is the interpreter starting and importing agno, not migrating
measure "agno-3.1.10-import-only" "$AGNO_TEST_PYTHON_V3" -c \
  "import agno.db.sqlite, agno.db.migrations.manager, agno.session, agno.run.agent, agno.run.team"

want=$((SESSIONS * RUNS))
for f in A B; do
  got=$(sqlite3 "$DIR/$f.db" "SELECT count(*) FROM agno_runs")
  parents=$(sqlite3 "$DIR/$f.db" "SELECT count(*) FROM agno_runs WHERE parent_run_id IS NOT NULL")
  echo "$f.db: $got runs in agno_runs ($parents with a parent_run_id)"
  [[ "$got" == "$want" ]] || { echo "expected $want runs in $f.db" >&2; exit 1; }
done

rows() { sqlite3 "$1" "SELECT run_id, session_id, run_type, run_index, parent_run_id, user_id, status FROM agno_runs ORDER BY run_id" | md5sum; }
if [[ "$(rows "$DIR/A.db")" == "$(rows "$DIR/B.db")" ]]; then
  echo "A.db and B.db hold the same runs (run_id, session_id, run_type, run_index, parent_run_id, user_id, status)"
else
  echo "A.db and B.db differ in their runs" >&2; exit 1
fi

awk '{ t[$1] = $2; m[$1] = $3 } END {
  printf "agno / ours: wall time %.1fx, max RSS %.1fx; less agno start-up (import-only run): wall time %.1fx\n",
    t["agno-3.1.10"] / t["ours"], m["agno-3.1.10"] / m["ours"],
    (t["agno-3.1.10"] - t["agno-3.1.10-import-only"]) / t["ours"] }' "$DIR/results"
[[ "${BENCH_KEEP:-}" == 1 ]] || rm -rf "$DIR"
