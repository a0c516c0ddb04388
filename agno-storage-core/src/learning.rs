//! Learnings: user profiles, entity memories, session context and other learned records.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::Result;
use crate::pagination::{Page, Pagination, Sort, SortOrder};

/// A learning (`agno_learnings`). Identity columns never change after the first write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Learning {
    /// Primary key (deterministic per type, see [`entity_learning_id`]).
    pub learning_id: String,
    /// `user_profile`, `user_memory`, `session_context`, `entity_memory`, …
    pub learning_type: String,
    /// `user`, `global` or a custom namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Owner.
    #[serde(default)]
    pub user_id: Option<String>,
    /// Agent that learned it.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// Team that learned it.
    #[serde(default)]
    pub team_id: Option<String>,
    /// Workflow that learned it.
    #[serde(default)]
    pub workflow_id: Option<String>,
    /// Session it belongs to.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Entity slug (entity memories).
    #[serde(default)]
    pub entity_id: Option<String>,
    /// Entity type (entity memories).
    #[serde(default)]
    pub entity_type: Option<String>,
    /// The learned content.
    pub content: Value,
    /// Free-form metadata.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Creation time, epoch seconds.
    pub created_at: i64,
    /// Last write, epoch seconds.
    #[serde(default)]
    pub updated_at: Option<i64>,
}

impl Learning {
    /// agno's columns of `agno_learnings`, in its order (the order its stores write a
    /// learning's fields).
    pub const FIELDS: &'static [&'static str] = &[
        "learning_id",
        "learning_type",
        "namespace",
        "user_id",
        "agent_id",
        "team_id",
        "workflow_id",
        "session_id",
        "entity_id",
        "entity_type",
        "content",
        "metadata",
        "created_at",
        "updated_at",
    ];

    /// Columns accepted by [`Sort::sort_by`] on learnings.
    pub const SORTABLE: &'static [&'static str] = &[
        "learning_id",
        "learning_type",
        "namespace",
        "user_id",
        "entity_id",
        "entity_type",
        "created_at",
        "updated_at",
    ];
}

/// The first 16 hex digits of `sha256(user_id)`: the user component of entity keys.
pub fn user_digest(user_id: &str) -> String {
    let digest = Sha256::digest(user_id.as_bytes());
    hex::encode(digest)[..16].to_owned()
}

/// The id of an entity memory, as agno 3.1.10's `build_learning_id`: under namespace `user`
/// `entity_user_{sha256(user_id)[:16]}_{type}_{id}` (`None` without a user), otherwise
/// `entity_{namespace}_{type}_{id}`.
pub fn entity_learning_id(
    namespace: &str,
    user_id: Option<&str>,
    entity_type: &str,
    entity_id: &str,
) -> Option<String> {
    if namespace == "user" {
        user_id.map(|u| format!("entity_user_{}_{entity_type}_{entity_id}", user_digest(u)))
    } else {
        Some(format!("entity_{namespace}_{entity_type}_{entity_id}"))
    }
}

/// Filters of [`LearningStore::list_learnings`]. Default order: `updated_at` descending.
#[derive(Debug, Clone, Default)]
pub struct LearningQuery {
    /// Only this type.
    pub learning_type: Option<String>,
    /// Only this owner's learnings.
    pub user_id: Option<String>,
    /// With `user_id`: also unowned (global) learnings.
    pub include_global: bool,
    /// Only this agent's.
    pub agent_id: Option<String>,
    /// Only this team's.
    pub team_id: Option<String>,
    /// Only this session's.
    pub session_id: Option<String>,
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this entity.
    pub entity_id: Option<String>,
    /// Only this entity type.
    pub entity_type: Option<String>,
    /// Limit and 1-indexed page.
    pub pagination: Pagination,
    /// Sort column and direction.
    pub sort: Sort,
}

