//! What the test targets share: server URLs from the environment and a fresh key prefix.

#![allow(dead_code)]

/// Whether unreachable servers must fail the run instead of skipping it.
pub fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The URL (or path) in `var`, or `None` (with a note) when unset. Under `CI=true` an unset
/// variable is an error.
pub fn url(var: &str) -> Result<Option<String>, String> {
    match std::env::var(var) {
        Ok(u) if !u.is_empty() => Ok(Some(u)),
        _ if ci() => Err(format!(
            "CI=true but {var} is not set; run ./scripts/test.sh"
        )),
        _ => {
            eprintln!("note: {var} is not set; skipping (./scripts/test.sh sets it)");
            Ok(None)
        }
    }
}

/// `agno_ct_<epoch>_<8 hex>`: a fresh key prefix (the stem `agno-storage-kv`'s tests drop
/// when a crashed run leaves it behind).
pub fn run_stem() -> String {
    let epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "agno_ct_{epoch}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    )
}

/// A connection to `url` for reading what the tests wrote.
pub async fn connection(url: &str) -> redis::RedisResult<redis::aio::ConnectionManager> {
    redis::Client::open(url)?.get_connection_manager().await
}
