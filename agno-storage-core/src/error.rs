//! The one error type every store returns.

use std::fmt;

/// What went wrong, independent of the backend. Match on this, never on message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The record does not exist, or exists but belongs to another user.
    NotFound,
    /// A record with the same key (id, `(user_id, name)`, idempotency key) already exists.
    AlreadyExists,
    /// A concurrent writer changed the record first, or a compare-and-set failed.
    Conflict,
    /// The caller no longer holds the lease/claim it acted on (fencing token mismatch).
    LeaseLost,
    /// The record belongs to another user; nothing was written.
    PermissionDenied,
    /// This backend does not offer the operation (see [`crate::Capabilities`]).
    Unsupported,
    /// The arguments are invalid; the message says which and how to fix them.
    InvalidInput,
    /// The stored layout does not match what this code expects and no migration covers it.
    SchemaMismatch,
    /// The stored layout is older than this code: run the migration manager.
    MigrationRequired,
    /// Stored data could not be encoded or decoded.
    Serialization,
    /// The backend could not be reached or refused service; retrying may help. When it
    /// needs an operator first (a full disk, a read-only file, missing permissions) the
    /// error is not [`Error::is_temporary`]: the same call fails again until that is fixed,
    /// whether it ran alone or batched with others.
    Unavailable,
    /// Anything else the backend reported.
    Unexpected,
}

impl ErrorKind {
    /// A short stable name, e.g. `not_found`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::Conflict => "conflict",
            ErrorKind::LeaseLost => "lease_lost",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidInput => "invalid_input",
            ErrorKind::SchemaMismatch => "schema_mismatch",
            ErrorKind::MigrationRequired => "migration_required",
            ErrorKind::Serialization => "serialization",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unexpected => "unexpected",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A storage error: its [`ErrorKind`], the backend and operation it came from, a message
/// that names the problem and the fix, and the underlying driver error when there is one.
#[derive(Debug)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    backend: Option<&'static str>,
    operation: Option<&'static str>,
    temporary: bool,
    source: Option<Source>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// A new error of `kind` with a message that says what happened and what to do.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            backend: None,
            operation: None,
            temporary: kind == ErrorKind::Unavailable || kind == ErrorKind::Conflict,
            source: None,
        }
    }

    /// Shorthand for [`ErrorKind::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidInput, message)
    }

    /// Shorthand for [`ErrorKind::NotFound`].
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotFound, message)
    }

    /// [`ErrorKind::Unsupported`] for `operation` on `backend`.
    pub fn unsupported(backend: &'static str, operation: &'static str) -> Self {
        Error::new(
            ErrorKind::Unsupported,
            format!("{operation} is not supported by this backend (see its Capabilities)"),
        )
        .with_backend(backend)
    }

    /// [`ErrorKind::Serialization`] wrapping a serde error.
    pub fn serialization(what: impl fmt::Display, source: serde_json::Error) -> Self {
        Error::new(
            ErrorKind::Serialization,
            format!("cannot decode {what}: {source}"),
        )
        .with_source(source)
    }

    /// The schema-mismatch error for a table an older Agno created. It names the likely
    /// cause and both fixes.
    pub fn migration_required(table: &str, detail: impl fmt::Display) -> Self {
        Error::new(
            ErrorKind::MigrationRequired,
            format!(
                "Table {table} has an invalid schema: {detail}. If this database was created by an older \
                 version of Agno, apply the pending migrations with the migration manager \
                 (`MigrationManager::new(db).up()`) or run `agno-storage migrate <URL>`; where an \
                 AgentOS serves this database, `POST /databases/all/migrate` on it does the same."
            ),
        )
    }

    /// Records the backend that raised the error.
    pub fn with_backend(mut self, backend: &'static str) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Records the operation that failed.
    pub fn with_operation(mut self, operation: &'static str) -> Self {
        self.operation = Some(operation);
        self
    }

    /// Keeps the underlying error.
    pub fn with_source(mut self, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Says which part of a call the error is about (`"job 3 (j-3)"`), ahead of the message.
    pub fn within(mut self, part: impl fmt::Display) -> Self {
        self.message = format!("{part}: {}", self.message);
        self
    }

    /// Overrides whether retrying may succeed.
    pub fn set_temporary(mut self, temporary: bool) -> Self {
        self.temporary = temporary;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without backend/operation context.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend that raised it, if known.
    pub fn backend(&self) -> Option<&'static str> {
        self.backend
    }

    /// The operation that failed, if known.
    pub fn operation(&self) -> Option<&'static str> {
        self.operation
    }

    /// True when retrying the same call may succeed (connection loss, lock contention).
    pub fn is_temporary(&self) -> bool {
        self.temporary
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.backend, self.operation) {
            (Some(b), Some(op)) => write!(f, "{b} {op}: ")?,
            (Some(b), None) => write!(f, "{b}: ")?,
            (None, Some(op)) => write!(f, "{op}: ")?,
            (None, None) => {}
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
