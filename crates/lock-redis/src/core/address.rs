//! The Redis address: checked once with the `url` crate and read by fred's own parser, and
//! kept out of every message but the one to the client.

use std::borrow::Cow;
use std::fmt;
use std::hash::{Hash, Hasher};

use fred::types::config::Config;
use url::Url;

use crate::core::redact::{decoded_name, looks_secret, redact};

/// Where Redis is: a URL naming one server, a Sentinel group or a Cluster, with credentials,
/// database and TLS, in the forms fred 10's `Config::from_url` reads:
///
/// - `redis://[user[:password]@]host[:port][/db]`: one server;
/// - `redis-sentinel://[user[:password]@]host[:port][/db]?sentinelServiceName=name[&node=host:port…][&sentinelUsername=user][&sentinelPassword=password]`:
///   a primary found through Sentinel — `host:port` and every `node=` are sentinels (port
///   26379 when omitted), the user and password are the primary's, `sentinelUsername` and
///   `sentinelPassword` the sentinels' own;
/// - `redis-cluster://[user[:password]@]host[:port][?node=host:port…]`: a Redis Cluster, found
///   from these seed nodes; database 0 only;
/// - `rediss://`, `rediss-sentinel://`, `rediss-cluster://`: the same over TLS.
///
/// `Display` and `Debug` replace the password (and a `sentinelPassword`) with `***`, and a user
/// part without a password too (`redis://***@host`: it may be a password written in the user's
/// place; such a user is sent no `AUTH`, which connecting warns of); [`RedisAddress::expose`]
/// gives the full URL for the Redis client and nothing else should.
///
/// # Examples
///
/// ```
/// use lock_redis::{RedisAddress, Topology};
///
/// let address = RedisAddress::parse("redis://app:s3cret@redis.internal:6380/2").unwrap();
/// assert_eq!(address.to_string(), "redis://app:***@redis.internal:6380/2");
/// assert_eq!(address.expose(), "redis://app:s3cret@redis.internal:6380/2");
/// assert_eq!((address.host(), address.port(), address.database()), ("redis.internal", 6380, 2));
/// assert_eq!(address.topology(), &Topology::Single);
/// assert_eq!((address.username(), address.has_password()), (Some("app"), true));
///
/// let sentinel = RedisAddress::parse(
///     "rediss-sentinel://:s3cret@s1:26379/1?sentinelServiceName=mymaster&node=s2:26379",
/// )
/// .unwrap();
/// assert_eq!(sentinel.topology(), &Topology::Sentinel { service_name: "mymaster".into() });
/// assert!(sentinel.tls());
/// assert_eq!(sentinel.nodes(), [("s1".to_owned(), 26379), ("s2".to_owned(), 26379)]);
/// assert_eq!(
///     sentinel.to_string(),
///     "rediss-sentinel://:***@s1:26379/1?sentinelServiceName=mymaster&node=s2:26379"
/// );
/// assert_eq!(sentinel.username(), None);
///
/// // The sentinels' own credentials, apart from the primary's:
/// let guarded = RedisAddress::parse(
///     "redis-sentinel://s1?sentinelServiceName=mymaster&sentinelUsername=watch&sentinelPassword=t0p",
/// )
/// .unwrap();
/// assert_eq!(guarded.sentinel_username().as_deref(), Some("watch"));
/// assert!(guarded.has_sentinel_password() && !guarded.has_password());
/// ```
#[derive(Clone)]
pub struct RedisAddress {
    url: Url,
    topology: Topology,
    /// fred's reading of the address with the plain scheme: the clients are built from it, and
    /// TLS is set up apart (fred's parser would load the system's roots, even where a CA file
    /// is configured and the system has none).
    client: Config,
}

impl PartialEq for RedisAddress {
    fn eq(&self, other: &Self) -> bool {
        // `topology` and `client` are read from `url`.
        self.url == other.url
    }
}

impl Eq for RedisAddress {}

impl Hash for RedisAddress {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.url.hash(state);
    }
}

/// How the Redis servers of a [`RedisAddress`] are deployed, from its scheme.
///
/// # Examples
///
/// ```
/// use lock_redis::{RedisAddress, Topology};
///
/// let address = RedisAddress::parse("redis-sentinel://s1:26379?sentinelServiceName=mymaster").unwrap();
/// match address.topology() {
///     Topology::Single => println!("one server"),
///     Topology::Sentinel { service_name } => assert_eq!(service_name, "mymaster"),
///     Topology::Cluster => println!("a Redis Cluster"),
///     _ => println!("a topology added later"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Topology {
    /// One server: `redis://`, `rediss://`.
    Single,
    /// A primary found through Sentinel: `redis-sentinel://`, `rediss-sentinel://`.
    Sentinel {
        /// The name the sentinels know the primary by (`sentinelServiceName`, Spring's
        /// `spring.data.redis.sentinel.master`).
        service_name: String,
    },
    /// A Redis Cluster: `redis-cluster://`, `rediss-cluster://`.
    Cluster,
}

