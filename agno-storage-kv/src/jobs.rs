//! The durable job queue, in agno 3.1.10 `RedisDb`'s layout (spec §3.4) so agno workers
//! and ours share one queue: tickets `{prefix}:jobs:job:{id}` (ASCII JSON), idempotency
//! keys `{prefix}:jobs:idem:u{len}:{user}:{key}`, and the `queued` (`available_at`),
//! `running` (`locked_at`) and `all` (`created_at`) sorted sets, which both sides keep in
//! step with every transition. Ours on top, per owner and per session by creation time:
//! fields that never change after enqueue, so agno's transitions cannot make them stale
//! (tickets agno enqueued join them through `KvDb::rebuild_indexes`).
//!
//! The store is the document engine's: every transition is one compare-and-set of the
//! ticket with its index moves, so a claim has one winner, and every write after a claim
//! is fenced on `(status = running, locked_by, attempt)`. Lease times come from the
//! server's `TIME`, one clock for every worker. A claim (the engine's `claim_next_job`
//! hook, served here) pages the `queued` set by due time, then the `running` set by lease.
//!
//! Durability is Redis's: with the default RDB snapshots an accepted job can be lost in a
//! crash; run Redis with `appendonly yes` and `appendfsync always` (or `everysec`, losing
//! at most a second) for a durable queue. A SQL store's job queue stays the record of
//! truth where losing an accepted job is not acceptable.

use agno_storage_core::job::undecodable_job_error;
use agno_storage_core::{Error, ErrorKind, Job, JobWakeups, Result};
use agno_storage_doc::{decode_or_fail_job, ClaimPass, Commit, DocBackend, Fields};
use serde_json::Value;

use crate::docs::Entry;
use crate::docs::{score, text, KvDocs, Server, TableLayout, DEFAULT_LAYOUT};
use crate::store::KvStore;

pub(crate) const TABLE: &str = "jobs";
/// Tickets one claim reads at a time: at least [`PAGE`], up to [`MAX_PAGE`] for a batch.
const PAGE: usize = 64;
const MAX_PAGE: usize = 512;

pub(crate) const LAYOUT: TableLayout = TableLayout {
    // `QueuedJob.to_dict()`.
    order: |_| {
        &[
            "id",
            "component_type",
            "component_id",
            "session_id",
            "job_type",
            "deployment_id",
            "user_id",
            "payload",
            "status",
            "attempt",
            "max_attempts",
            "idempotency_key",
            "available_at",
            "locked_by",
            "locked_at",
            "error",
            "created_at",
            "updated_at",
            "completed_at",
        ]
    },
    score: |f| score(f, "created_at"),
    group_field: "session_id",
    by_owner: |s, session| session.map(|id| s.jobs_idx(&format!("session:{id}"))),
    all: Some(|s| s.jobs_set("all")),
    secondary: Some(("user_id", |s, u| s.jobs_idx(&format!("user:{u}")))),
    extra: status_entries,
    normalize,
    key_prefix: "job:",
    ascii: true,
    lookups: &[("status", |s, status| match status {
        "queued" => Some(s.jobs_set("queued")),
        "running" => Some(s.jobs_set("running")),
        _ => None,
    })],
    ..DEFAULT_LAYOUT
};

