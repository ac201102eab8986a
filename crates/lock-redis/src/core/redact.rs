//! The free-text redactor: passwords out of every message that may quote an address.

use std::borrow::Cow;
use std::ops::Range;

use url::form_urlencoded;

/// A query parameter's name, percent- and `+`-decoded.
pub(crate) fn decoded_name(raw: &str) -> String {
    form_urlencoded::parse(raw.as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_default()
}

/// Blanks and quotes that may come before an address in free text.
fn leads_url(c: char) -> bool {
    c.is_whitespace() || matches!(c, '"' | '\'' | '`')
}

/// Replaces passwords in free text (an address that may not parse, an error message, a log
/// line) with `***`, erring on the side of hiding too much. The one redactor of the lock's
/// crates: the starter's configuration errors, the CLI and the bench use it too. A password
/// may contain anything (blanks, quotes, `/`, `?`, `#`, `@`, `://`, line separators), so nothing
/// but the last `@` ends it:
///
/// - after every `scheme://`, the user part up to the last `@` of the whole text: from after its
///   first `:` (`user:***@host`), or all of it when it has no `:` (`***@host`: a lone user part
///   may be a password written in the user's place);
/// - before the first `://` (or in text without one), the same for a `user:password@` from the
///   start of the text (after leading blanks and quotes);
/// - the value of every query parameter whose name looks secret (`?sentinelPassword=…`,
///   `&password=…`), up to the next `&name=` or the end of the text. A name looks secret when
///   it contains `pass`, `pwd`, `secret`, `token`, `credential`, `auth` or `key` (any case,
///   percent-decoded).
///
/// Text without any of these is returned as is (borrowed). A parsed [`RedisAddress`] shows
/// itself redacted already (its `Display`), more exactly: only its secrets.
///
/// [`RedisAddress`]: crate::RedisAddress
///
/// # Examples
///
/// ```
/// use lock_redis::redact;
///
/// assert_eq!(redact("redis://app:s3cret@redis.internal:6379/2"), "redis://app:***@redis.internal:6379/2");
/// // A password with an unencoded `@` or blank is hidden whole:
/// assert_eq!(redact("connecting to redis://app:p@ss word@h failed"), "connecting to redis://app:***@h failed");
/// assert_eq!(redact("redis-sentinel://s1?sentinelPassword=t0p&node=s2:26379"),
///            "redis-sentinel://s1?sentinelPassword=***&node=s2:26379");
/// assert_eq!(redact("no secrets here"), "no secrets here");
/// ```
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut hidden: Vec<Range<usize>> = Vec::new();
    if let Some(last_at) = text.rfind('@') {
        let schemes: Vec<usize> = text.match_indices("://").map(|(at, _)| at).collect();
        let before_scheme = schemes.first().map_or(text, |&first| &text[..first]);
        if let Some(at) = before_scheme.rfind('@') {
            let start = text.len() - text.trim_start_matches(leads_url).len();
            hidden.extend(userinfo_secret(text, start.min(at), at));
        }
        for scheme in schemes {
            let start = scheme + "://".len();
            if start <= last_at {
                hidden.extend(userinfo_secret(text, start, last_at));
            }
        }
    }
    if text.contains('=') {
        secret_query_values(text, &mut hidden);
    }
    if hidden.is_empty() {
        return Cow::Borrowed(text);
    }
    hidden.sort_by_key(|range| (range.start, range.end));
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for range in hidden {
        if range.start < last {
            // Overlaps the one before, already replaced.
            last = last.max(range.end);
            continue;
        }
        out.push_str(&text[last..range.start]);
        out.push_str("***");
        last = range.end;
    }
    out.push_str(&text[last..]);
    Cow::Owned(out)
}

/// The secret of the user part `text[start..at]` (`at` is its `@`): after its first `:`, or all
/// of it without one; `None` when that is empty.
fn userinfo_secret(text: &str, start: usize, at: usize) -> Option<Range<usize>> {
    let secret = match text[start..at].find(':') {
        Some(colon) => start + colon + 1..at,
        None => start..at,
    };
    (!secret.is_empty()).then_some(secret)
}

