//! Schedules (`agno_schedules.json`) and schedule runs (`agno_schedule_runs.json`), laid
//! out as agno's `Schedule.to_dict()` / `ScheduleRun.to_dict()` (agno's JSON stores have no
//! schedules). Claims and releases are single-file compare-and-swaps.

use agno_storage_core::schedule::{page_newest_first, Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate};
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, Page, Pagination, Result,
};
use serde_json::Value;

use crate::doc::{decode_all, fields, find, from_row, position, put, shape_serde, text, Doc};
use crate::files::{Step, Table};
use crate::store::JsonStore;

impl Doc for Schedule {
    const TABLE: Table = Table::Schedules;
    const KEY: &'static str = "id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::Schedules, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape_serde(fields(self)?, existing))
    }
}

impl Doc for ScheduleRun {
    const TABLE: Table = Table::ScheduleRuns;
    const KEY: &'static str = "id";

    fn decode(row: &Value) -> Result<Self> {
        from_row(Table::ScheduleRuns, Self::KEY, row)
    }

    fn encode(&self, existing: Option<&Value>) -> Result<Value> {
        Ok(shape_serde(fields(self)?, existing))
    }
}

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

/// Whether a schedule other than `id` owned by `user_id` is named `name`.
fn name_in_use(schedules: &[Schedule], id: &str, user_id: &Option<String>, name: &str) -> bool {
    schedules
        .iter()
        .any(|s| s.id != id && &s.user_id == user_id && s.name == name)
}

#[async_trait]
impl ScheduleStore for JsonStore {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        self.files
            .modify(Table::Schedules, |rows| {
                if position(rows, Schedule::KEY, &schedule.id).is_some() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("schedule {} already exists", schedule.id),
                    ));
                }
                let all = decode_all::<Schedule>(rows)?;
                if name_in_use(&all, &schedule.id, &schedule.user_id, &schedule.name) {
                    return Err(name_taken(&schedule.name));
                }
                put(rows, None, &schedule)?;
                Ok(Step::Write(schedule.clone()))
            })
            .await
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        Ok(self
            .get::<Schedule>(id)
            .await?
            .filter(|s| visible_to(s.user_id.as_deref(), user_id)))
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        Ok(self
            .all::<Schedule>()
            .await?
            .into_iter()
            .find(|s| s.name == name && s.user_id.as_deref() == user_id))
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        pagination.validate()?;
        let rows: Vec<Schedule> = self
            .all::<Schedule>()
            .await?
            .into_iter()
            .filter(|s| {
                enabled.is_none_or(|e| s.enabled == e) && visible_to(s.user_id.as_deref(), user_id)
            })
            .collect();
        page_newest_first(rows, |s| (s.created_at, s.id.as_str()), &pagination)
    }

    async fn update_schedule(
        &self,
        id: &str,
        user_id: Option<&str>,
        update: ScheduleUpdate,
    ) -> Result<Option<Schedule>> {
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Schedules, |rows| {
                let Some((index, current)) = find::<Schedule>(rows, id)? else {
                    return Ok(Step::Keep(None));
                };
                if !visible_to(current.user_id.as_deref(), user_id) {
                    return Ok(Step::Keep(None));
                }
                let updated = update.apply_to(&current, now)?;
                if updated.name != current.name
                    && name_in_use(&decode_all::<Schedule>(rows)?, id, &updated.user_id, &updated.name)
                {
                    return Err(name_taken(&updated.name));
                }
                put(rows, Some(index), &updated)?;
                Ok(Step::Write(Some(updated)))
            })
            .await
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let deleted = self
            .files
            .modify(Table::Schedules, |rows| {
                let before = rows.len();
                rows.retain(|s| {
                    !(text(s, "id") == Some(id) && visible_to(text(s, "user_id"), user_id))
                });
                Ok(if rows.len() == before {
                    Step::Keep(false)
                } else {
                    Step::Write(true)
                })
            })
            .await?;
        if deleted {
            self.files
                .modify(Table::ScheduleRuns, |rows| {
                    let before = rows.len();
                    rows.retain(|r| text(r, "schedule_id") != Some(id));
                    Ok(if rows.len() == before {
                        Step::Keep(())
                    } else {
                        Step::Write(())
                    })
                })
                .await?;
        }
        Ok(deleted)
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        self.files
            .modify(Table::Schedules, |rows| {
                let now = now_epoch_seconds();
                let due = decode_all::<Schedule>(rows)?
                    .into_iter()
                    .filter(|s| s.is_due(now, lock_grace_seconds))
                    .min_by(|a, b| (a.next_run_at, &a.id).cmp(&(b.next_run_at, &b.id)));
                let Some(mut schedule) = due else {
                    return Ok(Step::Keep(None));
                };
                schedule.locked_by = Some(worker_id.to_owned());
                schedule.locked_at = Some(now);
                put(rows, position(rows, Schedule::KEY, &schedule.id), &schedule)?;
                Ok(Step::Write(Some(schedule)))
            })
            .await
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let now = now_epoch_seconds();
        self.files
            .modify(Table::Schedules, |rows| {
                let Some((index, mut s)) = find::<Schedule>(rows, id)? else {
                    return Ok(Step::Keep(false));
                };
                if !s.release(worker_id, locked_at, next_run_at, now) {
            return Ok(Step::Keep(false));
        }
                put(rows, Some(index), &s)?;
                Ok(Step::Write(true))
            })
            .await
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let Some(schedule) = self.get::<Schedule>(&run.schedule_id).await? else {
            return Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            )));
        };
        run.user_id = schedule.user_id;
        self.files
            .modify(Table::ScheduleRuns, |rows| {
                if position(rows, ScheduleRun::KEY, &run.id).is_some() {
                    return Err(Error::new(
                        ErrorKind::AlreadyExists,
                        format!("schedule run {} already exists", run.id),
                    ));
                }
                put(rows, None, &run)?;
                Ok(Step::Write(run.clone()))
            })
            .await
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        self.files
            .modify(Table::ScheduleRuns, |rows| {
                let Some((index, stored)) = find::<ScheduleRun>(rows, &run.id)? else {
                    return Ok(Step::Keep(None));
                };
                if !visible_to(stored.user_id.as_deref(), user_id) {
                    return Ok(Step::Keep(None));
                }
                let updated = ScheduleRun {
                    id: stored.id,
                    schedule_id: stored.schedule_id,
                    user_id: stored.user_id,
                    created_at: stored.created_at,
                    ..run.clone()
                };
                put(rows, Some(index), &updated)?;
                Ok(Step::Write(Some(updated)))
            })
            .await
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        Ok(self
            .get::<ScheduleRun>(id)
            .await?
            .filter(|r| visible_to(r.user_id.as_deref(), user_id)))
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let rows: Vec<ScheduleRun> = self
            .all::<ScheduleRun>()
            .await?
            .into_iter()
            .filter(|r| r.schedule_id == schedule_id && visible_to(r.user_id.as_deref(), user_id))
            .collect();
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }
}
