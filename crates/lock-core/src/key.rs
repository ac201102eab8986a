//! Key validation, shared so that every implementation accepts the same keys.

use crate::error::LockError;

/// The longest accepted lock key, in bytes of UTF-8.
pub const MAX_KEY_BYTES: usize = 512;

/// What a valid key looks like, quoted in every [`LockError::InvalidKey`].
pub(crate) const KEY_RULES: &str = "a lock key is 1 to 512 bytes of UTF-8 with no control characters (braces, spaces and unicode are fine)";

/// A rate limit's or cache's name as every pod spells it: ASCII letters in lower case, `-` for
/// `_`. [`RateLimiter::new`](crate::rate_limit::RateLimiter::new) and
/// [`Cache::new`](crate::cache::Cache::new) fold the name they are given, so `MY_API` and
/// `my-api` are one limit, in code or in configuration.
///
/// ```
/// assert_eq!(lock_core::fold_name("Product_Prices"), "product-prices");
/// ```
pub fn fold_name(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

/// Checks a key before anything is sent to a backend: 1 to [`MAX_KEY_BYTES`] bytes of UTF-8
/// without control characters.
///
/// Spaces, unicode, `:` and braces are accepted; a backend that gives braces a meaning encodes
/// them.
///
/// # Errors
/// [`LockError::InvalidKey`] (code `LOCK_INVALID_ARGUMENT`) naming the problem.
///
/// # Examples
///
/// ```
/// use lock_core::validate_key;
///
/// assert!(validate_key("bill-run:2026-11").is_ok());
/// assert!(validate_key("{tenant-7} nightly 🔒").is_ok());
///
/// let error = validate_key("bill-run\n2026-11").unwrap_err();
/// assert_eq!(error.code(), "LOCK_INVALID_ARGUMENT");
/// assert!(error.to_string().contains("it contains a control character"));
/// ```
pub fn validate_key(key: &str) -> Result<(), LockError> {
    let problem = if key.is_empty() {
        Some("it is empty")
    } else if key.len() > MAX_KEY_BYTES {
        Some("it is longer than 512 bytes")
    } else if key.chars().any(char::is_control) {
        Some("it contains a control character")
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(LockError::InvalidKey {
            key: truncate_for_display(key),
            problem,
            accepted: KEY_RULES,
        }),
    }
}

/// Keeps error messages readable when someone passes a megabyte as a key.
pub(crate) fn truncate_for_display(key: &str) -> String {
    const SHOWN: usize = 64;
    if key.len() <= SHOWN {
        return key.to_owned();
    }
    let mut end = SHOWN;
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &key[..end], key.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_names() {
        for key in [
            "bill-run:2026-11",
            "msisdn reaper",
            "{braces}",
            "}",
            "ünïcødé-🔒",
            &"x".repeat(MAX_KEY_BYTES),
        ] {
            validate_key(key).unwrap_or_else(|e| panic!("{key:?} rejected: {e}"));
        }
    }

    #[test]
    fn rejects_empty_long_and_control_characters_with_the_reason() {
        let cases = [
            ("", "empty"),
            (&*"x".repeat(MAX_KEY_BYTES + 1), "longer than 512 bytes"),
            ("a\nb", "control character"),
            ("a\0b", "control character"),
            ("tab\there", "control character"),
            ("del\u{7f}", "control character"),
        ];
        for (key, expected) in cases {
            let err = validate_key(key).expect_err(key);
            let text = err.to_string();
            assert!(text.contains(expected), "{key:?}: {text}");
            assert_eq!(err.http_status(), 500);
        }
    }

    #[test]
    fn long_keys_are_truncated_in_the_message_on_a_char_boundary() {
        let key = "é".repeat(400);
        let text = validate_key(&key).unwrap_err().to_string();
        assert!(text.contains("(800 bytes)"), "{text}");
        assert!(text.len() < 400, "{text}");
    }
}
