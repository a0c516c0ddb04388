//! Knowledge contents (`agno_knowledge`): reads see the owner's and shared rows.

use agno_storage_core::{
    async_trait, Error, KnowledgeContent, KnowledgeQuery, KnowledgeStore, Page, Result,
};

use crate::schema::Table;
use crate::store::{limit_offset, order_by, SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

fn knowledge_from_row(row: &Row) -> Result<KnowledgeContent> {
    Ok(KnowledgeContent {
        id: row.str("id")?,
        name: row.str("name")?,
        description: row.opt_str("description")?.unwrap_or_default(),
        metadata: row.json("metadata")?,
        content_type: row.opt_str("type")?,
        size: row.opt_i64("size")?,
        linked_to: row.opt_str("linked_to")?,
        access_count: row.opt_i64("access_count")?,
        status: row.opt_str("status")?,
        status_message: row.opt_str("status_message")?,
        created_at: row.opt_i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
        external_id: row.opt_str("external_id")?,
        user_id: row.opt_str("user_id")?,
    })
}

/// A content row with NUL stripped from its text fields, as agno's PostgreSQL adapter
/// writes it (PostgreSQL text cannot hold NUL; agno sanitizes knowledge rows only). Its
/// id, owner and links are identifiers, refused with NUL before they get here.
fn without_nul(mut c: KnowledgeContent) -> KnowledgeContent {
    let strip = |s: &mut String| s.retain(|ch| ch != '\0');
    strip(&mut c.name);
    strip(&mut c.description);
    for field in [&mut c.content_type, &mut c.status, &mut c.status_message] {
        field.as_mut().map(strip);
    }
    c
}

impl SqlStore {
    fn owner_or_shared(&self, w: &mut Where, user_id: Option<&str>) {
        if let Some(u) = user_id {
            w.push("(user_id = ? OR user_id IS NULL)", [SqlValue::text(u)]);
        }
    }
}

#[async_trait]
impl KnowledgeStore for SqlStore {
    async fn upsert_knowledge_content(&self, c: KnowledgeContent) -> Result<KnowledgeContent> {
        self.check(Table::Knowledge)?;
        let c = if self.dialect.text_holds_nul() {
            c
        } else {
            without_nul(c)
        };
        let fields: Vec<(&str, SqlValue, bool)> = vec![
            ("name", SqlValue::text(&c.name), true),
            ("description", SqlValue::text(&c.description), true),
            (
                "metadata",
                SqlValue::json(c.metadata.as_ref()),
                c.metadata.is_some(),
            ),
            (
                "type",
                SqlValue::opt_text(c.content_type.as_deref()),
                c.content_type.is_some(),
            ),
            ("size", SqlValue::Int(c.size), c.size.is_some()),
            (
                "linked_to",
                SqlValue::opt_text(c.linked_to.as_deref()),
                c.linked_to.is_some(),
            ),
            (
                "access_count",
                SqlValue::Int(c.access_count),
                c.access_count.is_some(),
            ),
            (
                "status",
                SqlValue::opt_text(c.status.as_deref()),
                c.status.is_some(),
            ),
            (
                "status_message",
                SqlValue::opt_text(c.status_message.as_deref()),
                c.status_message.is_some(),
            ),
            (
                "created_at",
                SqlValue::Int(c.created_at),
                c.created_at.is_some(),
            ),
            (
                "updated_at",
                SqlValue::Int(c.updated_at),
                c.updated_at.is_some(),
            ),
            (
                "external_id",
                SqlValue::opt_text(c.external_id.as_deref()),
                c.external_id.is_some(),
            ),
            (
                "user_id",
                SqlValue::opt_text(c.user_id.as_deref()),
                c.user_id.is_some(),
            ),
        ];
        let d = self.dialect;
        let mut columns = vec!["id"];
        columns.extend(fields.iter().map(|(n, _, _)| *n));
        let sql = self.upsert_sql(&Upsert {
            table: Table::Knowledge,
            columns: &columns,
            values: format!("({})", vec!["?"; columns.len()].join(", ")),
            conflict: "id",
            set: fields
                .iter()
                .filter(|(_, _, set)| *set)
                .map(|(n, _, _)| (*n, d.excluded(n)))
                .collect(),
            // Unlike the other stores, agno lets a write without an owner through.
            guard: Some(format!(
                "{} IS NULL OR {}",
                d.excluded("user_id"),
                d.same(&d.stored("user_id"), &d.excluded("user_id"))
            )),
        });
        let writer = c.user_id.clone();
        let mut params = vec![SqlValue::text(&c.id)];
        params.extend(fields.into_iter().map(|(_, v, _)| v));
        let refused = |row: &Row| -> Result<bool> {
            Ok(writer.is_some() && row.opt_str("user_id")? != writer)
        };
        let stored = self
            .upsert_returning(
                Table::Knowledge,
                sql,
                params,
                "*",
                ("id", SqlValue::text(&c.id)),
                &refused,
            )
            .await?;
        match stored {
            Some(row) => knowledge_from_row(&row),
            None => Err(Error::not_found(format!(
                "Knowledge content {} not found",
                c.id
            ))),
        }
    }

    async fn get_knowledge_content(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<KnowledgeContent>> {
        self.check(Table::Knowledge)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        self.owner_or_shared(&mut w, user_id);
        self.exec
            .query(
                &format!("SELECT * FROM {}{}", self.t(Table::Knowledge), w.sql()),
                w.params,
            )
            .await?
            .first()
            .map(knowledge_from_row)
            .transpose()
    }

    async fn get_knowledge_contents(
        &self,
        query: KnowledgeQuery,
    ) -> Result<Page<KnowledgeContent>> {
        self.check(Table::Knowledge)?;
        let paging = limit_offset(&query.pagination)?;
        let order = order_by(self.dialect, &query.sort, KnowledgeContent::SORTABLE)?;
        let mut w = Where::default();
        w.eq("linked_to", query.linked_to.as_deref());
        self.owner_or_shared(&mut w, query.user_id.as_deref());
        let from = format!("FROM {}{}", self.t(Table::Knowledge), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let sql = format!(
            "SELECT * {from}{}{paging}",
            order.map(|o| format!(" ORDER BY {o}")).unwrap_or_default()
        );
        let rows = self.exec.query(&sql, w.params).await?;
        Ok(Page::new(
            rows.iter().map(knowledge_from_row).collect::<Result<_>>()?,
            total,
        ))
    }

    async fn delete_knowledge_content(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        self.check(Table::Knowledge)?;
        let mut w = Where::default();
        w.eq("id", Some(id));
        w.eq("user_id", user_id);
        Ok(self
            .exec
            .execute(
                &format!("DELETE FROM {}{}", self.t(Table::Knowledge), w.sql()),
                w.params,
            )
            .await?
            > 0)
    }
}