/// Why a text is not an accepted Redis address. Its `Display` never contains a password.
///
/// # Examples
///
/// ```
/// use lock_redis::RedisAddress;
///
/// let error = RedisAddress::parse("http://app:s3cret@redis.internal").unwrap_err();
/// assert!(error.to_string().starts_with("the scheme http:// is not a Redis scheme; use redis://"));
/// assert!(!error.to_string().contains("s3cret"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{problem}")]
pub struct InvalidAddress {
    problem: String,
}

impl InvalidAddress {
    fn new(problem: impl Into<String>) -> Self {
        InvalidAddress {
            problem: redact(&problem.into()).into_owned(),
        }
    }

    /// What is wrong, e.g. `port 0 is not accepted; the port must be a number from 1 to 65535`.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::RedisAddress;
    ///
    /// let error = RedisAddress::parse("redis://redis.internal:0").unwrap_err();
    /// assert_eq!(error.problem(), "port 0 is not accepted; the port must be a number from 1 to 65535");
    /// ```
    pub fn problem(&self) -> &str {
        &self.problem
    }
}

/// The default Redis port, used when a single-server or cluster address names none: 6379.
pub const DEFAULT_REDIS_PORT: u16 = 6379;

/// The default Sentinel port, used when a sentinel address names none: 26379.
pub const DEFAULT_SENTINEL_PORT: u16 = 26379;

/// The query parameter naming another node: a sentinel, or a cluster seed node.
const NODE: &str = "node";
/// The query parameter naming the primary a Sentinel group watches.
const SERVICE_NAME: &str = "sentinelServiceName";
/// The query parameter with the user for the sentinels themselves.
const SENTINEL_USERNAME: &str = "sentinelUsername";
/// The query parameter with the password for the sentinels themselves.
const SENTINEL_PASSWORD: &str = "sentinelPassword";

/// The accepted schemes, with their kind of deployment and whether they use TLS.
const SCHEMES: [(&str, Kind, bool); 6] = [
    ("redis", Kind::Single, false),
    ("rediss", Kind::Single, true),
    ("redis-sentinel", Kind::Sentinel, false),
    ("rediss-sentinel", Kind::Sentinel, true),
    ("redis-cluster", Kind::Cluster, false),
    ("rediss-cluster", Kind::Cluster, true),
];

/// What [`SCHEMES`] lists, as messages name it.
const SCHEME_LIST: &str = "redis://, rediss://, redis-sentinel://, rediss-sentinel://, \
                           redis-cluster:// and rediss-cluster://";

/// The accepted forms of an address, as every error and document says them after
/// "accepted: ".
///
/// # Examples
///
/// ```
/// assert!(lock_redis::limits::ACCEPTED_ADDRESSES.starts_with("redis[s]://[user[:password]@]host[:port][/db], "));
/// ```
pub const ACCEPTED_ADDRESSES: &str = "redis[s]://[user[:password]@]host[:port][/db], \
    redis[s]-sentinel://…?sentinelServiceName=name[&node=host:port…] or \
    redis[s]-cluster://host:port[?node=host:port…]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Sentinel,
    Cluster,
}

impl Kind {
    /// The query parameters an address of this kind accepts.
    fn parameters(self) -> &'static [&'static str] {
        match self {
            Kind::Single => &[],
            Kind::Sentinel => &[NODE, SERVICE_NAME, SENTINEL_USERNAME, SENTINEL_PASSWORD],
            Kind::Cluster => &[NODE],
        }
    }
}

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

/// A name as messages show it: as is when it is plain, quoted otherwise.
fn shown_name(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// Checks a `host:port` (a `node=` value, an entry of Spring's `sentinel.nodes` or
/// `cluster.nodes`) and returns its parts, or what is wrong with it.
///
/// The Redis client splits it at its one colon, so IPv6 addresses are not accepted here.
pub(crate) fn parse_host_port(text: &str) -> Result<(&str, u16), String> {
    if text.is_empty() {
        return Err("empty; host:port is required".to_owned());
    }
    if text.starts_with('[') || text.matches(':').count() > 1 {
        return Err(
            "an IPv6 address is not accepted here (the Redis client reads host:port with one \
             colon); use a host name or an IPv4 address"
                .to_owned(),
        );
    }
    let Some((host, port)) = text.split_once(':') else {
        return Err("the port is missing; host:port is required".to_owned());
    };
    if host.is_empty() {
        return Err("the host is missing".to_owned());
    }
    if host
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "/@?#\\[]%&=,\"'".contains(c))
    {
        return Err("the host contains a character not allowed in a host name".to_owned());
    }
    let digits = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    match port.parse::<u16>() {
        Ok(port) if digits && port > 0 => Ok((host, port)),
        _ => Err("the port is not a number from 1 to 65535".to_owned()),
    }
}

