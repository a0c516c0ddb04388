//! The rows a SQLite connection itself changed, per watched table.
//!
//! SQLite's `data_version` moves when another connection commits, not when the connection
//! that reads it does. Its update hook tells each row that connection inserts, updates or
//! deletes, by `rowid`: with both, a read knows exactly which rows of a watched table
//! changed since an earlier read, so it can fetch only those (see
//! [`crate::exec::RowWatch`]).
//!
//! The hook does not fire for tables declared `WITHOUT ROWID`, for rows removed by
//! `REPLACE` conflict resolution, or for a `DELETE` without `WHERE` (the truncate
//! optimization). So a table is watched only while it is a rowid table, and a read that
//! uses the log compares the full list of its rows' rowids with what it held: a row gone
//! without a note is seen missing, and a row whose content changed always has a note.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::Connection;

/// Row changes a table's log keeps; a read that knew an older position reads everything.
const KEPT: usize = 4096;

/// The watched tables of one connection, shared with its update hook.
#[derive(Clone, Default)]
pub(crate) struct RowLogs(Arc<Mutex<Vec<TableLog>>>);

/// One watched table's recent row changes.
struct TableLog {
    /// The table's name (SQLite compares names ignoring ASCII case).
    table: String,
    /// The schema version at which the table was last found to be a rowid table, if it was.
    rowid_table_at: Option<i64>,
    /// Row changes noted since the table was first watched.
    changes: u64,
    /// The rowids of the last [`KEPT`] changes, the last one last.
    recent: VecDeque<i64>,
}

impl RowLogs {
    fn logs(&self) -> MutexGuard<'_, Vec<TableLog>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes every row change `conn` makes to a watched table. Changes inside a transaction
    /// that later rolls back are noted too, which only costs a read of those rows.
    pub(crate) fn install(&self, conn: &Connection) -> rusqlite::Result<()> {
        let logs = self.clone();
        conn.update_hook(Some(move |_, _: &str, table: &str, rowid: i64| {
            let mut logs = logs.logs();
            if let Some(log) = logs
                .iter_mut()
                .find(|l| l.table.eq_ignore_ascii_case(table))
            {
                log.changes += 1;
                if log.recent.len() == KEPT {
                    log.recent.pop_front();
                }
                log.recent.push_back(rowid);
            }
        }))
    }

    /// How many changes `conn` made to `table` since it was first watched, if it is watched
    /// and, at `schema` (the schema version), a rowid table; starts watching it. Runs on
    /// the connection, so no change of its own happens meanwhile.
    pub(crate) fn position(
        &self,
        conn: &Connection,
        table: &str,
        schema: i64,
    ) -> rusqlite::Result<Option<u64>> {
        let known = self
            .logs()
            .iter()
            .find(|l| l.table.eq_ignore_ascii_case(table))
            .map(|l| (l.rowid_table_at == Some(schema), l.changes));
        if let Some((true, changes)) = known {
            return Ok(Some(changes));
        }
        // `wr` is 1 for a WITHOUT ROWID table; a table that does not exist has no row.
        let rowid_table = conn
            .prepare_cached("SELECT wr FROM pragma_table_list WHERE schema = 'main' AND name = ? COLLATE NOCASE")?
            .query_row([table], |r| r.get::<_, i64>(0))
            .map(|wr| wr == 0)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(false),
                e => Err(e),
            })?;
        let mut logs = self.logs();
        let index = match logs
            .iter()
            .position(|l| l.table.eq_ignore_ascii_case(table))
        {
            Some(i) => i,
            None => {
                logs.push(TableLog {
                    table: table.to_owned(),
                    rowid_table_at: None,
                    changes: 0,
                    recent: VecDeque::new(),
                });
                logs.len() - 1
            }
        };
        let log = &mut logs[index];
        log.rowid_table_at = rowid_table.then_some(schema);
        Ok(rowid_table.then_some(log.changes))
    }

    /// The rowids `conn` changed in `table` after position `since`, if the log still holds
    /// all of them.
    pub(crate) fn changed_since(&self, table: &str, since: u64) -> Option<HashSet<i64>> {
        let logs = self.logs();
        let log = logs.iter().find(|l| l.table.eq_ignore_ascii_case(table))?;
        let newer = usize::try_from(log.changes.checked_sub(since)?).ok()?;
        (newer <= log.recent.len()).then(|| log.recent.iter().rev().take(newer).copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_a_rowid_tables_changes_and_not_a_without_rowid_tables() {
        let conn = Connection::open_in_memory().expect("open");
        conn.execute_batch(
            "CREATE TABLE t (id TEXT PRIMARY KEY, v TEXT);
             CREATE TABLE w (id TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID;",
        )
        .expect("tables");
        let logs = RowLogs::default();
        logs.install(&conn).expect("hook");
        let schema: i64 = conn
            .query_row("PRAGMA schema_version", [], |r| r.get(0))
            .expect("schema");
        assert_eq!(logs.position(&conn, "w", schema).expect("w"), None);
        assert_eq!(
            logs.position(&conn, "absent", schema).expect("absent"),
            None
        );
        let start = logs
            .position(&conn, "T", schema)
            .expect("t")
            .expect("watched");
        conn.execute("INSERT INTO t VALUES ('a', '1'), ('b', '2')", [])
            .expect("insert");
        conn.execute("UPDATE t SET v = '3' WHERE id = 'a'", [])
            .expect("update");
        conn.execute("INSERT INTO w VALUES ('a', '1')", [])
            .expect("insert w");
        let now = logs
            .position(&conn, "t", schema)
            .expect("t")
            .expect("watched");
        assert_eq!(now, start + 3);
        let a: i64 = conn
            .query_row("SELECT rowid FROM t WHERE id = 'a'", [], |r| r.get(0))
            .expect("rowid");
        assert_eq!(logs.changed_since("t", now - 1), Some(HashSet::from([a])));
        assert_eq!(logs.changed_since("t", start).map(|c| c.len()), Some(2));
        conn.execute_batch("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 5000) INSERT INTO t SELECT 'x' || i, '' FROM n")
            .expect("many");
        assert_eq!(logs.changed_since("t", start), None, "older than the log");
    }
}
