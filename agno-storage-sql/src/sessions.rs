//! Sessions (`agno_sessions`).

use std::collections::HashMap;
use std::sync::Arc;

use agno_storage_core::legacy::{last_context_runs, merge_runs, SessionRun};
use agno_storage_core::{
    async_trait, now_epoch_seconds, owned_by_another_user, Error, ErrorKind, Page, Result, RunJson,
    Session, SessionQuery, SessionRead, SessionStore, SessionType, ACTIVE_RUN_STATUSES,
};
use serde_json::Value;

use crate::dialect::{like_pattern, RowVersioning};
use crate::exec::{Versioned, VersionedRead};
use crate::run_cache::{keep_if_unchanged, keep_unchanged, Held, RowVersions, Stamp};
use crate::schema::Table;
use crate::store::{in_list, limit_offset, order_by, owned_by_other, SqlStore, Upsert, Where};
use crate::value::{Row, SqlValue};

pub(crate) fn session_from_row(row: &Row) -> Result<Session> {
    Ok(Session {
        session_id: row.str("session_id")?,
        session_type: SessionType::parse(&row.str("session_type")?)?,
        agent_id: row.opt_str("agent_id")?,
        team_id: row.opt_str("team_id")?,
        workflow_id: row.opt_str("workflow_id")?,
        user_id: row.opt_str("user_id")?,
        session_data: row.json("session_data")?,
        agent_data: row.json("agent_data")?,
        team_data: row.json("team_data")?,
        workflow_data: row.json("workflow_data")?,
        metadata: row.json("metadata")?,
        summary: row.json("summary")?,
        runs: None,
        created_at: row.i64("created_at")?,
        updated_at: row.opt_i64("updated_at")?,
    })
}

/// Run `run_id` from its stored text ([`RunJson::from_stored_text`]); an error names the run.
fn stored_run(run_id: &str, text: String) -> Result<RunJson> {
    RunJson::from_stored_text(text)
        .map_err(|e| Error::new(e.kind(), format!("run {run_id}: {}", e.message())))
}

/// A row of [`SqlStore::session_runs_query`]: the run's session id and the run.
fn session_run_from_row(mut row: Row) -> Result<(String, SessionRun)> {
    let run_id = row.take_str("run_id")?;
    let run = match row.take_opt_str("run_data")? {
        Some(text) => stored_run(&run_id, text)?,
        None => RunJson::from(Value::Null),
    };
    let run = SessionRun {
        run_index: row.opt_i64("run_index")?,
        created_at: row.i64("created_at")?,
        run_id,
        run,
    };
    Ok((row.take_str("session_id")?, run))
}

/// A JSON cell as agno binds it: an absent value becomes JSON `null`.
fn json_or_null(v: &Option<Value>) -> SqlValue {
    SqlValue::Json(Some(v.clone().unwrap_or(Value::Null)))
}

impl SqlStore {
    /// The query for the runs of these sessions, in no particular order: the merge sorts
    /// them ([`merge_runs`]), which costs far less than a SQL sort of whole rows (SQLite
    /// would copy every `run_data` into a temporary b-tree to order ties by `created_at`).
    /// Run JSON comes back as text, not parsed.
    fn session_runs_query(&self, session_ids: &[String]) -> (String, Vec<SqlValue>) {
        let (list, params) = in_list(session_ids);
        let sql = format!(
            "SELECT {} FROM {} WHERE session_id IN {list}",
            self.session_runs_columns(),
            self.t(Table::Runs)
        );
        (sql, params)
    }

    /// The columns of [`SqlStore::session_runs_query`].
    fn session_runs_columns(&self) -> String {
        format!(
            "session_id, run_id, run_index, created_at, {} AS run_data",
            self.dialect.json_as_text("run_data")
        )
    }