impl LearningQuery {
    /// Whether `learning` passes the filters: owned by `user_id` (or unowned too with
    /// `include_global`; any owner without `user_id`), and equal on every other filter set.
    pub fn matches(&self, learning: &Learning) -> bool {
        use crate::same;
        let l = learning;
        let owner_ok = match (&self.user_id, self.include_global) {
            (None, _) => true,
            (Some(u), true) => l.user_id.is_none() || l.user_id.as_deref() == Some(u),
            (Some(u), false) => l.user_id.as_deref() == Some(u),
        };
        owner_ok
            && self
                .learning_type
                .as_deref()
                .is_none_or(|t| t == l.learning_type)
            && same(&self.agent_id, &l.agent_id)
            && same(&self.team_id, &l.team_id)
            && same(&self.session_id, &l.session_id)
            && same(&self.namespace, &l.namespace)
            && same(&self.entity_id, &l.entity_id)
            && same(&self.entity_type, &l.entity_type)
    }

    /// The order to list in: `sort`, or `updated_at` in `sort.sort_order` when it names no
    /// column.
    pub fn effective_sort(&self) -> Sort {
        match &self.sort.sort_by {
            Some(_) => self.sort.clone(),
            None => Sort::by("updated_at", self.sort.sort_order),
        }
    }

    /// Sorts `rows` (already filtered by [`LearningQuery::matches`]) by
    /// [`LearningQuery::effective_sort`], then cuts out the page; `total` counts every row.
    pub fn page(&self, rows: Vec<Learning>) -> Result<Page<Learning>> {
        Page::sorted(
            rows,
            &self.effective_sort(),
            Learning::SORTABLE,
            &self.pagination,
        )
    }
}

/// Learnings.
#[async_trait]
pub trait LearningStore: Send + Sync {
    /// Inserts a learning or replaces the `content`, `metadata` and `updated_at` of an
    /// existing one (identity columns are kept). A row owned by someone else is refused
    /// with `PermissionDenied`.
    async fn upsert_learning(&self, learning: Learning) -> Result<Learning>;

