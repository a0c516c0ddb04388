//! Typed SQL parameters and rows, shared by every dialect's executor.

use std::sync::Arc;

use agno_storage_core::legacy::{decode_legacy_json, unwrap_double_encoded};
use agno_storage_core::{Error, ErrorKind, Result};
use chrono::NaiveDate;
use serde_json::Value;

/// A bound parameter or a fetched cell. Every variant carries its SQL type, so a NULL can be
/// bound with the right type on PostgreSQL.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SqlValue {
    Int(Option<i64>),
    Float(Option<f64>),
    Text(Option<String>),
    Bool(Option<bool>),
    Json(Option<Value>),
    Date(Option<NaiveDate>),
}

impl SqlValue {
    pub(crate) fn text(v: impl Into<String>) -> Self {
        SqlValue::Text(Some(v.into()))
    }
    pub(crate) fn opt_text(v: Option<&str>) -> Self {
        SqlValue::Text(v.map(str::to_owned))
    }
    pub(crate) fn int(v: i64) -> Self {
        SqlValue::Int(Some(v))
    }
    /// A JSON cell: `None` binds the JSON literal `null` where agno does (`none_as_null=False`)
    /// only when asked to; by default absent values are SQL NULL.
    pub(crate) fn json(v: Option<&Value>) -> Self {
        SqlValue::Json(v.cloned())
    }
}

/// JSON text a result may hold before an executor decodes its rows on two threads (the
/// SQLite and PostgreSQL executors): below it, a second thread costs more than it saves.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const PARALLEL_JSON_BYTES: usize = 1 << 20;

/// One fetched row, cells addressed by column name.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) columns: Arc<[String]>,
    pub(crate) values: Vec<SqlValue>,
}

fn bad(column: &str, want: &str, got: &SqlValue) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("column {column}: expected {want}, found {got:?}"),
    )
}

fn null_column(column: &str) -> Error {
    Error::new(
        ErrorKind::Serialization,
        format!("column {column} is NULL but must be set"),
    )
}

impl Row {
    fn cell(&self, column: &str) -> Option<&SqlValue> {
        self.columns
            .iter()
            .position(|c| c == column)
            .and_then(|i| self.values.get(i))
    }

    fn cell_mut(&mut self, column: &str) -> Option<&mut SqlValue> {
        self.columns
            .iter()
            .position(|c| c == column)
            .and_then(|i| self.values.get_mut(i))
    }

    pub(crate) fn has(&self, column: &str) -> bool {
        self.columns.iter().any(|c| c == column)
    }

    pub(crate) fn opt_str(&self, column: &str) -> Result<Option<String>> {
        match self.cell(column) {
            None | Some(SqlValue::Text(None) | SqlValue::Int(None) | SqlValue::Json(None)) => {
                Ok(None)
            }
            Some(SqlValue::Text(Some(s))) => Ok(Some(s.clone())),
            Some(SqlValue::Int(Some(i))) => Ok(Some(i.to_string())),
            Some(SqlValue::Json(Some(Value::String(s)))) => Ok(Some(s.clone())),
            Some(other) => Err(bad(column, "text", other)),
        }
    }

    /// [`Row::opt_str`], moving a text cell out of the row instead of copying it.
    pub(crate) fn take_opt_str(&mut self, column: &str) -> Result<Option<String>> {
        match self.cell_mut(column) {
            Some(SqlValue::Text(text)) => Ok(text.take()),
            _ => self.opt_str(column),
        }
    }

    /// [`Row::str`], moving the cell out of the row instead of copying it.
    pub(crate) fn take_str(&mut self, column: &str) -> Result<String> {
        self.take_opt_str(column)?
            .ok_or_else(|| null_column(column))
    }

    pub(crate) fn str(&self, column: &str) -> Result<String> {
        self.opt_str(column)?.ok_or_else(|| null_column(column))
    }

    pub(crate) fn opt_i64(&self, column: &str) -> Result<Option<i64>> {
        match self.cell(column) {
            None | Some(SqlValue::Int(None) | SqlValue::Text(None) | SqlValue::Float(None)) => {
                Ok(None)
            }
            Some(SqlValue::Int(Some(i))) => Ok(Some(*i)),
            Some(SqlValue::Float(Some(f))) => Ok(Some(*f as i64)),
            Some(SqlValue::Bool(Some(b))) => Ok(Some(i64::from(*b))),
            Some(SqlValue::Text(Some(s))) => s
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| bad(column, "an integer", &SqlValue::text(s.clone()))),
            Some(other) => Err(bad(column, "an integer", other)),
        }
    }

    pub(crate) fn i64(&self, column: &str) -> Result<i64> {
        self.opt_i64(column)?.ok_or_else(|| null_column(column))
    }

    pub(crate) fn bool(&self, column: &str) -> Result<bool> {
        match self.cell(column) {
            Some(SqlValue::Bool(Some(b))) => Ok(*b),
            Some(SqlValue::Int(Some(i))) => Ok(*i != 0),
            Some(SqlValue::Text(Some(s))) => Ok(matches!(s.as_str(), "1" | "true" | "True" | "t")),
            None | Some(SqlValue::Bool(None) | SqlValue::Int(None) | SqlValue::Text(None)) => {
                Ok(false)
            }
            Some(other) => Err(bad(column, "a boolean", other)),
        }
    }

    /// A JSON cell, decoded once more when agno 2.x double-encoded it; SQL NULL and JSON
    /// `null` are both `None`.
    pub(crate) fn json(&self, column: &str) -> Result<Option<Value>> {
        match self.cell(column) {
            None | Some(SqlValue::Json(None) | SqlValue::Text(None)) => Ok(None),
            Some(SqlValue::Json(Some(v))) => Ok(unwrap_double_encoded(v.clone())),
            Some(SqlValue::Text(Some(s))) => decode_legacy_json(Some(s)).map_err(|e| {
                Error::new(
                    ErrorKind::Serialization,
                    format!("column {column} holds invalid JSON: {}", e.message()),
                )
            }),
            Some(SqlValue::Int(Some(i))) => Ok(Some(Value::from(*i))),
            Some(other) => Err(bad(column, "JSON", other)),
        }
    }

    /// [`Row::json`], moving a decoded cell out of the row instead of copying it.
    pub(crate) fn take_json(&mut self, column: &str) -> Result<Option<Value>> {
        match self.cell_mut(column) {
            Some(SqlValue::Json(value)) => Ok(value.take().and_then(unwrap_double_encoded)),
            _ => self.json(column),
        }
    }

    /// A date cell, `None` when NULL.
    #[cfg(feature = "mysql")]
    pub(crate) fn opt_date(&self, column: &str) -> Result<Option<NaiveDate>> {
        match self.cell(column) {
            None | Some(SqlValue::Date(None) | SqlValue::Text(None)) => Ok(None),
            Some(_) => self.date(column).map(Some),
        }
    }

    pub(crate) fn date(&self, column: &str) -> Result<NaiveDate> {
        match self.cell(column) {
            Some(SqlValue::Date(Some(d))) => Ok(*d),
            Some(SqlValue::Text(Some(s))) => {
                let day = s.get(..10).unwrap_or(s);
                NaiveDate::parse_from_str(day, "%Y-%m-%d")
                    .map_err(|_| bad(column, "a date", &SqlValue::text(s.clone())))
            }
            Some(other) => Err(bad(column, "a date", other)),
            None => Err(Error::new(
                ErrorKind::Serialization,
                format!("column {column} is missing"),
            )),
        }
    }
}
