//! The Redis address: parsing with the `url` crate, and keeping the password out of every message.

use std::borrow::Cow;
use std::fmt;

use url::Url;

/// Where Redis is: a `redis://[user[:password]@]host[:port][/db]` URL.
///
/// `Display` and `Debug` replace the password with `***`; [`RedisAddress::expose`] gives the full
/// URL for the Redis client and nothing else should.
///
/// ```
/// use lock_starter::config::RedisAddress;
///
/// let address = RedisAddress::parse("redis://app:s3cret@redis.internal:6380/2").unwrap();
/// assert_eq!(address.to_string(), "redis://app:***@redis.internal:6380/2");
/// assert_eq!(address.expose(), "redis://app:s3cret@redis.internal:6380/2");
/// assert_eq!((address.host(), address.port(), address.database()), ("redis.internal", 6380, 2));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RedisAddress {
    url: Url,
}

/// Why a text is not an accepted Redis address. Its `Display` never contains the password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct InvalidAddress {
    problem: String,
}

impl InvalidAddress {
    fn new(problem: impl Into<String>) -> Self {
        InvalidAddress {
            problem: redact_text(&problem.into()).into_owned(),
        }
    }

    /// What is wrong, e.g. `the port is missing or 0`.
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

/// The default Redis port, used when the address names none: 6379.
pub const DEFAULT_REDIS_PORT: u16 = 6379;

/// Why the `url` crate rejected a text, in the terms of a Redis address.
fn url_problem(error: url::ParseError) -> String {
    match error {
        url::ParseError::InvalidPort => "the port is not a number from 1 to 65535".to_owned(),
        url::ParseError::RelativeUrlWithoutBase => "not a Redis URL (no scheme://)".to_owned(),
        url::ParseError::EmptyHost => "the host is missing".to_owned(),
        url::ParseError::InvalidIpv4Address => "the host is not a valid IPv4 address".to_owned(),
        url::ParseError::InvalidIpv6Address => "the host is not a valid IPv6 address".to_owned(),
        url::ParseError::InvalidDomainCharacter => {
            "the host contains a character not allowed in a host name".to_owned()
        }
        other => format!("not a URL ({other})"),
    }
}

impl RedisAddress {
    /// Parses and checks an address.
    ///
    /// Accepted: `redis://[user[:password]@]host[:port][/db]` — port 1 to 65535 (default 6379),
    /// database 0 to 255 (default 0); `redis://:password@host` (password only) is accepted too.
    /// Special characters in the user or password must be percent-encoded (`@` as `%40`).
    ///
    /// # Errors
    /// [`InvalidAddress`] when the text is empty (or blank), is not a URL, uses another scheme
    /// (`rediss://`, `redis-sentinel://` and `redis-cluster://` are recognised but not
    /// supported yet), has no host, a port outside 1 to 65535, a path other than a database
    /// number, a query or a fragment.
    pub fn parse(text: &str) -> Result<RedisAddress, InvalidAddress> {
        let text = text.trim();
        if text.is_empty() {
            return Err(InvalidAddress::new("empty; a Redis URL is required"));
        }
        let url = Url::parse(text).map_err(|e| InvalidAddress::new(url_problem(e)))?;
        match url.scheme() {
            "redis" => {}
            scheme @ ("rediss" | "redis-sentinel" | "redis-cluster") => {
                return Err(InvalidAddress::new(format!(
                    "{scheme}:// is not supported yet"
                )));
            }
            _ if !text.contains("://") => {
                return Err(InvalidAddress::new("not a Redis URL (no scheme://)"));
            }
            scheme => {
                return Err(InvalidAddress::new(format!(
                    "the scheme {scheme}:// is not a Redis scheme"
                )));
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(InvalidAddress::new("the host is missing"));
        }
        if url.port() == Some(0) {
            return Err(InvalidAddress::new(
                "port 0 is not accepted; the port must be a number from 1 to 65535",
            ));
        }
        if url.query().is_some() {
            return Err(InvalidAddress::new(
                "query parameters (?…) are not accepted",
            ));
        }
        if url.fragment().is_some() {
            return Err(InvalidAddress::new("a fragment (#…) is not accepted"));
        }
        let address = RedisAddress { url };
        match address.path_database() {
            Some(Ok(_)) | None => Ok(address),
            Some(Err(())) => Err(InvalidAddress::new(format!(
                "the path {:?} is not a database number from 0 to 255",
                address.url.path()
            ))),
        }
    }

    /// The full URL, password included, for the Redis client. Do not log it.
    pub fn expose(&self) -> &str {
        self.url.as_str()
    }

    /// The host name or IP address (IPv6 in brackets).
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or_default()
    }

