//! Judges a recorded history (Jepsen-style): did the lock and the fenced resource keep their
//! promises while processes were killed, paused and cut off?
//!
//! [`check`] takes the merged [`history`](crate::history) of every process, the
//! [`FencedResource`](crate::fenced::FencedResource)'s accepted-write log and the error codes
//! the lock may return, and reports, per key:
//!
//! - **tokens**: no fencing token granted twice ([`Report::duplicate_tokens`]); a grant that
//!   completed before another was invoked has the smaller token
//!   ([`Report::order_violations`]);
//! - **writes**: every write a writer saw acknowledged is in the accepted-write log exactly once
//!   ([`Report::acked_writes_missing`], [`Report::acked_writes_duplicated`]), and the log's
//!   tokens strictly increase ([`Report::stale_writes_accepted`]). A write in the log that its
//!   writer never saw acknowledged (it was killed in between) is allowed
//!   ([`Report::accepted_but_not_acked`]);
//! - **exclusion**: two processes believing they hold a key at the same time
//!   ([`Report::overlaps`]), each either *explained* or a violation;
//! - **typed failures**: every failed operation carries an allowed error code
//!   ([`Report::untyped_errors`]).
//!
//! # Belief intervals
//!
//! A process believes it holds a key from the ok completion of its acquire (the grant) until the
//! first of: its [`Op::Release`] invoke on the key, an [`Op::Crash`] of the process (for the key
//! or for every key), its next [`Op::Acquire`] invoke on the key, or else its last event in the
//! history (a process whose history just ends — killed without a `Crash` record — believed until
//! its last recorded act). All bounds are inclusive timestamps in ns.
//!
//! An [`Op::Lost`] event does **not** end the interval: it is what *explains* an overlap. The
//! lock promises that `lost()` fires before another process can be granted the key; a holder
//! that was told, and still acts as holder until its release, overlaps the next grant by its own
//! choice. (Were `Lost` to end the interval, an overlap explained by `Lost` could not exist: the
//! interval would end before the later grant. Keeping it open shows such overlaps as explained,
//! and makes a holder told only *after* the later grant answer for every write up to its
//! release.)
//!
//! Two intervals of one key from different processes that share more than 0 ns form an
//! [`Overlap`]. It is **explained** when
//!
//! 1. the earlier holder's `Lost` event (same token, when both carry one) fired after its grant
//!    and before the later grant completed, or
//! 2. the earlier holder attempted at least one write (token of its grant) whose invoke–complete
//!    span meets the overlap, and every such write was rejected as
//!    [`STALE`] — the fence did its job and the holder acked nothing, or
//! 3. the earlier holder's `Lost` event fired later (it was paused past its lease and learned it
//!    when it resumed), and it acked no write inside the overlap.
//!
//! A write is inside the overlap when its span meets it, or, for an acked write the resource's
//! log holds, when the resource accepted it inside the overlap: a holder paused between the
//! acceptance and its ack made the write while it held the key.
//!
//! Otherwise it is a violation.
//!
//! ```
//! use lock_testkit::checker;
//! use lock_testkit::history::{Event, Op, Phase};
//!
//! let at = |t_ns, process: &str, op, phase| Event {
//!     t_ns,
//!     ..Event::new(process, op, phase, "bill-run")
//! };
//! let history = vec![
//!     at(10, "pod-a", Op::Acquire, Phase::Invoke),
//!     Event { token: Some(7), ok: Some(true), ..at(20, "pod-a", Op::Acquire, Phase::Complete) },
//!     at(30, "pod-a", Op::Release, Phase::Invoke),
//!     Event { ok: Some(true), ..at(40, "pod-a", Op::Release, Phase::Complete) },
//! ];
//! let report = checker::check(&history, &[], &["LOCK_ACQUISITION_FAILED"]);
//! assert_eq!(report.grants, 1);
//! assert!(report.violations().is_empty(), "{report}");
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;

use serde::Serialize;

use crate::fenced::{STALE, WRITE_REJECTED, WriteRecord};
use crate::history::{Event, Op, Phase};

