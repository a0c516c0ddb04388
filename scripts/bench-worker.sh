#!/usr/bin/env bash
# The worker benchmarks, on demand: installs graphile-worker 0.18 from npm (once, into
# ~/.cache/agno-storage/graphile-worker), then runs the drain bench (ours, the bare batched
# loop and graphile-worker, default and batched, alternating) and the enqueue-to-start
# latency bench against AGNO_TEST_POSTGRES_URL (started by scripts/services.sh if unset),
# then the SQLite and MySQL drain beside bare loops (MySQL from AGNO_TEST_MYSQL_URL).
#   scripts/bench-worker.sh            # BENCH_JOBS=20000 BENCH_ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${AGNO_TEST_POSTGRES_URL:-}" ]; then
    # shellcheck source=services.sh
    source scripts/services.sh
    ensure_postgres
fi
peer="${HOME}/.cache/agno-storage/graphile-worker"
if [ ! -d "${peer}/node_modules/graphile-worker" ]; then
    mkdir -p "${peer}"
    npm install --prefix "${peer}" --no-audit --no-fund graphile-worker@0.18.0 >&2
fi
cp agno-storage-worker/benches/graphile-worker-bench.js "${peer}/"
GRAPHILE_BENCH="${peer}" cargo bench -p agno-storage-worker --bench drain
cargo bench -p agno-storage-worker --bench latency
cargo bench -p agno-storage-worker --bench backends
