//! A history of lock operations, recorded by every process of a test into its own file.
//!
//! Each process of a fault test (a pod, a worker, the controller that kills them) appends one
//! JSON line per [`Event`] to `<dir>/<process>.jsonl` through a [`Recorder`]; after the run,
//! [`load`] merges every file of the directory into one history ordered by [`monotonic_ns`],
//! the `CLOCK_MONOTONIC` clock that all processes of one host share. The
//! [`checker`](crate::checker) then judges that history.
//!
//! An operation is recorded twice: [`Phase::Invoke`] just before it starts and
//! [`Phase::Complete`] when its outcome is known, so the checker knows the window in which it
//! took effect. An operation whose process died in between has an invoke and no completion: its
//! outcome is unknown. [`Op::Lost`] and [`Op::Crash`] are single events (phase
//! [`Phase::Complete`] by convention; the checker ignores their phase).
//!
//! | op | invoke | complete, ok | complete, failed |
//! |---|---|---|---|
//! | [`Op::Acquire`] | key | `token` = the grant's fencing token | `code`, `reason` |
//! | [`Op::Write`] | key | `token`, `value` written | `token`, `code`, `reason` ([`STALE`](crate::fenced::STALE) when fenced off) |
//! | [`Op::Release`] | key | `token` optional | `code`, `reason` |
//! | [`Op::Lost`] | — | `token` of the lost grant, `reason` optional | — |
//! | [`Op::Crash`] | — | `process` = the victim, `key` = `""` for every key | — |
//!
//! The toolkit's workloads record their own operations ([`Op::Push`] to [`Op::Execute`]), each
//! judged by its workload's checker in the stress runner.
//!
//! A process name identifies one sequential actor: at most one operation of a kind on a key is
//! in flight per process at a time (the checker pairs a completion with the oldest open invoke of
//! the same process, op and key). Record only the outermost grant of a re-entrant acquisition:
//! a re-entered grant shares its token, and two grants with one token are a violation.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

/// The extension of history files; [`load`] reads every file of a directory that has it.
pub const EXTENSION: &str = "jsonl";

/// Now on `CLOCK_MONOTONIC`, in nanoseconds since an arbitrary point (usually boot).
///
/// Every process on one host reads the same clock, so timestamps of different processes are
/// comparable; it never steps back. Timestamps of different hosts are not comparable.
pub fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC exists on every Linux and cannot fail with a valid clock id.
    let now = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
    let secs = u64::try_from(now.tv_sec()).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec()).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// What a recorded [`Event`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// An acquisition of a lock key; its ok completion carries the grant's fencing token.
    Acquire,
    /// A release of a held key. Its *invoke* ends the holder's belief that it holds the key.
    Release,
    /// A fenced write of `value` with a fencing token to the guarded resource
    /// ([`FencedResource`](crate::fenced::FencedResource)).
    Write,
    /// The holder's lost-lease signal fired (`lost()` completed): the lease of the grant with
    /// `token` ended or passed on.
    Lost,
    /// A controller SIGKILLed or SIGSTOPped `process` (the victim). It ends every belief
    /// interval of the victim that is open at that time, for `key` (or for every key when
    /// `key` is empty).
    Crash,
    /// An item handed on: a queue push of item `value`, or a branch's registration; ok when
    /// confirmed.
    Push,
    /// A queue take handed item `value` to this process: a single event, timed when the take
    /// was invoked, `token` = the item's delivery count.
    Deliver,
    /// An acknowledgement: of queue item `value`, ok when the queue removed it; or a branch's
    /// release, `reason` saying how it counted.
    Ack,
    /// A rate-limit decision: ok = admitted, failed with `code` `DENIED` or the basis that
    /// refused it.
    Admit,
    /// A write of `value` at `key`: a compare-and-set, ok with the write's version as `token`
    /// and failed with `reason` `refused` when another write came first; or a cache put (an
    /// invalidation when `value` is none).
    Set,
    /// A read of `key`; ok with the `value` read (none: a miss).
    Get,
    /// A wait for a value to change from version `token`; ok with the `value` it saw change to.
    Wait,
    /// An action body ran, from invoke to completion: `value` is the run's number.
    Run,
    /// A call that may run an action or get another's outcome: an idempotent call, ok with
    /// the run number of the result it returned and `reason` saying how (`executed`,
    /// `replayed`, …); a single-flight caller that joined a run (`reason` `joined`); a master
    /// invocation, ok with its id as `token` and `reason` `<outcome>:<missing branches>`.
    Execute,
}

