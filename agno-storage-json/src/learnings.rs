//! Learnings (`agno_learnings.json`; agno's JSON stores have none). Identity columns never
//! change after the first write.

use agno_storage_core::learning::{Learning, LearningQuery, LearningStore};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by,
    Page, Result, };
use serde_json::Value;

use crate::doc::{fields, find, from_row, put, shape_serde, text, Doc};
use crate::files::{Step, Table};
use crate::store::JsonStore;

impl Doc for Learning {
    const TABLE: Table = Table::Learnings;
    const KEY: &'static str = "learning_id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Learnings, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape_serde(fields(self)?, existing))
    }
}

#[async_trait]
impl LearningStore for JsonStore {
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Learnings, |rows| {
                let stored = match find::<Learning>(rows, &learning.learning_id)? {
                    Some((index, mut stored)) => {
                        if !writable_by(stored.user_id.as_deref(), learning.user_id.as_deref()) {
                            return Err(owned_by_another_user("learning", &learning.learning_id));
                        }
                        stored.content = learning.content.clone();
                        stored.metadata = learning.metadata.clone();
                        stored.updated_at = Some(now);
                        put(rows, Some(index), &stored)?;
                        stored
                    }
                    None => {
                        let mut new = learning.clone();
                        new.updated_at = new.updated_at.or(Some(now));
                        put(rows, None, &new)?;
                        new
                    }
                };
                Ok(Step::Write(stored))
            })
            .await
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        Ok(self
            .get::<Learning>(learning_id)
            .await?
            .filter(|l| visible_to(l.user_id.as_deref(), user_id)))
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        let rows: Vec<Learning> = self
            .all::<Learning>()
            .await?
            .into_iter()
            .filter(|l| query.matches(l))
            .collect();
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        self.files
            .modify(Table::Learnings, |rows| {
                let before = rows.len();
                rows.retain(|l| {
                    !(text(l, "learning_id") == Some(learning_id)
                        && visible_to(text(l, "user_id"), user_id))
                });
                Ok(if rows.len() == before {
                    Step::Keep(false)
                } else {
                    Step::Write(true)
                })
            })
            .await
    }
}
