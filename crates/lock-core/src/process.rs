//! The owner tokens this process issued, so that an error can say a contended key is held by
//! this process rather than by another pod.

use std::collections::BTreeSet;
use std::sync::Mutex;

/// The token prefixes (`<instance-id>/<client>/`) of the [`OwnerTokens`](crate::OwnerTokens) alive in this process.
/// Process-wide rather than per client, so that a holder reached through another client of the
/// same process is recognised too.
static LIVE_SOURCES: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

fn live_sources() -> std::sync::MutexGuard<'static, BTreeSet<String>> {
    // A set of strings cannot be left half-updated by a panic.
    LIVE_SOURCES.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether `token` was issued by an [`OwnerTokens`](crate::OwnerTokens) still alive in this
/// process.
///
/// The holder of a contended key is then another task of this process, typically one spawned
/// inside `with_lock` asking for its parent's key, since re-entry is per task.
///
/// # Examples
///
/// ```
/// use lock_core::{OwnerTokens, issued_by_this_process};
///
/// let owners = OwnerTokens::new("billing-7f9c")?;
/// assert!(issued_by_this_process(&owners.next_token()));
/// assert!(!issued_by_this_process("billing-7f9c/3e1f0c9a2b7d4e58/1")); // another process
/// # Ok::<(), lock_core::LockError>(())
/// ```
pub fn issued_by_this_process(token: &str) -> bool {
    // The counter after the last `/` has no `/`; an instance id may.
    token
        .rfind('/')
        .is_some_and(|end| live_sources().contains(&token[..=end]))
}

/// Records the prefix of a new token source.
pub(crate) fn register(prefix: &str) {
    live_sources().insert(prefix.to_owned());
}

/// Forgets a token source that was dropped.
pub(crate) fn unregister(prefix: &str) {
    live_sources().remove(prefix);
}
