//! Backend URLs: [`parse`] (pure) turns a URL into a [`BackendUrl`], [`open`] turns that
//! into an [`AgnoDb`] with the adapters compiled into this build.

use std::fmt;
use std::path::PathBuf;

use agno_storage_core::{AgnoDb, ErrorKind, OpenMode};
use agno_storage_doc::InMemoryDb;

use crate::Error;

/// The URL forms [`parse`] accepts, as listed in its errors.
pub const SUPPORTED: &str = "sqlite://PATH, memory://, postgres://…, mysql://…, mongodb://…, \
     redis://…, valkey://…, dynamodb://…, firestore://…, surrealdb://…, surrealkv://PATH, \
     surrealdb+mem://, file://DIR, gs://BUCKET/PREFIX, s3://BUCKET/PREFIX";

/// A parsed backend URL: one variant per backend with the parts its adapter needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendUrl {
    /// `sqlite://PATH`: a SQLite file; `sqlite://agno.db` is relative, `sqlite:///x/agno.db`
    /// absolute.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// `memory://`: the in-memory reference store, empty in every process.
    Memory,
    /// `postgres://…` (also `postgresql://` and SQLAlchemy's `postgresql+DRIVER://`).
    Postgres {
        /// The URL, with the scheme normalized to `postgresql://`.
        url: String,
    },
    /// `mysql://…` (also SQLAlchemy's `mysql+DRIVER://`).
    MySql {
        /// The URL, with the scheme normalized to `mysql://`.
        url: String,
    },
    /// `mongodb://…` or `mongodb+srv://…`.
    MongoDb {
        /// The URL as given.
        url: String,
    },
    /// `redis://…` or `rediss://…`.
    Redis {
        /// The URL as given.
        url: String,
    },
    /// `valkey://…` or `valkeys://…`.
    Valkey {
        /// The URL as given.
        url: String,
    },
    /// `dynamodb://…`.
    DynamoDb {
        /// The URL as given.
        url: String,
    },
    /// `firestore://…`.
    Firestore {
        /// The URL as given.
        url: String,
    },
    /// `surrealdb://[USER:PASS@]HOST:PORT/NS/DB` (a server over WebSocket),
    /// `surrealkv://PATH` (an embedded SurrealKV file) or `surrealdb+mem://` (embedded, in
    /// memory); namespace and database default to `agno`.
    SurrealDb {
        /// The URL as given (scheme lower-cased).
        url: String,
    },
    /// `file://DIR`: JSON files in a local directory.
    JsonDir {
        /// The directory.
        dir: PathBuf,
    },
    /// `gs://BUCKET/PREFIX`: JSON files in a Google Cloud Storage bucket.
    Gcs {
        /// The bucket.
        bucket: String,
        /// Object prefix without leading or trailing `/`; empty for the bucket root.
        prefix: String,
    },
    /// `s3://BUCKET/PREFIX`: JSON files in an Amazon S3 (or S3-compatible) bucket, with
    /// credentials, region and endpoint from the environment (`AWS_*`).
    S3 {
        /// The bucket.
        bucket: String,
        /// Object prefix without leading or trailing `/`; empty for the bucket root.
        prefix: String,
    },
}

impl BackendUrl {
    /// The backend's short name, as used in messages.
    pub fn backend(&self) -> &'static str {
        match self {
            BackendUrl::Sqlite { .. } => "sqlite",
            BackendUrl::Memory => "memory",
            BackendUrl::Postgres { .. } => "postgres",
            BackendUrl::MySql { .. } => "mysql",
            BackendUrl::MongoDb { .. } => "mongodb",
            BackendUrl::Redis { .. } => "redis",
            BackendUrl::Valkey { .. } => "valkey",
            BackendUrl::DynamoDb { .. } => "dynamodb",
            BackendUrl::Firestore { .. } => "firestore",
            BackendUrl::SurrealDb { .. } => "surrealdb",
            BackendUrl::JsonDir { .. } => "json (local directory)",
            BackendUrl::Gcs { .. } => "json (Google Cloud Storage)",
            BackendUrl::S3 { .. } => "json (Amazon S3)",
        }
    }

    /// The cargo feature of this crate that compiles the backend's adapter in; `None` for
    /// backends that are always present.
    pub fn feature(&self) -> Option<&'static str> {
        match self {
            BackendUrl::Memory => None,
            BackendUrl::Sqlite { .. } => Some("sqlite"),
            BackendUrl::Postgres { .. } => Some("postgres"),
            BackendUrl::MySql { .. } => Some("mysql"),
            BackendUrl::MongoDb { .. } => Some("mongo"),
            BackendUrl::Redis { .. } | BackendUrl::Valkey { .. } => Some("redis"),
            BackendUrl::DynamoDb { .. } => Some("dynamo"),
            BackendUrl::Firestore { .. } => Some("firestore"),
            BackendUrl::SurrealDb { .. } => Some("surreal"),
            BackendUrl::JsonDir { .. } => Some("json"),
            BackendUrl::Gcs { .. } => Some("gcs"),
            BackendUrl::S3 { .. } => Some("s3"),
        }
    }
}

