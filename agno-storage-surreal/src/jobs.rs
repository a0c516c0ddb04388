//! Claiming a job, SurrealDB's way (the rest of the job queue is `agno-storage-doc`'s): the
//! candidates come a page at a time from the `status` index instead of one read of every
//! queued and running job.

use agno_storage_core::{now_epoch_seconds, Job, JobStatus, Result};
use agno_storage_doc::{decode_or_fail_job, ClaimPass, DocBackend, Table};
use surrealdb::types::Value as SValue;

use crate::doc::{backoff, Commit, CAS_ATTEMPTS};
use crate::SurrealDb;

impl SurrealDb {
    /// [`DocBackend::claim_next_job`]: candidates come oldest first, a page at a time, from
    /// the `status` index.
    pub(crate) async fn claim_paged(
        &self,
        worker_id: &str,
        lock_grace_seconds: i64,
        deployment_id: Option<&str>,
    ) -> Result<Option<Job>> {
        // Candidates come oldest first, a page at a time, from the `status` index; each is
        // checked with `Job::is_claimable` and taken by a compare-and-set. Workers start at a
        // random one of the first few so that they do not all race for the oldest.
        const PAGE: usize = 64;
        let statuses = SValue::Array(
            vec![
                SValue::String(JobStatus::Queued.as_str().to_owned()),
                SValue::String(JobStatus::Running.as_str().to_owned()),
            ]
            .into(),
        );
        for round in 0..CAS_ATTEMPTS {
            let now = now_epoch_seconds();
            let mut lost_race = false;
            let mut start = 0;
            loop {
                let page = self
                    .select(
                        self.collection(Table::Jobs),
                        &format!(
                            "WHERE status IN $statuses ORDER BY created_at, id LIMIT {PAGE} START {start}"
                        ),
                        vec![("statuses".into(), statuses.clone())],
                    )
                    .await?;
                let full = page.len() == PAGE;
                let mut candidates = Vec::new();
                for d in page {
                    let Some(j) = decode_or_fail_job(self, &d, now).await? else {
                        continue;
                    };
                    if j.is_claimable(now, lock_grace_seconds, deployment_id) {
                        candidates.push((d, j));
                    }
                }
                let spread = candidates.len().min(8);
                if spread > 1 {
                    let offset = usize::from(uuid::Uuid::new_v4().as_bytes()[0]) % spread;
                    candidates[..spread].rotate_left(offset);
                }
                let mut pass = ClaimPass::default();
                for (stored, mut job) in candidates {
                    let Some(writes) = pass.claim(self, &stored, &mut job, worker_id, now).await?
                    else {
                        continue;
                    };
                    match self.commit("claim job", writes).await? {
                        Commit::Done => return Ok(Some(job)),
                        Commit::Conflict => lost_race = true,
                    }
                }
                if !full {
                    break;
                }
                start += PAGE;
            }
            if !lost_race {
                return Ok(None);
            }
            backoff(round).await;
        }
        Err(self.contended("claim job"))
    }
}