impl RedisAddress {
    /// Parses and checks an address.
    ///
    /// Accepted: `redis://`, `rediss://` (TLS), `redis-sentinel://`, `rediss-sentinel://`,
    /// `redis-cluster://` and `rediss-cluster://` URLs (see [`RedisAddress`]): a host, port 1 to
    /// 65535 (default 6379; 26379 for Sentinel), database 0 to 255 (default 0; a cluster has
    /// database 0 only), `node=host:port` for Sentinel and Cluster, `sentinelServiceName` (required),
    /// `sentinelUsername` and `sentinelPassword` for Sentinel. `redis://:password@host`
    /// (password only) is accepted too. Special characters in the user or password must be
    /// percent-encoded (`@` as `%40`, `%` as `%25`): the Redis client percent-decodes them.
    ///
    /// # Errors
    /// [`InvalidAddress`] when the text is empty (or blank), is not a URL, uses another scheme,
    /// has no host, a port outside 1 to 65535, a path other than a database number (a cluster
    /// address: other than 0), a query parameter its scheme does not take (named), a `node=`
    /// that is not `host:port`, a sentinel address without `sentinelServiceName`, or a
    /// fragment; or when fred's parser cannot read it (its reason, secrets as `***`).
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::{RedisAddress, Topology};
    ///
    /// let cluster = RedisAddress::parse("rediss-cluster://redis-0?node=redis-1:6379&node=redis-2:6379")?;
    /// assert_eq!((cluster.topology(), cluster.tls()), (&Topology::Cluster, true));
    /// assert_eq!(cluster.nodes().len(), 3);
    ///
    /// // A password with `@` must be percent-encoded:
    /// assert!(RedisAddress::parse("redis://app:p%40ss@redis.internal").is_ok());
    /// assert!(RedisAddress::parse("redis-cluster://redis-0/3").is_err()); // a cluster has database 0 only
    /// assert!(RedisAddress::parse("redis-sentinel://s1:26379").is_err()); // no sentinelServiceName
    /// # Ok::<(), lock_redis::InvalidAddress>(())
    /// ```
    pub fn parse(text: &str) -> Result<RedisAddress, InvalidAddress> {
        let text = text.trim();
        if text.is_empty() {
            return Err(InvalidAddress::new("empty; a Redis URL is required"));
        }
        let url = Url::parse(text).map_err(|e| InvalidAddress::new(url_problem(e)))?;
        let Some(&(_, kind, _)) = SCHEMES.iter().find(|(s, ..)| *s == url.scheme()) else {
            return Err(InvalidAddress::new(match url.scheme() {
                _ if !text.contains("://") => "not a Redis URL (no scheme://)".to_owned(),
                scheme if scheme.ends_with("+unix") => {
                    format!("Unix sockets ({scheme}://) are not supported; use {SCHEME_LIST}")
                }
                scheme => {
                    format!("the scheme {scheme}:// is not a Redis scheme; use {SCHEME_LIST}")
                }
            }));
        };
        if url.host_str().is_none_or(str::is_empty) {
            return Err(InvalidAddress::new("the host is missing"));
        }
        if url.port() == Some(0) {
            return Err(InvalidAddress::new(
                "port 0 is not accepted; the port must be a number from 1 to 65535",
            ));
        }
        if url.fragment().is_some() {
            return Err(InvalidAddress::new("a fragment (#…) is not accepted"));
        }
        match path_database(url.path()) {
            Some(Err(())) => {
                return Err(InvalidAddress::new(format!(
                    "the path {:?} is not a database number from 0 to 255",
                    url.path()
                )));
            }
            Some(Ok(db)) if db != 0 && kind == Kind::Cluster => {
                return Err(InvalidAddress::new(format!(
                    "a Redis Cluster has only database 0, so the path /{db} is not accepted; \
                     leave the path out"
                )));
            }
            _ => {}
        }
        let topology = check_query(&url, kind)?;
        let plain = match url.scheme().strip_prefix("rediss") {
            Some(rest) => format!("redis{rest}{}", &url.as_str()[url.scheme().len()..]),
            None => url.as_str().to_owned(),
        };
        let client = Config::from_url(&plain).map_err(|e| {
            InvalidAddress::new(format!(
                "the Redis client cannot read it: {}",
                scrub_url(&url, e.details())
            ))
        })?;
        Ok(RedisAddress {
            url,
            topology,
            client,
        })
    }

    /// fred's configuration for the address, without TLS (see [`RedisAddress::tls`]).
    pub(crate) fn client_config(&self) -> &Config {
        &self.client
    }

