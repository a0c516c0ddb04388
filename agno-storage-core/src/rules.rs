//! The rules every store applies the same way: who sees a row and who may overwrite it,
//! optional equality filters, sortable columns, and the clock of stored timestamps.

use crate::pagination::Sort;
use crate::{Error, ErrorKind, Result};

/// Now, in epoch seconds (the unit of every stored timestamp except schema stamps).
pub fn now_epoch_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Checks a `sort_by` column against a record's sortable columns.
pub fn validate_sort(sort: &Sort, allowed: &[&str]) -> Result<()> {
    match &sort.sort_by {
        Some(column) if !allowed.contains(&column.as_str()) => Err(Error::invalid_input(format!(
            "cannot sort by {column:?}: sortable columns are {}",
            allowed.join(", ")
        ))),
        _ => Ok(()),
    }
}

/// Whether a row owned by `row_owner` is visible to `caller`: everything is visible to an
/// unscoped caller (`None`); a user sees only their own rows (strict equality).
pub fn visible_to(row_owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || row_owner == caller
}

/// Whether a row owned by `row_owner` is readable by `caller` where unowned rows are shared:
/// everything for an unscoped caller (`None`), else the caller's own and unowned rows.
pub fn owner_or_shared(row_owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || row_owner.is_none() || row_owner == caller
}

/// Whether a row's `have` passes an optional equality filter `want` (any when `None`).
pub(crate) fn same(want: &Option<String>, have: &Option<String>) -> bool {
    want.is_none() || want == have
}

/// Whether `writer` may overwrite a row owned by `row_owner` (agno's owner guard): the row is
/// unowned, or owned by the writer.
pub fn writable_by(row_owner: Option<&str>, writer: Option<&str>) -> bool {
    row_owner.is_none() || row_owner == writer
}

/// `PermissionDenied` for a write onto another user's row.
pub fn owned_by_another_user(what: &str, id: &str) -> Error {
    Error::new(
        ErrorKind::PermissionDenied,
        format!("{what} {id} belongs to another user; nothing was written. Use a new id, or write as its owner."),
    )
}
