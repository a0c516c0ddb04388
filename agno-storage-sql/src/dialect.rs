//! What differs between SQLite, PostgreSQL and MySQL: quoting, types, placeholders.

/// The SQL dialect of one database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
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
        }
    }

    pub(crate) fn quote(self, ident: &str) -> String {
        format!("\"{}\"", ident.replace('"', "\"\""))
    }

    pub(crate) fn col_type(self, t: ColType) -> &'static str {
        match (self, t) {
            (_, ColType::Str(_)) => "VARCHAR",
            #[cfg(feature = "sqlite")]
            (Dialect::Sqlite, ColType::LongText) => "VARCHAR",
            #[cfg(feature = "postgres")]
            (Dialect::Postgres, ColType::LongText) => "TEXT",
            (_, ColType::BigInt) => "BIGINT",
            #[cfg(feature = "sqlite")]
            (Dialect::Sqlite, ColType::Json) => "JSON",
            #[cfg(feature = "postgres")]
            (Dialect::Postgres, ColType::Json) => "JSONB",
            (_, ColType::Bool) => "BOOLEAN",
            (_, ColType::Date) => "DATE",
        }
    }

    /// Case-insensitive `LIKE`.
    pub(crate) fn ilike(self) -> &'static str {
        match self {
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => "LIKE",
            #[cfg(feature = "postgres")]
            Dialect::Postgres => "ILIKE",
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
        }
    }

    /// A JSON column rendered as text.
    pub(crate) fn json_as_text(self, column: &str) -> String {
        format!("CAST({column} AS TEXT)")
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