    /// How a read of `session_id`'s runs fetches only what the store's own connection
    /// changed, holding the runs whose `rowid`s are `held`, where the dialect can tell
    /// ([`crate::dialect::Dialect::row_id`]).
    #[cfg(feature = "sqlite")]
    fn runs_watch(&self, held: Arc<Vec<i64>>) -> Option<crate::exec::RowWatch> {
        let row_id = self.dialect.row_id()?;
        let (columns, table) = (self.session_runs_columns(), self.t(Table::Runs));
        Some(crate::exec::RowWatch {
            table: self.names.get(Table::Runs).to_owned(),
            read: format!("SELECT {row_id} AS row_id, {columns} FROM {table} WHERE session_id = ?"),
            row_ids: format!("SELECT {row_id} AS row_id FROM {table} WHERE session_id = ?"),
            rows_by_id: format!(
                "SELECT {row_id} AS row_id, {columns} FROM {table} \
                 WHERE {row_id} IN (SELECT value FROM json_each(?))"
            ),
            held,
        })
    }

    /// Runs of these sessions, each with its session id.
    async fn session_runs(&self, session_ids: &[String]) -> Result<Vec<(String, SessionRun)>> {
        if session_ids.is_empty() {
            return Ok(Vec::new());
        }
        let (sql, params) = self.session_runs_query(session_ids);
        self.exec
            .query(&sql, params)
            .await?
            .into_iter()
            .map(session_run_from_row)
            .collect()
    }

    /// The runs of one session, reusing the cached ones that provably have not changed
    /// ([`crate::run_cache`]) and caching what was read where the dialect can prove it.
    async fn runs_of_session(&self, session_id: &str) -> Result<Vec<SessionRun>> {
        if let Some(versioning) = self.dialect.row_versioning("runs", "run_id") {
            return self.runs_of_session_by_row(session_id, &versioning).await;
        }
        let known = self.run_cache.version(session_id);
        if let Some((version, held)) = known {
            match self.versioned_runs(session_id, Some(version), held).await? {
                Versioned::Unchanged => {
                    if let Some(held) = self.run_cache.at_version(session_id, version) {
                        return Ok(held.runs.as_ref().clone());
                    }
                }
                Versioned::Rows(version, rows) => {
                    return self.keep_session_runs(session_id, version, rows, None);
                }
                #[cfg(feature = "sqlite")]
                Versioned::Changed {
                    version: now,
                    row_ids,
                    rows,
                } => {
                    if let Some(held) = self.run_cache.at_version(session_id, version) {
                        return self.keep_session_runs(
                            session_id,
                            Some(now),
                            rows,
                            Some((row_ids, held)),
                        );
                    }
                }
            }
            // Another read replaced the cached runs meanwhile: read them all.
        }
        match self
            .versioned_runs(session_id, None, Arc::default())
            .await?
        {
            Versioned::Rows(version, rows) => {
                self.keep_session_runs(session_id, version, rows, None)
            }
            _ => Err(Error::new(
                ErrorKind::Unexpected,
                "the executor reported no change to a read that knew no version",
            )),
        }
    }

    /// Reads `session_id`'s runs unless they are provably unchanged since `known`, when
    /// the cached ones, whose `rowid`s are `held`, were read.
    async fn versioned_runs(
        &self,
        session_id: &str,
        known: Option<crate::exec::DataVersion>,
        held: Arc<Vec<i64>>,
    ) -> Result<Versioned> {
        let (sql, params) = self.session_runs_query(&[session_id.to_owned()]);
        #[cfg(not(feature = "sqlite"))]
        let _ = held;
        self.exec
            .query_versioned(VersionedRead {
                sql,
                params,
                known,
                #[cfg(feature = "sqlite")]
                watch: self.runs_watch(held),
            })
            .await
    }