/// The values of `?name=value` / `&name=value` whose name looks secret: each up to the next
/// `&` that starts another `name=` (a password may contain `&`, `#`, blanks, quotes), or to the
/// end of the text.
fn secret_query_values(text: &str, hidden: &mut Vec<Range<usize>>) {
    let name_end = |c: char| leads_url(c) || matches!(c, '=' | '&' | '?' | '#');
    let mut from = 0;
    while let Some(pos) = text[from..].find(['?', '&']) {
        let start = from + pos + 1;
        let rest = &text[start..];
        let name_len = rest.find(name_end).unwrap_or(rest.len());
        from = start;
        if !rest[name_len..].starts_with('=') || !looks_secret(&decoded_name(&rest[..name_len])) {
            continue;
        }
        let value_start = start + name_len + 1;
        let value_len = next_parameter(&text[value_start..]);
        hidden.push(value_start..value_start + value_len);
        from = value_start + value_len;
    }
}

/// Where the next `&name=` in `text` starts (the index of its `&`), or the length of `text`.
fn next_parameter(text: &str) -> usize {
    text.match_indices('&')
        .map(|(at, _)| at)
        .find(|&at| {
            let rest = &text[at + 1..];
            let name_len = rest
                .find(|c: char| leads_url(c) || matches!(c, '=' | '&' | '?' | '#'))
                .unwrap_or(rest.len());
            name_len > 0 && rest[name_len..].starts_with('=')
        })
        .unwrap_or(text.len())
}

/// Whether a query parameter's value may be a secret (`sentinelPassword`, `token`, `auth`).
pub(crate) fn looks_secret(name: &str) -> bool {
    let norm = name.to_ascii_lowercase();
    [
        "pass",
        "pwd",
        "secret",
        "token",
        "credential",
        "auth",
        "key",
    ]
    .iter()
    .any(|word| norm.contains(word))
}

#[cfg(test)]
mod tests {
    use lock_testkit::secrets::{
        AT_PASSWORD, AT_PASSWORD_IN_URL, PASSWORD, SENTINEL_PASSWORD, USER, assert_no_secret,
    };

    use super::*;