/// What [`check`] found. Every list holds one human-readable line per finding.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// Acquisitions that completed ok (grants).
    pub grants: u64,
    /// Acquisitions that completed with a failure.
    pub failed_acquires: u64,
    /// Failed completions of every operation (acquire, release, write) by error code; a
    /// failure without a code counts under `"<none>"`.
    pub failures_by_code: BTreeMap<String, u64>,
    /// A fencing token granted more than once for one key: one line per key and token.
    pub duplicate_tokens: Vec<String>,
    /// Grant A completed before grant B was invoked (same key), yet token(A) >= token(B): one
    /// line per such B, naming the A with the highest token.
    pub order_violations: Vec<String>,
    /// Writes that completed ok (acknowledged to their writer).
    pub acked_writes: u64,
    /// Acknowledged writes that are not in the accepted-write log.
    pub acked_writes_missing: Vec<String>,
    /// Acknowledged writes that are in the accepted-write log more than once: one line per
    /// surplus copy.
    pub acked_writes_duplicated: Vec<String>,
    /// Writes in the accepted-write log whose writer never recorded the ok completion (it was
    /// killed or stopped in between). Allowed.
    pub accepted_but_not_acked: u64,
    /// Writes that completed failed with reason [`STALE`]: the fence
    /// refused them.
    pub stale_writes_rejected: u64,
    /// Accepted writes whose token was not greater than a token accepted before them for the
    /// key, i.e. the accepted-write log's tokens do not strictly increase per key (surplus
    /// copies of an acked write are reported in `acked_writes_duplicated` instead).
    pub stale_writes_accepted: Vec<String>,
    /// Two processes believing they held one key at once, explained or not.
    pub overlaps: Vec<Overlap>,
    /// Failed completions whose code is missing or not among the allowed codes.
    pub untyped_errors: Vec<String>,
}

/// Two processes believing they held the same key at the same time.
#[derive(Debug, Clone, Serialize)]
pub struct Overlap {
    /// The key.
    pub key: String,
    /// The process granted first.
    pub first: String,
    /// The process granted while `first` still believed it held the key.
    pub second: String,
    /// The fencing token of `first`'s grant (0 if its completion carried none).
    pub first_token: u64,
    /// The fencing token of `second`'s grant (0 if its completion carried none).
    pub second_token: u64,
    /// How long both believed (ns).
    pub overlap_ns: u64,
    /// Whether the overlap is explained (see the [module docs](self)); unexplained ones are
    /// violations.
    pub explained: bool,
    /// Why it is explained, or why not.
    pub explanation: String,
}

impl Report {
    /// Every finding that is a failure, one line each, prefixed with its kind: duplicate
    /// tokens, order violations, missing and duplicated acked writes, stale writes accepted,
    /// unexplained overlaps and untyped errors. Empty when the run was correct.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut add = |kind: &str, lines: &[String]| {
            out.extend(lines.iter().map(|line| format!("{kind}: {line}")));
        };
        add("duplicate token", &self.duplicate_tokens);
        add("order violation", &self.order_violations);
        add("acked write missing", &self.acked_writes_missing);
        add("acked write duplicated", &self.acked_writes_duplicated);
        add("stale write accepted", &self.stale_writes_accepted);
        let unexplained: Vec<String> = self
            .overlaps
            .iter()
            .filter(|o| !o.explained)
            .map(Overlap::to_string)
            .collect();
        add("unexplained overlap", &unexplained);
        add("untyped error", &self.untyped_errors);
        out
    }

    /// The overlaps that are violations.
    pub fn unexplained_overlaps(&self) -> impl Iterator<Item = &Overlap> {
        self.overlaps.iter().filter(|o| !o.explained)
    }
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {:?}: {} (token {}) and {} (token {}) both believed they held it for {} ns; {}",
            self.key,
            self.first,
            self.first_token,
            self.second,
            self.second_token,
            self.overlap_ns,
            self.explanation
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "grants: {}, failed acquires: {}",
            self.grants, self.failed_acquires
        )?;
        if !self.failures_by_code.is_empty() {
            let codes: Vec<String> = self
                .failures_by_code
                .iter()
                .map(|(code, n)| format!("{code}: {n}"))
                .collect();
            writeln!(f, "failed operations by code: {}", codes.join(", "))?;
        }
        writeln!(
            f,
            "writes: {} acked, {} accepted but not acked, {} rejected as stale",
            self.acked_writes, self.accepted_but_not_acked, self.stale_writes_rejected
        )?;
        let unexplained = self.unexplained_overlaps().count();
        writeln!(
            f,
            "overlaps: {} explained, {} unexplained",
            self.overlaps.len() - unexplained,
            unexplained
        )?;
        let violations = self.violations();
        if violations.is_empty() {
            write!(f, "violations: none")
        } else {
            write!(f, "violations: {}", violations.len())?;
            for violation in &violations {
                write!(f, "\n  - {violation}")?;
            }
            Ok(())
        }
    }
}