    /// The runs of `rows`, cached at `version` when there is one. With `patch` (the
    /// `rowid` of every run of the session now, and the cached runs with their `rowid`s),
    /// `rows` holds only the new and changed runs, and the others are the cached ones.
    /// Either way a cached run whose stored text is unchanged is kept, with its parse.
    fn keep_session_runs(
        &self,
        session_id: &str,
        version: Option<crate::exec::DataVersion>,
        rows: Vec<Row>,
        patch: Option<(Vec<i64>, Held)>,
    ) -> Result<Vec<SessionRun>> {
        let watched = version.is_some_and(|v| v.watched);
        let mut read = HashMap::with_capacity(rows.len());
        let mut row_ids = Vec::with_capacity(rows.len());
        let mut runs = Vec::with_capacity(rows.len());
        for row in rows {
            let row_id = if watched {
                Some(row.i64("row_id")?)
            } else {
                None
            };
            let (_, run) = session_run_from_row(row)?;
            match (row_id, patch.is_some()) {
                (Some(id), true) => {
                    read.insert(id, run);
                }
                (id, _) => {
                    row_ids.extend(id);
                    runs.push(run);
                }
            }
        }
        let cached = match patch {
            Some((now, cached)) => {
                let held: HashMap<i64, &SessionRun> = cached
                    .row_ids
                    .iter()
                    .copied()
                    .zip(cached.runs.iter())
                    .collect();
                for id in now {
                    let run = match (read.remove(&id), held.get(&id)) {
                        (Some(mut run), old) => {
                            if let Some(old) = old {
                                keep_if_unchanged(&mut run, old);
                            }
                            run
                        }
                        (None, Some(old)) => (*old).clone(),
                        (None, None) => {
                            return Err(Error::new(
                                ErrorKind::Unexpected,
                                format!("run row {id} was neither read nor cached"),
                            ))
                        }
                    };
                    row_ids.push(id);
                    runs.push(run);
                }
                None
            }
            None => self.run_cache.get(session_id).map(|(_, runs)| runs),
        };
        if let Some(version) = version {
            if let Some(cached) = cached {
                keep_unchanged(&mut runs, &cached);
            }
            self.run_cache.put(
                session_id,
                Stamp::Database(version, Arc::new(row_ids)),
                runs.clone(),
            );
        }
        Ok(runs)
    }

