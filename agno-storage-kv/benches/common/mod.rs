//! Shared by the KV benches.

#[path = "../../tests/common/keys.rs"]
mod keys;

/// Deletes every key under `prefix` (`prefix:*`); returns how many went.
pub async fn delete_prefix<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    prefix: &str,
) -> redis::RedisResult<u64> {
    keys::delete_matching(conn, &format!("{prefix}:*")).await
}