/// An acquire that completed ok.
#[derive(Debug)]
struct Grant<'a> {
    process: &'a str,
    key: &'a str,
    token: Option<u64>,
    /// The matching invoke, if it was recorded.
    invoke_ns: Option<u64>,
    /// The ok completion: the start of the belief interval.
    start: u64,
    /// The end of the belief interval.
    end: u64,
}

/// The outcome of a write attempt as far as the history knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WriteStatus {
    Acked,
    Stale,
    OtherFailure,
    /// Invoked, never completed.
    Unknown,
}

#[derive(Debug)]
struct WriteAttempt<'a> {
    process: &'a str,
    key: &'a str,
    token: Option<u64>,
    value: Option<i64>,
    invoke_ns: Option<u64>,
    complete_ns: Option<u64>,
    status: WriteStatus,
    /// When the resource accepted it, for an acked write its log holds.
    accepted_ns: Option<u64>,
}

impl WriteAttempt<'_> {
    /// Whether the write was made within `[from, to]`: at the moment the resource accepted
    /// it, when known (a writer paused between the acceptance and its ack learns of it late),
    /// else anywhere in its invoke–complete span. An attempt that never completed spans to
    /// the end of time.
    fn meets(&self, from: u64, to: u64) -> bool {
        if let Some(at) = self.accepted_ns {
            return from <= at && at <= to;
        }
        let Some(begin) = self.invoke_ns.or(self.complete_ns) else {
            return false;
        };
        let end = self.complete_ns.unwrap_or(u64::MAX);
        begin <= to && end >= from
    }
}

/// Checks `history` (the events of every process, in any order: they are ordered by `t_ns`
/// here) against the fenced resource's `accepted` write log (in acceptance order, as
/// [`FencedResource::accepted`](crate::fenced::FencedResource::accepted) returns it), with
/// `allowed_codes` the error codes a failed operation may carry ([`WRITE_REJECTED`] is always
/// allowed). See the [module docs](self) for what is checked.
pub fn check(history: &[Event], accepted: &[WriteRecord], allowed_codes: &[&str]) -> Report {
    let mut events: Vec<&Event> = history.iter().collect();
    events.sort_by_key(|e| e.t_ns);

    let mut report = Report::default();
    let mut open_invokes: HashMap<(&str, Op, &str), VecDeque<u64>> = HashMap::new();
    let mut grants: Vec<Grant<'_>> = Vec::new();
    let mut writes: Vec<WriteAttempt<'_>> = Vec::new();
    let mut open_writes: HashMap<(&str, &str), VecDeque<usize>> = HashMap::new();
    // Events that may end a belief interval, per process: (t_ns, op, key).
    let mut enders: HashMap<&str, Vec<(u64, Op, &str)>> = HashMap::new();
    let mut lost: Vec<&Event> = Vec::new();
    let mut last_event: HashMap<&str, u64> = HashMap::new();

    for event in &events {
        let process = event.process.as_str();
        let key = event.key.as_str();
        let last = last_event.entry(process).or_insert(event.t_ns);
        *last = (*last).max(event.t_ns);
        match (event.op, event.phase) {
            (Op::Lost, _) => lost.push(event),
            (Op::Crash, _) => enders
                .entry(process)
                .or_default()
                .push((event.t_ns, Op::Crash, key)),
            (op, Phase::Invoke) => {
                open_invokes
                    .entry((process, op, key))
                    .or_default()
                    .push_back(event.t_ns);
                if matches!(op, Op::Acquire | Op::Release) {
                    enders
                        .entry(process)
                        .or_default()
                        .push((event.t_ns, op, key));
                }
                if op == Op::Write {
                    open_writes
                        .entry((process, key))
                        .or_default()
                        .push_back(writes.len());
                    writes.push(WriteAttempt {
                        process,
                        key,
                        token: event.token,
                        value: event.value,
                        invoke_ns: Some(event.t_ns),
                        complete_ns: None,
                        status: WriteStatus::Unknown,
                        accepted_ns: None,
                    });
                }
            }
            (op, Phase::Complete) => {
                let invoke_ns = open_invokes
                    .get_mut(&(process, op, key))
                    .and_then(VecDeque::pop_front);
                let ok = event.ok == Some(true);
                if !ok {
                    complete_failed(&mut report, event, allowed_codes);
                }
                match op {
                    Op::Acquire if ok => grants.push(Grant {
                        process,
                        key,
                        token: event.token,
                        invoke_ns,
                        start: event.t_ns,
                        end: event.t_ns,
                    }),
                    Op::Acquire => report.failed_acquires += 1,
                    Op::Write => {
                        let status = if ok {
                            WriteStatus::Acked
                        } else if event.reason.as_deref() == Some(STALE) {
                            WriteStatus::Stale
                        } else {
                            WriteStatus::OtherFailure
                        };
                        let open = invoke_ns.and_then(|_| {
                            open_writes
                                .get_mut(&(process, key))
                                .and_then(VecDeque::pop_front)
                        });
                        let attempt = match open {
                            Some(i) => &mut writes[i],
                            None => {
                                writes.push(WriteAttempt {
                                    process,
                                    key,
                                    token: None,
                                    value: None,
                                    invoke_ns: None,
                                    complete_ns: None,
                                    status,
                                    accepted_ns: None,
                                });
                                writes.last_mut().expect("just pushed")
                            }
                        };
                        attempt.complete_ns = Some(event.t_ns);
                        attempt.status = status;
                        attempt.token = event.token.or(attempt.token);
                        attempt.value = event.value.or(attempt.value);
                    }
                    _ => {}
                }
            }
        }
    }
    report.grants = grants.len() as u64;
    report.stale_writes_rejected = writes
        .iter()
        .filter(|w| w.status == WriteStatus::Stale)
        .count() as u64;
    report.acked_writes = writes
        .iter()
        .filter(|w| w.status == WriteStatus::Acked)
        .count() as u64;

    for write in writes.iter_mut().filter(|w| w.status == WriteStatus::Acked) {
        write.accepted_ns = accepted
            .iter()
            .find(|r| {
                r.writer == write.process
                    && r.key == write.key
                    && Some(r.token) == write.token
                    && Some(r.value) == write.value
            })
            .map(|r| r.t_ns);
    }
    for grant in &mut grants {
        grant.end = belief_end(grant, &enders, &last_event);
    }
    check_tokens(&mut report, &grants);
    check_overlaps(&mut report, &grants, &writes, &lost);
    check_writes(&mut report, &writes, accepted);
    report
}

