//! The spinner `run` shows on a terminal while it waits for a held lock.

use std::io::Write;
use std::time::Duration;

use lock_starter::redis::{LockState, RedisLock};

/// How often the spinner turns.
const FRAME: Duration = Duration::from_millis(100);
/// The holder is read every this many frames (once a second): a status call per frame would
/// load Redis for a cosmetic detail.
const FRAMES_PER_STATUS: usize = 10;

/// Shows `| waiting for lock KEY, held by HOLDER` on stderr, redrawn in place, until aborted.
pub(crate) struct Spinner {
    task: tokio::task::JoinHandle<()>,
}

impl Spinner {
    /// Starts the spinner for `key` if stderr is a terminal (in a log file it would only be
    /// noise); `None` otherwise.
    pub(crate) fn start(lock: &RedisLock, key: &str) -> Option<Spinner> {
        use std::io::IsTerminal;
        std::io::stderr().is_terminal().then(|| Spinner {
            task: tokio::spawn(spin(lock.clone(), key.to_owned())),
        })
    }

    /// Stops it and clears its line, so what follows starts on a clean line.
    pub(crate) async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        eprint!("\r\x1b[2K");
    }
}

async fn spin(lock: RedisLock, key: String) {
    const FRAMES: [char; 4] = ['|', '/', '-', '\\'];
    let mut holder = String::from("…");
    for tick in 0usize.. {
        if tick % FRAMES_PER_STATUS == 0 {
            if let Ok(status) = lock.status(&key).await {
                holder = match status.state {
                    LockState::Held { instance_id, .. } => instance_id,
                    _ => "nobody".into(),
                };
            }
        }
        eprint!(
            "\r\x1b[2K{} waiting for lock {key}, held by {holder}",
            FRAMES[tick % FRAMES.len()]
        );
        let _ = std::io::stderr().flush();
        tokio::time::sleep(FRAME).await;
    }
}
