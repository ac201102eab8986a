//! The reference fenced resource: what a store that honours fencing tokens does, shared by the
//! processes of a test through files.
//!
//! [`FencedResource`] is a register of one integer per key. It accepts a write only if the
//! write's fencing token is **strictly greater** than every token it has accepted for that key
//! (the "one write per grant" rule of `docs/fencing.md`), and records the new token in the same
//! atomic step. A stale lock holder's write is therefore refused once a newer grant has written,
//! and a grant can write at most once per key.
//!
//! Every accepted write is appended to an accepted-write log ([`FencedResource::accepted`]),
//! which the [`checker`](crate::checker) compares with the writers' histories: every write a
//! writer saw acknowledged must be in the log exactly once, and the log's tokens must increase
//! per key.
//!
//! # Files
//!
//! The directory holds `fenced.lock` (the `flock(2)` target), `fenced-accepted.log` and
//! `fenced-rejected.log` (one JSON line per write). None of them ends in `.jsonl`, so the
//! resource may share a directory with a [`history`](crate::history). Each operation opens the
//! lock file and takes an exclusive `flock` for its whole duration; `flock` excludes every other
//! open file description, so processes, threads and clones of one handle all exclude each other.
//! A write is committed by one `write(2)` of its line to the log: a writer killed before it is
//! not accepted, one killed after it is (without knowing). A partial line left by a writer
//! killed in the middle is cut off by the next operation (which holds the lock, so no live writer
//! can be in the middle of a line).
//!
//! The calls block (file I/O and `flock`); from async code, wrap them in
//! `tokio::task::spawn_blocking` when contention is high.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::history::{Op, Recorder, monotonic_ns};

/// The `reason` to record for a write the resource rejected as stale
/// ([`Recorder::complete_err`]); the checker counts these.
pub const STALE: &str = "stale";

/// The error `code` to record for a write the resource rejected; the checker always allows it.
pub const WRITE_REJECTED: &str = "FENCED_WRITE_REJECTED";

const LOCK_FILE: &str = "fenced.lock";
const ACCEPTED_FILE: &str = "fenced-accepted.log";
const REJECTED_FILE: &str = "fenced-rejected.log";

/// One write the resource accepted: a line of the accepted-write log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteRecord {
    /// The key written.
    pub key: String,
    /// The write's fencing token, greater than every token accepted for `key` before it.
    pub token: u64,
    /// Who wrote: the writer's process name in the history.
    pub writer: String,
    /// The value written.
    pub value: i64,
    /// When the resource accepted it, [`monotonic_ns`] (ns).
    pub t_ns: u64,
}

/// A write the resource refused: a line of the rejected-write log.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct RejectedRecord {
    key: String,
    token: u64,
    writer: String,
    value: i64,
    /// The highest accepted token of `key` at the time.
    highest: u64,
    t_ns: u64,
}

/// The outcome of [`FencedResource::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The token was greater than every accepted one: the value is written and logged.
    Accepted,
    /// The token was not greater than `highest`, the highest token accepted for the key: the
    /// write is stale and changed nothing.
    Rejected {
        /// The highest token accepted for the key so far.
        highest: u64,
    },
}

/// A per-key integer register that accepts a write only with a fencing token strictly greater
/// than every token it has accepted for that key, shared by the processes of one host through
/// files in a directory (see the [module docs](self)).
///
/// Clones share one in-process cache of the register; every operation still takes the file lock
/// and catches up with the writes of other processes first.
#[derive(Debug, Clone)]
pub struct FencedResource {
    dir: PathBuf,
    cache: Arc<Mutex<Cache>>,
}

/// What this process has read of the logs so far.
#[derive(Debug, Default)]
struct Cache {
    /// Bytes of the accepted log applied to `keys` (always at a line boundary).
    accepted_offset: u64,
    /// Per key: current value and highest accepted token.
    keys: HashMap<String, (i64, u64)>,
    /// Bytes of the rejected log counted in `rejected`.
    rejected_offset: u64,
    rejected: u64,
}

impl FencedResource {
    /// Opens the resource kept in `dir`, creating the directory and its files if needed. Every
    /// process that opens the same directory shares the same register.
    pub fn open(dir: &Path) -> io::Result<FencedResource> {
        fs::create_dir_all(dir)?;
        for name in [LOCK_FILE, ACCEPTED_FILE, REJECTED_FILE] {
            OpenOptions::new()
                .append(true)
                .create(true)
                .open(dir.join(name))?;
        }
        let resource = FencedResource {
            dir: dir.to_owned(),
            cache: Arc::new(Mutex::new(Cache::default())),
        };
        resource.locked(|_| Ok(()))?;
        Ok(resource)
    }

    /// The directory the resource lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current value of `key` (0 if it was never written) and the highest token accepted for
    /// it (0 if none).
    pub fn read(&self, key: &str) -> io::Result<(i64, u64)> {
        self.locked(|cache| Ok(cache.keys.get(key).copied().unwrap_or((0, 0))))
    }