    /// The port; 6379 when the address names none.
    pub fn port(&self) -> u16 {
        self.url.port().unwrap_or(DEFAULT_REDIS_PORT)
    }

    /// The database number; 0 when the address names none.
    pub fn database(&self) -> u8 {
        match self.path_database() {
            Some(Ok(db)) => db,
            _ => 0,
        }
    }

    /// The user name (Redis 6 ACL), if the address has one.
    pub fn username(&self) -> Option<&str> {
        Some(self.url.username()).filter(|user| !user.is_empty())
    }

    /// Whether the address carries a password.
    pub fn has_password(&self) -> bool {
        self.url.password().is_some()
    }

    /// `None` for no path or `/`, the database for `/N`, `Err` for anything else.
    fn path_database(&self) -> Option<Result<u8, ()>> {
        let path = self.url.path();
        let db = path.strip_prefix('/').unwrap_or(path);
        if db.is_empty() {
            return None;
        }
        let digits = !db.is_empty() && db.bytes().all(|b| b.is_ascii_digit());
        Some(if digits {
            db.parse().map_err(|_| ())
        } else {
            Err(())
        })
    }

    fn redacted(&self) -> Cow<'_, str> {
        if self.url.password().is_none() {
            return Cow::Borrowed(self.url.as_str());
        }
        let mut url = self.url.clone();
        // Only fails for URLs without a host, which `parse` rejects.
        let _ = url.set_password(Some("***"));
        Cow::Owned(url.into())
    }
}

impl Default for RedisAddress {
    /// `redis://localhost:6379`.
    fn default() -> Self {
        RedisAddress {
            url: Url::parse(super::keys::DEFAULT_REDIS_ADDRESS)
                .expect("the default address parses"),
        }
    }
}

impl fmt::Display for RedisAddress {
    /// The URL with the password replaced by `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for RedisAddress {
    /// `RedisAddress("redis://user:***@host:6379")`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("RedisAddress")
            .field(&self.redacted())
            .finish()
    }
}

impl std::str::FromStr for RedisAddress {
    type Err = InvalidAddress;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        RedisAddress::parse(text)
    }
}

