//! [`OpenMode`]: whether opening a database may create what it lacks.

use std::fmt;

use crate::{Error, ErrorKind};

/// How an adapter opens a database: every adapter's `…_with_mode` constructor takes one
/// (the plain constructors are [`OpenMode::CreateMissing`]).
///
/// [`OpenMode::Existing`] is for least-privilege deployments, where the schema is created
/// and migrated only by the migrator (`agno-storage migrate`), and for read-only tools. Its
/// contract, on every backend:
///
/// - opening creates and alters nothing: no file, directory, schema, database, table,
///   collection, index or schema-version stamp, and no change of a file's journal mode;
/// - opening fails with [`ErrorKind::NotFound`] (see [`OpenMode::no_database`]) when the
///   database does not exist or holds none of agno's tables (a missing or zero-byte SQLite
///   file, a missing or empty JSON directory, a schema or key prefix with no agno data), and
///   with the backend's own error when it is not a database at all (a corrupt file);
/// - a table that is absent while others exist is not created later either: on backends
///   that create tables lazily (DynamoDB) or that must know them (SQL), a call on it fails
///   naming the table; reads of schema stamps answer "unstamped".
///
/// Calls made after opening write what they are asked to write, as in
/// [`OpenMode::CreateMissing`]; only the open (and lazy table creation) is affected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OpenMode {
    /// Create the database, tables, indexes and stamps that are missing (the default, as
    /// agno does on first use).
    #[default]
    CreateMissing,
    /// Open only an existing agno database and create or alter nothing (see the type's
    /// documentation).
    Existing,
}

impl OpenMode {
    /// Whether this mode may create what is missing.
    pub fn creates(self) -> bool {
        self == OpenMode::CreateMissing
    }

    /// The fix an [`OpenMode::no_database`] error names, at the end of its message; a
    /// front end may replace it with its own words (the CLI names the URL).
    pub const NO_DATABASE_FIX: &'static str = "check the location, or create the database \
        with `agno-storage migrate <URL>` (or open it with `OpenMode::CreateMissing`)";

    /// The error of an [`OpenMode::Existing`] open that found no agno database:
    /// [`ErrorKind::NotFound`], not temporary, with the message
    /// `no agno database at {location}: {why}; {NO_DATABASE_FIX}`.
    pub fn no_database(location: impl fmt::Display, why: impl fmt::Display) -> Error {
        Error::new(
            ErrorKind::NotFound,
            format!(
                "no agno database at {location}: {why}; {}",
                Self::NO_DATABASE_FIX
            ),
        )
        .set_temporary(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_creates_and_existing_does_not() {
        assert!(OpenMode::default().creates());
        assert!(!OpenMode::Existing.creates());
        let e = OpenMode::no_database("x.db", "the file does not exist");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert!(e
            .to_string()
            .contains("no agno database at x.db: the file does not exist"));
    }
}