/// The URL with any password replaced by `***`, safe to print.
impl fmt::Display for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendUrl::Sqlite { path } => write!(f, "sqlite://{}", path.display()),
            BackendUrl::Memory => f.write_str("memory://"),
            BackendUrl::JsonDir { dir } => write!(f, "file://{}", dir.display()),
            BackendUrl::Gcs { bucket, prefix } if prefix.is_empty() => write!(f, "gs://{bucket}"),
            BackendUrl::Gcs { bucket, prefix } => write!(f, "gs://{bucket}/{prefix}"),
            BackendUrl::S3 { bucket, prefix } if prefix.is_empty() => write!(f, "s3://{bucket}"),
            BackendUrl::S3 { bucket, prefix } => write!(f, "s3://{bucket}/{prefix}"),
            BackendUrl::Postgres { url }
            | BackendUrl::MySql { url }
            | BackendUrl::MongoDb { url }
            | BackendUrl::Redis { url }
            | BackendUrl::Valkey { url }
            | BackendUrl::DynamoDb { url }
            | BackendUrl::Firestore { url }
            | BackendUrl::SurrealDb { url } => f.write_str(&redact(url)),
        }
    }
}

/// `url` with its password (if any) replaced by `***`.
fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        Ok(_) => url.to_owned(),
        Err(_) => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => "…".to_owned(),
        },
    }
}

fn unsupported_scheme(scheme: &str) -> Error {
    let shown: String = scheme.chars().take(40).collect();
    Error::new(format!(
        "unknown backend URL scheme `{shown}://`; supported: {SUPPORTED}"
    ))
}

/// Parses a backend URL. Pure: nothing is opened or checked on disk.
///
/// The scheme is case-insensitive. Server URLs must be well-formed and are kept whole
/// (only the SQLAlchemy `+driver` suffix of `postgresql+psycopg://` or `mysql+pymysql://`
/// is dropped). Errors never echo a password.
pub fn parse(input: &str) -> Result<BackendUrl, Error> {
    let input = input.trim();
    if input.is_empty() {
        return Err(Error::new(format!(
            "empty backend URL; expected one of {SUPPORTED}"
        )));
    }
    let Some((scheme, rest)) = input.split_once("://") else {
        return Err(Error::new(format!(
            "`{input}` is not a backend URL (no `scheme://`); expected one of {SUPPORTED}"
        )));
    };
    let scheme = scheme.to_ascii_lowercase();
    let server = |scheme: &str| -> Result<String, Error> {
        let url = format!("{scheme}://{rest}");
        url::Url::parse(&url).map_err(|e| Error::new(format!("invalid {scheme}:// URL: {e}")))?;
        Ok(url)
    };
    let base = scheme
        .split_once('+')
        .map_or(scheme.as_str(), |(base, _)| base);
    match (scheme.as_str(), base) {
        ("sqlite", _) => {
            if rest.is_empty() {
                return Err(Error::new(
                    "sqlite:// needs a file path, e.g. sqlite://agno.db or sqlite:///var/lib/agno/agno.db",
                ));
            }
            Ok(BackendUrl::Sqlite {
                path: PathBuf::from(rest),
            })
        }
        ("memory", _) => match rest {
            "" | "/" => Ok(BackendUrl::Memory),
            _ => Err(Error::new(
                "memory:// takes no host or path: every process gets its own empty in-memory database",
            )),
        },
        (_, "postgres" | "postgresql") => Ok(BackendUrl::Postgres {
            url: server("postgresql")?,
        }),
        (_, "mysql") => Ok(BackendUrl::MySql {
            url: server("mysql")?,
        }),
        ("mongodb" | "mongodb+srv", _) => Ok(BackendUrl::MongoDb {
            url: server(&scheme)?,
        }),
        ("redis" | "rediss", _) => Ok(BackendUrl::Redis {
            url: server(&scheme)?,
        }),
        ("valkey" | "valkeys", _) => Ok(BackendUrl::Valkey {
            url: server(&scheme)?,
        }),
        ("dynamodb", _) => Ok(BackendUrl::DynamoDb {
            url: server(&scheme)?,
        }),
        ("firestore", _) => Ok(BackendUrl::Firestore {
            url: server(&scheme)?,
        }),
        ("surrealdb", _) => Ok(BackendUrl::SurrealDb {
            url: server(&scheme)?,
        }),
        ("surrealdb+mem", _) => {
            let path = rest.trim_matches('/');
            if path.is_empty() || (rest.starts_with('/') && path.split('/').count() == 2) {
                Ok(BackendUrl::SurrealDb {
                    url: format!("surrealdb+mem://{rest}"),
                })
            } else {
                Err(Error::new(
                    "surrealdb+mem:// takes no host: surrealdb+mem:// or surrealdb+mem:///NS/DB",
                ))
            }
        }
        ("surrealkv", _) => {
            if rest.is_empty() {
                return Err(Error::new(
                    "surrealkv:// needs a path, e.g. surrealkv://agno.skv or surrealkv:///var/lib/agno.skv",
                ));
            }
            Ok(BackendUrl::SurrealDb {
                url: format!("surrealkv://{rest}"),
            })
        }
        ("file", _) => {
            if rest.is_empty() {
                return Err(Error::new(
                    "file:// needs a directory, e.g. file://./agno-data or file:///var/lib/agno",
                ));
            }
            Ok(BackendUrl::JsonDir {
                dir: PathBuf::from(rest),
            })
        }
        ("gs", _) => {
            let (bucket, prefix) = parse_bucket(rest, &GCS)?;
            Ok(BackendUrl::Gcs { bucket, prefix })
        }
        ("s3", _) => {
            let (bucket, prefix) = parse_bucket(rest, &S3)?;
            Ok(BackendUrl::S3 { bucket, prefix })
        }
        ("", _) => Err(Error::new(format!(
            "backend URL has no scheme before `://`; expected one of {SUPPORTED}"
        ))),
        (other, _) => Err(unsupported_scheme(other)),
    }
}

