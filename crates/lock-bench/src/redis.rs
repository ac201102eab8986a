//! The Redis a run measures: a private `redis-server` started for the run, or the one at
//! `--redis-url`; and what only the server can tell (`INFO commandstats`).

use lock_redis::{RedisAddress, Topology, redact};
use lock_testkit::{RedisServer, TestkitError, command_at};

/// Where the Redis is, as the raw `INFO` connection needs it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) address: RedisAddress,
    /// Without the brackets of an IPv6 address.
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) password: Option<String>,
}

impl Target {
    /// Parses `redis://[[user]:password@]host[:port][/db]` with [`RedisAddress::parse`]; an IPv6
    /// host goes in brackets.
    ///
    /// # Errors
    /// A message naming the URL (password masked), what is wrong and the accepted form.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let problem = |what: &str| {
            format!(
                "--redis-url '{}': {what}; expected redis://[:password@]host[:port][/db] (a single server; no TLS, Sentinel or Cluster)",
                redact(url)
            )
        };
        let address = RedisAddress::parse(url).map_err(|e| problem(e.problem()))?;
        if address.topology() != &Topology::Single || address.tls() {
            return Err(problem("not a redis:// URL"));
        }
        Ok(Target {
            host: address
                .host()
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_owned(),
            port: address.port(),
            password: address.password().map(|p| p.into_owned()),
            address,
        })
    }

    /// Starts a private `redis-server` on a free loopback port (no persistence, own temp dir,
    /// stopped when the returned server is dropped), as ../shared/peers/run.sh does.
    ///
    /// # Errors
    /// When `redis-server` is missing or does not start.
    pub(crate) async fn private() -> Result<(Self, RedisServer), String> {
        let server = RedisServer::start()
            .await
            .map_err(|e| format!("could not start a private redis-server: {e}"))?;
        let target = Target::parse(&server.url())?;
        Ok((target, server))
    }

    /// The URL with its password masked, for messages.
    pub(crate) fn shown(&self) -> String {
        self.address.to_string()
    }

    /// One command on a fresh connection, reply as text.
    ///
    /// # Errors
    /// One line naming the server, the command (not its arguments: a script's source would
    /// fill the screen) and what to check.
    pub(crate) async fn command(&self, args: &[&str]) -> Result<String, String> {
        let name = args.first().copied().unwrap_or_default();
        command_at(&self.host, self.port, self.password.as_deref(), args)
            .await
            .map_err(|error| match error {
                TestkitError::Connection { source, .. } => format!(
                    "cannot reach Redis at {}:{} ({source}); is redis-server running there?",
                    self.host, self.port
                ),
                TestkitError::Redis { message, .. }
                    if ["NOAUTH", "WRONGPASS", "AUTH"]
                        .iter()
                        .any(|m| message.starts_with(m) || message.contains(" AUTH ")) =>
                {
                    format!(
                        "Redis at {}:{} refused the credentials ({message}); check the user and password in --redis-url {}",
                        self.host,
                        self.port,
                        self.shown()
                    )
                }
                TestkitError::Redis { message, .. } => {
                    format!("Redis at {}:{} refused {name}: {message}", self.host, self.port)
                }
                other => format!("{name} to Redis at {}:{}: {other}", self.host, self.port),
            })
    }

    /// Calls of every command so far (`calls=` summed over `INFO commandstats`; Redis counts the
    /// `redis.call`s inside scripts too), and the calls of `EVALSHA` alone.
    pub(crate) async fn command_calls(&self) -> Result<CommandCalls, String> {
        let info = self.command(&["INFO", "commandstats"]).await?;
        Ok(CommandCalls::parse(&info))
    }
}

/// The lines of `INFO commandstats`, as (command, its `calls=…,usec=…` list).
pub(crate) fn command_stats(info: &str) -> impl Iterator<Item = (&str, &str)> {
    info.lines()
        .filter_map(|line| line.trim().strip_prefix("cmdstat_")?.split_once(':'))
}

