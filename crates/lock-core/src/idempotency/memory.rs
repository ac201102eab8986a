//! An in-process [`IdempotencyStore`], for tests and single-process tools.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::BoxError;
use crate::idempotency::error::IdempotencyError;
use crate::idempotency::port::{Claim, IdempotencyStore};
use crate::owner::OwnerTokens;
use crate::watch::ChangeWatch;

/// An [`IdempotencyStore`] whose records live in this process, on Tokio's clock.
///
/// It passes the conformance suite. Records are not shared with other processes.
#[derive(Debug)]
pub struct InMemoryIdempotencyStore {
    records: Mutex<HashMap<String, Record>>,
    /// Bumped by every terminal write; every watch sees every bump (a watch wakes for any key,
    /// which is allowed: spurious wake-ups only cost a look).
    changes: watch::Sender<u64>,
    owners: OwnerTokens,
}

#[derive(Debug)]
struct Record {
    owner: String,
    fingerprint: String,
    /// `Some` once completed.
    result: Option<Vec<u8>>,
    /// Marked failed by its owner.
    failed: bool,
    expires_at: Instant,
}

impl InMemoryIdempotencyStore {
    /// An empty store.
    pub fn new() -> Self {
        InMemoryIdempotencyStore {
            records: Mutex::default(),
            changes: watch::Sender::new(0),
            owners: OwnerTokens::new("in-memory").expect("valid instance id"),
        }
    }

    /// Runs `f` on the live record of `key` (an expired one is removed first).
    fn with_record<R>(&self, key: &str, f: impl FnOnce(&mut Option<Record>) -> R) -> R {
        let mut records = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        records.retain(|_, r| r.expires_at > now);
        let mut entry = records.remove(key);
        let result = f(&mut entry);
        if let Some(record) = entry {
            records.insert(key.to_owned(), record);
        }
        result
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }
}

impl Default for InMemoryIdempotencyStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl IdempotencyStore for InMemoryIdempotencyStore {
    async fn claim(
        &self,
        key: &str,
        owner: &str,
        fingerprint: &str,
        ttl: Duration,
        waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError> {
        Ok(self.with_record(key, |record| match record {
            Some(r) if r.failed && waited_on == Some(r.owner.as_str()) => Claim::Failed {
                holder: r.owner.clone(),
            },
            None | Some(Record { failed: true, .. }) => {
                *record = Some(Record {
                    owner: owner.to_owned(),
                    fingerprint: fingerprint.to_owned(),
                    result: None,
                    failed: false,
                    expires_at: Instant::now() + ttl,
                });
                Claim::Owner
            }
            Some(r) => match &r.result {
                Some(result) => Claim::Completed {
                    result: result.clone(),
                    fingerprint: r.fingerprint.clone(),
                },
                None if r.owner == owner => Claim::Owner,
                None => Claim::InProgress {
                    holder: r.owner.clone(),
                    fingerprint: r.fingerprint.clone(),
                    ttl: Some(r.expires_at - Instant::now()),
                },
            },
        }))
    }

    async fn renew(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        Ok(self.with_record(key, |record| match record {
            Some(r) if r.owner == owner && r.result.is_none() && !r.failed => {
                r.expires_at = Instant::now() + ttl;
                true
            }
            _ => false,
        }))
    }

    async fn complete(
        &self,
        key: &str,
        owner: &str,
        result: &[u8],
        ttl: Duration,
    ) -> Result<bool, IdempotencyError> {
        let done = self.with_record(key, |record| match record {
            Some(r) if r.failed => false,
            Some(r) if r.owner == owner && r.result.is_none() => {
                r.result = Some(result.to_vec());
                r.expires_at = Instant::now() + ttl;
                true
            }
            // A repeated completion by the owner.
            Some(r) => r.owner == owner,
            None => false,
        });
        self.changed();
        Ok(done)
    }

    async fn abandon(&self, key: &str, owner: &str) -> Result<bool, IdempotencyError> {
        let done = self.with_record(key, |record| match record {
            Some(r) if r.owner == owner && r.result.is_none() && !r.failed => {
                *record = None;
                true
            }
            _ => false,
        });
        self.changed();
        Ok(done)
    }

    async fn fail(&self, key: &str, owner: &str, ttl: Duration) -> Result<bool, IdempotencyError> {
        let done = self.with_record(key, |record| match record {
            Some(r) if r.owner == owner && r.result.is_none() => {
                if !r.failed {
                    r.failed = true;
                    r.expires_at = Instant::now() + ttl;
                }
                true
            }
            _ => false,
        });
        self.changed();
        Ok(done)
    }

    async fn forget(&self, key: &str) -> Result<bool, IdempotencyError> {
        let done = self.with_record(key, |record| match record {
            Some(r) if r.result.is_some() => {
                *record = None;
                true
            }
            _ => false,
        });
        self.changed();
        Ok(done)
    }

    async fn watch(&self, _key: &str) -> Result<Box<dyn ChangeWatch>, IdempotencyError> {
        let mut receiver = self.changes.subscribe();
        receiver.mark_unchanged();
        Ok(Box::new(MemoryWatch(receiver)))
    }

    fn new_owner(&self) -> String {
        self.owners.next_token()
    }
}

#[derive(Debug)]
struct MemoryWatch(watch::Receiver<u64>);

#[async_trait]
impl ChangeWatch for MemoryWatch {
    async fn changed(&mut self) -> Result<(), BoxError> {
        if self.0.changed().await.is_err() {
            // The store is gone: nothing will change any more.
            std::future::pending::<()>().await;
        }
        Ok(())
    }
}