    #[test]
    fn free_text_redaction() {
        for (text, expected) in [
            ("redis://u:pw@h:1", "redis://u:***@h:1"),
            ("redis://u:p/w@h", "redis://u:***@h"),
            ("redis://u:p@w@h", "redis://u:***@h"),
            ("user:pass@localhost:6379", "user:***@localhost:6379"),
            ("\"user:pass@localhost\"", "\"user:***@localhost\""),
            // Everything up to the last `@` of the text: too much rather than too little.
            (
                "a \"redis://u:pw@h\" and tcp://x:y@z",
                "a \"redis://u:***@z",
            ),
            // A lone user part may be a password in the user's place.
            ("redis://u@h", "redis://***@h"),
            ("rediss://Xk4PwLeak@h:6380", "rediss://***@h:6380"),
            ("redis://@h", "redis://@h"),
            ("redis://:@h", "redis://:@h"),
            ("no secrets here", "no secrets here"),
            ("redis://h:1/0", "redis://h:1/0"),
            (
                "redis-sentinel://s?sentinelServiceName=m&sentinelPassword=pw&node=a:1",
                "redis-sentinel://s?sentinelServiceName=m&sentinelPassword=***&node=a:1",
            ),
            (
                "\"redis://h?password=pw\" and x?token=t#f",
                "\"redis://h?password=***",
            ),
            (
                "redis://h?sentinelPassword=",
                "redis://h?sentinelPassword=***",
            ),
            // A password with an `@` in the query, after a port: hidden whole.
            ("redis://h:1?sentinelPassword=p@ss", "redis://h:***"),
            (
                "redis://u:pw@h?sentinelPassword=p2",
                "redis://u:***@h?sentinelPassword=***",
            ),
            ("a=b&c=d", "a=b&c=d"),
            // Blanks, quotes, line separators, `#`, `?`, `/`, `://`, `%` in passwords.
            ("redis://app:Pa55 word@h:99999", "redis://app:***@h:99999"),
            ("redis://app:Pa55`x@h:99999", "redis://app:***@h:99999"),
            ("redis://app:Pa55'x@h:99999", "redis://app:***@h:99999"),
            ("redis://app:pa\"Pa55@h", "redis://app:***@h"),
            ("redis://app:Pa55\u{2028}x@h", "redis://app:***@h"),
            ("redis://app:Pa55\nx@h", "redis://app:***@h"),
            ("redis://app:Pa55#x@h:6379", "redis://app:***@h:6379"),
            ("redis://app:p@ss:w/rd?#@h", "redis://app:***@h"),
            ("redis://app:x://Pa55@h:6379", "redis://app:***@h:6379"),
            ("redis://app:Pa55%zzx@h", "redis://app:***@h"),
            (" redis://app:Pa55x@h:6379 x", " redis://app:***@h:6379 x"),
            ("redis://Pa55 x@h", "redis://***@h"),
            // Before the scheme, or without one.
            ("x:Pa55@redis://h", "x:***@redis://h"),
            ("redis:/app:Pa55@h", "redis:***@h"),
            ("' app:Pa55 x@h'", "' app:***@h'"),
            // Query values: up to the next `&name=`, whatever they contain.
            (
                "redis-sentinel://h?sentinelServiceName=m&sentinelPassword=Pa55 x&bogus=1",
                "redis-sentinel://h?sentinelServiceName=m&sentinelPassword=***&bogus=1",
            ),
            (
                "redis-sentinel://h?sentinelPassword=a&b#c\"d&node=a:1",
                "redis-sentinel://h?sentinelPassword=***&node=a:1",
            ),
            (
                "redis-sentinel://h?sentinel_password=Pa55x&bogus=1",
                "redis-sentinel://h?sentinel_password=***&bogus=1",
            ),
            (
                "redis://app:Pa55x@h:6379/0?password=Pa55y",
                "redis://app:***@h:6379/0?password=***",
            ),
            (
                "redis://h?sentinel%50assword=Pa55&x=1",
                "redis://h?sentinel%50assword=***&x=1",
            ),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn addresses_that_do_not_parse_hide_more_rather_than_less() {
        for (text, expected) in [
            // A fragment may be part of the password: hidden with it.
            (
                "redis-sentinel://h?sentinel%50assword=pw2#x",
                "redis-sentinel://h?sentinel%50assword=***",
            ),
            // An `@` in a query value after a user part: everything up to it.
            ("redis://u:p@ss@h?sentinelUsername=a@b", "redis://u:***@b"),
            (
                "redis-sentinel://127.0.0.1:1?sentinelServiceName=m&sentinelPassword=p@Pa55",
                "redis-sentinel://127.0.0.1:***",
            ),
            (
                "redis://u:pa?ss@h:1?sentinelServiceName=m",
                "redis://u:***@h:1?sentinelServiceName=m",
            ),
            ("redis://u:pa/ss@h:1/0", "redis://u:***@h:1/0"),
            ("redis://:s3cret@h:1/0", "redis://:***@h:1/0"),
            ("redis://bench:s3cret@h:1", "redis://bench:***@h:1"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
        for text in [
            format!("redis://{USER}:{PASSWORD}@h:6379 refused"),
            format!("redis://{USER}:{AT_PASSWORD}@h"),
            format!("redis://{USER}:{AT_PASSWORD_IN_URL}@h"),
            format!(
                "redis-sentinel://h?sentinelServiceName=m&sentinelPassword={SENTINEL_PASSWORD}"
            ),
            format!("rediss://{PASSWORD}@h"),
        ] {
            assert_no_secret("the redacted text", &redact(&text));
        }
    }
}
