//! Schedules (`agno_schedules`, document id = [`DocBackend::doc_id`] of `id`) and schedule
//! runs (`agno_schedule_runs`, likewise), in agno's `MongoDb` shapes (agno's `FirestoreDb`
//! and `SurrealDb` have no schedules).
//!
//! The unique `(user_id, name)` is, where [`DocBackend::SCHEDULE_NAME_GUARDS`], a guard
//! document in the meta collection, created and deleted in the same commit as the schedule;
//! elsewhere the backend enforces it (a unique index) and a duplicate fails the commit.
//! Claim and release are compare-and-sets on the schedule's version, release checks the
//! holder.

use agno_storage_core::schedule::page_newest_first;
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, Page, Pagination, Result,
    Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate,
};
use serde_json::json;

use crate::backend::given;
use crate::{backoff, object, opt, Commit, DocBackend, Docs, Pre, Stored, Table, CAS_ATTEMPTS};

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

impl<B: DocBackend> Docs<B> {
    /// The writes that take `schedule`'s `(user_id, name)`: its guard document, if any.
    fn take_name(&self, schedule: &Schedule) -> Vec<B::Write> {
        if !B::SCHEDULE_NAME_GUARDS {
            return Vec::new();
        }
        let guard = self.schedule_name_guard(schedule.user_id.as_deref(), &schedule.name);
        let mut fields = object(json!({
            "kind": "schedule_name",
            "user_id": schedule.user_id,
            "name": schedule.name,
        }));
        fields.insert(guard.holder.into(), schedule.id.clone().into());
        vec![self.put(
            self.collection(Table::Meta),
            &guard.id,
            &fields,
            Pre::Absent,
        )]
    }

    /// The writes that free `schedule`'s `(user_id, name)`: deleting its guard, if any.
    fn free_name(&self, schedule: &Schedule) -> Vec<B::Write> {
        if !B::SCHEDULE_NAME_GUARDS {
            return Vec::new();
        }
        let guard = self.schedule_name_guard(schedule.user_id.as_deref(), &schedule.name);
        vec![self.delete(self.collection(Table::Meta), &guard.id, Pre::Any)]
    }

    /// Whether another schedule than `id` holds `(user_id, name)`. A guard whose schedule
    /// is gone or renamed (left by a writer that does not keep guards) is removed, and the
    /// name is free.
    async fn name_held(&self, user_id: Option<&str>, name: &str, id: &str) -> Result<bool> {
        if !B::SCHEDULE_NAME_GUARDS {
            let docs = self
                .query(
                    self.collection(Table::Schedules),
                    &[("name", opt(Some(name))), ("user_id", opt(user_id))],
                )
                .await?;
            return Ok(docs.iter().any(|d| d.str("id") != Some(id)));
        }
        let meta = self.collection(Table::Meta);
        let guard = self.schedule_name_guard(user_id, name);
        let Some(stored) = self.get(meta, &guard.id).await? else {
            return Ok(false);
        };
        let holder = stored.str(guard.holder).unwrap_or_default();
        if holder == id {
            return Ok(false);
        }
        let live = self
            .schedule_doc(holder)
            .await?
            .is_some_and(|(_, s)| s.name == name && s.user_id.as_deref() == user_id);
        if !live {
            let stale = self.delete(meta, &guard.id, stored.unchanged());
            self.commit("free a stale schedule name", vec![stale])
                .await?;
        }
        Ok(live)
    }

    async fn schedule_doc(&self, id: &str) -> Result<Option<(Stored<B>, Schedule)>> {
        self.keyed(Table::Schedules, id, "a schedule", |s: &Schedule| &s.id)
            .await
    }

    async fn schedule_run_doc(&self, id: &str) -> Result<Option<(Stored<B>, ScheduleRun)>> {
        self.keyed(
            Table::ScheduleRuns,
            id,
            "a schedule run",
            |r: &ScheduleRun| &r.id,
        )
        .await
    }
}

