//! An in-process [`Branches`], for tests and single-process tools.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::branches::error::BranchError;
use crate::branches::outcome::{BranchRelease, Registration};
use crate::branches::port::Branches;
use crate::branches::sub_key::SubKey;
use crate::error::BoxError;
use crate::watch::ChangeWatch;

static NEXT_TABLE: AtomicU64 = AtomicU64::new(1);

/// A [`Branches`] backend whose records live in this process, on Tokio's clock.
///
/// It passes the conformance suite. Clones share the records, each standing in for another
/// process's client.
#[derive(Clone)]
pub struct InMemoryBranches {
    shared: Arc<Shared>,
}

struct Shared {
    namespace: String,
    records: Mutex<HashMap<SubKey, Record>>,
}

struct Record {
    sealed: bool,
    /// Branch id → released.
    branches: BTreeMap<String, bool>,
    expires_at: Instant,
    /// The watch's wake-up: `notify_one` keeps a permit for a watch that is busy reading.
    released: Arc<Notify>,
}

impl Record {
    fn pending(&self) -> Vec<String> {
        self.branches
            .iter()
            .filter(|(_, released)| !**released)
            .map(|(branch, _)| branch.clone())
            .collect()
    }

    fn lengthen(&mut self, ttl: Duration) {
        self.expires_at = self.expires_at.max(Instant::now() + ttl);
    }
}

impl fmt::Debug for InMemoryBranches {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryBranches")
            .field("namespace", &self.shared.namespace)
            .field("records", &self.record_count())
            .finish()
    }
}

impl Default for InMemoryBranches {
    fn default() -> Self {
        InMemoryBranches::new()
    }
}

impl InMemoryBranches {
    /// An empty table of its own.
    pub fn new() -> Self {
        InMemoryBranches {
            shared: Arc::new(Shared {
                namespace: format!(
                    "in-memory-branches:{}",
                    NEXT_TABLE.fetch_add(1, Ordering::Relaxed)
                ),
                records: Mutex::default(),
            }),
        }
    }

    /// The number of live invocation records: 0 once every master has finished.
    pub fn record_count(&self) -> usize {
        self.table().len()
    }

    /// The remaining TTL of `sub_key`'s record, if it exists.
    pub fn ttl(&self, sub_key: &SubKey) -> Option<Duration> {
        let now = Instant::now();
        self.table()
            .get(sub_key)
            .map(|r| r.expires_at.saturating_duration_since(now))
    }

    /// Every live record with its remaining TTL, sorted by sub-key.
    pub fn records(&self) -> Vec<(SubKey, Duration)> {
        let now = Instant::now();
        let mut records: Vec<_> = self
            .table()
            .iter()
            .map(|(sub_key, r)| (sub_key.clone(), r.expires_at.saturating_duration_since(now)))
            .collect();
        records.sort();
        records
    }

    /// The records with the expired ones removed.
    fn table(&self) -> MutexGuard<'_, HashMap<SubKey, Record>> {
        // Plain maps: a panic elsewhere cannot leave one half-written.
        let mut records = self
            .shared
            .records
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        records.retain(|_, record| record.expires_at > now);
        records
    }
}

#[async_trait]
impl Branches for InMemoryBranches {
    fn namespace(&self) -> &str {
        &self.shared.namespace
    }

    async fn open(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        self.table()
            .entry(sub_key.clone())
            .or_insert_with(|| Record {
                sealed: false,
                branches: BTreeMap::new(),
                expires_at: Instant::now(),
                released: Arc::default(),
            })
            .lengthen(ttl);
        Ok(())
    }

    async fn register(
        &self,
        sub_key: &SubKey,
        branch: &str,
        ttl: Duration,
    ) -> Result<Registration, BranchError> {
        let mut records = self.table();
        let Some(record) = records.get_mut(sub_key) else {
            return Ok(Registration::Unknown);
        };
        let registration = match record.branches.get(branch) {
            Some(false) => Registration::AlreadyRegistered,
            Some(true) => Registration::AlreadyReleased,
            None if record.sealed => return Ok(Registration::Sealed),
            None => {
                record.branches.insert(branch.to_owned(), false);
                Registration::Registered
            }
        };
        record.lengthen(ttl);
        Ok(registration)
    }

    async fn refresh(&self, sub_key: &SubKey, ttl: Duration) -> Result<(), BranchError> {
        if let Some(record) = self.table().get_mut(sub_key) {
            record.lengthen(ttl);
        }
        Ok(())
    }

    async fn seal(
        &self,
        sub_key: &SubKey,
        ttl: Duration,
    ) -> Result<Option<Vec<String>>, BranchError> {
        Ok(self.table().get_mut(sub_key).map(|record| {
            record.sealed = true;
            record.lengthen(ttl);
            record.pending()
        }))
    }

    async fn pending(&self, sub_key: &SubKey) -> Result<Option<Vec<String>>, BranchError> {
        Ok(self.table().get(sub_key).map(Record::pending))
    }

    async fn watch(&self, sub_key: &SubKey) -> Result<Box<dyn ChangeWatch>, BranchError> {
        // A watch on a record that does not exist is never woken; the read after it says why.
        let released = self
            .table()
            .get(sub_key)
            .map(|r| Arc::clone(&r.released))
            .unwrap_or_default();
        Ok(Box::new(MemoryWatch { released }))
    }

    async fn release(&self, sub_key: &SubKey, branch: &str) -> Result<BranchRelease, BranchError> {
        let mut records = self.table();
        let Some(record) = records.get_mut(sub_key) else {
            return Ok(BranchRelease::Unknown);
        };
        Ok(match record.branches.insert(branch.to_owned(), true) {
            Some(false) => {
                record.released.notify_one();
                BranchRelease::Released
            }
            Some(true) => BranchRelease::AlreadyReleased,
            None => BranchRelease::NotRegistered,
        })
    }

    async fn close(&self, sub_key: &SubKey) -> Result<(), BranchError> {
        self.table().remove(sub_key);
        Ok(())
    }
}

#[derive(Debug)]
struct MemoryWatch {
    released: Arc<Notify>,
}

#[async_trait]
impl ChangeWatch for MemoryWatch {
    async fn changed(&mut self) -> Result<(), BoxError> {
        self.released.notified().await;
        Ok(())
    }
}
