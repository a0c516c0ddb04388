//! Run events within one process: the stream a deployment without Redis gets.
//!
//! [`LocalRunEvents`] keeps each run's events in memory (at most [`MAX_EVENTS`] per run,
//! the oldest dropped first) with agno's semantics: indices, the generation fence, tails
//! that end at a terminal status. Only tails in the same process see them: a client whose
//! reconnect lands on another replica reads the run's outcome from the durable store
//! instead, as agno's in-memory stream does. For tails from any replica, use the Redis
//! stream (`agno_storage_redis_events::Coordination`), which is agno's layout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agno_storage_core::run_events::{
    event_object, format_sse, EventTail, RunEvent, RunEvents, StreamStatus,
};
use agno_storage_core::{async_trait, Result};
use serde_json::Value;
use tokio::sync::Notify;

/// Events kept per run (agno's `max_events_per_run`).
pub const MAX_EVENTS: usize = 10_000;

/// How long a tail waits for a change before it looks again.
const TAIL_RECHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Run {
    status: Option<StreamStatus>,
    generation: Option<i64>,
    next_index: i64,
    events: Vec<RunEvent>,
    changed: Arc<Notify>,
}

impl Run {
    /// agno's fence: refused when the recorded generation is newer; a newer one is
    /// recorded.
    fn admit(&mut self, generation: Option<i64>) -> bool {
        match (generation, self.generation) {
            (None, _) => true,
            (Some(g), Some(recorded)) if recorded > g => false,
            (Some(g), _) => {
                self.generation = Some(g);
                true
            }
        }
    }
}

/// The in-process event stream; see the module docs. Clones share the runs.
#[derive(Clone, Default)]
pub struct LocalRunEvents {
    runs: Arc<Mutex<HashMap<String, Run>>>,
}

impl LocalRunEvents {
    /// An empty stream.
    pub fn new() -> Self {
        Self::default()
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, Run>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `change` to the run if the fence admits `generation`, waking its tails.
    fn fenced(&self, run_id: &str, generation: Option<i64>, change: impl FnOnce(&mut Run)) -> bool {
        let mut runs = self.runs();
        let run = runs.entry(run_id.to_owned()).or_default();
        if !run.admit(generation) {
            return false;
        }
        change(run);
        run.changed.notify_waiters();
        true
    }
}

#[async_trait]
impl RunEvents for LocalRunEvents {
    async fn begin_attempt(&self, run_id: &str, generation: i64) -> Result<()> {
        self.fenced(run_id, Some(generation), |_| {});
        Ok(())
    }

    async fn set_run_status(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool> {
        Ok(self.fenced(run_id, generation, |run| run.status = Some(status)))
    }

    async fn get_run_status(&self, run_id: &str) -> Result<Option<StreamStatus>> {
        Ok(self.runs().get(run_id).and_then(|r| r.status))
    }

    async fn add_event(
        &self,
        run_id: &str,
        event: &Value,
        generation: Option<i64>,
    ) -> Result<Option<i64>> {
        let event = event_object(event)?;
        let mut index = None;
        self.fenced(run_id, generation, |run| {
            let i = run.next_index;
            run.next_index += 1;
            run.events.push(RunEvent {
                index: i,
                sse: format_sse(run_id, event, i),
            });
            if run.events.len() > MAX_EVENTS {
                run.events.remove(0);
            }
            index = Some(i);
        });
        Ok(index)
    }

    async fn complete_run(
        &self,
        run_id: &str,
        status: StreamStatus,
        generation: Option<i64>,
    ) -> Result<bool> {
        let status = status.terminal();
        Ok(self.fenced(run_id, generation, |run| run.status = Some(status)))
    }

    async fn reset_run_events(&self, run_id: &str, generation: Option<i64>) -> Result<bool> {
        Ok(self.fenced(run_id, generation, |run| run.events.clear()))
    }

    async fn reopen_run(
        &self,
        run_id: &str,
        include_error: bool,
        floor: Option<i64>,
    ) -> Result<bool> {
        let mut runs = self.runs();
        let run = runs.entry(run_id.to_owned()).or_default();
        if run.status.is_some_and(|s| !s.reopenable(include_error)) {
            return Ok(false);
        }
        run.status = Some(StreamStatus::Pending);
        if let Some(floor) = floor {
            run.next_index = run.next_index.max(floor + 1);
        }
        run.changed.notify_waiters();
        Ok(true)
    }

    async fn tail(&self, run_id: &str, after: Option<i64>) -> Result<Box<dyn EventTail>> {
        Ok(Box::new(LocalTail {
            events: self.clone(),
            run_id: run_id.to_owned(),
            last: after.unwrap_or(-1),
        }))
    }

    async fn cleanup_run(&self, run_id: &str) -> Result<()> {
        if let Some(run) = self.runs().remove(run_id) {
            run.changed.notify_waiters();
        }
        Ok(())
    }
}

struct LocalTail {
    events: LocalRunEvents,
    run_id: String,
    last: i64,
}

#[async_trait]
impl EventTail for LocalTail {
    async fn next(&mut self) -> Option<Result<RunEvent>> {
        loop {
            let changed = {
                let runs = self.events.runs();
                let run = runs.get(&self.run_id)?;
                if let Some(event) = run.events.iter().find(|e| e.index > self.last) {
                    self.last = event.index;
                    return Some(Ok(event.clone()));
                }
                if run.status.is_some_and(StreamStatus::ends_tails) {
                    return None;
                }
                run.changed.clone()
            };
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // A change between the look above and `enable` is seen by the next look.
            let moved = {
                let runs = self.events.runs();
                runs.get(&self.run_id).is_none_or(|run| {
                    run.events.iter().any(|e| e.index > self.last)
                        || run.status.is_some_and(StreamStatus::ends_tails)
                })
            };
            if !moved {
                let _ = tokio::time::timeout(TAIL_RECHECK, notified).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_stale_attempt_is_fenced_out_and_a_live_tail_ends_with_the_run() {
        let events = LocalRunEvents::new();
        events.begin_attempt("r", 2).await.unwrap();
        let stale = json!({"event": "x"});
        assert_eq!(events.add_event("r", &stale, Some(1)).await.unwrap(), None);
        let refused = events.complete_run("r", StreamStatus::Error, Some(1));
        assert!(!refused.await.unwrap());
        let mut tail = events.tail("r", None).await.unwrap();
        let writer = events.clone();
        let live = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            writer
                .add_event("r", &json!({"event": "y"}), Some(2))
                .await
                .unwrap();
            writer
                .complete_run("r", StreamStatus::Running, Some(2))
                .await
                .unwrap()
        });
        let event = tail.next().await.unwrap().unwrap();
        assert_eq!(
            (event.index, event.data().unwrap()["event"].clone()),
            (0, json!("y"))
        );
        assert!(tail.next().await.is_none(), "ends once the run completed");
        assert!(live.await.unwrap());
        // A status that does not end tails is taken as completed, as agno does.
        let status = events.get_run_status("r").await.unwrap();
        assert_eq!(status, Some(StreamStatus::Completed));
        assert!(events.add_event("r", &json!([1]), None).await.is_err());
    }
}