    /// [`SqlStore::runs_of_session`] where each row tells its version ([`RowVersioning`]).
    /// With runs cached, a first statement computes the digest of the session's run
    /// versions: if it is the cached one, the cached runs are the answer. Otherwise one
    /// statement computes the digest again and, only if it still differs, lists every run
    /// with its version, carrying the JSON text only of runs whose version is not the cached
    /// one; the digest row is the one without a `run_id`. Its scalar subqueries (InitPlans)
    /// have the server decode the cached versions once per read, not once per row, and skip
    /// the listing when the digest matches, whatever the plan. (The check is a statement of
    /// its own so that an unchanged read does not send the cached versions: a custom plan
    /// would parse them while planning.)
    async fn runs_of_session_by_row(
        &self,
        session_id: &str,
        versioning: &RowVersioning,
    ) -> Result<Vec<SessionRun>> {
        let cached = match self.run_cache.get(session_id) {
            Some((Stamp::Rows(versions), runs)) => Some((versions, runs)),
            _ => None,
        };
        let (version, runs_table) = (&versioning.version, self.t(Table::Runs));
        let seed = SqlValue::int(self.run_cache.seed());
        if let Some((v, cached_runs)) = &cached {
            let sql = format!(
                "SELECT {} AS d FROM {runs_table} AS runs WHERE session_id = ?",
                versioning.digest
            );
            let params = vec![seed.clone(), SqlValue::text(session_id)];
            let digest = self.exec.query(&sql, params).await?.pop();
            if digest.map(|row| row.str("d")).transpose()?.as_ref() == Some(&v.digest) {
                return Ok(cached_runs.as_ref().clone());
            }
        }
        let sql = format!(
            "WITH digest AS (SELECT {} AS d FROM {runs_table} AS runs WHERE session_id = ?) \
             SELECT NULL AS run_id, NULL AS run_index, NULL AS created_at, NULL AS row_version, \
             d AS run_data FROM digest \
             UNION ALL \
             SELECT run_id, run_index, created_at, {version} AS row_version, \
             CASE WHEN (SELECT CAST(? AS JSONB)) ->> run_id = {version} THEN NULL ELSE {} END \
             FROM {runs_table} AS runs \
             WHERE session_id = ? AND (SELECT d FROM digest) IS DISTINCT FROM ?",
            versioning.digest,
            self.dialect.json_as_text("run_data"),
        );
        let (known, digest) = match &cached {
            Some((v, _)) => (v.known.as_str(), SqlValue::text(&v.digest)),
            None => ("{}", SqlValue::Text(None)),
        };
        let params = vec![
            seed,
            SqlValue::text(session_id),
            SqlValue::text(known),
            SqlValue::text(session_id),
            digest,
        ];
        let rows = self.exec.query(&sql, params).await?;
        let mut runs = Vec::with_capacity(rows.len());
        let mut versions = Vec::with_capacity(rows.len());
        let mut digest = None;
        for mut row in rows {
            let Some(run_id) = row.take_opt_str("run_id")? else {
                digest = row.take_opt_str("run_data")?;
                continue;
            };
            let cached_run = cached
                .as_ref()
                .and_then(|(v, cached_runs)| cached_runs.get(*v.position.get(&run_id)?));
            let run = match row.take_opt_str("run_data")? {
                Some(text) => stored_run(&run_id, text)?,
                None => cached_run.map(|old| old.run.clone()).ok_or_else(|| {
                    Error::new(
                        ErrorKind::Unexpected,
                        format!("run {run_id} came back unchanged but is not cached"),
                    )
                })?,
            };
            versions.push(row.take_str("row_version")?);
            let mut run = SessionRun {
                run_index: row.opt_i64("run_index")?,
                created_at: row.i64("created_at")?,
                run_id,
                run,
            };
            // Written again with the same text (a new row version): keep what was read of it.
            if let Some(old) = cached_run {
                keep_if_unchanged(&mut run, old);
            }
            runs.push(run);
        }
        let digest = digest.ok_or_else(|| {
            Error::new(ErrorKind::Unexpected, "the runs read brought no digest row")
        })?;
        if let Some((v, cached_runs)) = cached {
            if v.digest == digest {
                return Ok(cached_runs.as_ref().clone());
            }
        }
        let versions = RowVersions::new(&runs, versions, digest);
        self.run_cache
            .put(session_id, Stamp::Rows(Arc::new(versions)), runs.clone());
        Ok(runs)
    }

    /// Sessions from rows, with runs merged from the runs table and any legacy blob.
    async fn with_runs(&self, rows: &[Row], runs_limit: Option<usize>) -> Result<Vec<Session>> {
        let ids: Vec<String> = rows
            .iter()
            .map(|r| r.str("session_id"))
            .collect::<Result<_>>()?;
        let mut by_session: std::collections::HashMap<String, Vec<SessionRun>> =
            std::collections::HashMap::with_capacity(ids.len());
        if let [session_id] = ids.as_slice() {
            by_session.insert(session_id.clone(), self.runs_of_session(session_id).await?);
        } else {
            for (session_id, run) in self.session_runs(&ids).await? {
                by_session.entry(session_id).or_default().push(run);
            }
        }
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut s = session_from_row(row)?;
            let mine = by_session.remove(&s.session_id).unwrap_or_default();
            let blob = if row.has("runs") {
                row.json("runs")?
            } else {
                None
            };
            let merged = merge_runs(blob.as_ref(), mine);
            s.runs = Some(match runs_limit {
                Some(n) => last_context_runs(merged, n),
                None => merged,
            });
            out.push(s);
        }
        Ok(out)
    }

    async fn session_row(&self, session_id: &str, user_id: Option<&str>) -> Result<Option<Row>> {
        let mut w = Where::default();
        w.eq("session_id", Some(session_id));
        w.eq("user_id", user_id);
        let sql = format!("SELECT * FROM {}{}", self.t(Table::Sessions), w.sql());
        Ok(self.exec.query(&sql, w.params).await?.into_iter().next())
    }
}

