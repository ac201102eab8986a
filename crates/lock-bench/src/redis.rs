//! The Redis a run measures: a private `redis-server` started for the run, or the one at
//! `--redis-url`; and what only the server can tell (`INFO commandstats`).

use lock_testkit::{RedisServer, command_at};

/// Where the Redis is, as the raw `INFO` connection needs it.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) password: Option<String>,
}

impl Target {
    /// Parses `redis://[[user]:password@]host[:port][/db]`.
    ///
    /// # Errors
    /// A message naming the URL and the accepted form.
    pub(crate) fn parse(url: &str) -> Result<Self, String> {
        let problem = |what: &str| {
            format!(
                "--redis-url '{url}': {what}; expected redis://[:password@]host[:port][/db] (a single server; no TLS, Sentinel or Cluster)"
            )
        };
        let rest = url
            .strip_prefix("redis://")
            .ok_or_else(|| problem("not a redis:// URL"))?;
        let (credentials, address) = match rest.rsplit_once('@') {
            Some((credentials, address)) => (Some(credentials), address),
            None => (None, rest),
        };
        let address = address.split('/').next().unwrap_or_default();
        let (host, port) = match address.rsplit_once(':') {
            Some((host, port)) => (
                host,
                port.parse::<u16>()
                    .map_err(|_| problem(&format!("port '{port}' is not a number 1..65535")))?,
            ),
            None => (address, 6379),
        };
        if host.is_empty() {
            return Err(problem("no host"));
        }
        let password = credentials
            .map(|c| c.rsplit_once(':').map_or(c, |(_, password)| password))
            .filter(|p| !p.is_empty())
            .map(str::to_owned);
        Ok(Target {
            url: url.to_owned(),
            host: host.to_owned(),
            port,
            password,
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

    /// One command on a fresh connection, reply as text.
    pub(crate) async fn command(&self, args: &[&str]) -> Result<String, String> {
        command_at(&self.host, self.port, self.password.as_deref(), args)
            .await
            .map_err(|e| format!("{} {}: {e}", self.url, args.join(" ")))
    }

    /// Calls of every command so far (`calls=` summed over `INFO commandstats`; Redis counts the
    /// `redis.call`s inside scripts too), and the calls of `EVALSHA` alone.
    pub(crate) async fn command_calls(&self) -> Result<CommandCalls, String> {
        let info = self.command(&["INFO", "commandstats"]).await?;
        Ok(CommandCalls::parse(&info))
    }
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
        for line in info.lines() {
            let Some(stat) = line.trim().strip_prefix("cmdstat_") else {
                continue;
            };
            let n = stat
                .split_once("calls=")
                .and_then(|(_, rest)| rest.split(',').next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            calls.total += n;
            if stat.starts_with("evalsha:") {
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
    }

    #[test]
    fn rejects_other_urls_naming_the_accepted_form() {
        for bad in [
            "rediss://h:1",
            "h:1",
            "redis://h:port",
            "redis://:1",
            "redis://h:70000",
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
}
