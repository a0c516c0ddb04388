//! What differs between SQLite, PostgreSQL and MySQL: quoting, types, placeholders.

/// The SQL dialect of one database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "mysql")]
    MySql,
}

/// Column types as agno declares them, rendered per dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ColType {
    /// `VARCHAR` (MySQL `VARCHAR(n)`).
    Str(u16),
    /// SQLite `VARCHAR`, PostgreSQL and MySQL `TEXT`.
    LongText,
    BigInt,
    Json,
    Bool,
    Date,
}

impl Dialect {
    pub(crate) fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => "sqlite",
            #[cfg(feature = "postgres")]
            Dialect::Postgres => "postgres",
            #[cfg(feature = "mysql")]
            Dialect::MySql => "mysql",
        }
    }

    /// The longest identifier, in characters, agno's key columns hold: MySQL's
    /// `VARCHAR(128)`; PostgreSQL's 512 keeps any id of 4-byte characters under a B-tree
    /// entry's 2,704-byte limit; SQLite has none.
    pub(crate) fn max_id_chars(self) -> Option<usize> {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => None,
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Some(512),
            #[cfg(feature = "mysql")]
            Dialect::MySql => Some(128),
        }
    }

    pub(crate) fn quote(self, ident: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("`{}`", ident.replace('`', "``")),
            #[allow(unreachable_patterns)]
            _ => format!("\"{}\"", ident.replace('"', "\"\"")),
        }
    }

    #[allow(unreachable_patterns)] // the catch-all arms, in builds with one dialect
    pub(crate) fn col_type(self, t: ColType) -> String {
        match (self, t) {
            #[cfg(feature = "mysql")]
            (Dialect::MySql, ColType::Str(n)) => format!("VARCHAR({n})"),
            #[cfg(feature = "mysql")]
            (Dialect::MySql, ColType::Bool) => "BOOL".into(),
            (_, ColType::Str(_)) => "VARCHAR".into(),
            #[cfg(feature = "sqlite")]
            (Dialect::Sqlite, ColType::LongText) => "VARCHAR".into(),
            (_, ColType::LongText) => "TEXT".into(),
            (_, ColType::BigInt) => "BIGINT".into(),
            #[cfg(feature = "postgres")]
            (Dialect::Postgres, ColType::Json) => "JSONB".into(),
            (_, ColType::Json) => "JSON".into(),
            (_, ColType::Bool) => "BOOLEAN".into(),
            (_, ColType::Date) => "DATE".into(),
        }
    }

    /// A case-insensitive `LIKE` of `expr` against one bound pattern made by
    /// [`like_pattern`]. MySQL's JSON text compares case-sensitively, so both sides are
    /// lowered there.
    pub(crate) fn ilike(self, expr: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!("{expr} LIKE ? ESCAPE '\\'"),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("{expr} ILIKE ? ESCAPE '\\'"),
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("LOWER({expr}) LIKE LOWER(?) ESCAPE '\\'"),
        }
    }

    /// The incoming row's `column` in an upsert's update list.
    pub(crate) fn excluded(self, column: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("VALUES({})", self.quote(column)),
            #[allow(unreachable_patterns)]
            _ => format!("excluded.{}", self.quote(column)),
        }
    }

    /// The stored row's `column` in an upsert's update list (the table is aliased `t`).
    pub(crate) fn stored(self, column: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => self.quote(column),
            #[allow(unreachable_patterns)]
            _ => format!("t.{}", self.quote(column)),
        }
    }

    /// `a = b`, exactly: MySQL's default collation ignores case, so owners are compared as
    /// bytes there.
    pub(crate) fn same(self, a: &str, b: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("CAST({a} AS BINARY) = CAST({b} AS BINARY)"),
            #[allow(unreachable_patterns)]
            _ => format!("{a} = {b}"),
        }
    }

    /// agno's owner guard on upserts: the stored row is unowned or owned by the writer.
    pub(crate) fn owner_guard(self) -> String {
        let stored = self.stored("user_id");
        format!(
            "{stored} IS NULL OR {}",
            self.same(&stored, &self.excluded("user_id"))
        )
    }

    /// ` FOR UPDATE SKIP LOCKED` where the dialect has row locks (SQLite serializes writers).
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => "",
            #[allow(unreachable_patterns)]
            _ => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// A JSON column's top-level string field as text (`''` when absent), reading through
    /// agno 2.x's double encoding on SQLite.
    pub(crate) fn json_field_text(self, column: &str, field: &str) -> String {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => format!(
                "COALESCE(json_extract(CASE WHEN json_valid({column}) AND json_type({column}) = 'text' THEN json_extract({column}, '$') ELSE {column} END, '$.{field}'), '')"
            ),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => format!("COALESCE({column}->>'{field}', '')"),
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!(
                "COALESCE(JSON_UNQUOTE(JSON_EXTRACT({column}, '$.{field}')), '')"
            ),
        }
    }

    /// How rows of the table aliased `alias`, keyed by column `key`, tell their version,
    /// where the dialect can: PostgreSQL's `xmin` (the writing transaction). Other dialects
    /// have none.
    pub(crate) fn row_versioning(self, alias: &str, key: &str) -> Option<RowVersioning> {
        match self {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                let version = format!("CAST({alias}.xmin AS TEXT)");
                // A 64-bit hash per row, seeded by the one `?`, summed: order-free, and it
                // changes when any row is added, removed or rewritten (but for a 2^-64 chance).
                let digest = format!(
                    "CAST(count(*) AS TEXT) || ':' || CAST(COALESCE(sum(hashtextextended(                     {alias}.{key} || ':' || {version}, ?)), 0) AS TEXT)"
                );
                Some(RowVersioning { version, digest })
            }
            #[allow(unreachable_patterns)]
            _ => {
                let _ = (alias, key);
                None
            }
        }
    }

    /// A JSON column rendered as text.
    pub(crate) fn json_as_text(self, column: &str) -> String {
        match self {
            #[cfg(feature = "mysql")]
            Dialect::MySql => format!("CAST({column} AS CHAR)"),
            #[allow(unreachable_patterns)]
            _ => format!("CAST({column} AS TEXT)"),
        }
    }
}

/// Escapes `%`, `_` and `\` so user text matches literally in `LIKE … ESCAPE '\'`.
pub(crate) fn like_pattern(text: &str) -> String {
    let mut out = String::from("%");
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

/// SQL expressions for the versions of a table's rows ([`Dialect::row_versioning`]).
pub(crate) struct RowVersioning {
    /// A row's version, as text; it changes whenever the row is written.
    pub(crate) version: String,
    /// An aggregate over the selected rows that changes when any of them is added, removed
    /// or written; it takes one parameter, a 64-bit seed.
    pub(crate) digest: String,
}
