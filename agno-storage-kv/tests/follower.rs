//! The index follower (`KvDb::follow_foreign_writes`) against real servers: records another
//! writer puts under the prefix (raw `SET`s in agno 3.1.10's layout, and the real agno
//! package through its own `RedisDb`) show up in listings without `rebuild_indexes`, and
//! leave them when deleted or expired; the start-up rebuild, reconnection, the
//! `notify-keyspace-events` setting and the error when it cannot be turned on.
//!
//! On Redis (`AGNO_TEST_REDIS_URL`) and, when set, Valkey (`AGNO_TEST_VALKEY_URL`); the agno
//! case also needs `AGNO_TEST_PYTHON_V3`. Skipped with a note when unset, failing under
//! `CI=true`. Tests that change the server-wide setting or kill connections hold an
//! exclusive lock; the others share it.

mod common;

use std::future::Future;
use std::path::Path;
use std::process::Command;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use agno_storage_core::json::to_python_json;
use agno_storage_core::{AgnoDb, MemoryQuery, RunQuery, SessionQuery};
use agno_storage_kv::{FollowError, KvDb, KvOptions, KEYSPACE_EVENTS_SETTING};
use agno_storage_testkit::interop::agno_python;
use agno_storage_testkit::servers::{self, Backend};
use redis::aio::ConnectionManager;
use serde_json::json;

/// Shared by tests that only need the events on; exclusive for those that turn them off or
/// kill subscriptions.
static SERVER: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    SERVER.read().unwrap_or_else(|p| p.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    SERVER.write().unwrap_or_else(|p| p.into_inner())
}

fn servers() -> Vec<String> {
    servers::urls_blocking(&[Backend::Redis, Backend::Valkey])
}

/// Runs `body(url, prefix, conn)` on every server with a fresh prefix, deleting it after.
fn each_server<F, Fut>(name: &str, body: F)
where
    F: Fn(String, String, ConnectionManager) -> Fut,
    Fut: Future<Output = ()>,
{
    for url in servers() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let prefix = format!("{}_{name}", common::run_stem());
            let conn = common::connection(&url).await.expect("server");
            body(url.clone(), prefix.clone(), conn.clone()).await;
            let mut conn = conn;
            common::delete_matching(&mut conn, &format!("{prefix}:*"))
                .await
                .expect("cleanup");
        });
    }
}

async fn connect(url: &str, prefix: &str) -> KvDb {
    KvDb::connect(
        url,
        KvOptions {
            prefix: prefix.to_owned(),
            stamp_new: true,
            ..Default::default()
        },
    )
    .await
    .expect("connect")
}

async fn cmd<T: redis::FromRedisValue>(conn: &ConnectionManager, c: &redis::Cmd) -> T {
    c.query_async(&mut conn.clone()).await.expect("command")
}