#[async_trait]
impl SessionStore for SqlStore {
    async fn upsert_session(&self, session: Session) -> Result<Session> {
        self.check(Table::Sessions)?;
        let (component_col, data_col, component, data) = match session.session_type {
            SessionType::Agent => (
                "agent_id",
                "agent_data",
                &session.agent_id,
                &session.agent_data,
            ),
            SessionType::Team => ("team_id", "team_data", &session.team_id, &session.team_data),
            SessionType::Workflow => (
                "workflow_id",
                "workflow_data",
                &session.workflow_id,
                &session.workflow_data,
            ),
        };
        let now = now_epoch_seconds();
        let d = self.dialect;
        let sql = self.upsert_sql(&Upsert {
            table: Table::Sessions,
            columns: &[
                "session_id",
                "session_type",
                component_col,
                "user_id",
                data_col,
                "session_data",
                "summary",
                "metadata",
                "created_at",
                "updated_at",
            ],
            values: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)".into(),
            conflict: "session_id",
            set: vec![
                (component_col, d.excluded(component_col)),
                ("user_id", d.excluded("user_id")),
                (data_col, d.excluded(data_col)),
                ("session_data", d.excluded("session_data")),
                ("summary", d.excluded("summary")),
                ("metadata", d.excluded("metadata")),
                ("updated_at", "?".into()),
            ],
            guard: Some(d.owner_guard()),
        });
        let params = vec![
            SqlValue::text(&session.session_id),
            SqlValue::text(session.session_type.as_str()),
            SqlValue::opt_text(component.as_deref()),
            SqlValue::opt_text(session.user_id.as_deref()),
            json_or_null(data),
            json_or_null(&session.session_data),
            json_or_null(&session.summary),
            json_or_null(&session.metadata),
            SqlValue::int(session.created_at),
            SqlValue::int(session.created_at),
            SqlValue::int(now),
        ];
        let stored = self
            .upsert_returning(
                Table::Sessions,
                sql,
                params,
                "session_id, user_id",
                ("session_id", SqlValue::text(&session.session_id)),
                &owned_by_other(session.user_id.as_deref()),
            )
            .await?;
        if stored.is_none() {
            return Err(owned_by_another_user("session", &session.session_id));
        }
        let row = self
            .session_row(&session.session_id, None)
            .await?
            .ok_or_else(|| {
                agno_storage_core::Error::not_found(format!(
                    "session {} vanished after upsert",
                    session.session_id
                ))
            })?;
        let mut sessions = self.with_runs(&[row], None).await?;
        sessions.pop().ok_or_else(|| {
            agno_storage_core::Error::not_found(format!(
                "session {} vanished after upsert",
                session.session_id
            ))
        })
    }

    async fn get_session(&self, session_id: &str, read: SessionRead) -> Result<Option<Session>> {
        self.check(Table::Sessions)?;
        let Some(row) = self
            .session_row(session_id, read.user_id.as_deref())
            .await?
        else {
            return Ok(None);
        };
        if let Some(t) = read.session_type {
            if row.str("session_type")? != t.as_str() {
                return Ok(None);
            }
        }
        Ok(self.with_runs(&[row], read.runs_limit).await?.pop())
    }

    async fn get_sessions(&self, query: SessionQuery) -> Result<Page<Session>> {
        self.check(Table::Sessions)?;
        let paging = limit_offset(&query.pagination)?;
        let order = order_by(self.dialect, &query.sort, Session::SORTABLE)?;
        let mut w = Where::default();
        w.eq("session_type", query.session_type.map(|t| t.as_str()));
        w.eq("user_id", query.user_id.as_deref());
        if let Some(c) = &query.component_id {
            match query.session_type {
                Some(SessionType::Agent) => w.eq("agent_id", Some(c)),
                Some(SessionType::Team) => w.eq("team_id", Some(c)),
                Some(SessionType::Workflow) => w.eq("workflow_id", Some(c)),
                None => w.push(
                    "(agent_id = ? OR team_id = ? OR workflow_id = ?)",
                    [SqlValue::text(c), SqlValue::text(c), SqlValue::text(c)],
                ),
            }
        }
        if let Some(name) = &query.session_name {
            let field = self.dialect.json_field_text("session_data", "session_name");
            w.push(
                self.dialect.ilike(&field),
                [SqlValue::text(like_pattern(name))],
            );
        }
        if let Some(s) = query.start_timestamp {
            w.push("created_at >= ?", [SqlValue::int(s)]);
        }
        if let Some(e) = query.end_timestamp {
            w.push("created_at <= ?", [SqlValue::int(e)]);
        }
        let from = format!("FROM {}{}", self.t(Table::Sessions), w.sql());
        let total = self.count(&from, w.params.clone()).await?;
        let sql = format!(
            "SELECT * {from}{}{paging}",
            order.map(|o| format!(" ORDER BY {o}")).unwrap_or_default()
        );
        let rows = self.exec.query(&sql, w.params).await?;
        let items = if query.include_runs {
            self.with_runs(&rows, None).await?
        } else {
            rows.iter().map(session_from_row).collect::<Result<_>>()?
        };
        Ok(Page::new(items, total))
    }

    async fn rename_session(
        &self,
        session_id: &str,
        session_name: &str,
        user_id: Option<&str>,
    ) -> Result<Option<Session>> {
        self.check(Table::Sessions)?;
        let Some(row) = self.session_row(session_id, user_id).await? else {
            return Ok(None);
        };
        let mut s = session_from_row(&row)?;
        s.set_session_name(session_name);
        let mut w = Where::default();
        w.eq("session_id", Some(session_id));
        w.eq("user_id", user_id);
        let sql = format!(
            "UPDATE {} SET session_data = ?, updated_at = ?{}",
            self.t(Table::Sessions),
            w.sql()
        );
        let mut params = vec![
            SqlValue::json(s.session_data.as_ref()),
            SqlValue::int(now_epoch_seconds()),
        ];
        params.extend(w.params);
        if self.exec.execute(&sql, params).await? == 0 {
            return Ok(None);
        }
        self.get_session(
            session_id,
            SessionRead {
                user_id: user_id.map(str::to_owned),
                ..Default::default()
            },
        )
        .await
    }

    async fn reassign_session_owner(
        &self,
        session_id: &str,
        previous_user_id: &str,
        user_id: Option<&str>,
    ) -> Result<bool> {
        self.check(Table::Sessions)?;
        self.check(Table::Runs)?;
        // agno's one statement: the owner and the idle check are decided with the write.
        let (active, mut params) = in_list(ACTIVE_RUN_STATUSES);
        let sql = format!(
            "UPDATE {} SET user_id = ? WHERE session_id = ? AND user_id = ? AND NOT EXISTS \
             (SELECT run_id FROM {} WHERE session_id = ? AND status IN {active})",
            self.t(Table::Sessions),
            self.t(Table::Runs),
        );
        let mut all = vec![
            SqlValue::opt_text(user_id),
            SqlValue::text(session_id),
            SqlValue::text(previous_user_id),
            SqlValue::text(session_id),
        ];
        all.append(&mut params);
        Ok(self.exec.execute(&sql, all).await? > 0)
    }

    async fn delete_sessions(&self, session_ids: &[String], user_id: Option<&str>) -> Result<u64> {
        self.check(Table::Sessions)?;
        if session_ids.is_empty() {
            return Ok(0);
        }
        let (list, ids) = in_list(session_ids);
        let mut w = Where::default();
        w.push(format!("session_id IN {list}"), ids);
        w.eq("user_id", user_id);
        let runs = format!(
            "DELETE FROM {} WHERE session_id IN (SELECT session_id FROM {}{})",
            self.t(Table::Runs),
            self.t(Table::Sessions),
            w.sql()
        );
        let sessions = format!("DELETE FROM {}{}", self.t(Table::Sessions), w.sql());
        self.transaction_count(vec![(runs, w.params.clone()), (sessions, w.params)])
            .await
    }
}
