//! Schedules (`agno_schedules`) and schedule runs (`agno_schedule_runs`).
//!
//! Names are unique per owner through the `uq_user_name` index; claims and releases are
//! single-document `findOneAndUpdate` compare-and-sets.

use agno_storage_core::{
    async_trait, now_epoch_seconds, Error, ErrorKind, Page, Pagination, Result, Schedule,
    ScheduleRun, ScheduleStore, ScheduleUpdate,
};
use futures::TryStreamExt;
use mongodb::bson::{doc, Bson, Document};
use mongodb::options::ReturnDocument;

use crate::doc::{db_err, from_doc, is_duplicate_key, opt, scope, to_bson, to_doc};
use crate::MongoDb;

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

fn decode(d: Document) -> Result<Schedule> {
    from_doc(d, "a schedule")
}

fn decode_run(d: Document) -> Result<ScheduleRun> {
    from_doc(d, "a schedule run")
}

impl MongoDb {
    async fn schedule_id_taken(&self, id: &str) -> Result<bool> {
        Ok(self
            .coll(&self.inner.names.schedules)
            .find_one(doc! {"id": id})
            .projection(doc! {"_id": 1})
            .await
            .map_err(db_err("create schedule"))?
            .is_some())
    }
}

#[async_trait]
impl ScheduleStore for MongoDb {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        match self
            .coll(&self.inner.names.schedules)
            .insert_one(to_doc(&schedule, "a schedule")?)
            .await
        {
            Ok(_) => Ok(schedule),
            Err(e) if is_duplicate_key(&e) => {
                if self.schedule_id_taken(&schedule.id).await? {
                    Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("schedule {} already exists", schedule.id),
                    ))
                } else {
                    Err(name_taken(&schedule.name))
                }
            }
            Err(e) => Err(db_err("create schedule")(e)),
        }
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.schedules)
            .find_one(filter)
            .await
            .map_err(db_err("get schedule"))?
            .map(decode)
            .transpose()
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        // agno's `{"name": name, "user_id": user_id}`: `None` matches null or missing only.
        self.coll(&self.inner.names.schedules)
            .find_one(doc! {"name": name, "user_id": opt(user_id)})
            .await
            .map_err(db_err("get schedule by name"))?
            .map(decode)
            .transpose()
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        pagination.validate()?;
        let mut filter = Document::new();
        if let Some(e) = enabled {
            filter.insert("enabled", e);
        }
        scope(&mut filter, user_id);
        let rows = self
            .coll(&self.inner.names.schedules)
            .find(filter)
            .sort(doc! {"created_at": -1, "id": -1})
            .await
            .map_err(db_err("get schedules"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get schedules"))?
            .into_iter()
            .map(decode)
            .collect::<Result<Vec<_>>>()?;
        Page::paginate(rows, &pagination)
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        let Some(current) = self.get_schedule(id, user_id).await? else {
            return Ok(None);
        };
        let now = now_epoch_seconds();
        // Type-checks every column against the record before anything is written.
        let updated = update.apply_to(&current, now)?;
        let mut set = doc! {"updated_at": now};
        for (k, v) in update.columns() {
            set.insert(k.clone(), to_bson(v, "a schedule column")?);
        }
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        let result = self
            .coll(&self.inner.names.schedules)
            .find_one_and_update(filter, doc! {"$set": set})
            .return_document(ReturnDocument::After)
            .await;
        match result {
            Ok(d) => d.map(decode).transpose(),
            Err(e) if is_duplicate_key(&e) => Err(name_taken(&updated.name)),
            Err(e) => Err(db_err("update schedule")(e)),
        }
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        let mut runs = doc! {"schedule_id": id};
        scope(&mut runs, user_id);
        // One transaction: a crash never leaves the runs of a deleted schedule.
        self.transaction("delete schedule", |db, tx| {
            let (filter, runs) = (filter.clone(), runs.clone());
            Box::pin(async move {
                let names = &db.inner.names;
                let deleted = db
                    .coll(&names.schedules)
                    .delete_one(filter)
                    .session(&mut *tx)
                    .await?
                    .deleted_count;
                if deleted > 0 {
                    db.coll(&names.schedule_runs)
                        .delete_many(runs)
                        .session(&mut *tx)
                        .await?;
                }
                Ok(deleted > 0)
            })
        })
        .await
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        let now = now_epoch_seconds();
        let filter = doc! {
            "enabled": true,
            "next_run_at": {"$lte": now},
            "$or": [{"locked_by": Bson::Null}, {"locked_at": {"$lte": now - lock_grace_seconds}}],
        };
        self.coll(&self.inner.names.schedules)
            .find_one_and_update(
                filter,
                doc! {"$set": {"locked_by": worker_id, "locked_at": now}},
            )
            .sort(doc! {"next_run_at": 1, "id": 1})
            .return_document(ReturnDocument::After)
            .await
            .map_err(db_err("claim due schedule"))?
            .map(decode)
            .transpose()
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let mut filter = doc! {"id": id, "locked_by": worker_id};
        if let Some(t) = locked_at {
            filter.insert("locked_at", t);
        }
        let next = next_run_at.map_or(Bson::String("$next_run_at".into()), Bson::Int64);
        // agno's pipeline update: one-shot schedules (empty cron) lose their next run.
        let update = vec![doc! {"$set": {
            "locked_by": Bson::Null,
            "locked_at": Bson::Null,
            "updated_at": now_epoch_seconds(),
            "next_run_at": {"$cond": [{"$eq": ["$cron_expr", ""]}, Bson::Null, next]},
        }}];
        Ok(self
            .coll(&self.inner.names.schedules)
            .update_one(filter, update)
            .await
            .map_err(db_err("release schedule"))?
            .modified_count
            > 0)
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let Some(schedule) = self
            .coll(&self.inner.names.schedules)
            .find_one(doc! {"id": &run.schedule_id})
            .projection(doc! {"user_id": 1})
            .await
            .map_err(db_err("create schedule run"))?
        else {
            return Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            )));
        };
        run.user_id = match schedule.get("user_id") {
            Some(Bson::String(u)) => Some(u.clone()),
            _ => None,
        };
        match self
            .coll(&self.inner.names.schedule_runs)
            .insert_one(to_doc(&run, "a schedule run")?)
            .await
        {
            Ok(_) => Ok(run),
            Err(e) if is_duplicate_key(&e) => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("schedule run {} already exists", run.id),
            )),
            Err(e) => Err(db_err("create schedule run")(e)),
        }
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        let mut set = to_doc(&run, "a schedule run")?;
        for kept in ["id", "schedule_id", "user_id", "created_at"] {
            set.remove(kept);
        }
        let mut filter = doc! {"id": &run.id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.schedule_runs)
            .find_one_and_update(filter, doc! {"$set": set})
            .return_document(ReturnDocument::After)
            .await
            .map_err(db_err("update schedule run"))?
            .map(decode_run)
            .transpose()
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        let mut filter = doc! {"id": id};
        scope(&mut filter, user_id);
        self.coll(&self.inner.names.schedule_runs)
            .find_one(filter)
            .await
            .map_err(db_err("get schedule run"))?
            .map(decode_run)
            .transpose()
    }

    async fn delete_schedule_runs(
        &self,
        schedule_id: &str,
        before: i64,
        user_id: Option<&str>,
    ) -> Result<u64> {
        // `$lt` never matches a missing or null `completed_at`.
        let mut filter = doc! {"schedule_id": schedule_id, "completed_at": {"$lt": before}};
        scope(&mut filter, user_id);
        Ok(self
            .coll(&self.inner.names.schedule_runs)
            .delete_many(filter)
            .await
            .map_err(db_err("delete schedule runs"))?
            .deleted_count)
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let mut filter = doc! {"schedule_id": schedule_id};
        scope(&mut filter, user_id);
        let rows = self
            .coll(&self.inner.names.schedule_runs)
            .find(filter)
            .sort(doc! {"created_at": -1, "id": -1})
            .await
            .map_err(db_err("get schedule runs"))?
            .try_collect::<Vec<Document>>()
            .await
            .map_err(db_err("get schedule runs"))?
            .into_iter()
            .map(decode_run)
            .collect::<Result<Vec<_>>>()?;
        Page::paginate(rows, &pagination)
    }
}