    /// The learning, or `None` when absent or not owned by `user_id`.
    async fn get_learning(
        &self,
        learning_id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Learning>>;

    /// Learnings matching `query`, with the count before paging.
    async fn list_learnings(&self, query: LearningQuery) -> Result<Page<Learning>>;

    /// Deletes the learning if owned by `user_id` (any when `None`).
    async fn delete_learning(&self, learning_id: &str, user_id: Option<&str>) -> Result<bool>;

    /// Deletes every learning `user_id` owns (only those of `learning_type` when given) and
    /// returns how many, as agno's `delete_user_learnings`; unowned rows are never touched.
    ///
    /// Provided over [`LearningStore::list_learnings`] and
    /// [`LearningStore::delete_learning`]; a backend with a bulk delete may override it.
    async fn delete_user_learnings(
        &self,
        user_id: &str,
        learning_type: Option<&str>,
    ) -> Result<u64> {
        let query = LearningQuery {
            user_id: Some(user_id.to_owned()),
            learning_type: learning_type.map(str::to_owned),
            include_global: false,
            ..Default::default()
        };
        let owned: Vec<String> = self
            .list_learnings(query)
            .await?
            .items
            .into_iter()
            .filter(|l| l.user_id.as_deref() == Some(user_id))
            .map(|l| l.learning_id)
            .collect();
        let mut deleted = 0;
        for id in owned {
            deleted += u64::from(self.delete_learning(&id, Some(user_id)).await?);
        }
        Ok(deleted)
    }

    /// Per owner (of `learning_type` when given; one owner when `user_id` is given), the
    /// latest `updated_at` of their learnings, as agno's `get_learnings_user_stats`: unowned
    /// rows are left out; sorted by `last_learning_updated_at` (the default, descending) or
    /// `user_id`; `total` counts the owners.
    ///
    /// Provided over [`LearningStore::list_learnings`] (it reads every matching learning); a
    /// backend that can group on the server may override it.
    async fn get_learnings_user_stats(
        &self,
        learning_type: Option<&str>,
        user_id: Option<&str>,
        sort: Sort,
        pagination: Pagination,
    ) -> Result<Page<LearningUserStats>> {
        pagination.validate()?;
        crate::validate_sort(&sort, LearningUserStats::SORTABLE)?;
        let query = LearningQuery {
            user_id: user_id.map(str::to_owned),
            learning_type: learning_type.map(str::to_owned),
            include_global: false,
            ..Default::default()
        };
        let mut latest: std::collections::BTreeMap<String, Option<i64>> = Default::default();
        for learning in self.list_learnings(query).await?.items {
            if let Some(owner) = learning.user_id {
                let at = latest.entry(owner).or_default();
                *at = (*at).max(learning.updated_at);
            }
        }
        let rows = latest
            .into_iter()
            .map(|(user_id, last_learning_updated_at)| LearningUserStats {
                user_id,
                last_learning_updated_at,
            })
            .collect();
        let sort = match sort.sort_by {
            Some(_) => sort,
            None => Sort::by("last_learning_updated_at", sort.sort_order),
        };
        Page::sorted(rows, &sort, LearningUserStats::SORTABLE, &pagination)
    }

    /// Learnings passing `filters` whose content holds `text`, as agno's `search_learnings`:
    /// case-insensitive, with runs of spaces, underscores and hyphens interchangeable
    /// ("sarah chen" finds `sarah_chen` and "Sarah-Chen"), and `%` a plain character. The
    /// text is looked for in the content's string values (agno's SQL matches the whole JSON
    /// text, keys included, and its callers then keep the value matches: the same rows in
    /// one step). Sorted and paged by `filters` (default: most recently updated first);
    /// `total` counts every match. A text of nothing but separators and wildcards matches
    /// nothing.
    ///
    /// Provided over [`LearningStore::list_learnings`] (it reads every learning passing the
    /// filters); a backend with a text index may override it.
    async fn search_learnings(&self, text: &str, filters: LearningQuery) -> Result<Page<Learning>> {
        filters.pagination.validate()?;
        let Some(needle) = search_key(text) else {
            return Ok(Page::new(Vec::new(), 0));
        };
        let all = LearningQuery {
            pagination: Pagination::default(),
            ..filters.clone()
        };
        let found = self
            .list_learnings(all)
            .await?
            .items
            .into_iter()
            .filter(|l| content_holds(&l.content, &needle))
            .collect();
        filters.page(found)
    }
}

/// `text` folded for [`LearningStore::search_learnings`]: lower case, each run of spaces,
/// underscores and hyphens one space, trimmed; `None` when nothing but separators and `%`
/// is left (agno's `learning_search_patterns` yields no pattern then).
fn search_key(text: &str) -> Option<String> {
    let folded = fold_separators(text);
    let key = folded.trim();
    (!key.replace(['%', ' '], "").is_empty()).then(|| key.to_owned())
}

fn fold_separators(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_run = false;
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_whitespace() || c == '_' || c == '-' {
            if !in_run {
                out.push(' ');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    out
}

/// Whether a string value inside `content` holds the folded `needle`.
fn content_holds(content: &Value, needle: &str) -> bool {
    match content {
        Value::String(s) => fold_separators(s).contains(needle),
        Value::Array(items) => items.iter().any(|v| content_holds(v, needle)),
        Value::Object(fields) => fields.values().any(|v| content_holds(v, needle)),
        _ => false,
    }
}

/// Entity memories (`learning_type` `entity_memory`) keyed as agno's `EntityMemoryStore`
/// keys them ([`entity_learning_id`]). In namespace `user` every call needs the user's id
/// and reaches only that user's entities; a call without one is refused with
/// `InvalidInput`, never widened to every user's rows. In any other namespace the entity
/// is shared and has no owner.
#[derive(Clone, Copy)]
pub struct EntityMemories<'a> {
    store: &'a dyn LearningStore,
}

/// Which entity memory: its namespace (`user`, `global` or a custom one), the user for
/// namespace `user`, and the entity's type and slug.
#[derive(Debug, Clone, Copy)]
pub struct EntityKey<'a> {
    /// `user`, `global` or a custom namespace.
    pub namespace: &'a str,
    /// The owner; required in namespace `user`, ignored elsewhere.
    pub user_id: Option<&'a str>,
    /// `person`, `project`, `company`, …
    pub entity_type: &'a str,
    /// The entity's slug.
    pub entity_id: &'a str,
}

impl EntityKey<'_> {
    /// The learning id and the owner (`None` outside namespace `user`).
    fn resolve(&self, call: &str) -> Result<(String, Option<&str>)> {
        let owner = if self.namespace == "user" {
            Some(self.user_id.ok_or_else(|| {
                crate::Error::invalid_input(format!(
                    "EntityMemories::{call}: namespace 'user' needs a user_id (entity \
                     memories there are per user); pass the user's id, or use namespace \
                     'global' for an entity every user shares"
                ))
            })?)
        } else {
            None
        };
        let id = entity_learning_id(self.namespace, owner, self.entity_type, self.entity_id)
            .ok_or_else(|| crate::Error::invalid_input("an entity memory needs an id"))?;
        Ok((id, owner))
    }
}