    /// `text` (a client error, a log line) with this address's secrets as `***`: the URL as
    /// [`Display`](fmt::Display) shows it, and each secret as written and percent-decoded, since
    /// a client message may quote a password alone.
    pub(crate) fn scrub(&self, text: &str) -> String {
        scrub_url(&self.url, text)
    }

    /// The full URL, passwords included, for the Redis client. Do not log it.
    pub fn expose(&self) -> &str {
        self.url.as_str()
    }

    /// Whether the servers are one server, a Sentinel group or a Cluster.
    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// Whether the connections use TLS: `rediss://`, `rediss-sentinel://`, `rediss-cluster://`.
    pub fn tls(&self) -> bool {
        SCHEMES
            .iter()
            .any(|(scheme, _, tls)| *tls && *scheme == self.url.scheme())
    }

    /// The host name or IP address of the URL (IPv6 in brackets): the server, the first
    /// sentinel or the first cluster seed node.
    pub fn host(&self) -> &str {
        self.url.host_str().unwrap_or_default()
    }

    /// The port of the URL; when it names none, 26379 for a sentinel address and 6379
    /// otherwise.
    pub fn port(&self) -> u16 {
        self.url.port().unwrap_or(match self.topology {
            Topology::Sentinel { .. } => DEFAULT_SENTINEL_PORT,
            _ => DEFAULT_REDIS_PORT,
        })
    }

    /// Every server the address names, as `(host, port)`: the URL's host and port, then each
    /// `node=` in order. One entry for a single server; the sentinels for Sentinel; the seed
    /// nodes for Cluster.
    pub fn nodes(&self) -> Vec<(String, u16)> {
        let mut nodes = vec![(self.host().to_owned(), self.port())];
        for (name, value) in self.url.query_pairs() {
            if name != NODE {
                continue;
            }
            if let Ok((host, port)) = parse_host_port(&value) {
                nodes.push((host.to_owned(), port));
            }
        }
        nodes
    }

    /// The database number; 0 when the address names none (always 0 for a cluster).
    pub fn database(&self) -> u8 {
        match path_database(self.url.path()) {
            Some(Ok(db)) => db,
            _ => 0,
        }
    }

    /// The user name (Redis 6 ACL), if the address has one: of the server, or for Sentinel of
    /// the primary and replicas; as written in the URL (percent-encoded).
    pub fn username(&self) -> Option<&str> {
        Some(self.url.username()).filter(|user| !user.is_empty())
    }

    /// Whether the address carries a password (in its user part).
    pub fn has_password(&self) -> bool {
        self.url.password().is_some()
    }

    /// The password of the user part, percent-decoded as the Redis client sends it in `AUTH`:
    /// for a tool that talks to the server without the client. Do not log it.
    ///
    /// # Examples
    ///
    /// ```
    /// use lock_redis::RedisAddress;
    ///
    /// let address = RedisAddress::parse("redis://app:p%40ss@redis.internal")?;
    /// assert_eq!(address.password().as_deref(), Some("p@ss"));
    /// assert_eq!(RedisAddress::parse("redis://app@redis.internal")?.password(), None);
    /// # Ok::<(), lock_redis::InvalidAddress>(())
    /// ```
    pub fn password(&self) -> Option<Cow<'_, str>> {
        let written = self.url.password()?;
        Some(percent_encoding::percent_decode_str(written).decode_utf8_lossy())
    }

    /// The `sentinelUsername` of a sentinel address, if any.
    pub fn sentinel_username(&self) -> Option<String> {
        self.query_value(SENTINEL_USERNAME)
    }

    /// Whether a sentinel address carries a `sentinelPassword`.
    pub fn has_sentinel_password(&self) -> bool {
        self.query_value(SENTINEL_PASSWORD).is_some()
    }

    fn query_value(&self, wanted: &str) -> Option<String> {
        self.url
            .query_pairs()
            .find(|(name, _)| name == wanted)
            .map(|(_, value)| value.into_owned())
    }

    fn redacted(&self) -> Cow<'_, str> {
        redacted_url(&self.url)
    }
}

/// `url` with its password, a lone user part and secret-looking query values as `***`.
fn redacted_url(url: &Url) -> Cow<'_, str> {
    let query = url.query().and_then(redact_query);
    let user_only = url.password().is_none() && !url.username().is_empty();
    if url.password().is_none() && !user_only && query.is_none() {
        return Cow::Borrowed(url.as_str());
    }
    let mut url = url.clone();
    // Only fail for URLs without a host, which `parse` rejects.
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    } else if user_only {
        // `redis://secret@host`: a lone user part may be a password in the user's place.
        let _ = url.set_username("***");
    }
    if let Some(query) = query {
        url.set_query(Some(&query));
    }
    Cow::Owned(url.into())
}

