//! Learnings: per-user entity keys and immutable identity.

use agno_storage_core::learning::entity_learning_id;
use agno_storage_core::{now_epoch_seconds, Learning, LearningQuery};
use serde_json::json;

use crate::{ensure, ensure_eq, CaseResult, Ctx};

pub(crate) fn entity(user: &str, learning_id: String, fact: &str) -> Learning {
    Learning {
        learning_id,
        learning_type: "entity_memory".into(),
        namespace: Some("user".into()),
        user_id: Some(user.into()),
        agent_id: None,
        team_id: None,
        workflow_id: None,
        session_id: None,
        entity_id: Some("sarah_chen".into()),
        entity_type: Some("person".into()),
        content: json!({"name": "Sarah Chen", "facts": [fact], "user_id": user}),
        metadata: None,
        created_at: now_epoch_seconds(),
        updated_at: None,
    }
}

/// Two users recording the same entity get two rows; neither sees the other's facts.
pub(crate) async fn entity_memory_isolated_per_user(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let key =
        |u: &str| entity_learning_id("user", Some(u), "person", "sarah_chen").unwrap_or_default();
    ensure(
        key("alice") != key("bob"),
        "entity keys of two users differ",
    )?;
    store
        .upsert_learning(entity("alice", key("alice"), "alice's manager"))
        .await?;
    store
        .upsert_learning(entity("bob", key("bob"), "bob's sister"))
        .await?;
    let a = store
        .get_learning(&key("alice"), Some("alice"))
        .await?
        .ok_or("alice's entity not found")?;
    ensure_eq(
        a.content["facts"].clone(),
        json!(["alice's manager"]),
        "alice's facts",
    )?;
    ensure(
        store
            .get_learning(&key("bob"), Some("alice"))
            .await?
            .is_none(),
        "alice reads bob's entity",
    )?;
    let listed = store
        .list_learnings(LearningQuery {
            user_id: Some("alice".into()),
            learning_type: Some("entity_memory".into()),
            ..Default::default()
        })
        .await?;
    ensure_eq(listed.total, 1, "alice's entity memories")?;
    Ok(())
}

/// An upsert replaces content and metadata but never the identity columns.
pub(crate) async fn learning_identity_is_kept(ctx: &Ctx) -> CaseResult {
    let db = ctx.db().await?;
    let store = db.learnings()?;
    let id = entity_learning_id("user", Some("alice"), "person", "sarah_chen").unwrap_or_default();
    let first = entity("alice", id.clone(), "one");
    store.upsert_learning(first.clone()).await?;
    let mut second = entity("alice", id.clone(), "two");
    second.entity_id = Some("someone_else".into());
    second.metadata = Some(json!({"v": 2}));
    store.upsert_learning(second).await?;
    let read = store
        .get_learning(&id, None)
        .await?
        .ok_or("learning not found")?;
    ensure_eq(
        read.entity_id.as_deref(),
        Some("sarah_chen"),
        "entity_id kept",
    )?;
    ensure_eq(
        read.content["facts"].clone(),
        json!(["two"]),
        "content replaced",
    )?;
    ensure_eq(
        read.metadata.clone(),
        Some(json!({"v": 2})),
        "metadata replaced",
    )?;
    ensure_eq(read.created_at, first.created_at, "created_at kept")?;
    Ok(())
}