/// Counts a failed completion and checks its code.
fn complete_failed(report: &mut Report, event: &Event, allowed_codes: &[&str]) {
    let code = event.code.as_deref();
    *report
        .failures_by_code
        .entry(code.unwrap_or("<none>").to_owned())
        .or_default() += 1;
    let allowed = code.is_some_and(|c| c == WRITE_REJECTED || allowed_codes.contains(&c));
    if !allowed {
        report.untyped_errors.push(format!(
            "{} {} {:?} at {} ns failed with code {} (reason {})",
            event.process,
            op_name(event.op),
            event.key,
            event.t_ns,
            code.unwrap_or("<none>"),
            event.reason.as_deref().unwrap_or("<none>"),
        ));
    }
}

/// The end of `grant`'s belief interval (see the module docs). `enders` are in time order.
fn belief_end(
    grant: &Grant<'_>,
    enders: &HashMap<&str, Vec<(u64, Op, &str)>>,
    last_event: &HashMap<&str, u64>,
) -> u64 {
    let ends = enders.get(grant.process).map_or(&[][..], Vec::as_slice);
    let from = ends.partition_point(|&(t, _, _)| t < grant.start);
    ends[from..]
        .iter()
        .find(|&&(t, op, key)| match op {
            Op::Release => key == grant.key,
            Op::Crash => key.is_empty() || key == grant.key,
            Op::Acquire => key == grant.key && t > grant.start,
            _ => false,
        })
        .map(|&(t, _, _)| t)
        .unwrap_or_else(|| {
            last_event
                .get(grant.process)
                .copied()
                .unwrap_or(grant.start)
        })
        .max(grant.start)
}

