//! Migration locks held as a heartbeat lease, for backends whose lock is a record in the
//! store (a document, an item, a key) rather than something that dies with its holder.
//!
//! The backend takes the lock itself (a create-if-absent write, or a compare-and-set over an
//! expired lease) with a fresh holder token, then hands it to [`hold_lease`]. From then on a
//! background task renews the lease every third of it ([`LeaseRecord::renew`], guarded by
//! the token); a renewal that finds the lock gone or carrying another token means another
//! migrator took it over after the lease passed (or it was deleted): the task stops without
//! writing the lock back, and [`HeldLock::release`] reports the loss as `Conflict`, because
//! the migration may have overlapped with another. A holder that dies stops renewing, so the
//! next migrator takes the lock over one lease after the last heartbeat, not after a fixed
//! stale time of many minutes.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::migration::{HeldLock, MigrationLock};
use crate::{Error, ErrorKind, Result};

/// The lease unless a backend's options set another: a migration whose process died is
/// taken over this long after its last heartbeat.
pub const DEFAULT_MIGRATION_LOCK_LEASE: Duration = Duration::from_secs(30);

/// The shortest lease [`check_lease`] accepts: shorter ones would expire under a live holder
/// whose heartbeat is merely slow.
pub const MIN_MIGRATION_LOCK_LEASE: Duration = Duration::from_secs(1);

/// How long a migrator waits for the lock before giving up: a minute, or two leases when
/// that is longer (a dead holder's lease always passes within the wait).
pub fn lock_wait(lease: Duration) -> Duration {
    Duration::from_secs(60).max(lease.saturating_mul(2))
}

/// `InvalidInput` naming the minimum when `lease` is shorter than
/// [`MIN_MIGRATION_LOCK_LEASE`].
pub fn check_lease(lease: Duration) -> Result<Duration> {
    if lease < MIN_MIGRATION_LOCK_LEASE {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!(
                "the migration lock lease must be at least {:?} (got {lease:?}): a shorter lease expires under a \
                 live migration whose heartbeat is slow",
                MIN_MIGRATION_LOCK_LEASE
            ),
        ));
    }
    Ok(lease)
}

/// Now, in epoch milliseconds (the unit of a lease's expiry in lock records).
pub fn now_epoch_millis() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `d` in whole milliseconds, saturating.
pub fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Whether a lock record may be taken over at `now_ms`: its lease (`lease_until_ms`) has
/// passed; or, for a record without a lease (written by a version without heartbeats, which
/// never renews), its `locked_at_seconds` is `legacy_stale_seconds` old, as that version
/// broke stale locks; or it has neither field (no version writes such a record).
pub fn lease_expired(
    lease_until_ms: Option<i64>,
    locked_at_seconds: Option<i64>,
    now_ms: i64,
    legacy_stale_seconds: i64,
) -> bool {
    match lease_until_ms {
        Some(until) => until <= now_ms,
        None => locked_at_seconds.is_none_or(|at| at < now_ms / 1000 - legacy_stale_seconds),
    }
}

/// A backend's lock record, as the heartbeat and the release see it.
#[async_trait]
pub trait LeaseRecord: Send + Sync + 'static {
    /// Extends `holder`'s lease to `lease` from now, only if the lock still carries
    /// `holder`'s token. `Ok(false)`: the lock is gone or carries another token (never write
    /// it back then). An error is a failed round trip; the heartbeat retries sooner.
    async fn renew(&self, holder: &str, lease: Duration) -> Result<bool>;

    /// Deletes the lock if it still carries `holder`'s token; `Ok(false)` when it is gone
    /// or carries another token.
    async fn remove(&self, holder: &str) -> Result<bool>;

    /// Where the lock lives, for messages (e.g. `key agno:agno_migration_lock`).
    fn location(&self) -> String;

    /// The backend's name, carried by errors.
    fn backend(&self) -> &'static str;
}

/// Why a holder lost its lock, set by the heartbeat task.
type Lost = Arc<Mutex<Option<String>>>;

fn loss(lost: &Lost) -> Option<String> {
    lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The guard of a lock `holder` has just taken in `record`: renews the lease every
/// `lease / 3` (every `lease / 10` after a failed round trip) until released or dropped.
/// Dropping it unreleased stops the heartbeat and deletes the lock in a spawned task (best
/// effort; otherwise the lease passes). Needs a tokio runtime (the heartbeat is a task).
pub fn hold_lease<R: LeaseRecord>(record: R, holder: String, lease: Duration) -> MigrationLock {
    let record = Arc::new(record);
    let lost = Lost::default();
    let heartbeat = tokio::spawn(heartbeat(
        record.clone(),
        holder.clone(),
        lease,
        lost.clone(),
    ));
    Box::new(LeaseGuard {
        record,
        holder,
        heartbeat,
        lost,
    })
}

async fn heartbeat<R: LeaseRecord>(record: Arc<R>, holder: String, lease: Duration, lost: Lost) {
    let mut pause = lease / 3;
    loop {
        tokio::time::sleep(pause).await;
        match record.renew(&holder, lease).await {
            Ok(true) => pause = lease / 3,
            Ok(false) => {
                let mut slot = lost.lock().unwrap_or_else(|p| p.into_inner());
                slot.get_or_insert_with(|| {
                    "a heartbeat found the lock gone or held by another migrator (its lease had passed)"
                        .to_owned()
                });
                return;
            }
            // A failed round trip: retry soon. If the lease passes meanwhile and another
            // migrator takes the lock over, the next renewal finds its token.
            Err(_) => pause = lease / 10,
        }
    }
}

struct LeaseGuard<R: LeaseRecord> {
    record: Arc<R>,
    /// Emptied once released.
    holder: String,
    heartbeat: tokio::task::JoinHandle<()>,
    lost: Lost,
}

impl<R: LeaseRecord> LeaseGuard<R> {
    fn lost_error(&self, why: &str) -> Error {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "the migration lock ({}) was lost while the migration ran: {why}; another migration may have run \
                 at the same time. The steps are idempotent: run the migration again to make sure every table is \
                 migrated",
                self.record.location()
            ),
        )
        .with_backend(self.record.backend())
    }
}