/// Whether an [`Event`] marks the start of an operation or its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Recorded just before the operation starts.
    Invoke,
    /// Recorded once the outcome is known (`ok`, and on failure `code` and `reason`).
    Complete,
}

/// One line of a history file.
///
/// `None` fields are left out of the JSON line and read back as `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The process the event is about: the recorder's process, or the victim of a
    /// [`Op::Crash`].
    pub process: String,
    /// When it happened, [`monotonic_ns`] (ns).
    pub t_ns: u64,
    /// The operation.
    pub op: Op,
    /// Invoke or complete.
    pub phase: Phase,
    /// The lock key (the resource key for writes); `""` in a [`Op::Crash`] means every key.
    pub key: String,
    /// The fencing token: of the grant (acquire complete ok), the write, the release or the lost
    /// grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// On a completion: whether the operation succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
    /// On a failed completion: the error code, e.g. `LOCK_ACQUISITION_FAILED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// On a failed completion: why, e.g. `held_by_another_owner`, `backend_unavailable`, or
    /// [`STALE`](crate::fenced::STALE) for a write the resource fenced off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// On a write: the value written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
}

impl Event {
    /// An event of `process` about `key`, timestamped now ([`monotonic_ns`]), with every
    /// optional field `None`.
    pub fn new(process: &str, op: Op, phase: Phase, key: &str) -> Event {
        Event {
            process: process.to_owned(),
            t_ns: monotonic_ns(),
            op,
            phase,
            key: key.to_owned(),
            token: None,
            ok: None,
            code: None,
            reason: None,
            value: None,
        }
    }

    /// `process`'s lost-lease signal fired now for its grant of `key` with `token`.
    pub fn lost(process: &str, key: &str, token: Option<u64>) -> Event {
        Event {
            token,
            ..Event::new(process, Op::Lost, Phase::Complete, key)
        }
    }

    /// A controller killed or stopped `victim` now; `key` is `""` for every key it holds.
    pub fn crash(victim: &str, key: &str) -> Event {
        Event::new(victim, Op::Crash, Phase::Complete, key)
    }
}

/// Appends the events of one process to `<dir>/<process>.jsonl`, one JSON line per event.
///
/// Every event is one `write(2)` of a whole line to a file opened with `O_APPEND`, straight to
/// the kernel (no user-space buffer): once a method returns, the line survives a SIGKILL of the
/// process, and a SIGKILL during the call loses at most that line, leaving a truncated last line
/// that [`load`] skips. (Nothing is `fsync`ed: the history survives a crash of the process, not
/// of the host.) A recorder may be shared by the tasks and threads of a process; their lines do
/// not interleave.
#[derive(Debug)]
pub struct Recorder {
    process: String,
    path: PathBuf,
    file: Mutex<File>,
}