/// Duplicate tokens and order violations.
fn check_tokens(report: &mut Report, grants: &[Grant<'_>]) {
    let mut by_key: BTreeMap<&str, Vec<&Grant<'_>>> = BTreeMap::new();
    for grant in grants.iter().filter(|g| g.token.is_some()) {
        by_key.entry(grant.key).or_default().push(grant);
    }
    for (key, grants) in &by_key {
        let mut by_token: BTreeMap<u64, Vec<&Grant<'_>>> = BTreeMap::new();
        for grant in grants {
            by_token
                .entry(grant.token.unwrap_or(0))
                .or_default()
                .push(grant);
        }
        for (token, same) in by_token.iter().filter(|(_, same)| same.len() > 1) {
            let who: Vec<String> = same
                .iter()
                .map(|g| format!("{} at {} ns", g.process, g.start))
                .collect();
            report.duplicate_tokens.push(format!(
                "key {key:?}: token {token} granted {} times: {}",
                same.len(),
                who.join(", ")
            ));
        }

        // `grants` is in completion order; the running maximum of tokens completed so far.
        let mut best: Vec<&Grant<'_>> = Vec::with_capacity(grants.len());
        for grant in grants {
            let keep = match best.last() {
                Some(prev) if prev.token >= grant.token => prev,
                _ => grant,
            };
            best.push(keep);
        }
        for later in grants {
            let Some(invoked) = later.invoke_ns else {
                continue;
            };
            let before = grants.partition_point(|g| g.start < invoked);
            let Some(earlier) = before.checked_sub(1).map(|i| best[i]) else {
                continue;
            };
            if earlier.token >= later.token {
                report.order_violations.push(format!(
                    "key {key:?}: {}'s grant (token {}) completed at {} ns, before {}'s acquire \
                     was invoked at {} ns, yet {} got the lower or equal token {}",
                    earlier.process,
                    earlier.token.unwrap_or(0),
                    earlier.start,
                    later.process,
                    invoked,
                    later.process,
                    later.token.unwrap_or(0),
                ));
            }
        }
    }
}

/// Overlapping belief intervals of different processes, explained or not.
fn check_overlaps(
    report: &mut Report,
    grants: &[Grant<'_>],
    writes: &[WriteAttempt<'_>],
    lost: &[&Event],
) {
    let mut by_key: BTreeMap<&str, Vec<&Grant<'_>>> = BTreeMap::new();
    for grant in grants {
        by_key.entry(grant.key).or_default().push(grant);
    }
    for grants in by_key.values() {
        // In completion (= interval start) order already.
        for (i, first) in grants.iter().enumerate() {
            for second in &grants[i + 1..] {
                if second.start >= first.end {
                    break;
                }
                if second.process == first.process {
                    continue;
                }
                let overlap_ns = first.end.min(second.end) - second.start;
                if overlap_ns == 0 {
                    continue;
                }
                let (explained, explanation) =
                    explain(first, second, first.end.min(second.end), writes, lost);
                report.overlaps.push(Overlap {
                    key: first.key.to_owned(),
                    first: first.process.to_owned(),
                    second: second.process.to_owned(),
                    first_token: first.token.unwrap_or(0),
                    second_token: second.token.unwrap_or(0),
                    overlap_ns,
                    explained,
                    explanation,
                });
            }
        }
    }
}

/// Whether the overlap of `first` and `second` (from `second.start` to `until`) is explained,
/// and why (not).
fn explain(
    first: &Grant<'_>,
    second: &Grant<'_>,
    until: u64,
    writes: &[WriteAttempt<'_>],
    lost: &[&Event],
) -> (bool, String) {
    let same_grant = |token: Option<u64>| match (token, first.token) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    };
    let told = lost.iter().find(|e| {
        e.process == first.process
            && e.key == first.key
            && same_grant(e.token)
            && e.t_ns >= first.start
            && e.t_ns < second.start
    });
    if let Some(told) = told {
        return (
            true,
            format!(
                "explained: lost() fired for {} at {} ns, {} ns before {}'s grant",
                first.process,
                told.t_ns,
                second.start - told.t_ns,
                second.process
            ),
        );
    }
    let inside: Vec<&WriteAttempt<'_>> = writes
        .iter()
        .filter(|w| {
            w.process == first.process
                && w.key == first.key
                && same_grant(w.token)
                && w.meets(second.start, until)
        })
        .collect();
    let stale = inside
        .iter()
        .filter(|w| w.status == WriteStatus::Stale)
        .count();
    let acked = inside
        .iter()
        .filter(|w| w.status == WriteStatus::Acked)
        .count();
    let lost_note = format!(
        "no lost() for {} before {}'s grant",
        first.process, second.process
    );
    let told_late = lost.iter().find(|e| {
        e.process == first.process
            && e.key == first.key
            && same_grant(e.token)
            && e.t_ns >= first.start
    });
    if !inside.is_empty() && stale == inside.len() {
        (
            true,
            format!(
                "explained: all {stale} write(s) {} attempted inside the overlap were rejected as stale",
                first.process
            ),
        )
    } else if let (Some(told), 0) = (told_late, acked) {
        (
            true,
            format!(
                "explained: lost() fired for {} at {} ns, after {}'s grant (a pause past its lease), and it acked no write inside the overlap",
                first.process, told.t_ns, second.process
            ),
        )
    } else if inside.is_empty() {
        (
            false,
            format!(
                "unexplained: {lost_note}, and {} attempted no write inside the overlap",
                first.process
            ),
        )
    } else {
        (
            false,
            format!(
                "unexplained: {lost_note}; of {} write(s) {} attempted inside the overlap, {acked} acked, {stale} rejected as stale, {} failed otherwise or never completed",
                inside.len(),
                first.process,
                inside.len() - acked - stale
            ),
        )
    }
}

/// Acked writes against the accepted-write log, and the log's token order.
fn check_writes(report: &mut Report, writes: &[WriteAttempt<'_>], accepted: &[WriteRecord]) {
    // (writer, key, token) -> indexes into `accepted`, in log order.
    let mut log: HashMap<(&str, &str, u64), Vec<usize>> = HashMap::new();
    for (i, record) in accepted.iter().enumerate() {
        log.entry((record.writer.as_str(), record.key.as_str(), record.token))
            .or_default()
            .push(i);
    }
    let mut matched = vec![false; accepted.len()];
    // (writer, key, token, value) of every acked write; `None`: acked without a value.
    let mut acked_groups: BTreeSet<(&str, &str, u64, Option<i64>)> = BTreeSet::new();
    for write in writes.iter().filter(|w| w.status == WriteStatus::Acked) {
        let at = write.complete_ns.unwrap_or(0);
        let Some(token) = write.token else {
            report.acked_writes_missing.push(format!(
                "{}'s write to {:?} acked at {at} ns carries no token, so it cannot be in the \
                 accepted-write log",
                write.process, write.key
            ));
            continue;
        };
        acked_groups.insert((write.process, write.key, token, write.value));
        let found =
            log.get(&(write.process, write.key, token))
                .and_then(|records| {
                    records.iter().copied().find(|&i| {
                        !matched[i] && write.value.is_none_or(|v| v == accepted[i].value)
                    })
                });
        match found {
            Some(i) => matched[i] = true,
            None => report.acked_writes_missing.push(format!(
                "{}'s write of {} to {:?} with token {token}, acked at {at} ns, is not in the \
                 accepted-write log",
                write.process,
                write
                    .value
                    .map_or("<no value>".to_owned(), |v| v.to_string()),
                write.key
            )),
        }
    }

    // Unmatched log records: surplus copies of an acked write, or writes never acked.
    let mut surplus = vec![false; accepted.len()];
    for (i, record) in accepted.iter().enumerate() {
        if matched[i] {
            continue;
        }
        let (writer, key, token) = (record.writer.as_str(), record.key.as_str(), record.token);
        if acked_groups.contains(&(writer, key, token, Some(record.value)))
            || acked_groups.contains(&(writer, key, token, None))
        {
            surplus[i] = true;
            report.acked_writes_duplicated.push(format!(
                "{}'s write of {} to {:?} with token {} is in the accepted-write log once more \
                 than it was acked (again at {} ns)",
                record.writer, record.value, record.key, record.token, record.t_ns
            ));
        } else {
            report.accepted_but_not_acked += 1;
        }
    }

    // Per key, the log's tokens must strictly increase.
    let mut highest: HashMap<&str, &WriteRecord> = HashMap::new();
    for (i, record) in accepted.iter().enumerate() {
        match highest.get(record.key.as_str()) {
            Some(prev) if prev.token >= record.token => {
                if !surplus[i] {
                    report.stale_writes_accepted.push(format!(
                        "key {:?}: {}'s write of {} with token {} was accepted at {} ns, after \
                         {}'s write with token {} (accepted at {} ns)",
                        record.key,
                        record.writer,
                        record.value,
                        record.token,
                        record.t_ns,
                        prev.writer,
                        prev.token,
                        prev.t_ns
                    ));
                }
            }
            _ => {
                highest.insert(record.key.as_str(), record);
            }
        }
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Acquire => "acquire",
        Op::Release => "release",
        Op::Write => "write",
        Op::Lost => "lost",
        Op::Crash => "crash",
        Op::Push => "push",
        Op::Deliver => "deliver",
        Op::Ack => "ack",
        Op::Admit => "admit",
        Op::Get => "get",
        Op::Set => "set",
        Op::Wait => "wait",
        Op::Run => "run",
        Op::Execute => "execute",
    }
}
