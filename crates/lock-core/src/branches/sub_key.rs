//! [`SubKey`]: one invocation of a master lock.

use std::fmt;

/// One invocation of a master lock: the master key, and the fencing token of the grant it runs
/// under as the invocation id.
///
/// # Examples
///
/// ```
/// use lock_core::branches::SubKey;
///
/// let sub_key = SubKey::new("ticket:4711", 42);
/// assert_eq!(sub_key.master_key(), "ticket:4711");
/// assert_eq!(sub_key.invocation(), 42);
/// assert_eq!(sub_key.to_string(), "ticket:4711#42");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubKey {
    master_key: String,
    invocation: u64,
}

impl SubKey {
    /// The sub-key of invocation `invocation` of the master lock `master_key`, not validated.
    pub fn new(master_key: impl Into<String>, invocation: u64) -> Self {
        SubKey {
            master_key: master_key.into(),
            invocation,
        }
    }

    /// The master lock's key.
    pub fn master_key(&self) -> &str {
        &self.master_key
    }

    /// The invocation id: the fencing token of the master's lock grant.
    pub fn invocation(&self) -> u64 {
        self.invocation
    }
}

impl fmt::Display for SubKey {
    /// `<master key>#<invocation>`, for logs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.master_key, self.invocation)
    }
}
