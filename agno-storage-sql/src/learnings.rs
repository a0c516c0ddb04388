//! Learnings (`agno_learnings`).

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, validate_sort, Learning, LearningQuery,
    LearningStore, LearningUserStats, Page, Pagination, Result, Sort, SortOrder,
};
use serde_json::Value;

use crate::schema::Table;
use crate::store::{limit_offset, order_by, owned_by_other, SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

fn learning_from_row(row: &Row) -> Result<Learning> {
    Ok(Learning {
        learning_id: row.str("learning_id")?,
        learning_type: row.str("learning_type")?,
        namespace: row.opt_str("namespace")?,
        user_id: row.opt_str("user_id")?,
        agent_id: row.opt_str("agent_id")?,
        team_id: row.opt_str("team_id")?,
        workflow_id: row.opt_str("workflow_id")?,
        session_id: row.opt_str("session_id")?,
        entity_id: row.opt_str("entity_id")?,
        entity_type: row.opt_str("entity_type")?,
        content: row.json("content")?.unwrap_or(Value::Null),
        metadata: row.json("metadata")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

#[async_trait]
impl LearningStore for SqlStore {
    async fn upsert_learning(&self, l: Learning) -> Result<Learning> {
        self.check(Table::Learnings)?;
        let d = self.dialect;
        let sql = self.upsert_sql(&Upsert {
            table: Table::Learnings,
            columns: Learning::FIELDS,
            values: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".into(),
            conflict: "learning_id",
            set: vec![
                ("content", d.excluded("content")),
                ("metadata", d.excluded("metadata")),
                ("updated_at", "?".into()),
            ],
            guard: Some(d.owner_guard()),
        });
        let now = now_epoch_seconds();
        let params = vec![
            SqlValue::text(&l.learning_id),
            SqlValue::text(&l.learning_type),
            SqlValue::opt_text(l.namespace.as_deref()),
            SqlValue::opt_text(l.user_id.as_deref()),
            SqlValue::opt_text(l.agent_id.as_deref()),
            SqlValue::opt_text(l.team_id.as_deref()),
            SqlValue::opt_text(l.workflow_id.as_deref()),
            SqlValue::opt_text(l.session_id.as_deref()),
            SqlValue::opt_text(l.entity_id.as_deref()),
            SqlValue::opt_text(l.entity_type.as_deref()),
            SqlValue::json(Some(&l.content)),
            SqlValue::json(l.metadata.as_ref()),
            SqlValue::int(l.created_at),
            SqlValue::int(l.updated_at.unwrap_or(now)),
            SqlValue::int(now),
        ];
        let stored = self
            .upsert_returning(
                Table::Learnings,
                sql,
                params,
                "*",
                ("learning_id", SqlValue::text(&l.learning_id)),
                &owned_by_other(l.user_id.as_deref()),
            )
            .await?;
        match stored {
            Some(row) => learning_from_row(&row),
            None => Err(owned_by_another_user("learning", &l.learning_id)),
        }
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        self.check(Table::Learnings)?;
        let mut w = Where::default();
        w.eq("learning_id", Some(learning_id));
        w.eq("user_id", user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Learnings), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(learning_from_row)
            .transpose()
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        self.check(Table::Learnings)?;
        let paging = limit_offset(&query.pagination)?;
        let sort = match &query.sort.sort_by {
            Some(_) => query.sort.clone(),
            None => Sort {
                sort_by: Some("updated_at".into()),
                sort_order: query.sort.sort_order,
            },
        };
        let order = order_by(self.dialect, &sort, Learning::SORTABLE)?.unwrap_or_default();
        let mut w = Where::default();
        match (&query.user_id, query.include_global) {
            (Some(u), true) => w.push("(user_id = ? OR user_id IS NULL)", [SqlValue::text(u)]),
            (Some(u), false) => w.eq("user_id", Some(u)),
            (None, _) => {}
        }
        w.eq("learning_type", query.learning_type.as_deref());
        w.eq("agent_id", query.agent_id.as_deref());
        w.eq("team_id", query.team_id.as_deref());
        w.eq("session_id", query.session_id.as_deref());
        w.eq("namespace", query.namespace.as_deref());
        w.eq("entity_id", query.entity_id.as_deref());
        w.eq("entity_type", query.entity_type.as_deref());
        let from = format!("FROM {}{}", self.t(Table::Learnings), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let rows = self
            .exec
            .query(
                &format!("SELECT * {from} ORDER BY {order}, learning_id ASC{paging}"),
                w.params,
            )
            .await?;
        Ok(Page::new(
            rows.iter().map(learning_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Learnings)?;
        let mut w = Where::default();
        w.eq("learning_id", Some(learning_id));
        w.eq("user_id", user_id);
        Ok(self
            .exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Table::Learnings), w.sql()),
                w.params,
            )
            .await?
            > 0)
    }

    /// One `DELETE`, as agno's.
    async fn delete_user_learnings(
        &self,
        user_id: &str,
        learning_type: Option<&str>,
    ) -> Result<u64> {
        self.check(Table::Learnings)?;
        let mut w = Where::default();
        w.eq("user_id", Some(user_id));
        w.eq("learning_type", learning_type);
        self.exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Table::Learnings), w.sql()),
                w.params,
            )
            .await
    }

    /// Grouped on the server, as agno's (`MAX(updated_at)` per owner).
    async fn get_learnings_user_stats(
        &self,
        learning_type: Option<&str>,
        user_id: Option<&str>,
        sort: Sort,
        pagination: Pagination,
    ) -> Result<Page<LearningUserStats>> {
        self.check(Table::Learnings)?;
        let paging = limit_offset(&pagination)?;
        validate_sort(&sort, LearningUserStats::SORTABLE)?;
        let mut w = Where::default();
        w.push("user_id IS NOT NULL", []);
        w.eq("learning_type", learning_type);
        w.eq("user_id", user_id);
        let grouped = format!(
            "SELECT user_id, MAX(updated_at) AS last_learning_updated_at FROM {}{} GROUP BY user_id",
            self.t(Table::Learnings),
            w.sql()
        );
        let total = self
            .count(&format!("FROM ({grouped}) owners"), w.params.clone())
            .await?;
        let dir = match sort.sort_order {
            SortOrder::Asc => "ASC",
            SortOrder::Desc => "DESC",
        };
        // Ties in the latest write go by owner, as the provided default orders them.
        let order = match sort.sort_by.as_deref() {
            Some("user_id") => format!("user_id {dir}"),
            _ => format!("last_learning_updated_at {dir}, user_id ASC"),
        };
        let rows = self
            .exec
            .query(&format!("{grouped} ORDER BY {order}{paging}"), w.params)
            .await?;
        let items = rows
            .iter()
            .map(|row| {
                Ok(LearningUserStats {
                    user_id: row.str("user_id")?,
                    last_learning_updated_at: row.opt_i64("last_learning_updated_at")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Page::new(items, total))
    }
}
