//! The command line (clap) and the exit codes scripts rely on.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lock_starter::lock::limits::{MAX_LEASE, MAX_WAIT, MIN_LEASE};

use crate::exit::EXIT_USAGE;
use crate::output::Failure;

/// Exit codes and configuration, shown by `--help`. docs/operations.md repeats the exit codes:
/// change both together.
pub(crate) const AFTER_HELP: &str = "\
Configuration: the lock-starter's sources — built-in defaults, then each --config TOML file \
(later wins), then TELCO_PLATFORM_LOCK_* environment variables (e.g. \
TELCO_PLATFORM_LOCK_REDIS_ADDRESS=redis://127.0.0.1:6379). See docs/configuration.md.

Exit codes:
  0    done (release: also when the lock was not held)
  1    Redis unavailable or refusing; release: nothing released (declined at the prompt, or
       the lock changed hands since it was shown); the output could not be written
  2    bad arguments (including release --force without --yes when stdin is not a terminal)
  70   run: the lease was lost while the command ran: the command was terminated, or had
       finished without the lock
  75   run: the lock was not acquired within --wait (held by another owner)
  78   bad configuration (also credentials Redis refuses); run: the lock is disabled
       (telco.platform.lock.enabled = false)
  126, 127  run: the command could not be executed / was not found
  other run: the command's own exit code; 128+N when it was killed by signal N";

#[derive(Debug, Parser)]
#[command(
    name = "platform-lock",
    version,
    about = "Inspect, list and force-release distributed locks; run a command under a lock",
    after_help = AFTER_HELP
)]
pub(crate) struct Cli {
    /// A TOML configuration file (telco.platform.lock.* keys); repeat for more, later wins.
    #[arg(long = "config", global = true, value_name = "FILE")]
    pub(crate) config: Vec<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Show a lock: holder (instance id), remaining TTL, hold count, fencing token, waiters,
    /// and the Redis and key prefix it was looked up under.
    Status {
        /// The lock's name, e.g. bill-run:2026-11.
        key: String,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List held locks (found with SCAN, never KEYS) with holder and TTL, saying which Redis
    /// and key prefix were searched.
    List {
        /// Glob over lock names (Redis MATCH syntax), e.g. 'bill-run:*'. Default: all.
        #[arg(value_parser = parse_pattern)]
        pattern: Option<String>,
        /// At most this many locks (1 or more).
        #[arg(long, default_value_t = 1000, value_parser = parse_limit)]
        limit: usize,
        /// Print one JSON object instead of the table: the Redis and key prefix searched
        /// (redis, keyPrefix, pattern) and the held locks (locks).
        #[arg(long)]
        json: bool,
    },
    /// Release a lock whoever holds it (runbooks' "force unlock"); its waiters are woken.
    Release {
        /// Required: this releases another process's lock.
        #[arg(long, required = true)]
        force: bool,
        /// Do not ask for confirmation (needed when stdin is not a terminal).
        #[arg(long, short = 'y')]
        yes: bool,
        /// The lock's name.
        key: String,
    },
    /// Run COMMAND while holding the lock, like flock(1) across machines.
    ///
    /// The lease is a watchdog lease (renewed while this process lives) unless --lease is
    /// given. Before the lease can run out (a fixed lease's end, a watchdog lease whose
    /// renewals go unconfirmed) the command gets SIGTERM, then SIGKILL just before the lease's
    /// end, and platform-lock exits 70; if the lease is lost otherwise (a forced release), the
    /// command gets SIGTERM, then SIGKILL 5 s later, and platform-lock exits 70. SIGINT,
    /// SIGTERM and SIGHUP sent to platform-lock are forwarded to the command, which gets SIGKILL
    /// 5 s after the first one (on a terminal, where Ctrl-C reaches the command directly, not
    /// SIGINT).
    /// Should platform-lock itself die (SIGKILL, the OOM killer), a guardian process kills the
    /// command at once, and should it be stopped, before the lease's end. Off a terminal
    /// all of this goes to the command's process group, and processes the command leaves
    /// running when it exits are stopped the same way before the lock is released. The command
    /// sees the grant's fencing token in PLATFORM_LOCK_FENCING_TOKEN.
    Run {
        /// The lock's name.
        #[arg(long)]
        key: String,
        /// A fixed lease instead of the watchdog, 100ms to 168h, e.g. 30s: the lock ends after
        /// it even if the command still runs (the command is then terminated).
        #[arg(long, value_parser = parse_lease, allow_hyphen_values = true)]
        lease: Option<Duration>,
        /// How long to wait for the lock, 0 (one attempt) to 1h, e.g. 2m. Default: the
        /// configured telco.platform.lock.wait-time (5 s).
        #[arg(long, value_parser = parse_wait, allow_hyphen_values = true)]
        wait: Option<Duration>,
        /// The command and its arguments, after `--` (passed as given, UTF-8 or not).
        #[arg(last = true, required = true, value_name = "COMMAND")]
        command: Vec<std::ffi::OsString>,
    },
}

/// The command line, or the exit code when there is nothing to run: `--help` and `--version`
/// print and succeed; bad arguments are one line on stderr (exit 2).
pub(crate) fn parse() -> Result<Cli, std::process::ExitCode> {
    let error = match Cli::try_parse() {
        Ok(cli) => return Ok(cli),
        Err(error) => error,
    };
    if !error.use_stderr() {
        let _ = error.print();
        return Err(std::process::ExitCode::SUCCESS);
    }
    Err(Failure::new(EXIT_USAGE, usage_line(&error.render().to_string())).report())
}

/// clap's error text as one line: its first paragraph (which may go on over several lines, as
/// "the following required arguments were not provided:" does) and the usage it shows.
fn usage_line(rendered: &str) -> String {
    let mut paragraphs = rendered.split("\n\n");
    let what = paragraphs
        .next()
        .map(|paragraph| paragraph.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|what| !what.is_empty())
        .unwrap_or_else(|| "error: bad arguments".to_owned());
    let usage = paragraphs
        .filter_map(|paragraph| paragraph.trim().strip_prefix("Usage: "))
        .map(|usage| usage.split_whitespace().collect::<Vec<_>>().join(" "))
        .next();
    match usage {
        Some(usage) => format!("{what} (usage: {usage}; see platform-lock --help)"),
        None => format!("{what} (see platform-lock --help)"),
    }
}

/// A duration as the configuration's keys read it ([`lock_starter::config::parse_duration`]).
fn parse_duration(text: &str) -> Result<Duration, String> {
    const FORMS: &str = "durations look like 500ms, 30s, 2m or 1h30m";
    lock_starter::config::parse_duration(text).map_err(|problem| format!("{problem}; {FORMS}"))
}

/// `--lease`: the fixed leases the lock accepts.
fn parse_lease(text: &str) -> Result<Duration, String> {
    let lease = parse_duration(text)?;
    if (MIN_LEASE..=MAX_LEASE).contains(&lease) {
        return Ok(lease);
    }
    Err(format!(
        "a fixed lease is {}; leave --lease out for a watchdog lease, renewed while the command \
         runs",
        lock_starter::config::duration_range(MIN_LEASE, MAX_LEASE)
    ))
}

/// `--wait`: zero (one attempt) up to the lock's longest wait.
fn parse_wait(text: &str) -> Result<Duration, String> {
    let wait = parse_duration(text)?;
    if wait <= MAX_WAIT {
        return Ok(wait);
    }
    Err(format!(
        "the wait is {} (0 is one attempt)",
        lock_starter::config::duration_range(Duration::ZERO, MAX_WAIT)
    ))
}

/// `list PATTERN`: an empty glob would match no lock, silently, and a lock's name holds no
/// control character.
fn parse_pattern(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err(
            "the pattern is empty; leave it out to list every lock, or give a glob \
                    such as 'bill-run:*'"
                .to_owned(),
        );
    }
    if text.chars().any(char::is_control) {
        return Err("the pattern holds a control character, which no lock's name does".to_owned());
    }
    Ok(text.to_owned())
}