/// A queued ticket is in agno's `queued` set by `available_at`, a running one in `running`
/// by `locked_at`.
fn status_entries(s: &KvStore, id: &str, f: &Fields) -> Vec<Entry> {
    let mut entries = match text(f, "status") {
        Some("queued") => vec![Entry::z(s.jobs_set("queued"), id, score(f, "available_at"))],
        Some("running") => vec![Entry::z(s.jobs_set("running"), id, score(f, "locked_at"))],
        _ => Vec::new(),
    };
    // agno's session set: the live serialized tickets, scored by `session_seq`.
    let payload = f.get("payload");
    let serialized = payload.and_then(|p| p.get("serialize_session")) == Some(&Value::Bool(true));
    if serialized && matches!(text(f, "status"), Some("queued" | "running" | "paused")) {
        let seq = payload
            .and_then(|p| p.get("session_seq"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let session = text(f, "session_id").unwrap_or_default();
        entries.push(Entry::z(s.jobs_session_set(session), id, seq as f64));
    }
    entries
}

/// A ticket missing fields agno's `QueuedJob.from_dict` defaults reads them so.
fn normalize(_: &str, f: &mut Fields) {
    let defaults = [
        ("component_type", Value::from("")),
        ("component_id", Value::from("")),
        ("session_id", Value::from("")),
        ("job_type", Value::from("run")),
        ("attempt", Value::from(0)),
        ("max_attempts", Value::from(1)),
        ("available_at", Value::from(0)),
    ];
    for (key, value) in defaults {
        if f.get(key).is_none_or(Value::is_null) {
            f.insert(key.into(), value);
        }
    }
}

/// Who claims, and when: what every claim of one batch shares.
#[derive(Clone, Copy)]
struct Lease<'a> {
    worker_id: &'a str,
    now: i64,
    lock_grace_seconds: i64,
    deployment_id: Option<&'a str>,
}

impl KvStore {
    /// agno's collision-free `(user, key)` encoding: the user is length-prefixed.
    pub(crate) fn idem_key(&self, user_id: Option<&str>, key: &str) -> String {
        let user = user_id.unwrap_or_default();
        self.key(TABLE, &format!("idem:u{}:{user}:{key}", user.len()))
    }

    /// One of agno's queue sets: `queued`, `running`, `all`.
    pub(crate) fn jobs_set(&self, name: &str) -> String {
        self.key(TABLE, name)
    }

    /// agno's set of a session's live serialized tickets:
    /// `jobs:session:{sha256(json.dumps(session_id))}`.
    pub(crate) fn jobs_session_set(&self, session_id: &str) -> String {
        use sha2::{Digest, Sha256};
        let identity = agno_storage_core::json::to_python_json(&Value::from(session_id));
        let digest = hex::encode(Sha256::digest(identity.as_bytes()));
        self.key(TABLE, &format!("session:{digest}"))
    }

    /// The channel our job writes publish on to wake idle workers: `{prefix}:jobs:wake`
    /// (a channel, not a key: nothing is stored).
    fn jobs_wake_channel(&self) -> String {
        self.key(TABLE, "wake")
    }

    fn jobs_idx(&self, rest: &str) -> String {
        self.idx(TABLE, rest)
    }
}

impl<S: Server> KvDocs<S> {
    /// [`DocBackend::wake_workers`]: `PUBLISH` on the wake channel, best effort.
    pub(crate) async fn publish_wake(&self) {
        let store = self.store();
        let _: Result<i64> = store
            .query(redis::cmd("PUBLISH").arg(store.jobs_wake_channel()).arg(""))
            .await;
    }

    /// [`DocBackend::job_wakeups`]: a subscription to the wake channel on a connection of
    /// its own.
    pub(crate) async fn subscribe_wakeups(&self) -> Result<Option<Box<dyn JobWakeups>>> {
        let store = self.store();
        let channel = store.jobs_wake_channel();
        let messages = subscribe(&store.client, &channel)
            .await
            .map_err(|e| store.err(e))?;
        Ok(Some(Box::new(RedisWakeups {
            client: store.client.clone(),
            channel,
            messages,
        })))
    }

    /// The tickets agno's session set of `session_id` holds.
    pub(crate) async fn live_session_tickets(&self, session_id: &str) -> Result<Vec<Job>> {
        let store = self.store();
        let ids: Vec<String> = store
            .query(
                redis::cmd("ZRANGE")
                    .arg(store.jobs_session_set(session_id))
                    .arg(0)
                    .arg(-1),
            )
            .await?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .get_each(TABLE, &ids)
            .await?
            .iter()
            .flatten()
            // One that does not decode is failed by the claim that meets it.
            .filter_map(|d| d.decode("a job").ok())
            .collect())
    }

    /// [`DocBackend::claim_next_jobs`] (and, with `limit` 1, `claim_next_job`): up to `limit`
    /// claimable tickets of the `queued` set due by now, then of the `running` set whose
    /// lease passed, oldest first within each page; each claim is its own compare-and-set,
    /// one page read serves every claim it can, and the page's claims go in one pipeline.
    pub(crate) async fn claim(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Job>> {
        let now = self.now().await?;
        let stale = now - lock_grace_seconds;
        let sets = [
            (self.store().jobs_set("queued"), now),
            (self.store().jobs_set("running"), stale),
        ];
        let lease = Lease {
            worker_id,
            now,
            lock_grace_seconds,
            deployment_id,
        };
        let mut claimed = Vec::new();
        for (set, max) in sets {
            if claimed.len() == limit {
                break;
            }
            if let Err(e) = self
                .claim_from(&set, max, &lease, limit, &mut claimed)
                .await
            {
                // Claimed jobs are always handed out; the next call meets the error again.
                if claimed.is_empty() {
                    return Err(e);
                }
                break;
            }
        }
        Ok(claimed)
    }

    /// Claims tickets of `set` scored up to `max` into `claimed` until it holds `limit`
    /// or the set has no more.
    async fn claim_from(
        &self,
        set: &str,
        max: i64,
        lease: &Lease<'_>,
        limit: usize,
        claimed: &mut Vec<Job>,
    ) -> Result<()> {
        let Lease {
            worker_id,
            now,
            lock_grace_seconds,
            deployment_id,
        } = *lease;
        let store = self.store();
        let mut offset = 0;
        let mut contended_rounds = 0;
        loop {
            let ids: Vec<String> = store
                .query(
                    redis::cmd("ZRANGEBYSCORE")
                        .arg(set)
                        .arg("-inf")
                        .arg(max)
                        .arg("LIMIT")
                        .arg(offset)
                        .arg(limit.clamp(PAGE, MAX_PAGE)),
                )
                .await?;
            if ids.is_empty() {
                return Ok(());
            }
            let mut candidates = Vec::new();
            for item in self.get_many_raw(TABLE, &ids).await? {
                let stored = match item {
                    Ok(stored) => stored,
                    Err(unparsable) => {
                        self.fail_unparsable_job(set, unparsable, now).await?;
                        continue;
                    }
                };
                let Some(job) = decode_or_fail_job(self, &stored, now).await? else {
                    continue;
                };
                if job.is_claimable(now, lock_grace_seconds, deployment_id) {
                    candidates.push((stored, job));
                }
            }
            candidates.sort_by(|(_, a), (_, b)| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
            let claimed_before = claimed.len();
            // Read once per page: a ticket claimed from it stays live in this view, so it
            // still holds back the later tickets of its session.
            let mut pass = ClaimPass::default();
            let mut claims = Vec::new();
            let mut commits = Vec::new();
            for (stored, mut job) in candidates {
                if claimed.len() + claims.len() == limit {
                    break;
                }
                let Some(writes) = pass.claim(self, &stored, &mut job, worker_id, now).await?
                else {
                    continue;
                };
                claims.push(job);
                commits.push(writes);
            }
            // Every claim of the page in one round trip, each its own compare-and-set.
            let mut contended = false;
            let mut failed = None;
            let outcomes = self.commit_each("claim job", commits).await?;
            for (job, outcome) in claims.into_iter().zip(outcomes) {
                match outcome {
                    Ok(Commit::Done) => claimed.push(job),
                    Ok(Commit::Conflict) => contended = true,
                    Err(e) => failed = Some(e),
                }
            }
            // `claim` hands out what was claimed before an error.
            if let Some(e) = failed {
                return Err(e);
            }
            let taken = claimed.len() - claimed_before;
            if claimed.len() == limit {
                return Ok(());
            }
            if contended && taken == 0 {
                // Others claimed what this page offered: look again from the start.
                contended_rounds += 1;
                if contended_rounds > 100 {
                    return Err(Error::new(
                        ErrorKind::Conflict,
                        "claim_job: every claimable job was taken by others while trying; poll again",
                    )
                    .with_backend(store.server)
                    .set_temporary(true));
                }
                offset = 0;
            } else {
                // The tickets claimed left the window (their score moved past `max`).
                offset += ids.len() - taken;
            }
        }
    }
}

impl<S: Server> KvDocs<S> {
    /// Fails in place a ticket of `set` whose stored text is not a JSON object (written by
    /// another tool), if unchanged since it was read, keeping the text in its `error`: one
    /// such key must not make every claim fail. Its entry in `set` goes with it.
    async fn fail_unparsable_job(
        &self,
        set: &str,
        (id, raw, e): crate::docs::Unparsable,
        now: i64,
    ) -> Result<()> {
        let store = self.store();
        let status = if set == store.jobs_set("running") {
            "running"
        } else {
            "queued"
        };
        let known = agno_storage_doc::object(serde_json::json!({"id": id, "status": status}));
        let failed = agno_storage_doc::object(serde_json::json!({
            "id": id,
            "status": "failed",
            "error": format!("{}; the stored text was: {raw}", undecodable_job_error(&id, &e)),
            "locked_by": null,
            "locked_at": null,
            "updated_at": now,
            "completed_at": now,
        }));
        let write = store.plan_over_unparsable(TABLE, &id, raw, &known, &failed)?;
        // A conflict means another writer changed it since: theirs stands.
        store.commit(vec![write]).await?;
        Ok(())
    }
}

type Messages = std::pin::Pin<Box<dyn futures::Stream<Item = redis::Msg> + Send>>;

async fn subscribe(client: &redis::Client, channel: &str) -> redis::RedisResult<Messages> {
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(Box::pin(pubsub.into_on_message()))
}

/// Wake-ups from the wake channel; a lost subscription is made again (the worker polls
/// meanwhile).
struct RedisWakeups {
    client: redis::Client,
    channel: String,
    messages: Messages,
}

#[agno_storage_core::async_trait]
impl JobWakeups for RedisWakeups {
    async fn next(&mut self) -> Option<()> {
        use futures::StreamExt;
        if self.messages.next().await.is_some() {
            return Some(());
        }
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            if let Ok(messages) = subscribe(&self.client, &self.channel).await {
                self.messages = messages;
                // Whatever was published meanwhile is unknown: wake to look.
                return Some(());
            }
        }
    }
}