/// What a bucket URL scheme accepts.
struct BucketRules {
    scheme: &'static str,
    service: &'static str,
    /// Where the credentials come from, for the error of a URL that carries some.
    credentials: &'static str,
    /// Bucket name lengths, and the punctuation allowed besides lowercase letters and digits.
    lengths: std::ops::RangeInclusive<usize>,
    punctuation: &'static [char],
}

const GCS: BucketRules = BucketRules {
    scheme: "gs",
    service: "GCS",
    credentials: "GOOGLE_APPLICATION_CREDENTIALS or `gcloud auth application-default login`",
    lengths: 3..=222,
    punctuation: &['-', '_', '.'],
};

const S3: BucketRules = BucketRules {
    scheme: "s3",
    service: "S3",
    credentials:
        "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_ENDPOINT for an S3-compatible server)",
    lengths: 3..=63,
    punctuation: &['-', '.'],
};

/// `(bucket, prefix)` of a bucket URL's `BUCKET/PREFIX`, the prefix without leading or
/// trailing `/`.
fn parse_bucket(rest: &str, rules: &BucketRules) -> Result<(String, String), Error> {
    let BucketRules {
        scheme, service, ..
    } = rules;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.contains('@') {
        return Err(Error::new(format!(
            "{scheme}:// URLs take no credentials (found `…@` before the bucket); authenticate with {}",
            rules.credentials
        )));
    }
    if bucket.is_empty() {
        return Err(Error::new(format!(
            "{scheme}:// needs a bucket: {scheme}://BUCKET or {scheme}://BUCKET/PREFIX"
        )));
    }
    let valid = rules.lengths.contains(&bucket.len())
        && bucket.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || rules.punctuation.contains(&c)
        });
    if !valid {
        let allowed: Vec<String> = rules.punctuation.iter().map(|c| format!("'{c}'")).collect();
        return Err(Error::new(format!(
            "invalid {service} bucket name `{bucket}`: use {}-{} lowercase letters, digits, {}",
            rules.lengths.start(),
            rules.lengths.end(),
            allowed.join(", ")
        )));
    }
    Ok((bucket.to_owned(), prefix.trim_matches('/').to_owned()))
}

/// Opens the database behind `url` with the adapters compiled into this build, creating
/// what it lacks ([`OpenMode::CreateMissing`]).
pub async fn open(url: &BackendUrl) -> Result<AgnoDb, Error> {
    open_with_mode(url, OpenMode::CreateMissing).await
}

/// Opens an existing agno database behind `url` and creates or alters nothing
/// ([`OpenMode::Existing`]), for the read-only commands: a missing, empty or unreadable
/// database is an error that names the problem and the fix.
pub async fn open_existing(url: &BackendUrl) -> Result<AgnoDb, Error> {
    open_with_mode(url, OpenMode::Existing).await
}

/// The CLI error of an adapter's failed open: in [`OpenMode::Existing`], a database that is
/// missing or is not an agno database gets the fix appended.
fn open_error(url: &BackendUrl, mode: OpenMode, e: agno_storage_core::Error) -> Error {
    match (mode, e.kind()) {
        (OpenMode::Existing, ErrorKind::NotFound) => {
            let fix =
                format!("check the URL, or create the database with `agno-storage migrate {url}`");
            let message = e.message();
            Error::new(match message.contains(OpenMode::NO_DATABASE_FIX) {
                true => message.replace(OpenMode::NO_DATABASE_FIX, &fix),
                false => format!("{message}; {fix}"),
            })
        }
        (OpenMode::Existing, ErrorKind::SchemaMismatch) => Error::new(format!(
            "{}; check the URL: it must name an agno database",
            e.message()
        )),
        _ => Error::new(e.to_string()),
    }
}

