//! Where a harness finds its server: a URL from the environment or, with the `containers`
//! feature, a container started for the test process.
//!
//! [`url`] answers, in this order:
//!
//! 1. the `AGNO_TEST_<BACKEND>_URL` variable ([`Backend::env_var`]) when it is set (not
//!    checked here: the harness connects and fails if nothing answers);
//! 2. with the `containers` feature and a reachable Docker daemon, the URL of a container
//!    started for this backend (the images and URL forms are listed on [`Backend`]). One
//!    container per backend per process, started on the first call and shared by every later
//!    one; it stays up until [`stop_all`] or the end of the process (then Docker keeps it
//!    running: call [`stop_all`] before `main` returns; the `watchdog` of testcontainers
//!    removes it on Ctrl-C);
//! 3. otherwise `Ok(None)`: the harness skips its suite with a note, except under `CI=true`
//!    (see [`ci`]), where a selected backend that cannot be reached is an error, never a skip.
//!
//! A container that Docker fails to start (pull refused, ready condition timed out) is an
//! error everywhere, not a skip. Without the `containers` feature this module reads
//! environment variables and nothing else, and the crate depends on no container library.
//!
//! ```no_run
//! use agno_storage_testkit::servers::{self, Backend};
//!
//! fn main() -> std::process::ExitCode {
//!     let url = match servers::url_blocking(Backend::Postgres) {
//!         Ok(Some(url)) => url,
//!         Ok(None) => {
//!             eprintln!("note: no PostgreSQL (set AGNO_TEST_POSTGRES_URL or enable `containers`)");
//!             return std::process::ExitCode::SUCCESS;
//!         }
//!         Err(e) => {
//!             eprintln!("error: {e}");
//!             return std::process::ExitCode::FAILURE;
//!         }
//!     };
//!     println!("testing against {url}");
//!     // conformance_tests::main(MyHarness { url }) here
//!     servers::stop_all();
//!     std::process::ExitCode::SUCCESS
//! }
//! ```

use std::fmt;

use agno_storage_core::{Error, ErrorKind, Result};

/// A backend the test suites run against a server (or an emulator) for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// PostgreSQL. Container: `postgres:16-alpine`; URL
    /// `postgres://postgres:postgres@HOST:PORT/postgres`.
    Postgres,
    /// MySQL. Container: `mysql:8.1` (empty root password); URL `mysql://root@HOST:PORT`.
    MySql,
    /// MongoDB. Container: `mongo:5.0.6` as a one-node replica set (so transactions work);
    /// URL `mongodb://HOST:PORT/?directConnection=true`.
    MongoDb,
    /// Redis. Container: `redis:7-alpine`; URL `redis://HOST:PORT`.
    Redis,
    /// Valkey. Container: `valkey/valkey:8.0.2-alpine`; URL `redis://HOST:PORT` (the
    /// `redis` client speaks to both).
    Valkey,
    /// DynamoDB Local. Container: `amazon/dynamodb-local:2.0.0`; URL `http://HOST:PORT`
    /// (any access key and secret work).
    DynamoDb,
    /// The Firestore emulator. Container: `google/cloud-sdk:emulators` running
    /// `gcloud emulators firestore start`; URL `http://HOST:PORT` (set
    /// `FIRESTORE_EMULATOR_HOST` to `HOST:PORT` for the client).
    Firestore,
    /// SurrealDB. Container: `surrealdb/surrealdb:latest`, in memory, user `root` password
    /// `root`; URL `ws://HOST:PORT`.
    SurrealDb,
    /// Google Cloud Storage as fake-gcs-server. Container: `fsouza/fake-gcs-server:1.52.2`
    /// (memory backend, plain HTTP) with the bucket `agno-test` created; URL
    /// `http://HOST:PORT`, the JSON API endpoint (`object_store` speaks GCS's XML API, which
    /// fake-gcs-server lacks: put `scripts/gcs-xml-shim.py` in front of it).
    Gcs,
}

impl Backend {
    /// Every backend, in declaration order.
    pub const ALL: [Backend; 9] = [
        Backend::Postgres,
        Backend::MySql,
        Backend::MongoDb,
        Backend::Redis,
        Backend::Valkey,
        Backend::DynamoDb,
        Backend::Firestore,
        Backend::SurrealDb,
        Backend::Gcs,
    ];

