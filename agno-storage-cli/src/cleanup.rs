//! `cleanup-legacy-runs`: drops the pre-v3 runs blobs that `migrate` kept as a backup.

use agno_storage_core::legacy::cleanup_legacy_runs;
use agno_storage_core::{AgnoDb, TableType};

use crate::target::{self, BackendUrl};
use crate::Error;

/// Drops the blobs; unforced it refuses (an error) while any session still has one.
/// Opens the database without creating anything: a missing or empty one is an error.
pub async fn run(url: &BackendUrl, force: bool) -> Result<String, Error> {
    let db = target::open_existing(url).await?;
    cleanup(&db, &url.to_string(), force).await
}

/// [`run`] on an open database; `url` is only printed.
pub async fn cleanup(db: &AgnoDb, url: &str, force: bool) -> Result<String, Error> {
    let sessions_table = match db.migrations() {
        Ok(migrations) => migrations
            .tables()
            .into_iter()
            .find(|t| t.table_type == TableType::Sessions)
            .map(|t| t.name),
        Err(_) => None,
    }
    .unwrap_or_else(|| TableType::Sessions.default_name().to_owned());
    let changed = cleanup_legacy_runs(db.legacy()?, &sessions_table, force).await?;
    Ok(if changed == 0 {
        format!("Nothing to clean: no session of {url} carries a legacy runs blob.\n")
    } else {
        format!(
            "Dropped the legacy runs blob of {changed} session(s) in {sessions_table} of {url}.\n"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agno_storage_core::{Session, SessionType};
    use agno_storage_doc::InMemoryDb;
    use serde_json::json;

    #[tokio::test]
    async fn refuses_until_forced() {
        let memory = InMemoryDb::new_legacy();
        for id in ["s1", "s2"] {
            let session = Session::new(id, SessionType::Agent, "a1");
            memory
                .insert_legacy_session(session, json!([{"run_id": format!("{id}-r1")}]))
                .await
                .unwrap();
        }
        let db = memory.agno_db();
        let refusal = cleanup(&db, "memory://", false)
            .await
            .unwrap_err()
            .to_string();
        assert!(
            refusal.contains("2 session(s)") && refusal.contains("--force"),
            "{refusal}"
        );
        let done = cleanup(&db, "memory://", true).await.unwrap();
        assert!(
            done.starts_with("Dropped the legacy runs blob of 2 session(s) in agno_sessions"),
            "{done}"
        );
        let again = cleanup(&db, "memory://", false).await.unwrap();
        assert!(again.starts_with("Nothing to clean"), "{again}");
    }
}
