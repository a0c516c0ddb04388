//! Schedules and schedule runs. agno's Redis adapters have neither, so the layout follows
//! theirs: `{prefix}:schedules:{id}` and `{prefix}:schedule_runs:{id}` records in
//! `Schedule.to_dict()` / `ScheduleRun.to_dict()` field order.
//!
//! Indexes: creation time (all, per owner); `due` (unlocked enabled schedules by
//! `next_run_at`) and `locked` (claimed ones by `locked_at`), so a claim reads only due
//! candidates; one name key per `(owner, name)` holding the schedule id, which makes the
//! name unique inside the same atomic write; runs per schedule by creation time.

use agno_storage_core::schedule::page_newest_first;
use agno_storage_core::{
    async_trait, now_epoch_seconds, visible_to, Error, ErrorKind, Page, Pagination, Result,
    Schedule, ScheduleRun, ScheduleStore, ScheduleUpdate,
};

use crate::cas::{Cas, Entry, Outcome};
use crate::codec::encode;
use crate::store::KvStore;

pub(crate) const TABLE: &str = "schedules";
pub(crate) const RUNS_TABLE: &str = "schedule_runs";

pub(crate) fn decode(key: &str, raw: &str) -> Result<Schedule> {
    agno_storage_core::json::from_str(raw).map_err(|e| Error::serialization(key, e))
}

pub(crate) fn decode_run(key: &str, raw: &str) -> Result<ScheduleRun> {
    agno_storage_core::json::from_str(raw).map_err(|e| Error::serialization(key, e))
}

fn to_json(what: &str, value: serde_json::Result<serde_json::Value>) -> Result<String> {
    value
        .map(|v| encode(&v))
        .map_err(|e| Error::serialization(what, e))
}

fn name_taken(name: &str) -> Error {
    Error::new(
        ErrorKind::AlreadyExists,
        format!("Schedule with name '{name}' already exists"),
    )
}

impl KvStore {
    fn schedules_all(&self) -> String {
        self.idx(TABLE, "created:all")
    }

    fn schedules_of(&self, user: &str) -> String {
        self.idx(TABLE, &format!("created:user:{user}"))
    }

    fn schedules_due(&self) -> String {
        self.idx(TABLE, "due")
    }

    fn schedules_locked(&self) -> String {
        self.idx(TABLE, "locked")
    }

    /// The key making `(user_id, name)` unique: the owner is length-prefixed (`u5:alice:`),
    /// the unowned bucket is `n:`, so no two buckets share a key.
    pub(crate) fn schedule_name_key(&self, user_id: Option<&str>, name: &str) -> String {
        let owner = match user_id {
            Some(u) => format!("u{}:{u}", u.len()),
            None => "n".to_owned(),
        };
        self.idx(TABLE, &format!("name:{owner}:{name}"))
    }

    fn schedule_runs_of(&self, schedule_id: &str) -> String {
        self.idx(RUNS_TABLE, &format!("by_schedule:{schedule_id}"))
    }

    pub(crate) fn schedule_entries(&self, s: &Schedule) -> Vec<Entry> {
        let created = s.created_at as f64;
        let mut entries = vec![Entry::z(self.schedules_all(), &s.id, created)];
        if let Some(u) = &s.user_id {
            entries.push(Entry::z(self.schedules_of(u), &s.id, created));
        }
        if let (true, Some(next)) = (s.enabled, s.next_run_at) {
            match s.locked_by {
                None => entries.push(Entry::z(self.schedules_due(), &s.id, next as f64)),
                Some(_) => entries.push(Entry::z(
                    self.schedules_locked(),
                    &s.id,
                    s.locked_at.unwrap_or_default() as f64,
                )),
            }
        }
        entries
    }

    pub(crate) fn schedule_run_entries(&self, r: &ScheduleRun) -> Vec<Entry> {
        vec![Entry::z(
            self.schedule_runs_of(&r.schedule_id),
            &r.id,
            r.created_at as f64,
        )]
    }

    async fn read_schedule(&self, id: &str) -> Result<Option<(String, Schedule)>> {
        let key = self.key(TABLE, id);
        match self.get(&key).await? {
            Some(raw) => {
                let s = decode(&key, &raw)?;
                Ok(Some((raw, s)))
            }
            None => Ok(None),
        }
    }
}

#[async_trait]
impl ScheduleStore for KvStore {
    async fn create_schedule(&self, schedule: Schedule) -> Result<Schedule> {
        let key = self.key(TABLE, &schedule.id);
        let name_key = self.schedule_name_key(schedule.user_id.as_deref(), &schedule.name);
        let raw = to_json("a schedule", serde_json::to_value(&schedule))?;
        self.retry("create_schedule", || async {
            // A name key whose schedule is gone or renamed (deleted by another writer) is
            // stale: take it over in the same atomic write.
            let holder = self.get(&name_key).await?;
            if let Some(other) = &holder {
                let taken = self
                    .read_schedule(other)
                    .await?
                    .is_some_and(|(_, s)| s.name == schedule.name && s.user_id == schedule.user_id);
                if taken {
                    return Err(name_taken(&schedule.name));
                }
            }
            let cas = Cas::on(&key)
                .expect(None)
                .set(raw.clone())
                .guard_value(&name_key, holder.as_deref())
                .set_key(&name_key, &schedule.id)
                .reindex(&[], &self.schedule_entries(&schedule));
            match self.cas(&cas).await? {
                Outcome::Applied => Ok(Some(schedule.clone())),
                Outcome::Changed => Err(Error::new(
                    ErrorKind::AlreadyExists,
                    format!("schedule {} already exists", schedule.id),
                )),
                Outcome::Guard(_) => Ok(None),
            }
        })
        .await
    }