    /// Short lower-case name (`postgres`, `mysql`, `mongodb`, `redis`, `valkey`,
    /// `dynamodb`, `firestore`, `surrealdb`, `gcs`).
    pub fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::MongoDb => "mongodb",
            Backend::Redis => "redis",
            Backend::Valkey => "valkey",
            Backend::DynamoDb => "dynamodb",
            Backend::Firestore => "firestore",
            Backend::SurrealDb => "surrealdb",
            Backend::Gcs => "gcs",
        }
    }

    /// The variable that names this backend's server: `AGNO_TEST_<NAME>_URL`, e.g.
    /// `AGNO_TEST_POSTGRES_URL` (the ones `scripts/test.sh` exports).
    pub fn env_var(self) -> &'static str {
        match self {
            Backend::Postgres => "AGNO_TEST_POSTGRES_URL",
            Backend::MySql => "AGNO_TEST_MYSQL_URL",
            Backend::MongoDb => "AGNO_TEST_MONGODB_URL",
            Backend::Redis => "AGNO_TEST_REDIS_URL",
            Backend::Valkey => "AGNO_TEST_VALKEY_URL",
            Backend::DynamoDb => "AGNO_TEST_DYNAMODB_URL",
            Backend::Firestore => "AGNO_TEST_FIRESTORE_URL",
            Backend::SurrealDb => "AGNO_TEST_SURREALDB_URL",
            Backend::Gcs => "AGNO_TEST_GCS_URL",
        }
    }

    #[cfg_attr(not(feature = "containers"), allow(dead_code))]
    fn index(self) -> usize {
        Backend::ALL
            .iter()
            .position(|&b| b == self)
            .expect("every backend is in ALL")
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this is a CI run (`CI` is `true` or `1`), where a backend that cannot be reached
/// fails instead of skipping.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// Whether this build can start containers (the `containers` feature).
pub const CONTAINERS: bool = cfg!(feature = "containers");

/// The URL of `backend`'s server: the `AGNO_TEST_<BACKEND>_URL` variable when set; else,
/// with the `containers` feature and a reachable Docker daemon, a container started (once per
/// process) for it; else `Ok(None)`, meaning "skip".
///
/// # Errors
///
/// [`ErrorKind::Unavailable`] when no server can be had under `CI=true` (no URL, and no
/// `containers` feature or no Docker), or when Docker is reachable but the container does
/// not start. Every later call for the same backend returns the same answer.
pub async fn url(backend: Backend) -> Result<Option<String>> {
    if let Some(url) = from_env(backend) {
        return Ok(Some(url));
    }
    #[cfg(feature = "containers")]
    {
        containers::url(backend).await
    }
    #[cfg(not(feature = "containers"))]
    {
        unreachable_or_skip(
            backend,
            "the `containers` feature of conformance-tests is off".into(),
        )
    }
}

/// [`url`] for synchronous code, such as a harness's `main` before it calls
/// [`conformance_tests::main`]. Do not call it from inside an async runtime (it blocks the thread).
///
/// # Errors
///
/// As [`url`].
pub fn url_blocking(backend: Backend) -> Result<Option<String>> {
    if let Some(url) = from_env(backend) {
        return Ok(Some(url));
    }
    #[cfg(feature = "containers")]
    {
        containers::url_blocking(backend)
    }
    #[cfg(not(feature = "containers"))]
    {
        unreachable_or_skip(
            backend,
            "the `containers` feature of conformance-tests is off".into(),
        )
    }
}

/// For a harness's `main`: the backend's URL ([`url_blocking`]), or the exit code to return
/// without running the suite: success after a note when the backend is not configured
/// (outside CI), failure after the error otherwise.
pub fn url_for_suite(backend: Backend) -> std::result::Result<String, std::process::ExitCode> {
    match url_blocking(backend) {
        Ok(Some(url)) => Ok(url),
        Ok(None) => {
            eprintln!(
                "note: {} is not set and no container was started; skipping the {backend} suite \
                 (./scripts/test.sh sets it)",
                backend.env_var()
            );
            Err(std::process::ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {backend}: {e}");
            Err(std::process::ExitCode::FAILURE)
        }
    }
}

/// The URLs of those of `backends` that can be had ([`url_blocking`]), for a test that runs
/// once per server; the others are skipped with a note.
///
/// # Panics
///
/// When one of them cannot be had under `CI=true`.
pub fn urls_blocking(backends: &[Backend]) -> Vec<String> {
    backends
        .iter()
        .filter_map(|&backend| url_blocking(backend).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// What every test key prefix, database and schema name starts with: a later run drops
/// those older than three hours, which a crashed run left behind.
pub const TEST_STEM: &str = "agno_ct_";

/// `agno_ct_<epoch>_<8 hex>`: a fresh stem for this process's names ([`TEST_STEM`], then the
/// epoch the leftover sweeps read).
pub fn run_stem() -> String {
    format!(
        "{TEST_STEM}{}_{}",
        agno_storage_core::now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// Stops and removes every container [`url`] started in this process. Call it from
/// synchronous code once the suite has run (after [`conformance_tests::main`] returns); later calls to
/// [`url`] for those backends answer the old, now dead, URL. Without the `containers`
/// feature, or when nothing was started, it does nothing. Setting
/// `TESTCONTAINERS_COMMAND=keep` keeps the containers for inspection.
pub fn stop_all() {
    #[cfg(feature = "containers")]
    containers::stop_all();
}

fn from_env(backend: Backend) -> Option<String> {
    std::env::var(backend.env_var())
        .ok()
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

/// `Ok(None)` with a note, or under `CI=true` the error saying why there is no server.
fn unreachable_or_skip(backend: Backend, why: String) -> Result<Option<String>> {
    if ci() {
        Err(unavailable(
            backend,
            format!(
                "CI=true but {backend} cannot be reached: {} is not set and {why}",
                backend.env_var()
            ),
        ))
    } else {
        eprintln!(
            "note: no {backend} server: {} is not set and {why}; its tests are skipped",
            backend.env_var()
        );
        Ok(None)
    }
}

fn unavailable(backend: Backend, message: String) -> Error {
    Error::new(ErrorKind::Unavailable, message)
        .with_backend(backend.name())
        .with_operation("servers::url")
}

#[cfg(feature = "containers")]
mod containers {
    use std::any::Any;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Mutex, OnceLock};
    use std::time::{Duration, Instant};

    use testcontainers::core::{ContainerPort, IntoContainerPort};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{ContainerAsync, GenericImage, Image, ImageExt};
    use testcontainers_modules::{
        dynamodb_local, google_cloud_sdk_emulators, mongo, mysql, postgres, redis, surrealdb,
        valkey,
    };
    use tokio::sync::OnceCell;

    use super::{unavailable, unreachable_or_skip, Backend, Result};

    /// One answer per backend, decided by the first call.
    type Outcome = std::result::Result<Option<String>, String>;
    static STARTED: [OnceCell<Outcome>; 9] = [const { OnceCell::const_new() }; 9];
    /// The containers themselves, kept alive until `stop_all`.
    static CONTAINERS: Mutex<Vec<Box<dyn Any + Send>>> = Mutex::new(Vec::new());
    /// Every Docker call runs on this runtime, which lives as long as the process, so the
    /// client's connections outlive the caller's runtime.
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();

    fn runtime() -> &'static tokio::runtime::Runtime {
        RUNTIME.get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("agno-test-containers")
                .enable_all()
                .build()
                .expect("start the runtime for testcontainers")
        })
    }

    pub(super) async fn url(backend: Backend) -> Result<Option<String>> {
        let outcome = runtime()
            .spawn(outcome(backend))
            .await
            .unwrap_or_else(|e| Err(format!("starting the container panicked: {e}")));
        finish(backend, outcome)
    }

    pub(super) fn url_blocking(backend: Backend) -> Result<Option<String>> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime().spawn(async move {
            let _ = tx.send(outcome(backend).await);
        });
        let outcome = rx
            .recv()
            .unwrap_or_else(|_| Err("starting the container panicked".into()));
        finish(backend, outcome)
    }

    pub(super) fn stop_all() {
        let taken = std::mem::take(&mut *CONTAINERS.lock().unwrap_or_else(|e| e.into_inner()));
        if taken.is_empty() {
            return;
        }
        // `ContainerAsync`'s `Drop` removes the container and needs a runtime.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        runtime().spawn(async move {
            drop(taken);
            let _ = tx.send(());
        });
        let _ = rx.recv();
    }

    fn finish(backend: Backend, outcome: Outcome) -> Result<Option<String>> {
        match outcome {
            Ok(Some(url)) => Ok(Some(url)),
            Ok(None) => unreachable_or_skip(
                backend,
                "no Docker daemon answers (DOCKER_HOST, /var/run/docker.sock)".into(),
            ),
            Err(e) => Err(unavailable(
                backend,
                format!("the {backend} container did not start: {e}"),
            )),
        }
    }

    /// `Ok(None)`: no Docker; `Err`: Docker is there and the container failed.
    async fn outcome(backend: Backend) -> Outcome {
        STARTED[backend.index()]
            .get_or_init(|| async move {
                if !docker_reachable() {
                    return Ok(None);
                }
                start(backend).await.map(Some)
            })
            .await
            .clone()
    }

    /// Whether a Docker daemon is likely to answer, without a client: `DOCKER_HOST` or a
    /// `~/.testcontainers.properties` (testcontainers decides), else one of the default
    /// sockets accepts a connection.
    pub(super) fn docker_reachable() -> bool {
        if std::env::var_os("DOCKER_HOST").is_some() {
            return true;
        }
        let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        if home
            .as_ref()
            .is_some_and(|h| h.join(".testcontainers.properties").exists())
        {
            return true;
        }
        #[cfg(unix)]
        {
            let mut sockets = vec![std::path::PathBuf::from("/var/run/docker.sock")];
            if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR") {
                sockets.push(std::path::PathBuf::from(dir).join(".docker/run/docker.sock"));
            }
            if let Some(h) = home {
                sockets.push(h.join(".docker/run/docker.sock"));
            }
            sockets
                .iter()
                .any(|s| std::os::unix::net::UnixStream::connect(s).is_ok())
        }
        #[cfg(not(unix))]
        {
            true
        }
    }

    async fn start(backend: Backend) -> std::result::Result<String, String> {
        let e = |e: testcontainers::TestcontainersError| e.to_string();
        match backend {
            Backend::Postgres => {
                let c = postgres::Postgres::default()
                    .with_tag("16-alpine")
                    .start()
                    .await
                    .map_err(e)?;
                let (host, port) = address(&c, 5432).await?;
                Ok(keep(
                    c,
                    format!("postgres://postgres:postgres@{host}:{port}/postgres"),
                ))
            }
            Backend::MySql => {
                let c = mysql::Mysql::default().start().await.map_err(e)?;
                let (host, port) = address(&c, 3306).await?;
                Ok(keep(c, format!("mysql://root@{host}:{port}")))
            }
            Backend::MongoDb => {
                let c = mongo::Mongo::repl_set().start().await.map_err(e)?;
                let (host, port) = address(&c, 27017).await?;
                Ok(keep(
                    c,
                    format!("mongodb://{host}:{port}/?directConnection=true"),
                ))
            }
            Backend::Redis => {
                let c = redis::Redis::default()
                    .with_tag("7-alpine")
                    .start()
                    .await
                    .map_err(e)?;
                let (host, port) = address(&c, 6379).await?;
                Ok(keep(c, format!("redis://{host}:{port}")))
            }
            Backend::Valkey => {
                let c = valkey::Valkey::default().start().await.map_err(e)?;
                let (host, port) = address(&c, 6379).await?;
                Ok(keep(c, format!("redis://{host}:{port}")))
            }
            Backend::DynamoDb => {
                let c = dynamodb_local::DynamoDb::default()
                    .start()
                    .await
                    .map_err(e)?;
                let (host, port) = address(&c, 8000).await?;
                Ok(keep(c, format!("http://{host}:{port}")))
            }
            Backend::Firestore => {
                let c = google_cloud_sdk_emulators::CloudSdk::firestore()
                    .with_tag("emulators")
                    .with_startup_timeout(Duration::from_secs(180))
                    .start()
                    .await
                    .map_err(e)?;
                let (host, port) = address(&c, google_cloud_sdk_emulators::FIRESTORE_PORT).await?;
                Ok(keep(c, format!("http://{host}:{port}")))
            }
            Backend::SurrealDb => {
                let c = surrealdb::SurrealDb::default()
                    .with_tag("latest")
                    .start()
                    .await
                    .map_err(e)?;
                let (host, port) = address(&c, 8000).await?;
                Ok(keep(c, format!("ws://{host}:{port}")))
            }
            Backend::Gcs => start_gcs().await,
        }
    }

    /// fake-gcs-server advertises its own address in upload responses, so its host port is
    /// chosen before it starts and passed as `-external-url`. Ready once it creates the
    /// bucket (no log line is relied on).
    async fn start_gcs() -> std::result::Result<String, String> {
        const PORT: u16 = 4443;
        let host_port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot pick a free port: {e}"))?
            .port();
        let external = format!("http://127.0.0.1:{host_port}");
        let c = GenericImage::new("fsouza/fake-gcs-server", "1.52.2")
            .with_exposed_port(PORT.tcp())
            .with_cmd([
                "-scheme".to_owned(),
                "http".to_owned(),
                "-port".to_owned(),
                PORT.to_string(),
                "-backend".to_owned(),
                "memory".to_owned(),
                "-public-host".to_owned(),
                format!("127.0.0.1:{host_port}"),
                "-external-url".to_owned(),
                external.clone(),
            ])
            .with_mapped_port(host_port, ContainerPort::Tcp(PORT))
            .start()
            .await
            .map_err(|e| e.to_string())?;
        let url = external;
        let body = r#"{"name":"agno-test"}"#;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match http_post(host_port, "/storage/v1/b", body) {
                // 200 created, 409 already there.
                Ok(200) | Ok(409) => break,
                Ok(status) if Instant::now() > deadline => {
                    return Err(format!("creating the bucket agno-test answered {status}"))
                }
                Err(err) if Instant::now() > deadline => {
                    return Err(format!("fake-gcs-server does not answer: {err}"))
                }
                _ => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
        Ok(keep(c, url))
    }

    /// A one-shot HTTP/1.0 POST to 127.0.0.1, answering the status code.
    fn http_post(port: u16, path: &str, body: &str) -> std::io::Result<u16> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "POST {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("not an HTTP status line"))
    }

    async fn address<I: Image>(
        c: &ContainerAsync<I>,
        port: u16,
    ) -> std::result::Result<(String, u16), String> {
        let host = c.get_host().await.map_err(|e| e.to_string())?;
        let port = c
            .get_host_port_ipv4(port.tcp())
            .await
            .map_err(|e| e.to_string())?;
        Ok((host.to_string(), port))
    }

    fn keep<I: Image + 'static>(c: ContainerAsync<I>, url: String) -> String {
        CONTAINERS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Box::new(c));
        url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, so the environment changes cannot race with each other.
    #[test]
    fn env_var_then_skip_or_fail() {
        let backend = Backend::SurrealDb;
        assert_eq!(backend.env_var(), "AGNO_TEST_SURREALDB_URL");
        let names: std::collections::HashSet<_> =
            Backend::ALL.iter().map(|b| b.env_var()).collect();
        assert_eq!(names.len(), Backend::ALL.len());
        for b in Backend::ALL {
            assert_eq!(
                b.env_var(),
                format!("AGNO_TEST_{}_URL", b.name().to_uppercase())
            );
        }

        std::env::set_var(backend.env_var(), " ws://db.example:8000 ");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(
            rt.block_on(url(backend)).unwrap().as_deref(),
            Some("ws://db.example:8000")
        );
        assert_eq!(
            url_blocking(backend).unwrap().as_deref(),
            Some("ws://db.example:8000")
        );

        std::env::remove_var(backend.env_var());
        #[cfg(feature = "containers")]
        if containers::docker_reachable() {
            // A container would start: not in a unit test.
            return;
        }
        std::env::set_var("CI", "false");
        assert_eq!(url_blocking(backend).unwrap(), None);
        assert_eq!(rt.block_on(url(backend)).unwrap(), None);
        std::env::set_var("CI", "true");
        let err = url_blocking(backend).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.message().contains("AGNO_TEST_SURREALDB_URL"), "{err}");
        assert_eq!(
            rt.block_on(url(backend)).unwrap_err().kind(),
            ErrorKind::Unavailable
        );
        std::env::remove_var("CI");
        stop_all();
    }
}