impl<'a> EntityMemories<'a> {
    /// Entity memories kept in `store`.
    pub fn new(store: &'a dyn LearningStore) -> Self {
        EntityMemories { store }
    }

    /// Writes the entity's `content` (identity columns are kept on an existing row).
    pub async fn upsert(&self, key: EntityKey<'_>, content: Value) -> Result<Learning> {
        let (learning_id, owner) = key.resolve("upsert")?;
        let now = crate::now_epoch_seconds();
        self.store
            .upsert_learning(Learning {
                learning_id,
                learning_type: "entity_memory".into(),
                namespace: Some(key.namespace.to_owned()),
                user_id: owner.map(str::to_owned),
                agent_id: None,
                team_id: None,
                workflow_id: None,
                session_id: None,
                entity_id: Some(key.entity_id.to_owned()),
                entity_type: Some(key.entity_type.to_owned()),
                content,
                metadata: None,
                created_at: now,
                updated_at: Some(now),
            })
            .await
    }

    /// The entity's memory, `None` when there is none.
    pub async fn get(&self, key: EntityKey<'_>) -> Result<Option<Learning>> {
        let (id, owner) = key.resolve("get")?;
        self.store.get_learning(&id, owner).await
    }

    /// Deletes the entity's memory; whether there was one.
    pub async fn delete(&self, key: EntityKey<'_>) -> Result<bool> {
        let (id, owner) = key.resolve("delete")?;
        self.store.delete_learning(&id, owner).await
    }
}

/// One owner's learnings at a glance ([`LearningStore::get_learnings_user_stats`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LearningUserStats {
    /// The owner.
    pub user_id: String,
    /// The latest `updated_at` among their learnings.
    pub last_learning_updated_at: Option<i64>,
}

impl LearningUserStats {
    /// The columns [`LearningStore::get_learnings_user_stats`] sorts by.
    pub const SORTABLE: &'static [&'static str] = &["user_id", "last_learning_updated_at"];
}

/// What [`rekey_user_entity_learnings`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RekeyReport {
    /// Rows looked at.
    pub scanned: u64,
    /// Already on a user-scoped key.
    pub keyed: u64,
    /// Moved to their user-scoped key.
    pub rekeyed: u64,
    /// Moved onto an existing user-scoped row (the existing row's content wins).
    pub merged: u64,
    /// Rows whose content names another user, moved to the `quarantined_user` namespace.
    pub quarantined: u64,
    /// Rows without an owner, left as they are.
    pub unowned: u64,
    /// Rows lacking entity id or type, left as they are.
    pub malformed: u64,
}

