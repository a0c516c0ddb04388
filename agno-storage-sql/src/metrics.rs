//! Daily metrics (`agno_metrics`), unique on `(user_id, date, aggregation_period)`.

use agno_storage_core::{
    async_trait, MetricsPage, MetricsQuery, MetricsRecord, MetricsStore, Result,
};
use serde_json::Value;

use crate::exec::Statement;
use crate::schema::Table;
use crate::store::{SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

const COUNTS: [&str; 7] = [
    "agent_runs_count",
    "team_runs_count",
    "workflow_runs_count",
    "agent_sessions_count",
    "team_sessions_count",
    "workflow_sessions_count",
    "users_count",
];

fn metrics_from_row(row: &Row) -> Result<MetricsRecord> {
    Ok(MetricsRecord {
        id: row.str("id")?,
        user_id: MetricsRecord::user_from_stored(row.opt_str("user_id")?),
        date: row.date("date")?,
        aggregation_period: row.str("aggregation_period")?,
        agent_runs_count: row.i64("agent_runs_count")?,
        team_runs_count: row.i64("team_runs_count")?,
        workflow_runs_count: row.i64("workflow_runs_count")?,
        agent_sessions_count: row.i64("agent_sessions_count")?,
        team_sessions_count: row.i64("team_sessions_count")?,
        workflow_sessions_count: row.i64("workflow_sessions_count")?,
        users_count: row.i64("users_count")?,
        token_metrics: row.json("token_metrics")?.unwrap_or(Value::Null),
        model_metrics: row.json("model_metrics")?.unwrap_or(Value::Null),
        completed: row.bool("completed")?,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

#[async_trait]
impl MetricsStore for SqlStore {
    async fn upsert_metrics(&self, records: Vec<MetricsRecord>) -> Result<Vec<MetricsRecord>> {
        self.check(Table::Metrics)?;
        let d = self.dialect;
        let mut columns = vec!["id"];
        columns.extend(COUNTS);
        columns.extend([
            "token_metrics",
            "model_metrics",
            "date",
            "aggregation_period",
            "user_id",
            "created_at",
            "updated_at",
            "completed",
        ]);
        let sql = self.upsert_sql(&Upsert {
            table: Table::Metrics,
            columns: &columns,
            values: format!("({})", vec!["?"; columns.len()].join(", ")),
            conflict: "user_id, date, aggregation_period",
            set: COUNTS
                .iter()
                .chain(&["token_metrics", "model_metrics", "completed", "updated_at"])
                .map(|c| (*c, d.excluded(c)))
                .collect(),
            guard: None,
        });
        let statements: Vec<Statement> = records
            .iter()
            .map(|r| {
                let mut params = vec![SqlValue::text(&r.id)];
                params.extend(
                    [
                        r.agent_runs_count,
                        r.team_runs_count,
                        r.workflow_runs_count,
                        r.agent_sessions_count,
                        r.team_sessions_count,
                        r.workflow_sessions_count,
                        r.users_count,
                    ]
                    .map(SqlValue::int),
                );
                params.extend([
                    SqlValue::json(Some(&r.token_metrics)),
                    SqlValue::json(Some(&r.model_metrics)),
                    SqlValue::Date(Some(r.date)),
                    SqlValue::text(&r.aggregation_period),
                    SqlValue::text(r.stored_user_id()),
                    SqlValue::int(r.created_at),
                    SqlValue::Int(r.updated_at),
                    SqlValue::Bool(Some(r.completed)),
                ]);
                (sql.clone(), params)
            })
            .collect();
        // Each row is read back by its key where the dialect has no RETURNING.
        let read = format!(
            "SELECT * FROM {} WHERE user_id = ? AND date = ? AND aggregation_period = ?",
            self.t(Table::Metrics)
        );
        let writes = statements
            .into_iter()
            .zip(&records)
            .map(|(write, r)| {
                let key = vec![
                    SqlValue::text(r.stored_user_id()),
                    SqlValue::Date(Some(r.date)),
                    SqlValue::text(&r.aggregation_period),
                ];
                (write, (read.clone(), key))
            })
            .collect();
        self.dialect
            .writes_returning(self, writes)
            .await?
            .iter()
            .map(metrics_from_row)
            .collect()
    }

    async fn delete_user_metrics(&self, user_id: &str) -> Result<u64> {
        self.check(Table::Metrics)?;
        let sql = format!("DELETE FROM {} WHERE user_id = ?", self.t(Table::Metrics));
        self.exec.execute(&sql, vec![SqlValue::text(user_id)]).await
    }

    async fn get_metrics(&self, query: MetricsQuery) -> Result<MetricsPage> {
        self.check(Table::Metrics)?;
        let table = self.t(Table::Metrics);
        let mut owner = Where::default();
        owner.eq("user_id", query.user_id.as_deref());
        let mut w = Where::default();
        w.eq("user_id", query.user_id.as_deref());
        if let Some(d) = query.starting_date {
            w.push("date >= ?", [SqlValue::Date(Some(d))]);
        }
        if let Some(d) = query.ending_date {
            w.push("date <= ?", [SqlValue::Date(Some(d))]);
        }
        let rows = self
            .exec
            .query(
                &format!(
                    "SELECT * FROM {table}{} ORDER BY date ASC, user_id ASC",
                    w.sql()
                ),
                w.params,
            )
            .await?;
        let rows: Vec<MetricsRecord> = rows.iter().map(metrics_from_row).collect::<Result<_>>()?;
        let latest_updated_at = if rows.is_empty() {
            None
        } else {
            let latest = self
                .exec
                .query(
                    &format!(
                        "SELECT MAX(updated_at) AS latest FROM {table}{}",
                        owner.sql()
                    ),
                    owner.params,
                )
                .await?;
            latest
                .first()
                .map(|r| r.opt_i64("latest"))
                .transpose()?
                .flatten()
        };
        Ok(MetricsPage {
            rows,
            latest_updated_at,
        })
    }
}
