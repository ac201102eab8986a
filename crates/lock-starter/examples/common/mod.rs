//! What the command-line examples do before anything about the lock: logs on stderr. A module
//! of each example (`mod common;`), not an example of its own.

/// Logs to stderr, coloured on a terminal only, at the level `RUST_LOG` names, or else
/// `warn,fred=error`: fred warns about routine shutdown steps, and its errors still show.
pub(crate) fn log_to_stderr() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,fred=error".into()),
        )
        .init();
}

/// The starter from the environment; a bad configuration is printed to stderr, with exit code
/// 78.
#[allow(dead_code, reason = "not every command-line example starts this way")]
pub(crate) async fn start() -> Result<lock_starter::LockStarter, std::process::ExitCode> {
    lock_starter::LockStarter::builder()
        .build()
        .await
        .map_err(|error| {
            eprintln!("{error}");
            std::process::ExitCode::from(78)
        })
}
