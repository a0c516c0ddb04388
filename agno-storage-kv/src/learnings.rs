//! Learnings: `{prefix}:learnings:{learning_id}` records in agno `ValkeyDb`'s layout (agno's
//! `RedisDb` has no learnings), indexed by last update (all, per owner, global).

use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, visible_to, writable_by, Learning,
    LearningQuery, LearningStore, Page, Result,
};
use serde_json::Value;

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::{decode_object, encode, int, json, object, opt_int, opt_json, opt_str, text};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "learnings";

pub(crate) fn decode(key: &str, raw: &str) -> Result<Learning> {
    let map = decode_object(key, raw)?;
    let updated_at = int(&map, "updated_at");
    Ok(Learning {
        learning_id: text(&map, "learning_id")
            .or_else(|| key.rsplit_once(":learnings:").map(|(_, id)| id.to_owned()))
            .unwrap_or_default(),
        learning_type: text(&map, "learning_type").unwrap_or_default(),
        namespace: text(&map, "namespace"),
        user_id: text(&map, "user_id"),
        agent_id: text(&map, "agent_id"),
        team_id: text(&map, "team_id"),
        workflow_id: text(&map, "workflow_id"),
        session_id: text(&map, "session_id"),
        entity_id: text(&map, "entity_id"),
        entity_type: text(&map, "entity_type"),
        content: json(&map, "content").unwrap_or(Value::Null),
        metadata: json(&map, "metadata"),
        created_at: int(&map, "created_at").or(updated_at).unwrap_or_default(),
        updated_at,
    })
}

/// The record as `ValkeyDb.upsert_learning` lays it out, with `workflow_id` after `team_id`.
pub(crate) fn encode_learning(l: &Learning) -> String {
    encode(&object([
        ("learning_id", Value::String(l.learning_id.clone())),
        ("learning_type", Value::String(l.learning_type.clone())),
        ("namespace", opt_str(&l.namespace)),
        ("user_id", opt_str(&l.user_id)),
        ("agent_id", opt_str(&l.agent_id)),
        ("team_id", opt_str(&l.team_id)),
        ("workflow_id", opt_str(&l.workflow_id)),
        ("session_id", opt_str(&l.session_id)),
        ("entity_id", opt_str(&l.entity_id)),
        ("entity_type", opt_str(&l.entity_type)),
        ("content", l.content.clone()),
        ("metadata", opt_json(&l.metadata)),
        ("created_at", Value::from(l.created_at)),
        ("updated_at", opt_int(l.updated_at)),
    ]))
}

impl KvStore {
    fn learnings_all(&self) -> String {
        self.idx(TABLE, "updated:all")
    }

    fn learnings_of(&self, user: Option<&str>) -> String {
        match user {
            Some(u) => self.idx(TABLE, &format!("updated:user:{u}")),
            None => self.idx(TABLE, "updated:global"),
        }
    }

    pub(crate) fn learning_entries(&self, l: &Learning) -> Vec<Entry> {
        let score = l.updated_at.unwrap_or(l.created_at) as f64;
        vec![
            Entry::z(self.learnings_all(), &l.learning_id, score),
            Entry::z(
                self.learnings_of(l.user_id.as_deref()),
                &l.learning_id,
                score,
            ),
        ]
    }
}

#[async_trait]
impl LearningStore for KvStore {
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning> {
        let key = self.key(TABLE, &learning.learning_id);
        self.retry("upsert_learning", || async {
            let current = self.get(&key).await?;
            let (next, old_entries) = match &current {
                Some(raw) => {
                    let stored = decode(&key, raw)?;
                    if !writable_by(stored.user_id.as_deref(), learning.user_id.as_deref()) {
                        return Err(owned_by_another_user("learning", &learning.learning_id));
                    }
                    let entries = self.learning_entries(&stored);
                    let next = Learning {
                        content: learning.content.clone(),
                        metadata: learning.metadata.clone(),
                        updated_at: Some(now_epoch_seconds()),
                        ..stored
                    };
                    (next, entries)
                }
                None => {
                    let mut next = learning.clone();
                    next.updated_at = next.updated_at.or(Some(now_epoch_seconds()));
                    (next, Vec::new())
                }
            };
            let cas = Cas::on(&key)
                .expect(current.as_deref())
                .set(encode_learning(&next))
                .reindex(&old_entries, &self.learning_entries(&next));
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(next))
        })
        .await
    }

    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>> {
        let key = self.key(TABLE, learning_id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let l = decode(&key, &raw)?;
        Ok(visible_to(l.user_id.as_deref(), user_id).then_some(l))
    }

    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>> {
        query.pagination.validate()?;
        agno_storage_core::validate_sort(&query.effective_sort(), Learning::SORTABLE)?;
        let indexes = match (&query.user_id, query.include_global) {
            (None, _) => vec![self.learnings_all()],
            (Some(u), false) => vec![self.learnings_of(Some(u))],
            (Some(u), true) => vec![self.learnings_of(Some(u)), self.learnings_of(None)],
        };
        let mut rows = Vec::new();
        for index in indexes {
            for (id, raw) in self.load_index(TABLE, &index, "-inf", "+inf").await? {
                let l = decode(&self.key(TABLE, &id), &raw)?;
                if query.matches(&l) {
                    rows.push(l);
                }
            }
        }
        rows.sort_by(|a, b| a.learning_id.cmp(&b.learning_id));
        query.page(rows)
    }

    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool> {
        let key = self.key(TABLE, learning_id);
        self.retry("delete_learning", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(false));
            };
            let l = decode(&key, &raw)?;
            if !visible_to(l.user_id.as_deref(), user_id) {
                return Ok(Some(false));
            }
            let cas = Cas::on(&key)
                .expect(Some(&raw))
                .delete()
                .reindex(&self.learning_entries(&l), &[]);
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
        })
        .await
    }
}
