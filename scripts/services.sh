#!/usr/bin/env bash
# Makes sure the servers the tests use answer on loopback, starting them when they don't,
# and exports the AGNO_TEST_<BACKEND>_URL variables the test targets read.
# Sourced by scripts/test.sh; safe to source again (a server that answers is left alone).

log() { echo "[services] $*" >&2; }

wait_for() { # wait_for <name> <seconds> <cmd...>
  local name=$1 seconds=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if (( SECONDS >= deadline )); then log "$name did not answer within ${seconds}s"; return 1; fi
    sleep 0.5
  done
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }

ensure_postgres() {
  if ! command -v pg_isready >/dev/null; then
    log "installing postgresql (Debian)"
    apt-get install -y -q --no-install-recommends postgresql >/dev/null
  fi
  if ! pg_up; then
    log "starting PostgreSQL"
    local cluster
    cluster=$(ls /etc/postgresql 2>/dev/null | head -n1)
    if [[ -z "$cluster" ]]; then log "no PostgreSQL cluster under /etc/postgresql"; return 1; fi
    pg_ctlcluster --skip-systemctl-redirect "$cluster" main start
    wait_for postgres 60 pg_up
  fi
  export AGNO_TEST_POSTGRES_URL="${AGNO_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
  log "postgres: $AGNO_TEST_POSTGRES_URL"
}

# ensure_agno_venv VERSION VAR: a venv with the pinned agno release from PyPI; exports VAR
# as its python. Rebuilt only when the requirements file changes.
ensure_agno_venv() {
  local version=$1 var=$2
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  local venv="$cache/venv-agno-$version" req="interop/requirements-agno-$version.txt"
  if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
    log "building $venv (pip install -r $req)"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
  fi
  export "$var=$venv/bin/python"
  log "agno $version: $venv"
}