#[async_trait]
impl<B: DocBackend> ScheduleStore for Docs<B> {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        for attempt in 0..CAS_ATTEMPTS {
            let mut writes = self.take_name(&schedule);
            writes.push(self.put(
                self.collection(Table::Schedules),
                &self.doc_id(&schedule.id),
                &self.to_fields(&schedule, "a schedule")?,
                Pre::Absent,
            ));
            match self.commit("create schedule", writes).await? {
                Commit::Done => return Ok(schedule),
                Commit::Conflict => {
                    if self.schedule_doc(&schedule.id).await?.is_some() {
                        return Err(Error::new(
                            ErrorKind::AlreadyExists,
                            format!("schedule {} already exists", schedule.id),
                        ));
                    }
                    if self
                        .name_held(schedule.user_id.as_deref(), &schedule.name, &schedule.id)
                        .await?
                    {
                        return Err(name_taken(&schedule.name));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(self.contended("create schedule"))
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        Ok(self
            .schedule_doc(id)
            .await?
            .map(|(_, s)| s)
            .filter(|s| visible_to(s.user_id.as_deref(), user_id)))
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        let docs = self
            .query(
                self.collection(Table::Schedules),
                &[("name", opt(Some(name))), ("user_id", opt(user_id))],
            )
            .await?;
        for d in docs {
            let s: Schedule = d.decode("a schedule")?;
            if s.name == name && s.user_id.as_deref() == user_id {
                return Ok(Some(s));
            }
        }
        Ok(None)
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        pagination.validate()?;
        let eq = given(&[("user_id", user_id)]);
        let mut rows = Vec::new();
        for d in self.query(self.collection(Table::Schedules), &eq).await? {
            let s: Schedule = d.decode("a schedule")?;
            if enabled.is_none_or(|e| s.enabled == e) && visible_to(s.user_id.as_deref(), user_id) {
                rows.push(s);
            }
        }
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        for attempt in 0..CAS_ATTEMPTS {
            let Some((stored, current)) = self.schedule_doc(id).await? else {
                return Ok(None);
            };
            if !visible_to(current.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            let updated = update.apply_to(&current, now_epoch_seconds())?;
            let renamed = updated.name != current.name || updated.user_id != current.user_id;
            let mut writes =
                vec![self.rewrite(Table::Schedules, &stored, &updated, "a schedule")?];
            if renamed {
                writes.extend(self.free_name(&current));
                writes.extend(self.take_name(&updated));
            }
            match self.commit("update schedule", writes).await? {
                Commit::Done => return Ok(Some(updated)),
                Commit::Conflict => {
                    if renamed
                        && self
                            .name_held(updated.user_id.as_deref(), &updated.name, id)
                            .await?
                    {
                        return Err(name_taken(&updated.name));
                    }
                    backoff(attempt).await;
                }
            }
        }
        Err(self.contended("update schedule"))
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let Some((stored, s)) = self.schedule_doc(id).await? else {
            return Ok(false);
        };
        if !visible_to(s.user_id.as_deref(), user_id) {
            return Ok(false);
        }
        let mut writes = vec![self.delete(self.collection(Table::Schedules), &stored.id, Pre::Any)];
        writes.extend(self.free_name(&s));
        for run in self
            .query(
                self.collection(Table::ScheduleRuns),
                &[("schedule_id", opt(Some(id)))],
            )
            .await?
        {
            writes.push(self.delete(self.collection(Table::ScheduleRuns), &run.id, Pre::Any));
        }
        self.commit_all("delete schedule", writes).await?;
        Ok(true)
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        for attempt in 0..CAS_ATTEMPTS {
            let now = self.0.now().await?;
            let mut due = Vec::new();
            for d in self.due_schedules(now, lock_grace_seconds).await? {
                let s: Schedule = d.decode("a schedule")?;
                if s.is_due(now, lock_grace_seconds) {
                    due.push((d, s));
                }
            }
            if due.is_empty() {
                return Ok(None);
            }
            due.sort_by(|a, b| (a.1.next_run_at, &a.1.id).cmp(&(b.1.next_run_at, &b.1.id)));
            for (stored, mut s) in due {
                s.locked_by = Some(worker_id.to_owned());
                s.locked_at = Some(now);
                let write = self.rewrite(Table::Schedules, &stored, &s, "a schedule")?;
                if let Commit::Done = self.commit("claim schedule", vec![write]).await? {
                    return Ok(Some(s));
                }
            }
            backoff(attempt).await;
        }
        Err(self.contended("claim schedule"))
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        for attempt in 0..CAS_ATTEMPTS {
            let Some((stored, mut s)) = self.schedule_doc(id).await? else {
                return Ok(false);
            };
            if !s.release(worker_id, locked_at, next_run_at, now_epoch_seconds()) {
                return Ok(false);
            }
            let write = self.rewrite(Table::Schedules, &stored, &s, "a schedule")?;
            match self.commit("release schedule", vec![write]).await? {
                Commit::Done => return Ok(true),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("release schedule"))
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let Some((_, schedule)) = self.schedule_doc(&run.schedule_id).await? else {
            return Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            )));
        };
        run.user_id = schedule.user_id;
        let write = self.put(
            self.collection(Table::ScheduleRuns),
            &self.doc_id(&run.id),
            &self.to_fields(&run, "a schedule run")?,
            Pre::Absent,
        );
        match self.commit("create schedule run", vec![write]).await? {
            Commit::Done => Ok(run),
            Commit::Conflict => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("schedule run {} already exists", run.id),
            )),
        }
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        for attempt in 0..CAS_ATTEMPTS {
            let Some((stored, current)) = self.schedule_run_doc(&run.id).await? else {
                return Ok(None);
            };
            if !visible_to(current.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            let next = ScheduleRun {
                id: current.id.clone(),
                schedule_id: current.schedule_id.clone(),
                user_id: current.user_id.clone(),
                created_at: current.created_at,
                ..run.clone()
            };
            let write = self.rewrite(Table::ScheduleRuns, &stored, &next, "a schedule run")?;
            match self.commit("update schedule run", vec![write]).await? {
                Commit::Done => return Ok(Some(next)),
                Commit::Conflict => backoff(attempt).await,
            }
        }
        Err(self.contended("update schedule run"))
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        Ok(self
            .schedule_run_doc(id)
            .await?
            .map(|(_, r)| r)
            .filter(|r| visible_to(r.user_id.as_deref(), user_id)))
    }

    async fn delete_schedule_runs(
        &self,
        schedule_id: &str,
        before: i64,
        user_id: Option<&str>,
    ) -> Result<u64> {
        let coll = self.collection(Table::ScheduleRuns);
        let mut deleted = 0;
        for d in self
            .query(coll, &[("schedule_id", opt(Some(schedule_id)))])
            .await?
        {
            let r: ScheduleRun = d.decode("a schedule run")?;
            let done_before = r.completed_at.is_some_and(|t| t < before);
            if r.schedule_id != schedule_id
                || !done_before
                || !visible_to(r.user_id.as_deref(), user_id)
            {
                continue;
            }
            let write = self.delete(coll, &d.id, d.unchanged());
            if let Commit::Done = self.commit("delete schedule runs", vec![write]).await? {
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let mut rows = Vec::new();
        for d in self
            .query(
                self.collection(Table::ScheduleRuns),
                &[("schedule_id", opt(Some(schedule_id)))],
            )
            .await?
        {
            let r: ScheduleRun = d.decode("a schedule run")?;
            if r.schedule_id == schedule_id && visible_to(r.user_id.as_deref(), user_id) {
                rows.push(r);
            }
        }
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }
}
