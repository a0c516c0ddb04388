//! Deleting keys by pattern, shared by the KV tests and benches.

/// Deletes every key matching `pattern` (a SCAN glob) with `UNLINK`; returns how many went.
pub async fn delete_matching<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    pattern: &str,
) -> redis::RedisResult<u64> {
    let mut cursor: u64 = 0;
    let mut deleted = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
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