/// One field (`calls`, `usec`) of a command's list from [`command_stats`]; 0 when absent.
pub(crate) fn stat_field(stats: &str, field: &str) -> u64 {
    stats
        .split(',')
        .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Command counts from one `INFO commandstats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CommandCalls {
    pub(crate) total: u64,
    pub(crate) evalsha: u64,
}

impl CommandCalls {
    fn parse(info: &str) -> Self {
        let mut calls = CommandCalls::default();
        for (command, stats) in command_stats(info) {
            let n = stat_field(stats, "calls");
            calls.total += n;
            if command == "evalsha" {
                calls.evalsha += n;
            }
        }
        calls
    }

    /// Calls made since `before`, less `own` requests of the measurement itself.
    pub(crate) fn since(self, before: CommandCalls, own: u64) -> CommandCalls {
        CommandCalls {
            total: self.total.saturating_sub(before.total).saturating_sub(own),
            evalsha: self.evalsha.saturating_sub(before.evalsha),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_accepted_url_forms() {
        let t = Target::parse("redis://127.0.0.1:7001").expect("plain");
        assert_eq!(
            (t.host.as_str(), t.port, t.password),
            ("127.0.0.1", 7001, None)
        );
        let t = Target::parse("redis://:s3cret@localhost/0").expect("password");
        assert_eq!((t.host.as_str(), t.port), ("localhost", 6379));
        assert_eq!(t.password.as_deref(), Some("s3cret"));
        let t = Target::parse("redis://bench:pw@h:1").expect("user");
        assert_eq!(t.password.as_deref(), Some("pw"));
        // Percent-encoded, as the lock's client decodes it.
        let t = Target::parse("redis://bench:p%40ss@h:1").expect("encoded");
        assert_eq!(t.password.as_deref(), Some("p@ss"));
    }

    #[test]
    fn rejects_other_urls_naming_the_accepted_form() {
        for bad in [
            "rediss://h:1",
            "h:1",
            "redis://h:port",
            "redis://:1",
            "redis://h:70000",
            "redis://h:0",
            "redis://h:1/abc",
        ] {
            let error = Target::parse(bad).expect_err(bad);
            assert!(
                error.contains(bad) && error.contains("expected redis://"),
                "{error}"
            );
        }
    }

    #[test]
    fn counts_calls_and_evalsha() {
        let info = "# Commandstats\r\ncmdstat_get:calls=10,usec=5,usec_per_call=0.5,rejected_calls=0,failed_calls=0\r\n\
                    cmdstat_evalsha:calls=4,usec=9,usec_per_call=2.2,rejected_calls=0,failed_calls=0\r\n";
        let calls = CommandCalls::parse(info);
        assert_eq!(
            calls,
            CommandCalls {
                total: 14,
                evalsha: 4
            }
        );
        let later = CommandCalls {
            total: 20,
            evalsha: 6,
        };
        assert_eq!(
            later.since(calls, 1),
            CommandCalls {
                total: 5,
                evalsha: 2
            }
        );
    }

    #[test]
    fn ipv6_hosts_go_in_brackets() {
        let t = Target::parse("redis://[::1]:7001").expect("IPv6");
        assert_eq!((t.host.as_str(), t.port), ("::1", 7001));
        let t = Target::parse("redis://[::1]").expect("IPv6, default port");
        assert_eq!((t.host.as_str(), t.port), ("::1", 6379));
    }

    #[test]
    fn passwords_never_show_in_messages() {
        let target = Target::parse("redis://bench:s3cret@h:1/0").unwrap();
        assert_eq!(target.shown(), "redis://bench:***@h:1/0");
        let error = Target::parse("redis://:s3cret@h:port").expect_err("bad port");
        assert!(!error.contains("s3cret"), "{error}");
        let error = Target::parse("rediss://:s3cret@h:1").expect_err("TLS");
        assert!(!error.contains("s3cret"), "{error}");
    }
}
