//! [`OwnerTokens`]: one token per acquisition, readable by on-call.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::LockError;

/// The longest accepted instance id, in bytes.
pub const MAX_INSTANCE_ID_BYTES: usize = 128;

/// Issues owner tokens of the form `<instance-id>/<client>/<n>`, one per acquisition.
///
/// The instance id (host or pod name) shows on-call who holds a key, the random 64-bit client id
/// keeps two processes on one host apart, and the counter makes a stale, retried release of an
/// earlier acquisition harmless to a newer one.
///
/// # Examples
///
/// ```
/// use lock_core::OwnerTokens;
///
/// // In a backend: one source per client, one token per acquisition.
/// let owners = OwnerTokens::new("billing-7f9c")?;
/// let (first, second) = (owners.next_token(), owners.next_token());
/// assert_ne!(first, second);
/// assert!(first.starts_with("billing-7f9c/") && first.ends_with("/1"));
/// assert_eq!(owners.instance_id(), "billing-7f9c");
/// # Ok::<(), lock_core::LockError>(())
/// ```
#[derive(Debug)]
pub struct OwnerTokens {
    prefix: String,
    instance_id_len: usize,
    next: AtomicU64,
}

impl OwnerTokens {
    /// A token source for one client.
    ///
    /// # Errors
    /// [`LockError::InvalidArgument`] naming `instance-id`, as [`validate_instance_id`].
    pub fn new(instance_id: &str) -> Result<Self, LockError> {
        validate_instance_id(instance_id)?;
        let client: u64 = rand::random();
        let prefix = format!("{instance_id}/{client:016x}/");
        crate::process::register(&prefix);
        Ok(OwnerTokens {
            prefix,
            instance_id_len: instance_id.len(),
            next: AtomicU64::new(1),
        })
    }

    /// The instance id this client reports.
    pub fn instance_id(&self) -> &str {
        &self.prefix[..self.instance_id_len]
    }

    /// The instance id an owner token starts with, even one that contains `/`; a string not of
    /// this form comes back as it is.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_core::OwnerTokens;
    ///
    /// let owners = OwnerTokens::new("eu-west/billing-7f9c")?;
    /// assert_eq!(OwnerTokens::instance_id_of(&owners.next_token()), "eu-west/billing-7f9c");
    /// assert_eq!(OwnerTokens::instance_id_of("not-a-token"), "not-a-token");
    /// # Ok::<(), lock_core::LockError>(())
    /// ```
    pub fn instance_id_of(owner_token: &str) -> &str {
        let mut fields = owner_token.rsplitn(3, '/');
        match (fields.next(), fields.next(), fields.next()) {
            (Some(_counter), Some(_client), Some(instance_id)) => instance_id,
            _ => owner_token,
        }
    }

    /// A fresh token, never returned before by this source.
    pub fn next_token(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        format!("{}{n}", self.prefix)
    }
}

impl Drop for OwnerTokens {
    fn drop(&mut self) {
        crate::process::unregister(&self.prefix);
    }
}

/// Checks an instance id: 1 to [`MAX_INSTANCE_ID_BYTES`] bytes, without control characters or
/// `|`.
///
/// # Errors
/// [`LockError::InvalidArgument`] naming `instance-id`.
///
/// # Examples
///
/// ```
/// use lock_core::validate_instance_id;
///
/// assert!(validate_instance_id("billing-7f9c").is_ok());
/// let error = validate_instance_id("pod|7").unwrap_err();
/// assert!(error.to_string().starts_with("invalid instance-id \"pod|7\": must not contain |"));
/// ```
pub fn validate_instance_id(instance_id: &str) -> Result<(), LockError> {
    let problem = if instance_id.is_empty() {
        "must not be empty"
    } else if instance_id.len() > MAX_INSTANCE_ID_BYTES {
        "must be at most 128 bytes"
    } else if instance_id.chars().any(char::is_control) {
        "must not contain control characters"
    } else if instance_id.contains('|') {
        "must not contain |"
    } else {
        return Ok(());
    };
    Err(LockError::invalid_argument(
        "instance-id",
        format!("{instance_id:?}"),
        format!(
            "{problem}; accepted: a host or pod name, 1 to 128 bytes, no control characters or |"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::issued_by_this_process;

    #[test]
    fn tokens_are_unique_per_acquisition_and_across_clients() {
        let a = OwnerTokens::new("pod-a").unwrap();
        let b = OwnerTokens::new("pod-a").unwrap();
        let (a1, a2, b1) = (a.next_token(), a.next_token(), b.next_token());
        assert_ne!(a1, a2);
        assert_ne!(a1, b1, "two clients on one host must not share tokens");
        assert!(a1.starts_with("pod-a/"), "{a1}");
        assert_eq!(a.instance_id(), "pod-a");
    }

    #[test]
    fn only_tokens_of_live_sources_of_this_process_are_recognised() {
        let a = OwnerTokens::new("pod/with/slashes").unwrap();
        let token = a.next_token();
        assert!(issued_by_this_process(&token), "{token}");
        for foreign in [
            "pod/with/slashes/0123456789abcdef/1",
            "",
            "no-slash",
            &token[..token.len() - 2],
        ] {
            assert!(!issued_by_this_process(foreign), "{foreign}");
        }
        drop(a);
        assert!(!issued_by_this_process(&token), "a dropped source: {token}");
    }

    #[test]
    fn bad_instance_ids_are_rejected() {
        for bad in ["", "a\nb", "pod|7", &"x".repeat(129)] {
            let text = OwnerTokens::new(bad).unwrap_err().to_string();
            assert!(text.contains("instance-id"), "{text}");
        }
    }
}