/// Polls `check` every 50 ms for up to 5 s; fails with `what` when it never holds.
async fn eventually<F, Fut>(what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "within 5 s: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What agno 3.1.10's `RedisDb.upsert_session` stores for an `AgentSession`: the record
/// (`serialize_data`, its field order) and `SADD`s of its own index sets.
async fn agno_session(conn: &ConnectionManager, prefix: &str, id: &str, user: &str, created: i64) {
    let record = json!({
        "session_id": id, "session_type": "agent", "agent_id": "agent-py", "team_id": null,
        "workflow_id": null, "user_id": user, "agent_data": {"name": "Py"}, "team_data": null,
        "workflow_data": null, "session_data": {"session_name": format!("raw {id}")},
        "summary": null, "metadata": null, "created_at": created, "updated_at": created + 5,
    });
    cmd::<()>(
        conn,
        redis::cmd("SET")
            .arg(format!("{prefix}:sessions:{id}"))
            .arg(to_python_json(&record)),
    )
    .await;
    for (field, value) in [
        ("user_id", user),
        ("agent_id", "agent-py"),
        ("session_type", "agent"),
    ] {
        cmd::<i64>(
            conn,
            redis::cmd("SADD")
                .arg(format!("{prefix}:sessions:index:{field}:{value}"))
                .arg(id),
        )
        .await;
    }
}

/// What agno 3.1.10's `RedisDb.upsert_user_memory` stores, optionally with a TTL in ms
/// (agno's `expire`, in seconds there).
async fn agno_memory(
    conn: &ConnectionManager,
    prefix: &str,
    id: &str,
    user: &str,
    ttl_ms: Option<u64>,
) {
    let record = json!({
        "user_id": user, "agent_id": null, "team_id": null, "memory_id": id,
        "memory": format!("remembered {id} ü"), "topics": ["raw"], "input": null,
        "feedback": null, "created_at": 1_710_000_100, "updated_at": 1_710_000_200,
    });
    let mut set = redis::cmd("SET");
    set.arg(format!("{prefix}:memories:{id}"))
        .arg(to_python_json(&record));
    if let Some(ms) = ttl_ms {
        set.arg("PX").arg(ms);
    }
    cmd::<()>(conn, &set).await;
    cmd::<i64>(
        conn,
        redis::cmd("SADD")
            .arg(format!("{prefix}:memories:index:user_id:{user}"))
            .arg(id),
    )
    .await;
}

async fn del(conn: &ConnectionManager, key: String) {
    cmd::<i64>(conn, redis::cmd("DEL").arg(key)).await;
}

async fn session_ids(db: &AgnoDb, user: &str) -> (Vec<String>, u64) {
    let page = db
        .sessions()
        .unwrap()
        .get_sessions(SessionQuery {
            user_id: Some(user.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<String> = page.items.into_iter().map(|s| s.session_id).collect();
    ids.sort();
    (ids, page.total)
}

async fn memory_ids(db: &AgnoDb, user: &str) -> (Vec<String>, u64) {
    let page = db
        .memories()
        .unwrap()
        .get_memories(MemoryQuery {
            user_id: Some(user.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids: Vec<String> = page.items.into_iter().map(|m| m.memory_id).collect();
    ids.sort();
    (ids, page.total)
}

/// Whether `member` is still in the sorted set `key` (read raw, so no listing repairs it).
async fn in_zset(conn: &ConnectionManager, key: &str, member: &str) -> bool {
    cmd::<Option<f64>>(conn, redis::cmd("ZSCORE").arg(key).arg(member))
        .await
        .is_some()
}

/// Raw agno-format writes appear in listings while the follower runs, leave the indexes
/// when deleted or expired (read raw, before any listing could repair them), and a
/// memory moved to another user moves between the owners' listings.
#[test]
fn raw_agno_writes_are_listed_and_unlisted_live() {
    let _guard = shared();
    each_server("follow_raw", |url, prefix, conn| async move {
        // Written before the follower: found by its start-up rebuild.
        agno_session(&conn, &prefix, "early", "dave", 1_700_000_000).await;
        let kv = connect(&url, &prefix).await;
        let db = kv.agno_db();
        let follower = kv.follow_foreign_writes().await.expect("follower starts");
        assert_eq!(session_ids(&db, "dave").await.0, ["early"]);
        assert_eq!(follower.status().rebuilds, 1);

        agno_session(&conn, &prefix, "s1", "dave", 1_700_000_010).await;
        agno_memory(&conn, &prefix, "m1", "dave", None).await;
        eventually("the raw session and memory are listed", || async {
            session_ids(&db, "dave").await == (vec!["early".into(), "s1".into()], 2)
                && memory_ids(&db, "dave").await == (vec!["m1".into()], 1)
        })
        .await;
        let s1 = db
            .sessions()
            .unwrap()
            .get_sessions(SessionQuery {
                component_id: Some("agent-py".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(s1.total, 2, "listed by component too");

        // Deleted by the other writer: removed from every index, including the one
        // indexed by the start-up rebuild and the memory owners set.
        del(&conn, format!("{prefix}:sessions:s1")).await;
        del(&conn, format!("{prefix}:sessions:early")).await;
        del(&conn, format!("{prefix}:memories:m1")).await;
        let by_user = format!("{prefix}:sessions:index:created:user:dave");
        let by_component = format!("{prefix}:sessions:index:created:component:agent-py");
        let owners = format!("{prefix}:memories:index:users");
        eventually("deleted records leave the indexes", || async {
            !in_zset(&conn, &by_user, "s1").await
                && !in_zset(&conn, &by_user, "early").await
                && !in_zset(&conn, &by_component, "s1").await
                && !in_zset(&conn, &format!("{prefix}:memories:index:updated:all"), "m1").await
                && !cmd::<bool>(&conn, redis::cmd("SISMEMBER").arg(&owners).arg("dave")).await
        })
        .await;
        assert_eq!(session_ids(&db, "dave").await, (vec![], 0));
        assert_eq!(memory_ids(&db, "dave").await, (vec![], 0));

        // Rewritten for another owner: moves from dave's listing to erin's.
        agno_memory(&conn, &prefix, "m2", "dave", None).await;
        eventually("m2 is dave's", || async {
            memory_ids(&db, "dave").await.1 == 1
        })
        .await;
        agno_memory(&conn, &prefix, "m2", "erin", None).await;
        let daves = format!("{prefix}:memories:index:updated:user:dave");
        eventually("m2 moves to erin", || async {
            !in_zset(&conn, &daves, "m2").await && memory_ids(&db, "erin").await.1 == 1
        })
        .await;
        assert_eq!(memory_ids(&db, "dave").await.1, 0);

        // Expired (agno's `expire`): removed when Redis expires it.
        agno_memory(&conn, &prefix, "m3", "frank", Some(300)).await;
        let franks = format!("{prefix}:memories:index:updated:user:frank");
        eventually("m3 is indexed", || async {
            in_zset(&conn, &franks, "m3").await
        })
        .await;
        eventually("expired m3 leaves the index", || async {
            !in_zset(&conn, &franks, "m3").await
        })
        .await;

        // Our own writes still list (re-indexed idempotently).
        db.memories()
            .unwrap()
            .upsert_memory(agno_storage_core::UserMemory::new(
                "ours",
                Some("gina".into()),
                "mine",
            ))
            .await
            .unwrap();
        assert_eq!(memory_ids(&db, "gina").await.1, 1);

        let status = follower.status();
        assert!(status.connected, "{status:?}");
        assert!(status.indexed >= 5 && status.removed >= 4, "{status:?}");
        assert_eq!((status.errors, status.reconnects), (0, 0), "{status:?}");
        follower.stop().await;

        // Stopped: no longer followed (listed only after a rebuild).
        agno_session(&conn, &prefix, "late", "dave", 1_700_000_020).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(session_ids(&db, "dave").await.1, 0);
        kv.rebuild_indexes().await.unwrap();
        assert_eq!(session_ids(&db, "dave").await.1, 1);

        // Deleted while no follower listened: the next follower's start-up undoes it.
        let follower = kv.follow_foreign_writes().await.expect("follower starts");
        follower.stop().await;
        del(&conn, format!("{prefix}:sessions:late")).await;
        assert!(in_zset(&conn, &by_user, "late").await);
        let follower = kv.follow_foreign_writes().await.expect("follower starts");
        assert!(!in_zset(&conn, &by_user, "late").await);
        assert_eq!(follower.status().removed, 1);
        follower.stop().await;
    });
}

/// The follower's subscription is killed: it reconnects, rebuilds (catching what was
/// written meanwhile) and keeps following.
#[test]
fn reconnects_and_rebuilds_after_losing_the_subscription() {
    let _guard = exclusive();
    each_server("follow_kill", |url, prefix, conn| async move {
        let kv = connect(&url, &prefix).await;
        let db = kv.agno_db();
        let pubsub_ids = || async {
            let list: String = cmd(
                &conn,
                redis::cmd("CLIENT").arg("LIST").arg("TYPE").arg("pubsub"),
            )
            .await;
            list.lines()
                .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
                .map(str::to_owned)
                .collect::<std::collections::BTreeSet<String>>()
        };
        let before = pubsub_ids().await;
        let follower = kv.follow_foreign_writes().await.expect("follower starts");
        let ours: Vec<String> = pubsub_ids().await.difference(&before).cloned().collect();
        assert_eq!(ours.len(), 1, "one new subscriber: {ours:?}");
        cmd::<i64>(
            &conn,
            redis::cmd("CLIENT").arg("KILL").arg("ID").arg(&ours[0]),
        )
        .await;
        agno_session(&conn, &prefix, "during", "hank", 1_700_000_000).await;
        eventually("reconnected and rebuilt", || async {
            let s = follower.status();
            s.connected && s.reconnects == 1 && s.rebuilds == 2
        })
        .await;
        assert_eq!(session_ids(&db, "hank").await.0, ["during"]);
        agno_session(&conn, &prefix, "after", "hank", 1_700_000_010).await;
        eventually("followed after reconnecting", || async {
            session_ids(&db, "hank").await.1 == 2
        })
        .await;
        follower.stop().await;
    });
}

/// With the events off, the follower turns them on (merged into the current value); as a
/// user that may not run CONFIG it still starts when they are on (probe), and fails with
/// `KeyspaceEventsOff` naming the setting when they are off.
#[test]
fn keyspace_events_setting() {
    let _guard = exclusive();
    each_server("follow_config", |url, prefix, conn| async move {
        let get = || async {
            let v: Vec<String> = cmd(
                &conn,
                redis::cmd("CONFIG").arg("GET").arg(KEYSPACE_EVENTS_SETTING),
            )
            .await;
            v.get(1).cloned().unwrap_or_default()
        };
        let set = |value: String| {
            let conn = conn.clone();
            async move {
                cmd::<()>(
                    &conn,
                    redis::cmd("CONFIG")
                        .arg("SET")
                        .arg(KEYSPACE_EVENTS_SETTING)
                        .arg(value),
                )
                .await
            }
        };
        let original = get().await;

        // Off, with an unrelated class kept: turned on, merged.
        set("Ez".into()).await;
        let kv = connect(&url, &prefix).await;
        let follower = kv
            .follow_foreign_writes()
            .await
            .expect("turns the events on");
        let now = get().await;
        for c in ['E', 'z', 'K', '$', 'g', 'x'] {
            assert!(now.contains(c), "{now:?} lacks {c}");
        }
        follower.stop().await;

        // A user without CONFIG (as on managed services).
        let user = format!(
            "agno_ct_follower_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        cmd::<()>(
            &conn,
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user)
                .arg("on")
                .arg("nopass")
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .arg("-config"),
        )
        .await;
        let limited_url = url.replacen("redis://", &format!("redis://{user}:x@"), 1);
        let limited = connect(&limited_url, &prefix).await;

        // Events on: the probe proves it; following works.
        let follower = limited
            .follow_foreign_writes()
            .await
            .expect("starts without CONFIG when the events are on");
        agno_session(&conn, &prefix, "managed", "ivy", 1_700_000_000).await;
        let db = limited.agno_db();
        eventually("followed without CONFIG", || async {
            session_ids(&db, "ivy").await.1 == 1
        })
        .await;
        follower.stop().await;

        // Events off and no CONFIG: a typed error naming the setting.
        set(String::new()).await;
        let err = limited
            .follow_foreign_writes()
            .await
            .expect_err("cannot follow without the events");
        let text = err.to_string();
        match &err {
            FollowError::KeyspaceEventsOff { current, detail } => {
                assert_eq!(current, &None, "CONFIG GET was refused");
                assert!(
                    detail.contains("set") && detail.contains("expired"),
                    "{detail}"
                );
            }
            other => panic!("expected KeyspaceEventsOff, got {other:?}"),
        }
        assert!(
            text.contains("notify-keyspace-events") && text.contains("K$gx"),
            "{text}"
        );
        let as_storage: agno_storage_core::Error = err.into();
        assert_eq!(as_storage.kind(), agno_storage_core::ErrorKind::Unsupported);

        cmd::<i64>(&conn, redis::cmd("ACL").arg("DELUSER").arg(&user)).await;
        set(original).await;
    });
}

fn driver() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/agno_redis_driver.py")
}

/// Runs agno's driver (`interop/agno_redis_driver.py`) against `redis:URL#PREFIX`.
fn agno(python: &str, command: &str, url: &str, prefix: &str) {
    let out = Command::new(python)
        .arg(driver())
        .arg(command)
        .arg(format!("redis:{url}#{prefix}"))
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "agno {command} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The real agno 3.1.10 writes sessions, runs and a memory through its own `RedisDb` while
/// our follower runs: our listings find them without `rebuild_indexes`; agno deletes them
/// and they leave our indexes.
#[test]
fn agno_writes_are_listed_live() {
    let Some(python) = agno_python("AGNO_TEST_PYTHON_V3") else {
        return;
    };
    let _guard = shared();
    each_server("follow_agno", |url, prefix, conn| {
        let python = python.clone();
        async move {
            let kv = connect(&url, &prefix).await;
            let db = kv.agno_db();
            let follower = kv.follow_foreign_writes().await.expect("follower starts");
            let (u, p, py) = (url.clone(), prefix.clone(), python.clone());
            tokio::task::spawn_blocking(move || agno(&py, "write-v3", &u, &p))
                .await
                .unwrap();
            eventually("agno's session, runs and memory are listed", || async {
                let runs = db
                    .runs()
                    .unwrap()
                    .get_runs(RunQuery {
                        user_id: Some("carol".into()),
                        ..Default::default()
                    })
                    .await
                    .unwrap();
                session_ids(&db, "carol").await == (vec!["py-s1".into()], 1)
                    && memory_ids(&db, "carol").await == (vec!["py-m1".into()], 1)
                    && runs.total == 2
            })
            .await;
            let s = db
                .sessions()
                .unwrap()
                .get_sessions(SessionQuery {
                    user_id: Some("carol".into()),
                    ..Default::default()
                })
                .await
                .unwrap();
            assert_eq!(s.items[0].session_name(), Some("From Python"));

            let (u, p, py) = (url.clone(), prefix.clone(), python.clone());
            tokio::task::spawn_blocking(move || agno(&py, "delete-v3", &u, &p))
                .await
                .unwrap();
            let users = format!("{prefix}:sessions:index:created:user:carol");
            let owners = format!("{prefix}:memories:index:users");
            let runs = format!("{prefix}:runs:index:created:user:carol");
            eventually("agno's deletions leave our indexes", || async {
                !in_zset(&conn, &users, "py-s1").await
                    && !in_zset(&conn, &runs, "py-r0").await
                    && !cmd::<bool>(&conn, redis::cmd("SISMEMBER").arg(&owners).arg("carol")).await
            })
            .await;
            assert_eq!(session_ids(&db, "carol").await.1, 0);
            assert_eq!(memory_ids(&db, "carol").await.1, 0);
            let status = follower.status();
            assert_eq!(status.errors, 0, "{status:?}");
            follower.stop().await;
        }
    });
}
