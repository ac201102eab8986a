//! [`DisabledIdempotencyStore`], under which every call runs its action.

use std::sync::Once;
use std::time::Duration;

use async_trait::async_trait;

use crate::idempotency::error::IdempotencyError;
use crate::idempotency::port::{Claim, IdempotencyStore};
use crate::watch::{ChangeWatch, Unchanging};

/// A store that is switched off: every claim is granted and nothing is stored, so every call
/// runs its action.
///
/// One `WARN` per process says so on first use. An unavailable backend is another case: there
/// [`Idempotency`](crate::idempotency::Idempotency) fails closed.
#[derive(Debug, Default)]
pub struct DisabledIdempotencyStore {
    /// Where it was switched off, for the warning.
    detail: String,
}

impl DisabledIdempotencyStore {
    /// A store that deduplicates nothing; `detail` says where it was switched off.
    pub fn new(detail: impl Into<String>) -> Self {
        DisabledIdempotencyStore {
            detail: detail.into(),
        }
    }
}

static WARNED: Once = Once::new();

#[async_trait]
impl IdempotencyStore for DisabledIdempotencyStore {
    async fn claim(
        &self,
        key: &str,
        _owner: &str,
        _fingerprint: &str,
        _ttl: Duration,
        _waited_on: Option<&str>,
    ) -> Result<Claim, IdempotencyError> {
        WARNED.call_once(|| {
            tracing::warn!(%key, detail = %self.detail, "idempotent execution is disabled: every call runs its action (no deduplication)");
        });
        Ok(Claim::Owner)
    }

    async fn renew(&self, _: &str, _: &str, _: Duration) -> Result<bool, IdempotencyError> {
        Ok(true)
    }

    async fn complete(
        &self,
        _: &str,
        _: &str,
        _: &[u8],
        _: Duration,
    ) -> Result<bool, IdempotencyError> {
        Ok(true)
    }

    async fn abandon(&self, _: &str, _: &str) -> Result<bool, IdempotencyError> {
        Ok(true)
    }

    async fn fail(&self, _: &str, _: &str, _: Duration) -> Result<bool, IdempotencyError> {
        Ok(true)
    }

    async fn forget(&self, _: &str) -> Result<bool, IdempotencyError> {
        Ok(false)
    }

    async fn watch(&self, _: &str) -> Result<Box<dyn ChangeWatch>, IdempotencyError> {
        Ok(Box::new(Unchanging))
    }

    fn new_owner(&self) -> String {
        "disabled".to_owned()
    }
}