/// `--limit`: 0 would list nothing, which no one asks for on purpose.
fn parse_limit(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("the limit is at least 1".to_owned()),
        Ok(limit) => Ok(limit),
        Err(_) => Err("not a whole number; the limit is at least 1".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line_with_the_usage() {
        let missing = "error: the following required arguments were not provided:\n  \
                       <COMMAND>...\n\nUsage: platform-lock run --key <KEY> -- <COMMAND>...\n\n\
                       For more information, try '--help'.\n";
        assert_eq!(
            usage_line(missing),
            "error: the following required arguments were not provided: <COMMAND>... (usage: \
             platform-lock run --key <KEY> -- <COMMAND>...; see platform-lock --help)"
        );
        assert_eq!(
            usage_line(""),
            "error: bad arguments (see platform-lock --help)"
        );
    }

    #[test]
    fn durations_outside_the_locks_bounds_are_bad_arguments() {
        assert_eq!(parse_lease("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_lease("100ms"), Ok(MIN_LEASE));
        for bad in ["0s", "99ms", "169h", "99999999999999999s"] {
            let problem = parse_lease(bad).expect_err(bad);
            assert!(problem.contains("100 ms to 168 h"), "{bad}: {problem}");
        }
        assert!(
            parse_lease("abc")
                .unwrap_err()
                .contains("durations look like")
        );
        assert_eq!(parse_wait("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("1h"), Ok(MAX_WAIT));
        assert!(
            parse_wait("61m")
                .unwrap_err()
                .contains("the wait is 0 to 1 h (0 is one attempt)")
        );
        assert!(parse_wait("18446744073709551616s").is_err());
    }
}
