#!/usr/bin/env bash
# Runs every test of the workspace against real servers on loopback.
#
# Starts (installing when missing) the services the tests need, builds the Python venvs
# for the interop tests (pinned agno releases from PyPI), then runs `cargo test` with the
# backend features the tests cover. Under CI=true an unreachable backend fails the run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# shellcheck source=scripts/services.sh
source scripts/services.sh
ensure_postgres
ensure_redis
ensure_valkey
ensure_mariadb
ensure_dynamodb
ensure_firestore
ensure_agno_venv 2.9.0 AGNO_TEST_PYTHON_V2
ensure_agno_venv 3.1.10 AGNO_TEST_PYTHON_V3
ensure_gcs
ensure_s3
ensure_mongodb

FEATURES="agno-storage-sql/sqlite,agno-storage-sql/postgres,agno-storage-sql/mysql,agno-storage-cli/full,agno-storage-json/fs,agno-storage-json/memory,agno-storage-json/gcs,agno-storage-json/s3,agno-storage-mongo/mongodb,agno-storage-kv/redis,agno-storage-dynamo/dynamodb,agno-storage-firestore/firestore,agno-storage-surreal/kv-mem,agno-storage-surreal/surrealkv,agno-storage-surreal/remote"
cargo test --workspace --no-fail-fast --features "$FEATURES" "$@"