/// `None` for no path or `/`, the database for `/N`, `Err` for anything else.
fn path_database(path: &str) -> Option<Result<u8, ()>> {
    let db = path.strip_prefix('/').unwrap_or(path);
    if db.is_empty() {
        return None;
    }
    Some(if db.bytes().all(|b| b.is_ascii_digit()) {
        db.parse().map_err(|_| ())
    } else {
        Err(())
    })
}

/// Checks the query parameters against what `kind` accepts; the topology they describe.
fn check_query(url: &Url, kind: Kind) -> Result<Topology, InvalidAddress> {
    let scheme = format!("{}://", url.scheme());
    let only_with_sentinel = |name: &str| {
        InvalidAddress::new(format!(
            "the query parameter {name} is only accepted with redis-sentinel:// and \
             rediss-sentinel://; {} names {}",
            scheme,
            match kind {
                Kind::Single => "one server",
                Kind::Sentinel => "a Sentinel group",
                Kind::Cluster => "a Redis Cluster",
            }
        ))
    };
    let mut service_name: Option<String> = None;
    let mut seen: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for (name, value) in url.query_pairs() {
        let name = name.as_ref();
        let known = [NODE, SERVICE_NAME, SENTINEL_USERNAME, SENTINEL_PASSWORD];
        if !known.contains(&name) {
            let hint = known
                .iter()
                .find(|k| k.eq_ignore_ascii_case(name))
                .map(|k| format!(" (did you mean {k}?)"))
                .unwrap_or_default();
            unknown.push(format!("{}{hint}", shown_name(name)));
            continue;
        }
        if !kind.parameters().contains(&name) {
            // Only a single-server address lacks `node`; only Sentinel takes the others.
            if name == NODE {
                return Err(InvalidAddress::new(format!(
                    "the query parameter node is only accepted with redis-sentinel:// and \
                     redis-cluster:// (and their rediss forms); {} names one server",
                    scheme
                )));
            }
            return Err(only_with_sentinel(name));
        }
        if name != NODE {
            if seen.iter().any(|s| s == name) {
                return Err(InvalidAddress::new(format!(
                    "the query parameter {name} is given twice; give it once"
                )));
            }
            seen.push(name.to_owned());
        }
        match name {
            NODE => {
                if let Err(problem) = parse_host_port(&value) {
                    return Err(InvalidAddress::new(format!(
                        "node={}: {problem}; each node= is host:port",
                        shown_name(&value)
                    )));
                }
            }
            SERVICE_NAME => {
                if value.trim().is_empty() {
                    return Err(InvalidAddress::new(
                        "sentinelServiceName is empty; it names the primary the sentinels \
                         watch (Sentinel's master name, e.g. mymaster)",
                    ));
                }
                service_name = Some(value.into_owned());
            }
            _ => {}
        }
    }
    if !unknown.is_empty() {
        let accepted = match kind.parameters() {
            [] => format!("{} takes none", scheme),
            names => format!("{} takes {}", scheme, names.join(", ")),
        };
        return Err(InvalidAddress::new(format!(
            "unknown query parameter{} {} ({accepted})",
            if unknown.len() == 1 { "" } else { "s" },
            unknown.join(", ")
        )));
    }
    Ok(match kind {
        Kind::Single => Topology::Single,
        Kind::Cluster => Topology::Cluster,
        Kind::Sentinel => Topology::Sentinel {
            service_name: service_name.ok_or_else(|| {
                InvalidAddress::new(
                    "sentinelServiceName is missing; a sentinel address needs \
                     ?sentinelServiceName=<master name> (the name the sentinels know the \
                     primary by, e.g. mymaster)",
                )
            })?,
        },
    })
}

/// The query with the value of every secret-looking parameter (`sentinelPassword`) as `***`;
/// `None` when there is none.
fn redact_query(query: &str) -> Option<String> {
    let mut changed = false;
    let parts: Vec<String> = query
        .split('&')
        .map(|part| match part.split_once('=') {
            Some((raw_name, _)) if looks_secret(&decoded_name(raw_name)) => {
                changed = true;
                format!("{raw_name}=***")
            }
            _ => part.to_owned(),
        })
        .collect();
    changed.then(|| parts.join("&"))
}

impl Default for RedisAddress {
    /// `redis://localhost:6379` ([`DEFAULT_ADDRESS`](crate::limits::DEFAULT_ADDRESS)).
    fn default() -> Self {
        RedisAddress::parse(crate::limits::DEFAULT_ADDRESS).expect("the default address parses")
    }
}

