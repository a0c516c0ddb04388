//! Statements whose parameters are named (`:name`), bound by name instead of by position.

use agno_storage_core::{Error, ErrorKind, Result};

use crate::value::SqlValue;

/// SQL written with named parameters (`:run_id`), rendered once to the executors'
/// positional `?`. A name may appear more than once; `::` (a PostgreSQL cast) and text in
/// single quotes are left alone.
#[derive(Debug, Clone)]
pub(crate) struct NamedSql {
    sql: String,
    names: Vec<String>,
}

impl NamedSql {
    pub(crate) fn new(text: &str) -> Self {
        let mut sql = String::with_capacity(text.len());
        let mut names = Vec::new();
        let mut chars = text.char_indices().peekable();
        let mut quoted = false;
        while let Some((i, c)) = chars.next() {
            let name_follows = !quoted
                && c == ':'
                && !text[..i].ends_with(':')
                && chars
                    .peek()
                    .is_some_and(|(_, n)| n.is_ascii_lowercase() || *n == '_');
            if !name_follows {
                quoted ^= c == '\'';
                sql.push(c);
                continue;
            }
            let mut name = String::new();
            while let Some((_, n)) = chars.next_if(|(_, n)| n.is_ascii_alphanumeric() || *n == '_')
            {
                name.push(n);
            }
            names.push(name);
            sql.push('?');
        }
        NamedSql { sql, names }
    }

    /// The SQL with positional `?` parameters.
    pub(crate) fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters in order, each the value `value` gives its name; a name it does not
    /// know is an error naming it.
    pub(crate) fn bind(
        &self,
        mut value: impl FnMut(&str) -> Option<SqlValue>,
    ) -> Result<Vec<SqlValue>> {
        self.names
            .iter()
            .map(|name| {
                value(name).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unexpected,
                        format!("no value for the SQL parameter :{name}"),
                    )
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_positions_in_order_and_may_repeat() {
        let named = NamedSql::new(
            "SELECT x::text FROM t WHERE a = :run_id AND b = ':not_a_name' AND c IN (:user_id, :run_id)",
        );
        assert_eq!(
            named.sql(),
            "SELECT x::text FROM t WHERE a = ? AND b = ':not_a_name' AND c IN (?, ?)"
        );
        let params = named
            .bind(|name| Some(SqlValue::text(name)))
            .expect("every name has a value");
        assert_eq!(
            params,
            vec![
                SqlValue::text("run_id"),
                SqlValue::text("user_id"),
                SqlValue::text("run_id")
            ]
        );
        let missing = named.bind(|_| None).expect_err("no value for :run_id");
        assert!(missing.to_string().contains(":run_id"), "{missing}");
    }
}