    /// Writes `value` to `key` with fencing `token` on behalf of `writer` (its process name in
    /// the history), if `token` is greater than every token accepted for `key`.
    ///
    /// The comparison, the new value and the log line are one atomic step under the file lock.
    /// An accepted write is appended to the accepted-write log, a rejected one to the
    /// rejected-write log. An error means the outcome is unknown (the line may or may not have
    /// been committed).
    pub fn write(
        &self,
        key: &str,
        token: u64,
        writer: &str,
        value: i64,
    ) -> io::Result<WriteOutcome> {
        self.locked(|cache| {
            let highest = cache.keys.get(key).map_or(0, |&(_, highest)| highest);
            let t_ns = monotonic_ns();
            if token > highest {
                let record = WriteRecord {
                    key: key.to_owned(),
                    token,
                    writer: writer.to_owned(),
                    value,
                    t_ns,
                };
                let written = append_line(&self.dir.join(ACCEPTED_FILE), &record)?;
                cache.accepted_offset += written;
                cache.keys.insert(key.to_owned(), (value, token));
                Ok(WriteOutcome::Accepted)
            } else {
                let record = RejectedRecord {
                    key: key.to_owned(),
                    token,
                    writer: writer.to_owned(),
                    value,
                    highest,
                    t_ns,
                };
                let written = append_line(&self.dir.join(REJECTED_FILE), &record)?;
                cache.rejected_offset += written;
                cache.rejected += 1;
                Ok(WriteOutcome::Rejected { highest })
            }
        })
    }

    /// [`write`](Self::write) as `recorder`'s process, recording it in the history: an
    /// [`Op::Write`] invoke, then `complete_ok` with the token and value when accepted, or
    /// `complete_err` with [`WRITE_REJECTED`] and [`STALE`] when rejected. On an I/O error no
    /// completion is recorded (the outcome is unknown) and the error is returned.
    pub fn write_recorded(
        &self,
        recorder: &Recorder,
        key: &str,
        token: u64,
        value: i64,
    ) -> io::Result<WriteOutcome> {
        recorder.invoke(Op::Write, key)?;
        let outcome = self.write(key, token, recorder.process(), value)?;
        match outcome {
            WriteOutcome::Accepted => {
                recorder.complete_ok(Op::Write, key, Some(token), Some(value))?;
            }
            WriteOutcome::Rejected { .. } => {
                recorder.complete_err(Op::Write, key, Some(token), WRITE_REJECTED, STALE)?;
            }
        }
        Ok(outcome)
    }

    /// The accepted-write log: every accepted write of every key, in the order it was accepted.
    pub fn accepted(&self) -> io::Result<Vec<WriteRecord>> {
        self.locked(|cache| {
            let mut file = File::open(self.dir.join(ACCEPTED_FILE))?;
            let mut bytes = Vec::new();
            (&mut file)
                .take(cache.accepted_offset)
                .read_to_end(&mut bytes)?;
            let path = self.dir.join(ACCEPTED_FILE);
            let mut records = Vec::new();
            for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
                records.push(parse_line(&path, line)?);
            }
            Ok(records)
        })
    }

    /// How many writes the resource has rejected as stale, over all keys.
    pub fn rejected_count(&self) -> io::Result<u64> {
        self.locked(|cache| Ok(cache.rejected))
    }

    /// Runs `f` with the cache caught up with both logs, under the exclusive file lock.
    fn locked<T>(&self, f: impl FnOnce(&mut Cache) -> io::Result<T>) -> io::Result<T> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let lock_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(LOCK_FILE))?;
        let _lock = lock_exclusive(lock_file)?;
        // A failed operation may leave the cache behind the files; start over rather than
        // trust it.
        let result = self.catch_up(&mut cache).and_then(|()| f(&mut cache));
        if result.is_err() {
            *cache = Cache::default();
        }
        result
    }

    /// Applies the lines both logs gained since the cache last read them, and cuts off a
    /// partial last line (its writer died mid-line: we hold the lock, so no live writer is
    /// writing).
    fn catch_up(&self, cache: &mut Cache) -> io::Result<()> {
        let path = self.dir.join(ACCEPTED_FILE);
        let lines = read_tail(&path, cache.accepted_offset)?;
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let record: WriteRecord = parse_line(&path, line)?;
            cache.keys.insert(record.key, (record.value, record.token));
        }
        cache.accepted_offset += lines.len() as u64;

        let path = self.dir.join(REJECTED_FILE);
        let lines = read_tail(&path, cache.rejected_offset)?;
        for line in lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            let _: RejectedRecord = parse_line(&path, line)?;
            cache.rejected += 1;
        }
        cache.rejected_offset += lines.len() as u64;
        Ok(())
    }
}

/// Takes an exclusive `flock` on `file`, waiting as long as it takes.
fn lock_exclusive(mut file: File) -> io::Result<Flock<File>> {
    loop {
        match Flock::lock(file, FlockArg::LockExclusive) {
            Ok(lock) => return Ok(lock),
            Err((again, Errno::EINTR)) => file = again,
            Err((_, errno)) => return Err(io::Error::from(errno)),
        }
    }
}

/// The complete lines of `path` from `offset` on (ending with a newline); a partial last line is
/// truncated away.
fn read_tail(path: &Path, offset: u64) -> io::Result<Vec<u8>> {
    let mut file = OpenOptions::new().read(true).write(true).open(path)?;
    let len = file.metadata()?.len();
    if len < offset {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} shrank from {offset} to {len} bytes behind the fenced resource's back",
                path.display()
            ),
        ));
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    if complete < bytes.len() {
        file.set_len(offset + complete as u64)?;
        bytes.truncate(complete);
    }
    Ok(bytes)
}

/// Appends `record` as one JSON line in one `write(2)`; returns the bytes written.
fn append_line(path: &Path, record: &impl Serialize) -> io::Result<u64> {
    let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
    line.push(b'\n');
    let mut file = OpenOptions::new().append(true).open(path)?;
    file.write_all(&line)?;
    Ok(line.len() as u64)
}

fn parse_line<T: for<'de> Deserialize<'de>>(path: &Path, line: &[u8]) -> io::Result<T> {
    serde_json::from_slice(line).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not a fenced-resource record: {e}", path.display()),
        )
    })
}
