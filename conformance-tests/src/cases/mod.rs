//! The cases, one module per domain.

use agno_storage_core::{RunJson, RunRecord, ScheduleRun, Session, SessionType};
use serde_json::{json, Value};

use crate::Case;

mod hostile;
mod input;
mod jobs;
mod learnings;
mod migrations;
mod records;
mod runs;
mod schedules;
mod scoping;
mod sessions;
mod surface;
mod users;

macro_rules! case {
    ($module:ident :: $f:ident, [$($req:literal),*]) => {
        Case { name: stringify!($f), requires: &[$($req),*], run: |ctx| Box::pin($module::$f(ctx)) }
    };
}

pub(crate) fn all() -> Vec<Case> {
    vec![
        case!(sessions::capabilities_are_declared_truthfully, []),
        case!(sessions::session_round_trip_per_type, ["sessions"]),
        case!(sessions::session_owner_guard, ["sessions"]),
        case!(sessions::get_sessions_filters_and_sorts, ["sessions"]),
        case!(runs::runs_written_one_row_per_run, ["sessions", "runs"]),
        case!(runs::run_index_assigned_atomically, ["sessions", "runs"]),
        case!(runs::long_session_reads_back_whole, ["sessions", "runs"]),
        case!(
            runs::session_reads_see_each_write_between_them,
            ["sessions", "runs"]
        ),
        case!(runs::get_runs_filters, ["sessions", "runs"]),
        case!(runs::run_requires_its_session, ["sessions", "runs"]),
        case!(runs::legacy_blob_merge, ["sessions", "runs", "legacy_runs"]),
        case!(
            runs::deleted_run_not_resurrected_by_blob,
            ["sessions", "runs", "legacy_runs"]
        ),
        case!(
            runs::rename_keeps_legacy_runs,
            ["sessions", "runs", "legacy_runs"]
        ),
        case!(
            scoping::sessions_and_runs_are_user_scoped,
            ["sessions", "runs"]
        ),
        case!(
            scoping::runs_go_only_into_the_writers_sessions,
            ["sessions", "runs"]
        ),
        case!(scoping::memories_are_user_scoped, ["memories"]),
        case!(scoping::evals_are_user_scoped, ["evals"]),
        case!(scoping::knowledge_reads_owner_or_shared, ["knowledge"]),
        case!(scoping::schedules_are_user_scoped, ["schedules"]),
        case!(scoping::learnings_are_user_scoped, ["learnings"]),
        case!(scoping::jobs_are_user_scoped, ["jobs"]),
        case!(
            hostile::hostile_identifiers_touch_only_their_rows,
            ["sessions", "runs", "memories"]
        ),
        case!(
            hostile::user_isolation_holds_under_random_operations,
            ["sessions", "runs", "memories"]
        ),
        case!(input::nul_in_identifiers_is_refused, ["sessions", "runs"]),
        case!(
            input::control_characters_in_identifiers_are_kept_and_isolated,
            ["sessions", "runs"]
        ),
        case!(
            input::identifiers_at_and_over_the_maximum,
            ["sessions", "runs"]
        ),
        case!(
            input::json_nesting_limit_holds_on_a_small_stack,
            ["sessions", "runs"]
        ),
        case!(
            input::undecodable_run_never_hides_its_neighbours,
            ["sessions", "runs", "raw_runs"]
        ),
        case!(
            records::pagination_is_validated,
            ["sessions", "runs", "memories", "evals", "knowledge"]
        ),
        case!(records::pages_are_one_indexed_with_totals, ["sessions"]),
        case!(records::memory_round_trip_keeps_timestamps, ["memories"]),
        case!(records::memory_search_topics_and_stats, ["memories"]),
        case!(records::eval_reruns_do_not_overwrite, ["evals"]),
        case!(
            records::metrics_per_user_with_shared_bucket,
            ["sessions", "runs", "metrics"]
        ),
        case!(
            records::concurrent_metrics_runs_keep_one_row_per_key,
            ["sessions", "runs", "metrics"]
        ),
        case!(records::knowledge_upsert_merges_fields, ["knowledge"]),
        case!(schedules::update_schedule_allow_list, ["schedules"]),
        case!(schedules::schedule_names_unique_per_user, ["schedules"]),
        case!(
            schedules::schedule_names_unique_under_concurrent_creates,
            ["schedules"]
        ),
        case!(
            schedules::claim_has_one_winner_and_release_needs_holder,
            ["schedules"]
        ),
        case!(schedules::schedule_runs_carry_owner, ["schedules"]),
        case!(learnings::entity_memory_isolated_per_user, ["learnings"]),
        case!(learnings::learning_identity_is_kept, ["learnings"]),
        case!(jobs::jobs_claimed_exactly_once, ["jobs"]),
        case!(jobs::stale_worker_is_fenced, ["jobs"]),
        case!(
            jobs::idempotency_key_deduplicates_concurrent_submissions,
            ["jobs"]
        ),
        case!(jobs::retry_then_fail_and_cleanup, ["jobs"]),
        case!(jobs::two_claimers_of_one_job_one_winner, ["jobs"]),
        case!(jobs::batch_claims_and_completions_exactly_once, ["jobs"]),
        case!(jobs::batch_completion_refuses_a_stale_job_alone, ["jobs"]),
        case!(jobs::released_claim_costs_no_attempt, ["jobs"]),
        case!(jobs::requeue_settle_and_queue_stats, ["jobs"]),
        case!(jobs::serialized_session_runs_one_ticket_at_a_time, ["jobs"]),
        case!(
            jobs::serialized_tickets_enqueued_at_once_take_distinct_places,
            ["jobs"]
        ),
        case!(jobs::continue_and_sweep_as_agno, ["jobs"]),
        case!(jobs::running_job_cancelled_from_anywhere, ["jobs"]),
        case!(jobs::stress_exactly_once_with_killed_workers, ["jobs"]),
        case!(
            users::erase_removes_one_user_and_only_that_user,
            ["sessions"]
        ),
        case!(
            surface::bulk_upserts_check_the_owner_per_row,
            ["sessions", "memories"]
        ),
        case!(surface::clear_memories_deletes_every_memory, ["memories"]),
        case!(surface::idle_session_changes_hands, ["sessions", "runs"]),
        case!(
            surface::learnings_per_owner_stats_and_deletes,
            ["learnings"]
        ),
        case!(surface::learnings_found_by_text, ["learnings"]),
        case!(
            surface::entity_memories_in_namespace_user_need_the_user,
            ["learnings"]
        ),
        case!(surface::latest_run_of_each_schedule, ["schedules"]),
        case!(surface::eval_run_owner_is_given_once, ["evals"]),
        case!(surface::schedule_runs_deleted_before_a_time, ["schedules"]),
        case!(
            surface::provenance_round_trips_and_targets_are_disabled,
            ["schedules"]
        ),
        case!(
            migrations::up_twice_is_idempotent,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(
            migrations::failure_aborts_before_stamp,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(
            migrations::unstamped_database_is_migrated,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(migrations::newer_database_is_refused, ["migrations"]),
        case!(
            migrations::malformed_blob_is_reported_and_others_copied,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(
            migrations::run_in_two_legacy_sessions_is_copied_once,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(
            migrations::cleanup_legacy_runs_refuses_unforced,
            ["migrations", "legacy_runs", "runs"]
        ),
        case!(
            migrations::learnings_rekey_migrates_and_refuses_down,
            ["migrations", "learnings"]
        ),
    ]
}

/// A unique id with a readable prefix.
/// A small deterministic generator, so a failing sequence can be replayed from its seed.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

pub(crate) fn uid(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// A session of `session_type` owned by `user`, with a name and token counters.
pub(crate) fn session(session_type: SessionType, user: Option<&str>) -> Session {
    let mut s = Session::new(uid("s"), session_type, uid("c"));
    s.user_id = user.map(str::to_owned);
    s.session_data = Some(json!({"session_name": "conformance", "session_state": {"k": [1, 2]}}));
    s
}

/// A run dict as agno's `RunOutput.to_dict()` would carry it.
pub(crate) fn run_dict(run_id: &str, status: &str) -> Value {
    json!({"run_id": run_id, "agent_id": "agent-1", "status": status, "content": format!("output of {run_id}"), "model": "gpt-4o", "model_provider": "OpenAI"})
}

/// A run row of `session` from [`run_dict`], with `run_index` left for the store to assign.
pub(crate) fn run_row(session: &Session, run_id: &str, status: &str) -> RunRecord {
    RunRecord {
        run_id: run_id.to_owned(),
        session_id: session.session_id.clone(),
        run_type: agno_storage_core::RunType::Agent,
        run_index: None,
        user_id: session.user_id.clone(),
        agent_id: Some("agent-1".into()),
        team_id: None,
        workflow_id: None,
        parent_run_id: None,
        status: Some(status.to_owned()),
        run_data: run_dict(run_id, status),
        created_at: agno_storage_core::now_epoch_seconds(),
        updated_at: None,
    }
}

/// The `run_id`s of run dicts.
pub(crate) fn run_ids(runs: &[RunJson]) -> Vec<String> {
    runs.iter().filter_map(RunJson::run_id).collect()
}

/// A finished run of `schedule_id` (its owner is the store's to set).
pub(crate) fn schedule_run(
    schedule_id: &str,
    triggered_at: Option<i64>,
    completed_at: Option<i64>,
    created_at: i64,
) -> ScheduleRun {
    ScheduleRun {
        id: uid("sr"),
        schedule_id: schedule_id.to_owned(),
        attempt: 1,
        triggered_at,
        completed_at,
        status: "success".into(),
        status_code: None,
        run_id: None,
        session_id: None,
        error: None,
        input: None,
        output: None,
        requirements: None,
        user_id: None,
        created_at,
    }
}