/// See [`RedisAddress::scrub`]; `url` need not be one `parse` accepts.
fn scrub_url(url: &Url, text: &str) -> String {
    // A lone user part may be a password written in the user's place.
    let mut written = vec![url.password().unwrap_or(url.username())];
    for part in url.query().unwrap_or_default().split('&') {
        if let Some((name, value)) = part.split_once('=') {
            if looks_secret(&decoded_name(name)) {
                written.push(value);
            }
        }
    }
    let mut secrets: Vec<String> = written
        .into_iter()
        .flat_map(|secret| {
            let decoded = percent_encoding::percent_decode_str(secret).decode_utf8_lossy();
            [secret.to_owned(), decoded.into_owned()]
        })
        .filter(|secret| !secret.is_empty())
        .collect();
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets.dedup();
    let mut text = text.replace(url.as_str(), &redacted_url(url));
    for secret in secrets {
        text = mask(&text, &secret);
    }
    text
}

/// `text` with each occurrence of `secret` as `***`, but for one inside a longer word: a
/// password `WRONG` leaves `WRONGPASS` alone, and is hidden wherever it stands by itself, as
/// between a URL's `:` and `@`.
fn mask(text: &str, secret: &str) -> String {
    let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let (starts_word, ends_word) = (word(secret.chars().next()), word(secret.chars().last()));
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(secret) {
        let (before, after) = (&rest[..at], &rest[at + secret.len()..]);
        let inside = (starts_word && word(before.chars().last()))
            || (ends_word && word(after.chars().next()));
        out.push_str(before);
        out.push_str(if inside { secret } else { "***" });
        rest = after;
    }
    out.push_str(rest);
    out
}

