//! Shared by the KV benches.

/// Deletes every key under `prefix` (`prefix:*`); returns how many went.
pub async fn delete_prefix<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    prefix: &str,
) -> redis::RedisResult<u64> {
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await?;
        if !keys.is_empty() {
            deleted += redis::cmd("UNLINK")
                .arg(&keys)
                .query_async::<u64>(conn)
                .await?;
        }
        if next == 0 {
            return Ok(deleted);
        }
        cursor = next;
    }
}