/// Replaces passwords in free text with `***`: in every `scheme://user:password@` and, for text
/// without `://`, in a leading `user:password@`. Errs on the side of hiding too much: everything
/// from the first `:` of the user part up to the last `@` before the next blank or quote goes.
pub(crate) fn redact_text(text: &str) -> Cow<'_, str> {
    if !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found_scheme = false;
    while let Some(at) = rest.find("://") {
        found_scheme = true;
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        rest = redact_userinfo(tail, &mut out);
    }
    if !found_scheme {
        let quotes = rest.len() - rest.trim_start_matches(['"', '\'', '`']).len();
        out.push_str(&rest[..quotes]);
        rest = redact_userinfo(&rest[quotes..], &mut out);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// Copies a leading `user:password@` of `text` to `out` as `user:***@` and returns the rest.
fn redact_userinfo<'a>(text: &'a str, out: &mut String) -> &'a str {
    let end = text
        .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`'))
        .unwrap_or(text.len());
    let Some(at) = text[..end].rfind('@') else {
        return text;
    };
    let userinfo = &text[..at];
    match userinfo.find(':') {
        Some(colon) => {
            out.push_str(&userinfo[..colon]);
            out.push_str(":***");
        }
        None => out.push_str(userinfo),
    }
    &text[at..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_single_server_forms() {
        for (text, host, port, db, user) in [
            ("redis://localhost:6379", "localhost", 6379, 0, None),
            ("redis://redis.internal", "redis.internal", 6379, 0, None),
            (
                "redis://app:pw@10.0.0.7:6380/3",
                "10.0.0.7",
                6380,
                3,
                Some("app"),
            ),
            ("redis://:pw@h/", "h", 6379, 0, None),
            ("redis://app@h:1/255", "h", 1, 255, Some("app")),
            ("redis://[::1]:7000", "[::1]", 7000, 0, None),
        ] {
            let address = RedisAddress::parse(text).unwrap();
            assert_eq!(address.host(), host, "{text}");
            assert_eq!(address.port(), port, "{text}");
            assert_eq!(address.database(), db, "{text}");
            assert_eq!(address.username(), user, "{text}");
        }
    }

    #[test]
    fn rejects_with_a_reason() {
        for (text, reason) in [
            ("localhost:6379", "not a Redis URL"),
            ("http://x", "not a Redis scheme"),
            ("rediss://h", "not supported yet"),
            ("redis-sentinel://h", "not supported yet"),
            ("redis-cluster://h", "not supported yet"),
            ("redis://", "host is missing"),
            ("redis:///0", "host is missing"),
            (
                "redis://h:0",
                "port 0 is not accepted; the port must be a number from 1 to 65535",
            ),
            (
                "redis://h:99999",
                "the port is not a number from 1 to 65535",
            ),
            (
                "redis://:pw@h:99999",
                "the port is not a number from 1 to 65535",
            ),
            ("redis://h:port", "the port is not a number from 1 to 65535"),
            ("redis://h/16x", "not a database number"),
            ("redis://h/256", "not a database number"),
            ("redis://h/0/1", "not a database number"),
            ("redis://h?password=x", "query"),
            ("redis://h#x", "fragment"),
            ("", "empty; a Redis URL is required"),
            ("  ", "empty; a Redis URL is required"),
            ("redis.internal", "not a Redis URL (no scheme://)"),
        ] {
            let problem = RedisAddress::parse(text).unwrap_err().to_string();
            assert!(problem.contains(reason), "{text}: {problem}");
        }
    }

    #[test]
    fn passwords_never_show() {
        let address = RedisAddress::parse("redis://app:hunter2@h:6379").unwrap();
        assert_eq!(address.to_string(), "redis://app:***@h:6379");
        assert_eq!(
            format!("{address:?}"),
            r#"RedisAddress("redis://app:***@h:6379")"#
        );
        assert!(address.has_password());
        let only = RedisAddress::parse("redis://:hunter2@h").unwrap();
        assert_eq!(only.to_string(), "redis://:***@h");
        assert!(!RedisAddress::default().to_string().contains("***"));
    }

    #[test]
    fn free_text_redaction() {
        for (text, expected) in [
            ("redis://u:pw@h:1", "redis://u:***@h:1"),
            ("redis://u:p/w@h", "redis://u:***@h"),
            ("redis://u:p@w@h", "redis://u:***@h"),
            ("user:pass@localhost:6379", "user:***@localhost:6379"),
            ("\"user:pass@localhost\"", "\"user:***@localhost\""),
            (
                "a \"redis://u:pw@h\" and tcp://x:y@z",
                "a \"redis://u:***@h\" and tcp://x:***@z",
            ),
            ("redis://u@h", "redis://u@h"),
            ("no secrets here", "no secrets here"),
        ] {
            assert_eq!(redact_text(text), expected, "{text}");
        }
    }
}