/// Opens the database behind `url` in `mode` with the adapters compiled into this build.
///
/// Each adapter is one `#[cfg(feature = "…")]` arm above the fallback, e.g.
/// `#[cfg(feature = "sqlite")] BackendUrl::Sqlite { path } => …`; the fallback reports
/// the feature that would compile the backend in. `memory://` is always new and empty,
/// whatever the mode.
#[allow(unreachable_patterns)] // the fallback becomes unreachable once every adapter is in
pub async fn open_with_mode(url: &BackendUrl, mode: OpenMode) -> Result<AgnoDb, Error> {
    let _ = mode; // unused when no adapter is compiled in
    match url {
        BackendUrl::Memory => Ok(InMemoryDb::new().agno_db()),
        #[cfg(feature = "sqlite")]
        BackendUrl::Sqlite { path } => {
            let db = agno_storage_sql::SqlDb::open_sqlite_with_mode(
                path,
                agno_storage_sql::TableNames::default(),
                mode,
            )
            .await
            .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "postgres")]
        BackendUrl::Postgres { url: server } => {
            let (server, schema) = split_schema(server);
            let db = agno_storage_sql::SqlDb::connect_postgres_with_mode(
                &server,
                &schema,
                agno_storage_sql::TableNames::default(),
                mode,
            )
            .await
            .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "mysql")]
        BackendUrl::MySql { url: server } => {
            let (server, schema) = split_schema(server);
            let db = agno_storage_sql::SqlDb::connect_mysql_with_mode(
                &server,
                &schema,
                agno_storage_sql::TableNames::default(),
                mode,
            )
            .await
            .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "json")]
        BackendUrl::JsonDir { dir } => {
            let db = agno_storage_json::JsonDb::open_local_with_mode(dir, mode)
                .await
                .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "gcs")]
        BackendUrl::Gcs { bucket, prefix } => {
            let db = agno_storage_json::JsonDb::open_gcs_with_mode(bucket, prefix, mode)
                .await
                .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "s3")]
        BackendUrl::S3 { bucket, prefix } => {
            let db = agno_storage_json::JsonDb::open_s3_with_mode(bucket, prefix, mode)
                .await
                .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "mongo")]
        BackendUrl::MongoDb { url: server } => {
            let db = agno_storage_mongo::MongoDb::connect_with_mode(
                server,
                &mongo_database(server),
                agno_storage_mongo::TableNames::default(),
                mode,
            )
            .await
            .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "redis")]
        BackendUrl::Redis { url: server } | BackendUrl::Valkey { url: server } => {
            let (server, prefix) =
                split_query_param(&server.replacen("valkey", "redis", 1), "prefix");
            let options = agno_storage_kv::KvOptions {
                prefix: prefix.unwrap_or_else(|| "agno".into()),
                stamp_new: true,
                ..Default::default()
            };
            let db = agno_storage_kv::KvDb::connect_with_mode(&server, options, mode)
                .await
                .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "dynamo")]
        BackendUrl::DynamoDb { url: server } => {
            let db =
                agno_storage_dynamo::DynamoDb::connect_with_mode(dynamo_options(server)?, mode)
                    .await
                    .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "firestore")]
        BackendUrl::Firestore { url: server } => {
            let (project, names) = firestore_target(server)?;
            let options = agno_storage_firestore::FirestoreOptions {
                names,
                ..Default::default()
            };
            let db =
                agno_storage_firestore::FirestoreDb::connect_with_mode(&project, options, mode)
                    .await
                    .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        #[cfg(feature = "surreal")]
        BackendUrl::SurrealDb { url: server } => {
            let target = surreal_target(server)?;
            let mut options = agno_storage_surreal::SurrealOptions::new(target.ns, target.db);
            options.credentials = target.credentials;
            let db =
                agno_storage_surreal::SurrealDb::connect_with_mode(&target.engine, options, mode)
                    .await
                    .map_err(|e| open_error(url, mode, e))?;
            Ok(db.agno_db())
        }
        other => Err(not_compiled(other)),
    }
}

/// What `surrealdb://…`, `surrealkv://…` and `surrealdb+mem://…` name: the engine URL the
/// `surrealdb` crate takes, namespace, database and root credentials.
#[cfg_attr(not(feature = "surreal"), allow(dead_code))]
#[derive(Debug, PartialEq, Eq)]
struct SurrealTarget {
    engine: String,
    ns: String,
    db: String,
    credentials: Option<(String, String)>,
}

