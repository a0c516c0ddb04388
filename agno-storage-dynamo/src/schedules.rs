//! Schedules (`agno_schedules`) and schedule runs (`agno_schedule_runs`); agno's
//! `DynamoDb` has neither, the items are agno's Mongo documents in DynamoDB encoding.
//!
//! `(user_id, name)` is unique through a uniqueness item in the meta table, written in the
//! same transaction as the schedule. Claims and releases are compare-and-sets on the item.

use agno_storage_core::schedule::page_newest_first;
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, ErrorKind, Page, Pagination, Result, Schedule,
    ScheduleRun, ScheduleStore, ScheduleUpdate,
};

use crate::codec::{err, record, record_item, s, sv, Item};
use crate::db::{contention, Cond, Table, TxOutcome, MAX_ATTEMPTS};
use crate::DynamoDb;

fn name_taken(name: &str) -> agno_storage_core::Error {
    err(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

fn decode(item: &Item) -> Result<Schedule> {
    record(item, &["payload"], "a schedule")
}

fn decode_run(item: &Item) -> Result<ScheduleRun> {
    record(item, &["input", "output", "requirements"], "a schedule run")
}

impl DynamoDb {
    /// The meta key of the uniqueness item for `(user_id, name)`.
    fn name_key(&self, user_id: Option<&str>, name: &str) -> String {
        let owner = user_id.map_or_else(|| "n".to_owned(), |u| format!("u{}:{u}", u.len()));
        format!(
            "schedule_name#{}#{owner}#{name}",
            self.inner.names.schedules
        )
    }

    fn name_item(&self, user_id: Option<&str>, name: &str, id: &str) -> Item {
        let mut item = Item::new();
        item.insert("pk".into(), sv(&self.name_key(user_id, name)));
        item.insert("id".into(), sv(id));
        item
    }

    /// Removes a uniqueness item whose schedule is gone or renamed (left by a crash or by a
    /// writer that does not maintain it); `true` when the name is free now.
    async fn free_stale_name(&self, user_id: Option<&str>, name: &str) -> Result<bool> {
        let key = self.name_key(user_id, name);
        let Some(claim) = self.get(Table::Meta, &key).await? else {
            return Ok(true);
        };
        let Some(id) = s(&claim, "id") else {
            return self.delete(Table::Meta, &key, None).await;
        };
        let holder = self.get(Table::Schedules, id).await?;
        let live = match holder {
            Some(item) => {
                let sch = decode(&item)?;
                sch.name == name && sch.user_id.as_deref() == user_id
            }
            None => false,
        };
        if live {
            return Ok(false);
        }
        self.delete(Table::Meta, &key, Some(Cond::default().eq("id", sv(id))))
            .await
    }

    /// Whether another schedule of the owner already has `name` (rows agno wrote carry no
    /// uniqueness item, so the table is checked too).
    async fn name_in_use(&self, user_id: Option<&str>, name: &str, except: &str) -> Result<bool> {
        Ok(self.scan(Table::Schedules).await?.iter().any(|i| {
            decode(i).is_ok_and(|sch| {
                sch.id != except && sch.name == name && sch.user_id.as_deref() == user_id
            })
        }))
    }
}

#[async_trait]
impl ScheduleStore for DynamoDb {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        let user = schedule.user_id.as_deref();
        if self.name_in_use(user, &schedule.name, &schedule.id).await? {
            return Err(name_taken(&schedule.name));
        }
        for _ in 0..MAX_ATTEMPTS {
            let items = vec![
                self.tx_put(
                    Table::Schedules,
                    record_item(&schedule, "a schedule")?,
                    Some(Cond::absent("id")),
                )
                .await?,
                self.tx_put(
                    Table::Meta,
                    self.name_item(user, &schedule.name, &schedule.id),
                    Some(Cond::absent("pk")),
                )
                .await?,
            ];
            match self.transact(items).await? {
                TxOutcome::Applied => return Ok(schedule),
                TxOutcome::Cancelled(failed) => {
                    if failed.first().copied().unwrap_or(false) {
                        return Err(err(
                            ErrorKind::AlreadyExists,
                            format!("schedule {} already exists", schedule.id),
                        ));
                    }
                    if !self.free_stale_name(user, &schedule.name).await? {
                        return Err(name_taken(&schedule.name));
                    }
                }
            }
        }
        Err(contention("create_schedule"))
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        match self.get(Table::Schedules, id).await? {
            Some(item) => {
                let sch = decode(&item)?;
                Ok(visible_to(sch.user_id.as_deref(), user_id).then_some(sch))
            }
            None => Ok(None),
        }
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        for item in self.scan(Table::Schedules).await? {
            let sch = decode(&item)?;
            if sch.name == name && sch.user_id.as_deref() == user_id {
                return Ok(Some(sch));
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
        let mut rows = Vec::new();
        for item in self.scan(Table::Schedules).await? {
            let sch = decode(&item)?;
            if enabled.is_none_or(|e| sch.enabled == e)
                && visible_to(sch.user_id.as_deref(), user_id)
            {
                rows.push(sch);
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
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Schedules, id).await? else {
                return Ok(None);
            };
            let current = decode(&old)?;
            if !visible_to(current.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            let updated = update.apply_to(&current, now_epoch_seconds())?;
            let item = record_item(&updated, "a schedule")?;
            if updated.name == current.name {
                if self.cas(Table::Schedules, Some(&old), item).await? {
                    return Ok(Some(updated));
                }
                continue;
            }
            let owner = updated.user_id.as_deref();
            if self.name_in_use(owner, &updated.name, id).await? {
                return Err(name_taken(&updated.name));
            }
            let cond = Cond::unchanged(Table::Schedules, Some(&old), &item);
            let items = vec![
                self.tx_put(Table::Schedules, item, Some(cond)).await?,
                self.tx_put(
                    Table::Meta,
                    self.name_item(owner, &updated.name, id),
                    Some(Cond::absent("pk")),
                )
                .await?,
                self.tx_delete(
                    Table::Meta,
                    &self.name_key(current.user_id.as_deref(), &current.name),
                    None,
                )
                .await?,
            ];
            match self.transact(items).await? {
                TxOutcome::Applied => return Ok(Some(updated)),
                TxOutcome::Cancelled(failed) => {
                    if failed.get(1).copied().unwrap_or(false)
                        && !self.free_stale_name(owner, &updated.name).await?
                    {
                        return Err(name_taken(&updated.name));
                    }
                }
            }
        }
        Err(contention("update_schedule"))
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let Some(item) = self.get(Table::Schedules, id).await? else {
            return Ok(false);
        };
        let sch = decode(&item)?;
        if !visible_to(sch.user_id.as_deref(), user_id) {
            return Ok(false);
        }
        let cond = user_id.map(|u| Cond::default().eq("user_id", sv(u)));
        if !self.delete(Table::Schedules, id, cond).await? {
            return Ok(false);
        }
        self.delete(
            Table::Meta,
            &self.name_key(sch.user_id.as_deref(), &sch.name),
            Some(Cond::default().eq("id", sv(id))),
        )
        .await?;
        for run in self.scan_eq(Table::ScheduleRuns, "schedule_id", id).await? {
            if let Some(run_id) = s(&run, "id") {
                self.delete(Table::ScheduleRuns, run_id, None).await?;
            }
        }
        Ok(true)
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        for _ in 0..MAX_ATTEMPTS {
            let now = now_epoch_seconds();
            let mut due = Vec::new();
            for item in self.scan(Table::Schedules).await? {
                let sch = decode(&item)?;
                if sch.is_due(now, lock_grace_seconds) {
                    due.push((sch, item));
                }
            }
            if due.is_empty() {
                return Ok(None);
            }
            due.sort_by(|a, b| (a.0.next_run_at, &a.0.id).cmp(&(b.0.next_run_at, &b.0.id)));
            for (mut sch, old) in due {
                sch.locked_by = Some(worker_id.to_owned());
                sch.locked_at = Some(now);
                if self
                    .cas(
                        Table::Schedules,
                        Some(&old),
                        record_item(&sch, "a schedule")?,
                    )
                    .await?
                {
                    return Ok(Some(sch));
                }
            }
        }
        Err(contention("claim_due_schedule"))
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::Schedules, id).await? else {
                return Ok(false);
            };
            let mut sch = decode(&old)?;
            if !sch.release(worker_id, locked_at, next_run_at, now_epoch_seconds()) {
                return Ok(false);
            }
            if self
                .cas(
                    Table::Schedules,
                    Some(&old),
                    record_item(&sch, "a schedule")?,
                )
                .await?
            {
                return Ok(true);
            }
        }
        Err(contention("release_schedule"))
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let Some(item) = self.get(Table::Schedules, &run.schedule_id).await? else {
            return Err(err(
                ErrorKind::NotFound,
                format!("schedule {} does not exist", run.schedule_id),
            ));
        };
        run.user_id = decode(&item)?.user_id;
        let put = record_item(&run, "a schedule run")?;
        if !self
            .put(Table::ScheduleRuns, put, Some(Cond::absent("id")))
            .await?
        {
            return Err(err(
                ErrorKind::AlreadyExists,
                format!("schedule run {} already exists", run.id),
            ));
        }
        Ok(run)
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        for _ in 0..MAX_ATTEMPTS {
            let Some(old) = self.get(Table::ScheduleRuns, &run.id).await? else {
                return Ok(None);
            };
            let stored = decode_run(&old)?;
            if !visible_to(stored.user_id.as_deref(), user_id) {
                return Ok(None);
            }
            let next = ScheduleRun {
                id: stored.id,
                schedule_id: stored.schedule_id,
                user_id: stored.user_id,
                created_at: stored.created_at,
                ..run.clone()
            };
            if self
                .cas(
                    Table::ScheduleRuns,
                    Some(&old),
                    record_item(&next, "a schedule run")?,
                )
                .await?
            {
                return Ok(Some(next));
            }
        }
        Err(contention("update_schedule_run"))
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        match self.get(Table::ScheduleRuns, id).await? {
            Some(item) => {
                let r = decode_run(&item)?;
                Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
            }
            None => Ok(None),
        }
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let mut rows = Vec::new();
        for item in self
            .scan_eq(Table::ScheduleRuns, "schedule_id", schedule_id)
            .await?
        {
            let r = decode_run(&item)?;
            if visible_to(r.user_id.as_deref(), user_id) {
                rows.push(r);
            }
        }
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }
}