impl Recorder {
    /// Opens `<dir>/<process>.jsonl` for appending, creating `dir` and the file as needed.
    ///
    /// A process restarted under the same name appends to its earlier file; if the earlier
    /// incarnation was killed in the middle of a line, that partial line is cut off first, so
    /// that it does not merge with the next one. Give each live process its own name: two
    /// recorders of one name in different processes at once would cut each other's lines.
    ///
    /// `process` must be usable as a file name: not empty, no `/`, not `.` or `..`.
    pub fn create(dir: &Path, process: &str) -> io::Result<Recorder> {
        if process.is_empty() || process.contains('/') || process == "." || process == ".." {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("process name {process:?} cannot be a history file name"),
            ));
        }
        fs::create_dir_all(dir)?;
        let path = dir.join(format!("{process}.{EXTENSION}"));
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        cut_partial_last_line(&file)?;
        Ok(Recorder {
            process: process.to_owned(),
            path,
            file: Mutex::new(file),
        })
    }

    /// The process name events are recorded under.
    pub fn process(&self) -> &str {
        &self.process
    }

    /// The file events are appended to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records that this process starts `op` on `key`, now.
    pub fn invoke(&self, op: Op, key: &str) -> io::Result<()> {
        self.record(Event::new(&self.process, op, Phase::Invoke, key))
    }

    /// Records that `op` on `key` succeeded, now, with the grant's or the write's `token` and
    /// the written `value`.
    pub fn complete_ok(
        &self,
        op: Op,
        key: &str,
        token: Option<u64>,
        value: Option<i64>,
    ) -> io::Result<()> {
        self.record(Event {
            token,
            ok: Some(true),
            value,
            ..Event::new(&self.process, op, Phase::Complete, key)
        })
    }

    /// Records that `op` on `key` failed, now, with its error `code` and `reason` (and the
    /// `token` it carried, for writes and releases).
    pub fn complete_err(
        &self,
        op: Op,
        key: &str,
        token: Option<u64>,
        code: &str,
        reason: &str,
    ) -> io::Result<()> {
        self.record(Event {
            token,
            ok: Some(false),
            code: Some(code.to_owned()),
            reason: Some(reason.to_owned()),
            ..Event::new(&self.process, op, Phase::Complete, key)
        })
    }

    /// Appends `event` as it is: for [`Op::Lost`], [`Op::Crash`] (whose `process` is the
    /// victim, not this recorder's process) or an event with a timestamp of its own.
    pub fn record(&self, event: Event) -> io::Result<()> {
        let mut line = serde_json::to_vec(&event).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        // One write(2) per line (O_APPEND): a line is never interleaved with another writer's.
        file.write_all(&line)
    }
}

/// Truncates `file` after its last newline, removing a partial line a killed writer left.
fn cut_partial_last_line(file: &File) -> io::Result<()> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(());
    }
    let mut reader = file;
    let mut end = len;
    let mut chunk = vec![0u8; 4096];
    while end > 0 {
        let start = end.saturating_sub(chunk.len() as u64);
        let n = usize::try_from(end - start).map_err(io::Error::other)?;
        reader.seek(SeekFrom::Start(start))?;
        reader.read_exact(&mut chunk[..n])?;
        if let Some(i) = chunk[..n].iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(());
        }
        end = start;
    }
    // No newline at all: the whole file is one partial line.
    file.set_len(0)
}

/// Reads every `*.jsonl` file of `dir` (not its subdirectories) and returns their events
/// ordered by `t_ns`.
///
/// Events with equal timestamps keep their order within a file; files are merged in name order.
/// The last line of a file may be truncated (its process was killed while writing it); it is
/// skipped. Any other line that is not an [`Event`] is an [`io::ErrorKind::InvalidData`] error
/// naming the file and line.
pub fn load(dir: &Path) -> io::Result<Vec<Event>> {
    let mut paths = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == EXTENSION) && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    let mut events = Vec::new();
    for path in paths {
        events.extend(parse_file(&path)?);
    }
    events.sort_by_key(|e| e.t_ns);
    Ok(events)
}

/// The events of one history file.
fn parse_file(path: &Path) -> io::Result<Vec<Event>> {
    let bytes = fs::read(path)?;
    let complete = bytes.last().is_none_or(|&b| b == b'\n');
    let mut lines: Vec<&[u8]> = bytes.split(|&b| b == b'\n').collect();
    // `split` yields an empty piece after a final newline; without one, the last piece is the
    // line a killed process did not finish (or, rarely, finished all but its newline).
    let last = lines.pop().unwrap_or_default();
    let mut events = Vec::with_capacity(lines.len() + 1);
    for (i, line) in lines.iter().enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let event = serde_json::from_slice(line).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}:{}: not a history event: {e}", path.display(), i + 1),
            )
        })?;
        events.push(event);
    }
    if !complete {
        if let Ok(event) = serde_json::from_slice(last) {
            events.push(event);
        }
    }
    Ok(events)
}