/// Splits a SurrealDB backend URL (see [`BackendUrl::SurrealDb`]).
#[cfg_attr(not(feature = "surreal"), allow(dead_code))]
fn surreal_target(url: &str) -> Result<SurrealTarget, Error> {
    let ns_db = |path: &str| -> Result<(String, String), Error> {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        match parts.as_slice() {
            [] => Ok(("agno".into(), "agno".into())),
            [ns, db] => Ok(((*ns).to_owned(), (*db).to_owned())),
            _ => Err(Error::new(
                "a SurrealDB URL names the namespace and database as /NS/DB, or neither",
            )),
        }
    };
    if let Some(rest) = url.strip_prefix("surrealdb+mem://") {
        let (ns, db) = ns_db(rest)?;
        return Ok(SurrealTarget {
            engine: "mem://".into(),
            ns,
            db,
            credentials: None,
        });
    }
    if url.starts_with("surrealkv://") {
        return Ok(SurrealTarget {
            engine: url.to_owned(),
            ns: "agno".into(),
            db: "agno".into(),
            credentials: None,
        });
    }
    let parsed =
        url::Url::parse(url).map_err(|e| Error::new(format!("invalid surrealdb:// URL: {e}")))?;
    let host = parsed
        .host_str()
        .ok_or_else(|| Error::new("surrealdb:// needs a host: surrealdb://HOST:PORT/NS/DB"))?;
    let port = parsed.port().unwrap_or(8000);
    let (ns, db) = ns_db(parsed.path())?;
    let credentials = (!parsed.username().is_empty()).then(|| {
        (
            percent_decode(parsed.username()),
            percent_decode(parsed.password().unwrap_or_default()),
        )
    });
    Ok(SurrealTarget {
        engine: format!("ws://{host}:{port}"),
        ns,
        db,
        credentials,
    })
}

/// The query parameters of a server URL, by name.
#[cfg(any(feature = "dynamo", feature = "firestore"))]
fn query_params(url: &url::Url) -> std::collections::HashMap<String, String> {
    url.query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

/// DynamoDB options from `dynamodb://REGION` (AWS, default credential chain) or
/// `dynamodb://[KEY:SECRET@]HOST:PORT` (an endpoint such as DynamoDB Local, over HTTP; a
/// URL with a port is an endpoint). `?region=` overrides the region, `?prefix=` prefixes the
/// table names.
#[cfg(feature = "dynamo")]
fn dynamo_options(url: &str) -> Result<agno_storage_dynamo::DynamoOptions, Error> {
    let parsed =
        url::Url::parse(url).map_err(|e| Error::new(format!("invalid dynamodb:// URL: {e}")))?;
    let params = query_params(&parsed);
    let host = parsed.host_str().unwrap_or_default();
    let mut options = agno_storage_dynamo::DynamoOptions::default();
    match parsed.port() {
        Some(port) => options.endpoint = Some(format!("http://{host}:{port}")),
        None if !host.is_empty() => options.region = host.to_owned(),
        None => {}
    }
    if let Some(region) = params.get("region") {
        options.region = region.clone();
    }
    if let Some(prefix) = params.get("prefix") {
        options.tables = agno_storage_dynamo::TableNames::with_prefix(prefix);
    }
    if !parsed.username().is_empty() {
        options.credentials = Some(agno_storage_dynamo::StaticCredentials {
            access_key_id: percent_decode(parsed.username()),
            secret_access_key: percent_decode(parsed.password().unwrap_or_default()),
        });
    }
    Ok(options)
}

/// `%XX` escapes of a URL's user or password decoded (a secret with `/` or `+` is given as
/// `%2F`, `%2B`); malformed escapes stay as written.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| text.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The project and collection names of `firestore://PROJECT[?prefix=P]`.
#[cfg(feature = "firestore")]
fn firestore_target(url: &str) -> Result<(String, agno_storage_firestore::TableNames), Error> {
    let parsed =
        url::Url::parse(url).map_err(|e| Error::new(format!("invalid firestore:// URL: {e}")))?;
    let project = parsed.host_str().unwrap_or_default().to_owned();
    if project.is_empty() {
        return Err(Error::new(
            "firestore:// needs a project id, e.g. firestore://my-project",
        ));
    }
    let names = match query_params(&parsed).get("prefix") {
        Some(prefix) => agno_storage_firestore::TableNames::with_prefix(prefix),
        None => agno_storage_firestore::TableNames::default(),
    };
    Ok((project, names))
}

/// The database a MongoDB URL names (`mongodb://host/DB?…`), or agno's default `agno`.
#[cfg(feature = "mongo")]
fn mongo_database(url: &str) -> String {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    let path = after_scheme.split_once('/').map_or("", |(_, path)| path);
    let name = path.split(['?', '#']).next().unwrap_or_default();
    if name.is_empty() {
        "agno".into()
    } else {
        name.to_owned()
    }
}

/// Removes `name=VALUE` from a URL's query, returning the URL and the value.
#[cfg(feature = "redis")]
fn split_query_param(url: &str, name: &str) -> (String, Option<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), None);
    };
    let mut value = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.split_once('=') {
            Some((k, v)) if k == name => {
                value = Some(v.to_owned());
                false
            }
            _ => true,
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, value)
}

