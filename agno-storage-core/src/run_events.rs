//! Live events of background runs: what a worker's handler publishes while a job runs and
//! what a tail reads, from the start or from the last index it saw (agno 3.1.10's
//! `BaseEventStream`, `os/event_streams/base.py`).
//!
//! The contract, as agno's: an event's index is strictly increasing per run but not
//! gapless (a writer dying between taking an index and appending leaves a gap); a tail
//! yields every event after the index it was given, then live ones, and ends once the run
//! reaches a terminal status (`completed`, `error`, `cancelled`, `paused`), also when the
//! writer died without saying so. Every write may carry the writer's *generation* (the
//! job's attempt): once a newer attempt began, an older one's writes are refused, so a
//! stalled worker cannot interleave its output into the live attempt's stream.
//!
//! An event stream is a transport, not the truth: terminal state and output live in the
//! durable store.

use serde_json::{Map, Value};

use crate::{async_trait, Error, ErrorKind, Result};

/// A run's status as an event stream holds it (agno's `RunStatus` values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStatus {
    /// Accepted, not started.
    Pending,
    /// A writer is producing events.
    Running,
    /// Finished.
    Completed,
    /// Failed.
    Error,
    /// Cancelled.
    Cancelled,
    /// Waiting for input; a continuation reopens the stream.
    Paused,
}

impl StreamStatus {
    /// agno's value (`RUNNING`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            StreamStatus::Pending => "PENDING",
            StreamStatus::Running => "RUNNING",
            StreamStatus::Completed => "COMPLETED",
            StreamStatus::Error => "ERROR",
            StreamStatus::Cancelled => "CANCELLED",
            StreamStatus::Paused => "PAUSED",
        }
    }

    /// The status agno's value names; `None` for an unknown one.
    pub fn parse(value: &str) -> Option<Self> {
        [
            StreamStatus::Pending,
            StreamStatus::Running,
            StreamStatus::Completed,
            StreamStatus::Error,
            StreamStatus::Cancelled,
            StreamStatus::Paused,
        ]
        .into_iter()
        .find(|s| s.as_str() == value)
    }

    /// The status [`RunEvents::complete_run`] records for it: itself when it ends tails,
    /// else `Completed` (agno: the call marks terminal).
    pub fn terminal(self) -> Self {
        if self.ends_tails() {
            self
        } else {
            StreamStatus::Completed
        }
    }

    /// Whether a tail ends at it (paused included: the stream is closed until reopened).
    pub fn ends_tails(self) -> bool {
        !matches!(self, StreamStatus::Pending | StreamStatus::Running)
    }

    /// Whether [`RunEvents::reopen_run`] reopens a run in this status (`Error` only for
    /// the redrive of a failed leg, `include_error`).
    pub fn reopenable(self, include_error: bool) -> bool {
        match self {
            StreamStatus::Paused | StreamStatus::Pending => true,
            StreamStatus::Error => include_error,
            _ => false,
        }
    }
}

/// One event as a tail yields it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEvent {
    /// Its index in the run (strictly increasing, not gapless).
    pub index: i64,
    /// agno's server-sent-event text: `event: TYPE\ndata: JSON\n\n`, the JSON carrying
    /// `event_index` and `run_id`.
    pub sse: String,
}

impl RunEvent {
    /// The event's JSON (the `data:` line).
    ///
    /// # Errors
    ///
    /// `Serialization` when the text is not agno's SSE form.
    pub fn data(&self) -> Result<Value> {
        let data = self
            .sse
            .lines()
            .find_map(|l| l.strip_prefix("data: "))
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Serialization,
                    format!("event {} has no data line: {:?}", self.index, self.sse),
                )
            })?;
        serde_json::from_str(data).map_err(|e| Error::serialization("a run event", e))
    }
}

/// agno's `format_sse_event_with_index`: `event: TYPE\ndata: JSON\n\n`, the type from the
/// event's `event` field (`message` when absent), the JSON compact with `event_index` set
/// and `run_id` added when absent.
pub fn format_sse(run_id: &str, event: &Map<String, Value>, index: i64) -> String {
    let kind = event
        .get("event")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())
        .unwrap_or("message");
    let mut data = event.clone();
    data.insert("event_index".into(), index.into());
    if !data.contains_key("run_id") {
        data.insert("run_id".into(), run_id.into());
    }
    format!("event: {kind}\ndata: {}\n\n", Value::Object(data))
}

/// The events of one run, in order: a buffered prefix, then live ones.
#[async_trait]
pub trait EventTail: Send {
    /// The next event; `None` once the run reached a terminal status (or the stream
    /// forgot it) and every event before that was yielded.
    async fn next(&mut self) -> Option<Result<RunEvent>>;
}

/// Where runs' events go and are tailed from (agno's `BaseEventStream`).
#[async_trait]
pub trait RunEvents: Send + Sync {
    /// Records attempt `generation` as the writer of `run_id`'s stream. Monotonic: an
    /// older attempt's late call changes nothing.
    async fn begin_attempt(&self, run_id: &str, generation: i64) -> Result<()>;