impl fmt::Display for RedisAddress {
    /// The URL with the password and a `sentinelPassword` replaced by `***` (a user part
    /// without a password as a whole).
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
            ("rediss://app:pw@h:6380/1", "h", 6380, 1, Some("app")),
            ("redis://h?", "h", 6379, 0, None),
        ] {
            let address = RedisAddress::parse(text).unwrap();
            assert_eq!(address.host(), host, "{text}");
            assert_eq!(address.port(), port, "{text}");
            assert_eq!(address.database(), db, "{text}");
            assert_eq!(address.username(), user, "{text}");
            assert_eq!(address.topology(), &Topology::Single, "{text}");
            assert_eq!(address.tls(), text.starts_with("rediss"), "{text}");
            assert_eq!(address.nodes(), [(host.to_owned(), port)], "{text}");
        }
    }

    #[test]
    fn accepts_the_sentinel_and_cluster_forms() {
        let sentinel = |name: &str| Topology::Sentinel {
            service_name: name.to_owned(),
        };
        for (text, topology, tls, nodes, db) in [
            (
                "redis-sentinel://s1?sentinelServiceName=mymaster",
                sentinel("mymaster"),
                false,
                vec![("s1", 26379)],
                0,
            ),
            (
                "rediss-sentinel://app:pw@s1:26380/2?sentinelServiceName=m&node=s2:26381\
                 &node=10.0.0.3:26379&sentinelUsername=sen&sentinelPassword=spw",
                sentinel("m"),
                true,
                vec![("s1", 26380), ("s2", 26381), ("10.0.0.3", 26379)],
                2,
            ),
            (
                "redis-sentinel://s1:26379?node=s2:26379&sentinelServiceName=my%20master",
                sentinel("my master"),
                false,
                vec![("s1", 26379), ("s2", 26379)],
                0,
            ),
            (
                "redis-cluster://c1:7000?node=c2:7001&node=c3:7002",
                Topology::Cluster,
                false,
                vec![("c1", 7000), ("c2", 7001), ("c3", 7002)],
                0,
            ),
            (
                "rediss-cluster://:pw@c1/0",
                Topology::Cluster,
                true,
                vec![("c1", 6379)],
                0,
            ),
            (
                "redis-cluster://c1:7000/",
                Topology::Cluster,
                false,
                vec![("c1", 7000)],
                0,
            ),
        ] {
            let address = RedisAddress::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(address.topology(), &topology, "{text}");
            assert_eq!(address.tls(), tls, "{text}");
            let nodes: Vec<(String, u16)> =
                nodes.iter().map(|(h, p)| ((*h).to_owned(), *p)).collect();
            assert_eq!(address.nodes(), nodes, "{text}");
            assert_eq!(address.database(), db, "{text}");
            assert_eq!(address.expose(), text, "{text}");
        }
        let full = RedisAddress::parse(
            "redis-sentinel://s1?sentinelServiceName=m&sentinelUsername=sen&sentinelPassword=x",
        )
        .unwrap();
        assert_eq!(full.sentinel_username().as_deref(), Some("sen"));
        assert!(full.has_sentinel_password());
        assert!(!full.has_password());
    }

    #[test]
    fn rejects_with_a_reason() {
        for (text, reason) in [
            ("localhost:6379", "not a Redis URL"),
            (
                "http://x",
                "the scheme http:// is not a Redis scheme; use redis://, ",
            ),
            ("valkey://x", "the scheme valkey:// is not a Redis scheme"),
            (
                "redis+unix:///tmp/r.sock",
                "Unix sockets (redis+unix://) are not supported",
            ),
            ("redis://", "host is missing"),
            ("redis:///0", "host is missing"),
            ("redis-cluster:///0", "host is missing"),
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
            (
                "redis://h?password=x",
                "unknown query parameter password (redis:// takes none)",
            ),
            (
                "redis://h?timeout=1&x=2",
                "unknown query parameters timeout, x (redis:// takes none)",
            ),
            (
                "redis://h?node=a:1",
                "the query parameter node is only accepted with redis-sentinel:// and \
                 redis-cluster://",
            ),
            (
                "rediss://h?sentinelServiceName=m",
                "the query parameter sentinelServiceName is only accepted with \
                 redis-sentinel:// and rediss-sentinel://; rediss:// names one server",
            ),
            (
                "redis-cluster://h?sentinelServiceName=m",
                "sentinelServiceName is only accepted with redis-sentinel:// and \
                 rediss-sentinel://; redis-cluster:// names a Redis Cluster",
            ),
            (
                "redis-cluster://h?sentinelPassword=m",
                "sentinelPassword is only accepted with redis-sentinel://",
            ),
            ("redis://h#x", "fragment"),
            ("", "empty; a Redis URL is required"),
            ("  ", "empty; a Redis URL is required"),
            ("redis.internal", "not a Redis URL (no scheme://)"),
            (
                "redis-sentinel://s1:26379",
                "sentinelServiceName is missing; a sentinel address needs \
                 ?sentinelServiceName=<master name>",
            ),
            (
                "redis-sentinel://s1?sentinelServiceName=",
                "sentinelServiceName is empty",
            ),
            (
                "redis-sentinel://s1?sentinelServiceName=a&sentinelServiceName=b",
                "the query parameter sentinelServiceName is given twice",
            ),
            (
                "redis-sentinel://s1?sentinelservicename=m",
                "unknown query parameter sentinelservicename (did you mean \
                 sentinelServiceName?) (redis-sentinel:// takes node, sentinelServiceName, \
                 sentinelUsername, sentinelPassword)",
            ),
            (
                "redis-sentinel://s1?sentinelServiceName=m&node=s2",
                "node=s2: the port is missing; host:port is required; each node= is host:port",
            ),
            (
                "redis-cluster://c1?node=c2:0",
                "node=c2:0: the port is not a number from 1 to 65535",
            ),
            (
                "redis-cluster://c1?node=c2:70000",
                "node=c2:70000: the port is not a number from 1 to 65535",
            ),
            (
                "redis-cluster://c1?node=:7000",
                "node=:7000: the host is missing",
            ),
            (
                "redis-cluster://c1?node=",
                "node=\"\": empty; host:port is required",
            ),
            (
                "redis-cluster://c1?node=[::1]:7000",
                "an IPv6 address is not accepted here",
            ),
            (
                "redis-cluster://c1?node=c2:7001&timeout=5",
                "unknown query parameter timeout (redis-cluster:// takes node)",
            ),
            (
                "redis-cluster://c1:7000/3",
                "a Redis Cluster has only database 0, so the path /3 is not accepted",
            ),
            (
                "rediss-cluster://c1/x",
                "the path \"/x\" is not a database number",
            ),
        ] {
            let problem = match RedisAddress::parse(text) {
                Ok(address) => panic!("{text}: accepted as {address:?}"),
                Err(e) => e.to_string(),
            };
            assert!(problem.contains(reason), "{text}: {problem}");
        }
    }

    #[test]
    fn host_port_entries() {
        assert_eq!(parse_host_port("s1:26379"), Ok(("s1", 26379)));
        assert_eq!(parse_host_port("10.0.0.7:1"), Ok(("10.0.0.7", 1)));
        for bad in [
            "s1", "s1:", "s1:+1", "s1: 1", "s 1:1", "s1:65536", "a@b:1", "::1",
        ] {
            assert!(parse_host_port(bad).is_err(), "{bad}");
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

        let sentinel = RedisAddress::parse(
            "rediss-sentinel://app:hunter2@s1/1?sentinelServiceName=m&sentinelUsername=sen\
             &sentinelPassword=hunter2&node=s2:26379",
        )
        .unwrap();
        let shown = "rediss-sentinel://app:***@s1/1?sentinelServiceName=m&sentinelUsername=sen\
                     &sentinelPassword=***&node=s2:26379";
        assert_eq!(sentinel.to_string(), shown);
        assert_eq!(format!("{sentinel:?}"), format!("RedisAddress({shown:?})"));
        assert!(sentinel.expose().contains("sentinelPassword=hunter2"));
        // A percent-encoded parameter name is the parameter (the client decodes it too), and
        // is redacted as such.
        let encoded = RedisAddress::parse(
            "redis-sentinel://s1?sentinelServiceName=m&sentinel%50assword=hunter2",
        )
        .unwrap();
        assert!(encoded.has_sentinel_password());
        assert_eq!(
            encoded.to_string(),
            "redis-sentinel://s1?sentinelServiceName=m&sentinel%50assword=***"
        );
        assert_eq!(
            redact(encoded.expose()),
            "redis-sentinel://s1?sentinelServiceName=m&sentinel%50assword=***"
        );
    }

    #[test]
    fn a_lone_user_part_shows_as_stars() {
        let address = RedisAddress::parse("rediss://Xk4PwLeak@h:6380/1").unwrap();
        assert_eq!(address.to_string(), "rediss://***@h:6380/1");
        assert_eq!(
            format!("{address:?}"),
            r#"RedisAddress("rediss://***@h:6380/1")"#
        );
        assert_eq!(address.username(), Some("Xk4PwLeak"));
        assert_eq!(address.expose(), "rediss://Xk4PwLeak@h:6380/1");
        assert_eq!(redact(address.expose()), address.to_string().as_str());
    }

    #[test]
    fn display_hides_exactly_the_secrets() {
        for (text, shown) in [
            ("redis://u:pw@h:1/0", "redis://u:***@h:1/0"),
            ("redis://pw@h", "redis://***@h"),
            ("redis://h:6379", "redis://h:6379"),
            // An unencoded `@` in the password: the URL parser encodes it, hidden whole.
            ("redis://u:p@ss@h", "redis://u:***@h"),
            (
                "redis-sentinel://u:pw1@h:26379/0?sentinelServiceName=m&sentinelUsername=s\
                 &sentinelPassword=pw2&node=h2:1",
                "redis-sentinel://u:***@h:26379/0?sentinelServiceName=m&sentinelUsername=s\
                 &sentinelPassword=***&node=h2:1",
            ),
            // An `@` in a query secret, with no user part: not taken for the end of one.
            (
                "redis-sentinel://127.0.0.1:1?sentinelServiceName=m&sentinelPassword=p@Pa55",
                "redis-sentinel://127.0.0.1:1?sentinelServiceName=m&sentinelPassword=***",
            ),
        ] {
            let address = RedisAddress::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(address.to_string(), shown, "{text}");
        }
    }

    #[test]
    fn scrub_hides_the_address_and_its_secrets_in_any_text() {
        let address = RedisAddress::parse("redis://u:hunter2@h").unwrap();
        assert_eq!(
            address.scrub("bad url redis://u:hunter2@h: hunter2"),
            "bad url redis://u:***@h: ***"
        );
        // Percent-encoded: hidden as written and as decoded.
        let encoded =
            "redis-sentinel://u:s3%40cret@h:1?sentinelServiceName=m&sentinelPassword=t%2Fop";
        let address = RedisAddress::parse(encoded).unwrap();
        assert_eq!(
            address.scrub(&format!("{encoded} s3@cret s3%40cret t/op t%2Fop")),
            "redis-sentinel://u:***@h:1?sentinelServiceName=m&sentinelPassword=*** *** *** *** ***"
        );
        let at_in_query = RedisAddress::parse(
            "redis-sentinel://127.0.0.1:1?sentinelServiceName=m&sentinelPassword=p@Pa55",
        )
        .unwrap();
        assert_eq!(at_in_query.scrub("auth p@Pa55 failed"), "auth *** failed");
        // A lone user part may be a password.
        let lone = RedisAddress::parse("rediss://Xk4PwLeak@h:6380").unwrap();
        assert_eq!(lone.scrub("NOAUTH for Xk4PwLeak"), "NOAUTH for ***");
        // A word that holds the password is not garbled; the password alone is still hidden.
        let word = RedisAddress::parse("redis://:WRONG@h").unwrap();
        assert_eq!(
            word.scrub("WRONGPASS invalid password WRONG for redis://:WRONG@h"),
            "WRONGPASS invalid password *** for redis://:***@h"
        );
    }

    #[test]
    fn fred_reads_the_address_without_tls() {
        let address = RedisAddress::parse(
            "rediss-sentinel://u:pw@s1:26380/2?sentinelServiceName=m&node=s2:26381",
        )
        .unwrap();
        let config = address.client_config();
        assert!(address.tls());
        assert!(config.tls.is_none(), "fred would load the system's roots");
        assert_eq!(config.database, Some(2));
        let fred::types::config::ServerConfig::Sentinel {
            hosts,
            service_name,
            ..
        } = &config.server
        else {
            panic!("{:?}", config.server);
        };
        assert_eq!(service_name, "m");
        let mut hosts: Vec<(String, u16)> =
            hosts.iter().map(|s| (s.host.to_string(), s.port)).collect();
        hosts.sort();
        assert_eq!(hosts, address.nodes());
    }
}