/// Splits agno's schema (`?schema=NAME`, default `ai`) off a connection URL: the PostgreSQL
/// schema, or the MySQL database the tables live in (agno's `db_schema`; the URL's own
/// database only serves the connection, as with agno).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn split_schema(url: &str) -> (String, String) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_owned(), "ai".to_owned());
    };
    let mut schema = "ai".to_owned();
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("schema=") {
            Some(s) if !s.is_empty() => {
                schema = s.to_owned();
                false
            }
            _ => true,
        })
        .collect();
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    (url, schema)
}

/// The error for a backend whose adapter this build lacks.
fn not_compiled(url: &BackendUrl) -> Error {
    match url.feature() {
        Some(feature) => Error::new(format!(
            "the {} backend is not compiled into this build of agno-storage; rebuild with \
             `--features {feature}` (e.g. `cargo install agno-storage-cli --features {feature}`)",
            url.backend()
        )),
        None => Error::new(format!(
            "the {} backend is not available in this build of agno-storage",
            url.backend()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(url: &str) -> BackendUrl {
        match parse(url) {
            Ok(parsed) => parsed,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    fn err(url: &str) -> String {
        match parse(url) {
            Ok(parsed) => panic!("{url} parsed as {parsed:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(
            ok("sqlite://agno.db"),
            BackendUrl::Sqlite {
                path: "agno.db".into()
            }
        );
        assert_eq!(
            ok("sqlite:///var/lib/agno.db"),
            BackendUrl::Sqlite {
                path: "/var/lib/agno.db".into()
            }
        );
        assert_eq!(
            ok("SQLite://./data/agno.db"),
            BackendUrl::Sqlite {
                path: "./data/agno.db".into()
            }
        );
        assert!(err("sqlite://").contains("needs a file path"));
    }

    #[test]
    fn memory() {
        assert_eq!(ok("memory://"), BackendUrl::Memory);
        assert_eq!(ok("  memory://  "), BackendUrl::Memory);
        assert!(err("memory://somewhere").contains("takes no host or path"));
    }

    #[test]
    fn servers_keep_the_whole_url() {
        let cases: [(&str, BackendUrl); 12] = [
            (
                "postgres://ai:ai@localhost:5532/ai",
                BackendUrl::Postgres {
                    url: "postgresql://ai:ai@localhost:5532/ai".into(),
                },
            ),
            (
                "postgresql://localhost/db",
                BackendUrl::Postgres {
                    url: "postgresql://localhost/db".into(),
                },
            ),
            (
                "postgresql+psycopg://localhost/db",
                BackendUrl::Postgres {
                    url: "postgresql://localhost/db".into(),
                },
            ),
            (
                "mysql+pymysql://u:p@db:3306/agno",
                BackendUrl::MySql {
                    url: "mysql://u:p@db:3306/agno".into(),
                },
            ),
            (
                "mongodb://localhost:27017/agno",
                BackendUrl::MongoDb {
                    url: "mongodb://localhost:27017/agno".into(),
                },
            ),
            (
                "mongodb+srv://cluster0.example.net/agno",
                BackendUrl::MongoDb {
                    url: "mongodb+srv://cluster0.example.net/agno".into(),
                },
            ),
            (
                "redis://localhost:6379/0",
                BackendUrl::Redis {
                    url: "redis://localhost:6379/0".into(),
                },
            ),
            (
                "rediss://cache.example.com:6380",
                BackendUrl::Redis {
                    url: "rediss://cache.example.com:6380".into(),
                },
            ),
            (
                "valkey://localhost:6379",
                BackendUrl::Valkey {
                    url: "valkey://localhost:6379".into(),
                },
            ),
            (
                "dynamodb://us-east-1",
                BackendUrl::DynamoDb {
                    url: "dynamodb://us-east-1".into(),
                },
            ),
            (
                "firestore://my-project",
                BackendUrl::Firestore {
                    url: "firestore://my-project".into(),
                },
            ),
            (
                "surrealdb://localhost:8000/agno/agno",
                BackendUrl::SurrealDb {
                    url: "surrealdb://localhost:8000/agno/agno".into(),
                },
            ),
        ];
        for (input, want) in cases {
            assert_eq!(ok(input), want, "{input}");
        }
        assert!(err("postgres://host:notaport/db").starts_with("invalid postgresql:// URL"));
    }

    #[test]
    fn surreal_urls() {
        assert_eq!(
            ok("surrealdb+mem://"),
            BackendUrl::SurrealDb {
                url: "surrealdb+mem://".into()
            }
        );
        assert_eq!(
            ok("SurrealKV://data/agno.skv"),
            BackendUrl::SurrealDb {
                url: "surrealkv://data/agno.skv".into()
            }
        );
        assert!(err("surrealkv://").contains("needs a path"));
        assert!(err("surrealdb+mem://host").contains("takes no host"));
        let t = surreal_target("surrealdb://root:p%40ss@db.local:8001/ns1/db1").unwrap();
        assert_eq!(
            t,
            SurrealTarget {
                engine: "ws://db.local:8001".into(),
                ns: "ns1".into(),
                db: "db1".into(),
                credentials: Some(("root".into(), "p@ss".into())),
            }
        );
        let t = surreal_target("surrealdb://localhost").unwrap();
        assert_eq!(
            (
                t.engine.as_str(),
                t.ns.as_str(),
                t.db.as_str(),
                t.credentials
            ),
            ("ws://localhost:8000", "agno", "agno", None)
        );
        let t = surreal_target("surrealdb+mem:///a/b").unwrap();
        assert_eq!((t.engine.as_str(), t.ns.as_str()), ("mem://", "a"));
        assert!(surreal_target("surrealdb://h/only-ns").is_err());
        assert_eq!(
            ok("surrealdb://root:secret@h:8000/a/b").to_string(),
            "surrealdb://root:***@h:8000/a/b"
        );
    }

    #[test]
    fn json_directory_and_bucket() {
        assert_eq!(
            ok("file:///var/lib/agno"),
            BackendUrl::JsonDir {
                dir: "/var/lib/agno".into()
            }
        );
        assert_eq!(
            ok("file://./agno-data"),
            BackendUrl::JsonDir {
                dir: "./agno-data".into()
            }
        );
        assert!(err("file://").contains("needs a directory"));
        assert_eq!(
            ok("gs://my-bucket/agno/prod/"),
            BackendUrl::Gcs {
                bucket: "my-bucket".into(),
                prefix: "agno/prod".into()
            }
        );
        assert_eq!(
            ok("gs://my-bucket"),
            BackendUrl::Gcs {
                bucket: "my-bucket".into(),
                prefix: String::new()
            }
        );
        assert!(err("gs://").contains("needs a bucket"));
        assert!(err("gs:///prefix").contains("needs a bucket"));
        assert!(err("gs://My Bucket/x").contains("invalid GCS bucket name"));
        assert_eq!(
            ok("s3://my-bucket/agno/prod/"),
            BackendUrl::S3 {
                bucket: "my-bucket".into(),
                prefix: "agno/prod".into()
            }
        );
        assert_eq!(ok("s3://my-bucket").to_string(), "s3://my-bucket");
        assert!(err("s3://").contains("s3:// needs a bucket"));
        assert!(err("s3://key:secret@bucket/p").contains("AWS_ACCESS_KEY_ID"));
        assert!(err("s3://my_bucket/x").contains("invalid S3 bucket name"));
    }

    #[test]
    fn bad_inputs_name_the_supported_schemes() {
        for input in [
            "",
            "   ",
            "nope://x",
            "agno.db",
            "://x",
            "http://example.com",
        ] {
            let message = err(input);
            assert!(message.contains("sqlite://PATH"), "{input}: {message}");
            assert!(!message.contains('\n'), "{input}: {message}");
        }
        assert!(err("nope://x").starts_with("unknown backend URL scheme `nope://`"));
        assert!(err("").starts_with("empty backend URL"));
    }

    #[test]
    fn display_hides_passwords() {
        let url = ok("postgres://ai:s3cret@localhost:5532/ai");
        assert_eq!(url.to_string(), "postgresql://ai:***@localhost:5532/ai");
        assert_eq!(ok("sqlite://agno.db").to_string(), "sqlite://agno.db");
        assert_eq!(ok("gs://b-1/p").to_string(), "gs://b-1/p");
        assert!(!err("postgres://ai:s3cret@host:bad/ai").contains("s3cret"));
    }

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    #[test]
    fn schema_comes_from_the_query() {
        assert_eq!(
            split_schema("postgres://h/db"),
            ("postgres://h/db".into(), "ai".into())
        );
        assert_eq!(
            split_schema("postgres://h/db?sslmode=disable&schema=app"),
            ("postgres://h/db?sslmode=disable".into(), "app".into())
        );
        assert_eq!(
            split_schema("mysql://root@h:3306?schema=agno"),
            ("mysql://root@h:3306".into(), "agno".into())
        );
    }

    #[test]
    fn open_memory_and_report_missing_features() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let db = open(&BackendUrl::Memory).await.unwrap();
            assert_eq!(db.backend(), "memory");
            let all = [
                ("mysql://localhost/db", "mysql", cfg!(feature = "mysql")),
                ("mongodb://localhost", "mongo", cfg!(feature = "mongo")),
                ("redis://localhost", "redis", cfg!(feature = "redis")),
                ("valkey://localhost", "redis", cfg!(feature = "redis")),
                ("dynamodb://us-east-1", "dynamo", cfg!(feature = "dynamo")),
                ("firestore://p", "firestore", cfg!(feature = "firestore")),
                (
                    "surrealdb://localhost",
                    "surreal",
                    cfg!(feature = "surreal"),
                ),
                ("file://./d", "json", cfg!(feature = "json")),
                ("gs://bucket/p", "gcs", cfg!(feature = "gcs")),
                ("s3://bucket/p", "s3", cfg!(feature = "s3")),
            ];
            let cases: Vec<(&str, &str)> = all
                .iter()
                .filter(|(_, _, compiled)| !compiled)
                .map(|(u, f, _)| (*u, *f))
                .collect();
            for (input, feature) in cases {
                let message = open(&ok(input)).await.unwrap_err().to_string();
                assert!(
                    message.contains(&format!("--features {feature}`")),
                    "{input}: {message}"
                );
                assert!(message.contains("not compiled"), "{input}: {message}");
            }
        });
    }

    #[cfg(feature = "dynamo")]
    #[test]
    fn dynamo_urls() {
        let aws = dynamo_options("dynamodb://eu-west-1?prefix=app_").unwrap();
        assert_eq!((aws.endpoint, aws.region.as_str()), (None, "eu-west-1"));
        assert_eq!(aws.tables.sessions, "app_agno_sessions");
        assert!(aws.credentials.is_none());
        let local =
            dynamo_options("dynamodb://key:se%2Fcr%2Bet@127.0.0.1:8000?region=us-west-2").unwrap();
        assert_eq!(local.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert_eq!(local.region, "us-west-2");
        let creds = local.credentials.unwrap();
        assert_eq!(
            (
                creds.access_key_id.as_str(),
                creds.secret_access_key.as_str()
            ),
            ("key", "se/cr+et")
        );
    }

    #[cfg(feature = "firestore")]
    #[test]
    fn firestore_urls() {
        let (project, names) = firestore_target("firestore://my-project?prefix=t_").unwrap();
        assert_eq!(project, "my-project");
        assert_eq!(names.sessions, "t_agno_sessions");
        assert!(firestore_target("firestore://")
            .unwrap_err()
            .to_string()
            .contains("project id"));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        const SCHEMES: &[&str] = &[
            "sqlite",
            "memory",
            "postgres",
            "postgresql",
            "postgresql+psycopg",
            "mysql",
            "mysql+pymysql",
            "mongodb",
            "mongodb+srv",
            "redis",
            "rediss",
            "valkey",
            "dynamodb",
            "firestore",
            "surrealdb",
            "file",
            "gs",
            "s3",
            "",
            "HTTP",
        ];

        /// A URL-ish string: a known or odd scheme, then arbitrary text.
        fn url_like() -> impl Strategy<Value = String> {
            (prop::sample::select(SCHEMES), "(?s).{0,40}", any::<bool>()).prop_map(
                |(scheme, rest, upper)| {
                    let scheme = if upper {
                        scheme.to_ascii_uppercase()
                    } else {
                        scheme.to_owned()
                    };
                    format!("{scheme}://{rest}")
                },
            )
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2_000))]

            /// Arbitrary input never panics the parser, and what it accepts prints back
            /// to a URL that parses to the same value (unless a password was redacted).
            #[test]
            fn parse_never_panics_and_round_trips(input in prop_oneof![url_like(), "(?s).{0,40}"]) {
                if let Ok(parsed) = parse(&input) {
                    let shown = parsed.to_string();
                    if !shown.contains("***") {
                        prop_assert_eq!(parse(&shown).ok(), Some(parsed), "{}", shown);
                    }
                }
            }

            /// A password never appears in an error or in the printed URL, whatever
            /// follows it.
            #[test]
            fn passwords_never_leak(
                scheme in prop::sample::select(SCHEMES),
                user in "[a-z]{1,8}",
                tail in "(?s).{0,24}",
            ) {
                let secret = "Zq9SECRETpw";
                let input = format!("{scheme}://{user}:{secret}@{tail}");
                match parse(&input) {
                    Ok(parsed) => {
                        let shown = parsed.to_string();
                        let is_path = matches!(parsed, BackendUrl::Sqlite { .. } | BackendUrl::JsonDir { .. } | BackendUrl::Gcs { .. } | BackendUrl::S3 { .. });
                        prop_assert!(is_path || !shown.contains(secret), "{}", shown);
                    }
                    Err(e) => prop_assert!(!e.to_string().contains(secret), "{}", e),
                }
            }

            /// Scheme case does not matter.
            #[test]
            fn scheme_is_case_insensitive(scheme in prop::sample::select(SCHEMES), host in "[a-z]{1,8}") {
                let lower = parse(&format!("{scheme}://{host}:1/db"));
                let upper = parse(&format!("{}://{host}:1/db", scheme.to_ascii_uppercase()));
                prop_assert_eq!(lower.ok(), upper.ok());
            }
        }
    }
}