    async fn get_schedule(&self, id: &str, user_id: Option<&str>) -> Result<Option<Schedule>> {
        Ok(self
            .read_schedule(id)
            .await?
            .map(|(_, s)| s)
            .filter(|s| visible_to(s.user_id.as_deref(), user_id)))
    }

    async fn get_schedule_by_name(
        &self,
        name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Schedule>> {
        let Some(id) = self.get(&self.schedule_name_key(user_id, name)).await? else {
            return Ok(None);
        };
        Ok(self
            .read_schedule(&id)
            .await?
            .map(|(_, s)| s)
            .filter(|s| s.name == name && s.user_id.as_deref() == user_id))
    }

    async fn get_schedules(
        &self,
        enabled: Option<bool>,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<Schedule>> {
        pagination.validate()?;
        let index = match user_id {
            Some(u) => self.schedules_of(u),
            None => self.schedules_all(),
        };
        let mut rows = Vec::new();
        for (id, raw) in self.load_index(TABLE, &index, "-inf", "+inf").await? {
            let s = decode(&self.key(TABLE, &id), &raw)?;
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
        let key = self.key(TABLE, id);
        self.retry("update_schedule", || async {
            let Some((raw, current)) = self.read_schedule(id).await? else {
                return Ok(Some(None));
            };
            if !visible_to(current.user_id.as_deref(), user_id) {
                return Ok(Some(None));
            }
            let updated = update.apply_to(&current, now_epoch_seconds())?;
            let mut cas = Cas::on(&key)
                .expect(Some(&raw))
                .set(to_json("a schedule", serde_json::to_value(&updated))?);
            let renamed = updated.name != current.name || updated.user_id != current.user_id;
            if renamed {
                let new_name = self.schedule_name_key(updated.user_id.as_deref(), &updated.name);
                cas = cas
                    .guard_absent_or(&new_name, id)
                    .del_key(&self.schedule_name_key(current.user_id.as_deref(), &current.name))
                    .set_key(&new_name, id);
            }
            let cas = cas.reindex(
                &self.schedule_entries(&current),
                &self.schedule_entries(&updated),
            );
            match self.cas(&cas).await? {
                Outcome::Applied => Ok(Some(Some(updated))),
                Outcome::Guard(_) => Err(name_taken(&updated.name)),
                Outcome::Changed => Ok(None),
            }
        })
        .await
    }

    async fn delete_schedule(&self, id: &str, user_id: Option<&str>) -> Result<bool> {
        let key = self.key(TABLE, id);
        let runs_index = self.schedule_runs_of(id);
        self.retry("delete_schedule", || async {
            let Some((raw, current)) = self.read_schedule(id).await? else {
                return Ok(Some(false));
            };
            if !visible_to(current.user_id.as_deref(), user_id) {
                return Ok(Some(false));
            }
            let run_ids: Vec<String> = self
                .query(redis::cmd("ZRANGE").arg(&runs_index).arg(0).arg(-1))
                .await?;
            let mut cas = Cas::on(&key)
                .expect(Some(&raw))
                .delete()
                .guard_zcard(&runs_index, run_ids.len())
                .del_key(&self.schedule_name_key(current.user_id.as_deref(), &current.name))
                .reindex(&self.schedule_entries(&current), &[]);
            for run_id in &run_ids {
                cas = cas.del_key(&self.key(RUNS_TABLE, run_id));
            }
            cas = cas.del_key(&runs_index);
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
        })
        .await
    }

    async fn claim_due_schedule(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
    ) -> Result<Option<Schedule>> {
        let now = self.server_now().await?;
        for _ in 0..100 {
            let page = |index: String, max: i64| {
                let mut c = redis::cmd("ZRANGEBYSCORE");
                c.arg(index)
                    .arg("-inf")
                    .arg(max)
                    .arg("LIMIT")
                    .arg(0)
                    .arg(64);
                c
            };
            let mut ids: Vec<String> = self.query(&page(self.schedules_due(), now)).await?;
            let stale: Vec<String> = self
                .query(&page(self.schedules_locked(), now - lock_grace_seconds))
                .await?;
            ids.extend(stale);
            ids.sort();
            ids.dedup();
            let keys: Vec<String> = ids.iter().map(|id| self.key(TABLE, id)).collect();
            let mut candidates = Vec::new();
            for (key, raw) in keys.iter().zip(self.mget(&keys).await?) {
                let Some(raw) = raw else { continue };
                let s = decode(key, &raw)?;
                if s.is_due(now, lock_grace_seconds) {
                    candidates.push((raw, s));
                }
            }
            if candidates.is_empty() {
                return Ok(None);
            }
            candidates
                .sort_by(|(_, a), (_, b)| (a.next_run_at, &a.id).cmp(&(b.next_run_at, &b.id)));
            for (raw, current) in candidates {
                let mut claimed = current.clone();
                claimed.locked_by = Some(worker_id.to_owned());
                claimed.locked_at = Some(now);
                let cas = Cas::on(&self.key(TABLE, &current.id))
                    .expect(Some(&raw))
                    .set(to_json("a schedule", serde_json::to_value(&claimed))?)
                    .reindex(
                        &self.schedule_entries(&current),
                        &self.schedule_entries(&claimed),
                    );
                if self.cas(&cas).await? == Outcome::Applied {
                    return Ok(Some(claimed));
                }
            }
        }
        Err(Error::new(
            ErrorKind::Conflict,
            "claim_due_schedule: every due schedule was claimed by others while trying; poll again",
        )
        .with_backend(self.server))
    }

    async fn release_schedule(
        &self,
        id: &str,
        worker_id: &str,
        locked_at: Option<i64>,
        next_run_at: Option<i64>,
    ) -> Result<bool> {
        let key = self.key(TABLE, id);
        self.retry("release_schedule", || async {
            let Some((raw, current)) = self.read_schedule(id).await? else {
                return Ok(Some(false));
            };
            let mut released = current.clone();
            if !released.release(worker_id, locked_at, next_run_at, now_epoch_seconds()) {
                return Ok(Some(false));
            }
            let cas = Cas::on(&key)
                .expect(Some(&raw))
                .set(to_json("a schedule", serde_json::to_value(&released))?)
                .reindex(
                    &self.schedule_entries(&current),
                    &self.schedule_entries(&released),
                );
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(true))
        })
        .await
    }

    async fn create_schedule_run(&self, mut run: ScheduleRun) -> Result<ScheduleRun> {
        let Some((_, schedule)) = self.read_schedule(&run.schedule_id).await? else {
            return Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            )));
        };
        run.user_id = schedule.user_id.clone();
        let cas = Cas::on(&self.key(RUNS_TABLE, &run.id))
            .expect(None)
            .set(to_json("a schedule run", serde_json::to_value(&run))?)
            .guard_exists(&self.key(TABLE, &run.schedule_id))
            .reindex(&[], &self.schedule_run_entries(&run));
        match self.cas(&cas).await? {
            Outcome::Applied => Ok(run),
            Outcome::Changed => Err(Error::new(
                ErrorKind::AlreadyExists,
                format!("schedule run {} already exists", run.id),
            )),
            Outcome::Guard(_) => Err(Error::not_found(format!(
                "schedule {} does not exist",
                run.schedule_id
            ))),
        }
    }

    async fn update_schedule_run(
        &self,
        run: ScheduleRun,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        let key = self.key(RUNS_TABLE, &run.id);
        self.retry("update_schedule_run", || async {
            let Some(raw) = self.get(&key).await? else {
                return Ok(Some(None));
            };
            let stored = decode_run(&key, &raw)?;
            if !visible_to(stored.user_id.as_deref(), user_id) {
                return Ok(Some(None));
            }
            let updated = ScheduleRun {
                id: stored.id.clone(),
                schedule_id: stored.schedule_id.clone(),
                user_id: stored.user_id.clone(),
                created_at: stored.created_at,
                ..run.clone()
            };
            let cas = Cas::on(&key)
                .expect(Some(&raw))
                .set(to_json("a schedule run", serde_json::to_value(&updated))?);
            Ok((self.cas(&cas).await? == Outcome::Applied).then_some(Some(updated)))
        })
        .await
    }

    async fn get_schedule_run(
        &self,
        id: &str,
        user_id: Option<&str>,
    ) -> Result<Option<ScheduleRun>> {
        let key = self.key(RUNS_TABLE, id);
        let Some(raw) = self.get(&key).await? else {
            return Ok(None);
        };
        let r = decode_run(&key, &raw)?;
        Ok(visible_to(r.user_id.as_deref(), user_id).then_some(r))
    }

    async fn get_schedule_runs(
        &self,
        schedule_id: &str,
        user_id: Option<&str>,
        pagination: Pagination,
    ) -> Result<Page<ScheduleRun>> {
        pagination.validate()?;
        let index = self.schedule_runs_of(schedule_id);
        let mut rows = Vec::new();
        for (id, raw) in self.load_index(RUNS_TABLE, &index, "-inf", "+inf").await? {
            let r = decode_run(&self.key(RUNS_TABLE, &id), &raw)?;
            if r.schedule_id == schedule_id && visible_to(r.user_id.as_deref(), user_id) {
                rows.push(r);
            }
        }
        page_newest_first(rows, |r| (r.created_at, r.id.as_str()), &pagination)
    }
}
