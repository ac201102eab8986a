//! What several test modules share: the deadline for things that should be prompt, polling
//! until something holds, and whether a process is gone.

use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

pub(crate) use lock_testkit::GENEROUS;

/// Polls `done` every few milliseconds until it holds; panics naming `what` after `within`.
pub(crate) fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < within, "{what}: not within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `pid` is gone: no such process, or only a zombie left for a parent that is not us.
pub(crate) fn process_is_gone(pid: u32) -> bool {
    match kill(Pid::from_raw(pid as i32), None) {
        Err(Errno::ESRCH) => true,
        _ => std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| {
                let state = stat
                    .rfind(')')
                    .map(|i| stat[i + 1..].trim_start().to_owned());
                state.map(|s| s.starts_with('Z') || s.starts_with('X'))
            })
            .unwrap_or(true),
    }
}

/// Waits until every process of `pids` is gone, within [`GENEROUS`].
pub(crate) fn wait_until_all_gone(pids: &[u32]) {
    wait_until(&format!("processes {pids:?} gone"), GENEROUS, || {
        pids.iter().all(|&pid| process_is_gone(pid))
    });
}
