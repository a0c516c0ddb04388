//! User memories (`agno_memories`).

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, MemoryQuery, MemoryStats, MemoryStore,
    Page, Pagination, Result, UserMemory,
};
use serde_json::Value;

use crate::schema::Table;
use crate::store::{in_list, limit_offset, order_by, owned_by_other, SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

fn memory_from_row(row: &Row) -> Result<UserMemory> {
    let memory = match row.json("memory")? {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let topics = match row.json("topics")? {
        Some(Value::Array(items)) => Some(
            items
                .into_iter()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect(),
        ),
        _ => None,
    };
    Ok(UserMemory {
        memory_id: row.str("memory_id")?,
        memory,
        topics,
        user_id: row.opt_str("user_id")?,
        input: row.opt_str("input")?,
        agent_id: row.opt_str("agent_id")?,
        team_id: row.opt_str("team_id")?,
        feedback: row.opt_str("feedback")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

#[async_trait]
impl MemoryStore for SqlStore {
    async fn upsert_memory(&self, memory: UserMemory) -> Result<UserMemory> {
        self.check(Table::Memories)?;
        let d = self.dialect;
        let sql = self.upsert_sql(&Upsert {
            table: Table::Memories,
            columns: &[
                "memory_id",
                "memory",
                "input",
                "agent_id",
                "team_id",
                "user_id",
                "topics",
                "feedback",
                "created_at",
                "updated_at",
            ],
            values: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".into(),
            conflict: "memory_id",
            set: [
                "memory", "topics", "input", "agent_id", "team_id", "feedback",
            ]
            .into_iter()
            .map(|c| (c, d.excluded(c)))
            .chain([("updated_at", "?".to_owned())])
            .collect(),
            guard: Some(d.owner_guard()),
        });
        let topics = memory.topics.as_ref().map(|t| Value::from(t.clone()));
        let params = vec![
            SqlValue::text(&memory.memory_id),
            SqlValue::Json(Some(Value::String(memory.memory.clone()))),
            SqlValue::opt_text(memory.input.as_deref()),
            SqlValue::opt_text(memory.agent_id.as_deref()),
            SqlValue::opt_text(memory.team_id.as_deref()),
            SqlValue::opt_text(memory.user_id.as_deref()),
            SqlValue::Json(topics),
            SqlValue::opt_text(memory.feedback.as_deref()),
            SqlValue::int(memory.created_at),
            SqlValue::int(memory.updated_at.unwrap_or(memory.created_at)),
            SqlValue::int(now_epoch_seconds()),
        ];
        let stored = self
            .upsert_returning(
                Table::Memories,
                sql,
                params,
                "*",
                ("memory_id", SqlValue::text(&memory.memory_id)),
                &owned_by_other(memory.user_id.as_deref()),
            )
            .await?;
        match stored {
            Some(row) => memory_from_row(&row),
            None => Err(owned_by_another_user("memory", &memory.memory_id)),
        }
    }

    async fn get_memory(
        &self,
        memory_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<UserMemory>> {
        self.check(Table::Memories)?;
        let mut w = Where::default();
        w.eq("memory_id", Some(memory_id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Memories), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(memory_from_row)
            .transpose()
    }

    async fn get_memories(&self, query: MemoryQuery) -> Result<Page<UserMemory>> {
        self.check(Table::Memories)?;
        let paging = limit_offset(&query.pagination)?;
        let order = order_by(self.dialect, &query.sort, UserMemory::SORTABLE)?;
        let mut w = Where::default();
        w.eq("user_id", query.user_id.as_deref());
        w.eq("agent_id", query.agent_id.as_deref());
        w.eq("team_id", query.team_id.as_deref());
        for topic in &query.topics {
            let (clause, param) = self.dialect.topic_filter(topic);
            w.push(clause, [param]);
        }
        if let Some(search) = &query.search_content {
            let (clause, param) = self.dialect.memory_search(search);
            w.push(clause, [param]);
        }
        let from = format!("FROM {}{}", self.t(Table::Memories), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let sql = format!(
            "SELECT * {from}{}{paging}",
            order.map(|o| format!(" ORDER BY {o}")).unwrap_or_default()
        );
        let rows = self.exec.query(&sql, w.params).await?;
        Ok(Page::new(
            rows.iter().map(memory_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn get_memory_topics(&self, user_id: Option<&str>) -> Result<Vec<String>> {
        self.check(Table::Memories)?;
        let mut w = Where::default();
        w.push("topics IS NOT NULL", []);
        w.eq("user_id", user_id);
        let rows = self
            .exec
            .query(
                &format!("SELECT topics FROM {}{}", self.t(Table::Memories), w.sql()),
                w.params,
            )
            .await?;
        let mut topics = Vec::new();
        for row in rows {
            if let Some(Value::Array(items)) = row.json("topics")? {
                topics.extend(
                    items
                        .into_iter()
                        .filter_map(|t| t.as_str().map(str::to_owned)),
                );
            }
        }
        topics.sort();
        topics.dedup();
        Ok(topics)
    }

    async fn get_memory_stats(
        &self,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<MemoryStats>> {
        self.check(Table::Memories)?;
        let paging = limit_offset(&pagination)?;
        let mut w = Where::default();
        w.push("user_id IS NOT NULL", []);
        w.eq("user_id", user_id);
        let table = self.t(Table::Memories);
        let total = self
            .count(
                &format!(
                    "FROM (SELECT DISTINCT user_id FROM {table}{}) AS owners",
                    w.sql()
                ),
                w.params.clone(),
            )
            .await?;
        let sql = format!(
            "SELECT user_id, COUNT(*) AS total_memories, MAX(updated_at) AS last_memory_updated_at FROM {table}{} \
             GROUP BY user_id ORDER BY MAX(updated_at) DESC, user_id ASC{paging}",
            w.sql()
        );
        let items = self
            .exec
            .query(&sql, w.params)
            .await?
            .iter()
            .map(|r| {
                Ok(MemoryStats {
                    user_id: r.str("user_id")?,
                    total_memories: r.i64("total_memories")?.max(0) as u64,
                    last_memory_updated_at: r.opt_i64("last_memory_updated_at")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Page::new(items, total))
    }

    async fn delete_memories(&self, memory_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.check(Table::Memories)?;
        if memory_ids.is_empty() {
            return Ok(0);
        }
        let (list, ids) = in_list(memory_ids);
        let mut w = Where::default();
        w.push(format!("memory_id IN {list}"), ids);
        w.eq("user_id", user_id);
        self.exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Table::Memories), w.sql()),
                w.params,
            )
            .await
    }

    /// One `DELETE`, as agno's.
    async fn clear_memories(&self) -> Result<u64> {
        self.check(Table::Memories)?;
        self.exec
            .execute(
                &format!("DELETE FROM {}", self.t(Table::Memories)),
                Vec::new(),
            )
            .await
    }
}