/// The v3.0.0 learnings step: re-keys entity memories of namespace `user` from the pre-v3
/// shared key `entity_user_{type}_{id}` to the per-user key. Written once against
/// [`LearningStore`] for every backend. Each move writes the target, reads it back, then
/// deletes the source; an error aborts (the caller does not stamp).
pub async fn rekey_user_entity_learnings(store: &dyn LearningStore) -> Result<RekeyReport> {
    let mut report = RekeyReport::default();
    let rows = store
        .list_learnings(LearningQuery {
            learning_type: Some("entity_memory".into()),
            namespace: Some("user".into()),
            sort: Sort::by("learning_id", SortOrder::Asc),
            ..Default::default()
        })
        .await?
        .items;
    for row in rows {
        report.scanned += 1;
        let (Some(entity_type), Some(entity_id)) = (row.entity_type.clone(), row.entity_id.clone())
        else {
            report.malformed += 1;
            continue;
        };
        if row.learning_id != format!("entity_user_{entity_type}_{entity_id}") {
            report.keyed += 1;
            continue;
        }
        let Some(owner) = row.user_id.clone() else {
            report.unowned += 1;
            continue;
        };
        let content_owner = row.content.get("user_id").and_then(Value::as_str);
        let (target_id, namespace) = match content_owner {
            Some(c) if c != owner => (
                format!("entity_quarantined_user_{entity_type}_{entity_id}"),
                "quarantined_user",
            ),
            _ => match entity_learning_id("user", Some(&owner), &entity_type, &entity_id) {
                Some(id) => (id, "user"),
                None => continue,
            },
        };
        let existing = store.get_learning(&target_id, None).await?;
        let now = crate::now_epoch_seconds();
        let content = match &existing {
            Some(target) => merge_entity_content(&target.content, &row.content),
            None => row.content.clone(),
        };
        let moved = Learning {
            learning_id: target_id.clone(),
            namespace: Some(namespace.into()),
            content,
            created_at: now,
            updated_at: Some(now),
            ..row.clone()
        };
        store.upsert_learning(moved).await?;
        if store.get_learning(&target_id, None).await?.is_none() {
            return Err(crate::Error::new(
                crate::ErrorKind::Conflict,
                format!("re-keyed learning {target_id} was not readable after writing it; source {} kept", row.learning_id),
            ));
        }
        store.delete_learning(&row.learning_id, None).await?;
        match (namespace, existing) {
            ("quarantined_user", _) => report.quarantined += 1,
            (_, Some(_)) => report.merged += 1,
            (_, None) => report.rekeyed += 1,
        }
    }
    Ok(report)
}

/// Target wins on scalar keys; `facts`, `events` and `relationships` are unioned with the
/// source's entries first.
fn merge_entity_content(target: &Value, source: &Value) -> Value {
    let (Value::Object(t), Value::Object(s)) = (target, source) else {
        return target.clone();
    };
    let mut merged = s.clone();
    for (k, v) in t {
        merged.insert(k.clone(), v.clone());
    }
    for key in ["facts", "events", "relationships"] {
        if let (Some(Value::Array(sa)), Some(Value::Array(ta))) = (s.get(key), t.get(key)) {
            let mut union = sa.clone();
            union.extend(ta.iter().filter(|v| !sa.contains(v)).cloned());
            merged.insert(key.into(), Value::Array(union));
        }
    }
    Value::Object(merged)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_key_matches_agno() {
        assert_eq!(
            entity_learning_id("user", Some("alice"), "person", "sarah_chen").as_deref(),
            Some("entity_user_2bd806c97f0e00af_person_sarah_chen")
        );
        assert_eq!(entity_learning_id("user", None, "person", "x"), None);
        assert_eq!(
            entity_learning_id("global", None, "person", "x").as_deref(),
            Some("entity_global_person_x")
        );
    }
}