#[async_trait]
impl<R: LeaseRecord> HeldLock for LeaseGuard<R> {
    /// Stops the heartbeat and deletes the lock if this holder still holds it. `Conflict`
    /// when the lock was lost while held (taken over after its lease passed, or deleted).
    async fn release(mut self: Box<Self>) -> Result<()> {
        self.heartbeat.abort();
        let holder = std::mem::take(&mut self.holder);
        if let Some(why) = loss(&self.lost) {
            return Err(self.lost_error(&why));
        }
        if !self.record.remove(&holder).await? {
            return Err(self.lost_error(
                "at release it was gone or held by another migrator (its lease had passed)",
            ));
        }
        Ok(())
    }
}

impl<R: LeaseRecord> Drop for LeaseGuard<R> {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if self.holder.is_empty() {
            return; // released
        }
        let (record, holder) = (self.record.clone(), std::mem::take(&mut self.holder));
        // Without a runtime the lease passes on its own.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = record.remove(&holder).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock record in memory: the holder's token, and how many renewals it saw.
    #[derive(Default)]
    struct Memory {
        holder: Mutex<Option<String>>,
        renewals: Mutex<u32>,
    }

    #[async_trait]
    impl LeaseRecord for Arc<Memory> {
        async fn renew(&self, holder: &str, _lease: Duration) -> Result<bool> {
            let held = self.holder.lock().unwrap().as_deref() == Some(holder);
            if held {
                *self.renewals.lock().unwrap() += 1;
            }
            Ok(held)
        }
        async fn remove(&self, holder: &str) -> Result<bool> {
            let mut slot = self.holder.lock().unwrap();
            if slot.as_deref() == Some(holder) {
                *slot = None;
                return Ok(true);
            }
            Ok(false)
        }
        fn location(&self) -> String {
            "memory".into()
        }
        fn backend(&self) -> &'static str {
            "memory"
        }
    }

    fn taken(record: &Arc<Memory>, holder: &str) {
        *record.holder.lock().unwrap() = Some(holder.to_owned());
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_lease_is_renewed_and_released() {
        let record = Arc::new(Memory::default());
        taken(&record, "a");
        let lock = hold_lease(record.clone(), "a".into(), Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(3_500)).await;
        assert!(
            *record.renewals.lock().unwrap() >= 3,
            "renewed every lease/3"
        );
        lock.release().await.expect("released");
        assert!(
            record.holder.lock().unwrap().is_none(),
            "the record is gone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_is_not_written_back_and_release_reports_it() {
        let record = Arc::new(Memory::default());
        taken(&record, "a");
        let lock = hold_lease(record.clone(), "a".into(), Duration::from_secs(3));
        taken(&record, "b"); // taken over after the lease passed
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(record.holder.lock().unwrap().as_deref(), Some("b"));
        let err = lock.release().await.expect_err("the loss is reported");
        assert_eq!(err.kind(), ErrorKind::Conflict);
        assert!(err.message().contains("lost"), "{err}");
        assert_eq!(
            record.holder.lock().unwrap().as_deref(),
            Some("b"),
            "the other holder keeps the lock"
        );
    }

    #[test]
    fn expiry_follows_the_lease_or_the_legacy_stale_time() {
        let now = 1_000_000_000;
        assert!(lease_expired(Some(now), None, now, 900));
        assert!(!lease_expired(Some(now + 1), Some(0), now, 900));
        assert!(!lease_expired(None, Some(now / 1000 - 900), now, 900));
        assert!(lease_expired(None, Some(now / 1000 - 901), now, 900));
        assert!(lease_expired(None, None, now, 900));
    }

    #[test]
    fn short_leases_are_refused() {
        let err = check_lease(Duration::from_millis(500)).expect_err("refused");
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert_eq!(
            check_lease(Duration::from_secs(2)).ok(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(lock_wait(Duration::from_secs(2)), Duration::from_secs(60));
        assert_eq!(lock_wait(Duration::from_secs(90)), Duration::from_secs(180));
    }
}
