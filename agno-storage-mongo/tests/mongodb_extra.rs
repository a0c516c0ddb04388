//! MongoDB-only behaviour the shared suite cannot see: agno's v3.0.0 index repairs and the
//! migration of a database agno 2.9.0 left behind.
//!
//! Uses `AGNO_TEST_MONGODB_URL`; skipped without it, except under `CI=true`.

use agno_storage_core::{
    now_epoch_seconds, ErrorKind, MigrationManager, Pagination, Schedule, SchemaVersion,
    SchemaVersionStore,
};
use agno_storage_mongo::mongodb::bson::{doc, Document};
use agno_storage_mongo::mongodb::{Client, Database};
use agno_storage_mongo::{CollectionNames, MongoDb};

fn url() -> Option<String> {
    match std::env::var("AGNO_TEST_MONGODB_URL") {
        Ok(u) => Some(u),
        Err(_) if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") => {
            panic!("CI=true but AGNO_TEST_MONGODB_URL is not set; run ./scripts/test.sh")
        }
        Err(_) => {
            eprintln!("note: AGNO_TEST_MONGODB_URL is not set; skipping");
            None
        }
    }
}

async fn fresh(url: &str, label: &str) -> Database {
    let client = Client::with_uri_str(url).await.expect("client");
    client.database(&format!(
        "agno_ct_{}_{label}_{}",
        now_epoch_seconds(),
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ))
}

/// A schedule document as agno 2.9.0 wrote it (no owner, no provenance).
fn v2_schedule(id: &str, name: &str) -> Document {
    doc! {
        "id": id, "name": name, "description": null, "method": "POST", "endpoint": "/agents/a/runs",
        "payload": null, "cron_expr": "* * * * *", "timezone": "UTC", "timeout_seconds": 3600,
        "max_retries": 0, "retry_delay_seconds": 60, "enabled": true, "next_run_at": null,
        "locked_by": null, "locked_at": null, "created_at": 1_700_000_000, "updated_at": null,
    }
}

async fn indexes(db: &Database, coll: &str) -> Vec<(String, bool)> {
    let listed = db
        .run_command(doc! {"listIndexes": coll})
        .await
        .expect("listIndexes");
    let batch = listed
        .get_document("cursor")
        .and_then(|c| c.get_array("firstBatch"))
        .cloned()
        .unwrap_or_default();
    batch
        .iter()
        .filter_map(|b| b.as_document())
        .map(|d| {
            (
                d.get_str("name").unwrap_or_default().to_owned(),
                d.get_bool("unique").unwrap_or(false),
            )
        })
        .collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// agno 2.9.0's global unique `name` index gives way to `uq_user_name`; two owners may then
/// share a name, one owner still may not. The legacy metrics index goes on open.
#[test]
fn v3_replaces_the_global_schedule_name_index() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "sched_repair").await;
        for (coll, key, name) in [
            ("agno_schedules", doc! {"name": 1}, "name_1"),
            ("agno_metrics", doc! {"date": 1, "aggregation_period": 1}, "date_1_aggregation_period_1"),
        ] {
            db.run_command(doc! {"createIndexes": coll, "indexes": [{"key": key, "name": name, "unique": true}]})
                .await
                .expect("legacy index");
        }
        db.collection::<Document>("agno_schedules").insert_one(v2_schedule("s1", "nightly")).await.unwrap();
        let store = MongoDb::open(db.clone(), CollectionNames::default()).await.unwrap();
        assert!(!indexes(&db, "agno_metrics").await.iter().any(|(n, _)| n == "date_1_aggregation_period_1"));
        assert_eq!(store.get_schema_version("agno_schedules").await.unwrap(), None, "a 2.9 database is unstamped");
        let report = MigrationManager::new(&store).up().await.expect("migration");
        assert_eq!(report.stamped.len(), 8);
        let after = indexes(&db, "agno_schedules").await;
        assert!(after.contains(&("name_1".into(), false)), "{after:?}");
        assert!(after.contains(&("uq_user_name".into(), true)), "{after:?}");
        let schedules = store.agno_db();
        let schedules = schedules.schedules().unwrap();
        let mut alice = Schedule::new("s2", "nightly", "/agents/a/runs", "* * * * *");
        alice.user_id = Some("alice".into());
        schedules.create_schedule(alice.clone()).await.expect("another owner may reuse the name");
        alice.id = "s3".into();
        let err = schedules.create_schedule(alice).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::AlreadyExists);
        assert_eq!(schedules.get_schedules(None, None, Pagination::default()).await.unwrap().total, 2);
    });
}

/// Duplicate names inside one owner bucket block `uq_user_name`: the migration aborts with
/// agno's message and leaves schedules unstamped; once resolved, it completes.
#[test]
fn duplicate_schedule_names_abort_unstamped() {
    let Some(url) = url() else { return };
    rt().block_on(async {
        let db = fresh(&url, "sched_dupes").await;
        let coll = db.collection::<Document>("agno_schedules");
        coll.insert_one(v2_schedule("d1", "report")).await.unwrap();
        coll.insert_one(v2_schedule("d2", "report")).await.unwrap();
        let store = MongoDb::open(db.clone(), CollectionNames::default())
            .await
            .unwrap();
        let failure = MigrationManager::new(&store)
            .up()
            .await
            .expect_err("duplicates abort");
        assert!(
            failure
                .to_string()
                .contains("duplicate schedule names exist within one owner bucket"),
            "{failure}"
        );
        assert_eq!(
            store.get_schema_version("agno_schedules").await.unwrap(),
            None
        );
        assert!(failure
            .report
            .stamped
            .iter()
            .any(|(t, _)| t == "agno_sessions"));
        coll.update_one(doc! {"id": "d2"}, doc! {"$set": {"name": "report (2)"}})
            .await
            .unwrap();
        MigrationManager::new(&store)
            .up()
            .await
            .expect("migration after the fix");
        assert_eq!(
            store.get_schema_version("agno_schedules").await.unwrap(),
            Some(SchemaVersion::LATEST)
        );
        assert!(indexes(&db, "agno_schedules")
            .await
            .contains(&("uq_user_name".into(), true)));
    });
}