    /// Sets the run's status; false when `generation` is older than the stream's writer
    /// (refused). `None` writes unfenced.
    async fn set_run_status(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool>;

    /// The run's status; `None` for a run the stream does not know (or forgot).
    async fn get_run_status(&self, run_id: &str) -> Result<Option<StreamStatus>>;

    /// Appends `event` (a JSON object; its `event` field is the SSE type) and returns its
    /// index, or `None` when the generation fence refused it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` when `event` is not an object.
    async fn add_event(
        &self,
        run_id: &str,
        event: &Value,
        generation: Option<i64>,
    ) -> Result<Option<i64>>;

    /// Marks the run terminal in `status` and ends every tail once it has yielded what is
    /// buffered; false when refused by the fence. A status that does not end tails is
    /// taken as `Completed`, as agno does.
    async fn complete_run(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool>;

    /// Drops the run's buffered events (a retry supersedes the attempt before it) and
    /// keeps its index counter, so indices stay increasing across attempts; false when
    /// refused by the fence.
    async fn reset_run_events(&self, run_id: &str, generation: Option<i64>) -> Result<bool>;

    /// Reopens a paused run for a continuation leg (agno's `reopen_run`), atomically: when
    /// its status is `Paused` or `Pending` (or `Error` too with `include_error`, the
    /// redrive of a failed leg by the worker holding it) or the stream forgot it, the
    /// status becomes `Pending` and the pause's end of stream is voided, so a tail attached
    /// before the leg's first event stays open; the index counter is raised to at least
    /// `floor + 1` when given (never lowered). False, changing nothing, when the status is
    /// newer (`Running` or another terminal one). The application calls it after
    /// `continue_job` queues a paused job, as agno's router does; the worker calls it
    /// again when it starts a continuation leg.
    async fn reopen_run(
        &self,
        run_id: &str,
        include_error: bool,
        floor: Option<i64>,
    ) -> Result<bool>;

    /// The events after index `after` (all when `None`), then live ones until the run
    /// ends. Events arriving while the buffered ones are read are neither missed nor
    /// repeated.
    async fn tail(&self, run_id: &str, after: Option<i64>) -> Result<Box<dyn EventTail>>;

    /// Forgets the run (after its retention).
    async fn cleanup_run(&self, run_id: &str) -> Result<()>;

    /// Keeps the streams of `run_ids` (runs this process is producing) alive while they
    /// are quiet: where a stream expires (Redis), a run that publishes nothing for longer
    /// than the expiry would otherwise lose its events and status mid-run, and its tails
    /// would take it for a dead one. The worker calls it at every heartbeat for the jobs
    /// it holds. Does nothing by default.
    async fn keep_alive(&self, run_ids: &[String]) -> Result<()> {
        let _ = run_ids;
        Ok(())
    }
}

/// Cancellation requests shared by every replica (agno's `BaseRunCancellationManager`, on
/// Redis its `RedisRunCancellationManager`): a worker asks often for the runs it holds and
/// stops those flagged, at once rather than at its next heartbeat.
#[async_trait]
pub trait RunCancellations: Send + Sync {
    /// Flags `run_id` as cancelled; false when the flag could not be set.
    async fn request_cancel(&self, run_id: &str) -> Result<bool>;

    /// Which of `run_ids` are flagged as cancelled.
    async fn cancelled(&self, run_ids: &[String]) -> Result<Vec<String>>;
}

/// `event` as the object [`RunEvents::add_event`] takes, or the `InvalidInput` naming it.
pub fn event_object(event: &Value) -> Result<&Map<String, Value>> {
    event.as_object().ok_or_else(|| {
        Error::invalid_input(format!(
            "a run event must be a JSON object with an `event` type field, got {event}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sse_is_agnos_format() {
        let event = json!({"event": "RunContent", "content": "héllo / \"x\"", "run_id": "r0"});
        let sse = format_sse("r1", event.as_object().unwrap(), 7);
        // agno: json.dumps(separators=(",", ":"), ensure_ascii=False), index appended.
        assert_eq!(
            sse,
            "event: RunContent\ndata: {\"event\":\"RunContent\",\"content\":\"héllo / \\\"x\\\"\",\"run_id\":\"r0\",\"event_index\":7}\n\n"
        );
        let parsed = RunEvent { index: 7, sse }.data().unwrap();
        assert_eq!(parsed["event_index"], 7);
        let bare = format_sse("r1", json!({"n": 1}).as_object().unwrap(), 0);
        assert_eq!(
            bare,
            "event: message\ndata: {\"n\":1,\"event_index\":0,\"run_id\":\"r1\"}\n\n"
        );
    }

    #[test]
    fn statuses_round_trip_agnos_values() {
        for s in [
            "PENDING",
            "RUNNING",
            "COMPLETED",
            "ERROR",
            "CANCELLED",
            "PAUSED",
        ] {
            assert_eq!(StreamStatus::parse(s).map(StreamStatus::as_str), Some(s));
        }
        assert_eq!(StreamStatus::parse("running"), None);
        assert!(StreamStatus::Paused.ends_tails() && !StreamStatus::Running.ends_tails());
    }
}
