//! Group commit: the script calls a client makes to one slot while the slot is busy (see below)
//! wait and then go to Redis together, the calls of each script as a single script call
//! (`group_commit.lua` runs the script once per call). An idle client sends a call at once,
//! as it would without this; a busy one sends one command, one write and one script run for
//! many calls instead of one each. Off unless `RedisLockConfig::group_commit` turns it on: it
//! has not yet made the lock faster (docs/performance.md).
//!
//! What each call keeps: its own deadline (the command timeout from when it was made, queued or
//! not), its own reply or error (an error inside one call is that call's alone; a failure of the
//! grouped call — a timeout, a lost connection, a refusal — is every member's, with the error it
//! would have had alone), and its place in line: the calls on one key reach Redis in the order
//! they were made, so a release followed by the next waiter's attempt still arrives in that
//! order. A call whose caller has gone (cancelled, timed out) is sent all the same, as fred sends
//! a command whose future was dropped: a release must not be lost with its caller, and an
//! acquisition's clean-up, which follows it, relies on that order.
//!
//! Per slot (off a Cluster, per client) two calls may be in flight alone — a release and the
//! attempt of the waiter it wakes travel together — and two groups: while Redis runs one, the
//! client answers the other's calls and gathers the next. On a Cluster a script's keys must
//! share a slot, so calls are grouped per slot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use fred::types::scripts::Script;
use tokio::sync::oneshot;

/// The most calls one grouped script call carries; a longer run is split.
const MAX_GROUP: usize = 128;

/// The dispatcher `group_commit.lua` runs after the wrapped body.
const DISPATCH: &str = include_str!("group_commit.lua");

/// A script whose calls may be grouped: the script as sent alone, and its grouped form, which
/// runs the same body once per call.
#[derive(Debug)]
pub(crate) struct GroupedScript {
    single: Script,
    grouped: Script,
}

impl GroupedScript {
    /// `source` is the whole script. Its grouped form wraps all of it but the flags line
    /// (`#!lua flags=…`, which must stay first) in a function taking `KEYS` and `ARGV`, so the
    /// script and the functions it defines read the call's own keys and arguments.
    pub(crate) fn new(source: &str) -> Self {
        let (flags, script) = match source.split_once('\n') {
            Some((first, rest)) if first.starts_with("#!") => (first, rest),
            _ => ("", source),
        };
        let grouped =
            format!("{flags}\nlocal function call_once(KEYS, ARGV)\n{script}\nend\n{DISPATCH}");
        GroupedScript {
            single: Script::from_lua(source),
            grouped: Script::from_lua(grouped),
        }
    }

    /// Loads the script, and its grouped form when calls are `grouped`, so neither needs a
    /// reload on first use.
    pub(crate) async fn load(&self, client: &Client, grouped: bool) -> Result<(), Error> {
        self.single.load(client).await?;
        if grouped {
            self.grouped.load(client).await?;
        }
        Ok(())
    }
}

/// The group commit of one client (see the module docs); shared by all its capabilities.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
}

/// How many calls to one slot may be in flight on their own: two, so that a release and the
/// attempt of the waiter it wakes travel together, as they did before calls were grouped.
const ALONE: usize = 2;

/// How many groups to one slot may be in flight at once: while Redis runs one, the client
/// answers the calls of another and gathers the next, so neither waits for the other.
const GROUPS: usize = 2;

#[derive(Debug)]
struct Shared {
    client: Client,
    runtime: tokio::runtime::Handle,
    clustered: bool,
    /// Off: every call is sent alone, as without group commit.
    enabled: bool,
    /// The command timeout: how long a call waits, queued and in flight.
    timeout: Duration,
    /// Slot (0 off a Cluster) → what is in flight there and what waits; an idle slot has no
    /// entry.
    slots: Mutex<HashMap<u16, Slot>>,
    calls: AtomicU64,
    script_calls: AtomicU64,
}

/// One slot's calls. A call goes alone only while nothing waits, no group is in flight or being
/// handed to fred, and fewer than [`ALONE`] calls are alone in flight; so it never overtakes an
/// earlier call. Otherwise it waits for the slot's flusher, one task that sends what waits as a
/// group whenever fewer than [`GROUPS`] groups are in flight, in the order the calls were made.
#[derive(Debug, Default)]
struct Slot {
    alone: usize,
    groups: usize,
    /// A flusher task runs for this slot; `wake` tells it that calls wait.
    flusher: Option<Arc<tokio::sync::Notify>>,
    /// A group taken from `waiting` is being handed to fred.
    handing_over: bool,
    waiting: Waiting,
}

impl Slot {
    fn idle(&self) -> bool {
        self.alone == 0 && self.flusher.is_none() && self.waiting.is_empty()
    }
}

/// Calls waiting to be sent, in the order they were made.
type Waiting = Vec<Queued>;

#[derive(Debug)]
struct Queued {
    script: &'static GroupedScript,
    keys: Vec<Key>,
    args: Vec<Value>,
    reply: oneshot::Sender<Result<Value, Error>>,
}

impl GroupCommit {
    pub(crate) fn new(client: &Client, command_timeout: Duration, enabled: bool) -> Self {
        GroupCommit {
            shared: Arc::new(Shared {
                client: client.clone(),
                runtime: tokio::runtime::Handle::current(),
                clustered: client.is_clustered(),
                enabled,
                timeout: command_timeout,
                slots: Mutex::default(),
                calls: AtomicU64::new(0),
                script_calls: AtomicU64::new(0),
            }),
        }
    }

    /// Runs `script` with the keys and arguments `call` builds (at least one key; on a Cluster
    /// all in one slot): at once when the slot is idle or has one call in flight, else with a
    /// group. `call` builds them again for the one retry after a `NOSCRIPT` (a `SCRIPT FLUSH`, a
    /// failover to a server that never saw the script), which loads the script first: sending
    /// keeps no copy, as fred's `evalsha_with_reload` does for every call.
    ///
    /// # Errors
    /// The call's error reply, or the failure of the script call that carried it; a call that
    /// waited the whole command timeout gets fred's `Timeout` error (it may still run, as a
    /// timed-out command may).
    pub(crate) async fn call<R: FromValue>(
        &self,
        script: &'static GroupedScript,
        call: impl Fn() -> (Vec<Key>, Vec<Value>),
    ) -> Result<R, Error> {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        let (keys, args) = call();
        let reply = match self.call_once(script, keys, args).await {
            Err(error) if error.details().starts_with("NOSCRIPT") => {
                script
                    .load(&self.shared.client, self.shared.enabled)
                    .await?;
                let (keys, args) = call();
                self.call_once(script, keys, args).await
            }
            reply => reply,
        };
        reply?.convert()
    }

    async fn call_once(
        &self,
        script: &'static GroupedScript,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<Value, Error> {
        let shared = &self.shared;
        if !shared.enabled {
            shared.script_calls.fetch_add(1, Ordering::Relaxed);
            return shared
                .client
                .evalsha(script.single.sha1().clone(), keys, args)
                .await;
        }
        let slot = match keys.first() {
            Some(key) if shared.clustered => fred::util::redis_keyslot(key.as_bytes()),
            _ => 0,
        };
        let queued = {
            let mut slots = shared.lock();
            let state = slots.entry(slot).or_default();
            if state.waiting.is_empty()
                && state.groups == 0
                && !state.handing_over
                && state.alone < ALONE
            {
                state.alone += 1;
                Ok((keys, args))
            } else {
                let (reply, replied) = oneshot::channel();
                state.waiting.push(Queued {
                    script,
                    keys,
                    args,
                    reply,
                });
                match &state.flusher {
                    Some(wake) => wake.notify_one(),
                    None => {
                        let wake = Arc::new(tokio::sync::Notify::new());
                        state.flusher = Some(Arc::clone(&wake));
                        shared.runtime.spawn(Arc::clone(shared).flush(slot, wake));
                    }
                }
                Err(replied)
            }
        };
        match queued {
            Ok((keys, args)) => {
                let _alone = Alone {
                    shared: Arc::clone(shared),
                    slot,
                };
                shared.script_calls.fetch_add(1, Ordering::Relaxed);
                shared
                    .client
                    .evalsha(script.single.sha1().clone(), keys, args)
                    .await
            }
            Err(replied) => {
                let reply = if shared.timeout.is_zero() {
                    Ok(replied.await)
                } else {
                    tokio::time::timeout(shared.timeout, replied).await
                };
                match reply {
                    Ok(Ok(reply)) => reply,
                    Ok(Err(_)) => Err(Error::new(
                        ErrorKind::Canceled,
                        "the grouped call was dropped before it was answered",
                    )),
                    Err(_) => Err(Error::new(
                        ErrorKind::Timeout,
                        "no reply within the command timeout (the call waited its turn in a group commit)",
                    )),
                }
            }
        }
    }

    /// Calls made, and script calls sent for them, since the client was created: their ratio
    /// is the group commit's operations per script call.
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.shared.calls.load(Ordering::Relaxed),
            self.shared.script_calls.load(Ordering::Relaxed),
        )
    }
}

/// A call sent alone, counted in its slot until it ends (answered or not).
struct Alone {
    shared: Arc<Shared>,
    slot: u16,
}

impl Drop for Alone {
    fn drop(&mut self) {
        let mut slots = self.shared.lock();
        if let Some(state) = slots.get_mut(&self.slot) {
            state.alone -= 1;
            if state.idle() {
                slots.remove(&self.slot);
            }
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u16, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The flusher of `slot`: sends what waits as a group while fewer than [`GROUPS`] are in
    /// flight, each handed to fred before the next is taken (so they reach Redis in order), and
    /// ends when nothing waits or is in flight.
    async fn flush(self: Arc<Self>, slot: u16, wake: Arc<tokio::sync::Notify>) {
        let mut in_flight = futures::stream::FuturesUnordered::new();
        loop {
            if in_flight.len() < GROUPS {
                let group = {
                    let mut slots = self.lock();
                    let state = slots.entry(slot).or_default();
                    if state.waiting.is_empty() {
                        None
                    } else {
                        state.handing_over = true;
                        state.groups += 1;
                        Some(std::mem::take(&mut state.waiting))
                    }
                };
                if let Some(group) = group {
                    let mut sending = Box::pin(self.send(group));
                    // The first poll hands every script call of the group to fred.
                    let pending = futures::poll!(sending.as_mut()).is_pending();
                    let mut slots = self.lock();
                    let state = slots.entry(slot).or_default();
                    state.handing_over = false;
                    if pending {
                        in_flight.push(sending);
                    } else {
                        state.groups -= 1;
                    }
                    continue;
                }
            }
            if in_flight.is_empty() {
                let mut slots = self.lock();
                let state = slots.entry(slot).or_default();
                if state.waiting.is_empty() {
                    state.flusher = None;
                    if state.idle() {
                        slots.remove(&slot);
                    }
                    return;
                }
                continue;
            }
            let room = in_flight.len() < GROUPS;
            tokio::select! {
                Some(()) = futures::StreamExt::next(&mut in_flight) => {
                    self.lock().entry(slot).or_default().groups -= 1;
                    // Lets the calls just answered make their next ones before the next
                    // group is taken.
                    tokio::task::yield_now().await;
                }
                () = wake.notified(), if room => {}
            }
        }
    }

    /// Sends a group — one script call per script (at most [`MAX_GROUP`] calls each), all at
    /// once — and answers every call (a `NOSCRIPT` too: [`GroupCommit::call`] retries it).
    async fn send(&self, group: Waiting) {
        let runs = runs(group);
        futures::future::join_all(runs.into_iter().map(|run| self.send_run(run))).await;
    }

    async fn send_run(&self, mut run: Waiting) {
        self.script_calls.fetch_add(1, Ordering::Relaxed);
        let script = run[0].script;
        if run.len() == 1 {
            let Queued {
                keys, args, reply, ..
            } = run.remove(0);
            let replied = self
                .client
                .evalsha(script.single.sha1().clone(), keys, args)
                .await;
            let _ = reply.send(replied);
            return;
        }
        let mut keys = Vec::with_capacity(run.iter().map(|q| q.keys.len()).sum());
        let mut args = Vec::with_capacity(1 + run.iter().map(|q| 2 + q.args.len()).sum::<usize>());
        args.push(Value::from(run.len() as i64));
        let mut callers = Vec::with_capacity(run.len());
        for queued in run {
            args.push((queued.keys.len() as i64).into());
            args.push((queued.args.len() as i64).into());
            keys.extend(queued.keys);
            args.extend(queued.args);
            callers.push(queued.reply);
        }
        // A NOSCRIPT reaches every member, which loads the script and calls again.
        let replied: Result<Vec<Value>, Error> = self
            .client
            .evalsha(script.grouped.sha1().clone(), keys, args)
            .await;
        match replied {
            Ok(replies) if replies.len() == callers.len() => {
                for (reply, caller) in replies.into_iter().zip(callers) {
                    let _ = caller.send(one_reply(reply));
                }
            }
            Ok(replies) => {
                let error = Error::new(
                    ErrorKind::Protocol,
                    format!(
                        "a grouped script call answered {} of {} calls",
                        replies.len(),
                        callers.len()
                    ),
                );
                for caller in callers {
                    let _ = caller.send(Err(error.clone()));
                }
            }
            Err(error) => {
                for caller in callers {
                    let _ = caller.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Splits a group into runs of one script each, sent in the order of the runs. By script, in
/// the order each first appears — unless some key has calls of two scripts in the group (a
/// release and the next attempt on that key): then into consecutive runs, so every key's calls
/// reach Redis in the order they were made.
fn runs(group: Waiting) -> Vec<Waiting> {
    let same = |a: &Queued, b: &Queued| std::ptr::eq(a.script, b.script);
    let mut scripts_of_key: HashMap<&Key, &'static GroupedScript> = HashMap::new();
    let shared_key = group.iter().any(|queued| {
        queued.keys.iter().any(|key| {
            let script = *scripts_of_key.entry(key).or_insert(queued.script);
            !std::ptr::eq(script, queued.script)
        })
    });
    let mut runs: Vec<Waiting> = Vec::new();
    for queued in group {
        let run = if shared_key {
            runs.last_mut().filter(|run| same(&run[0], &queued))
        } else {
            runs.iter_mut().find(|run| same(&run[0], &queued))
        };
        match run {
            Some(run) => run.push(queued),
            None => runs.push(vec![queued]),
        }
    }
    runs.into_iter()
        .flat_map(|mut run| {
            let mut parts = Vec::new();
            while run.len() > MAX_GROUP {
                let rest = run.split_off(MAX_GROUP);
                parts.push(std::mem::replace(&mut run, rest));
            }
            parts.push(run);
            parts
        })
        .collect()
}

/// One call's part of a grouped reply: `{1, reply}` or `{0, error message}`. The message is
/// the error reply Redis would have sent for the call alone; it gets the kind fred gives most
/// error replies, and [`Refusal`](crate::core::error::Refusal) reads the code from the message,
/// so the call fails with the refusal it would have had alone.
fn one_reply(reply: Value) -> Result<Value, Error> {
    let malformed = || {
        Error::new(
            ErrorKind::Protocol,
            "malformed reply in a grouped script call",
        )
    };
    let Value::Array(mut parts) = reply else {
        return Err(malformed());
    };
    if parts.len() != 2 {
        return Err(malformed());
    }
    let value = parts.pop().unwrap_or(Value::Null);
    match parts[0].as_i64() {
        Some(1) => Ok(value),
        Some(0) => {
            let message = value.as_string().unwrap_or_default();
            Err(Error::new(ErrorKind::Unknown, message))
        }
        _ => Err(malformed()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::Refusal;

    static ACQUIRE: std::sync::LazyLock<GroupedScript> =
        std::sync::LazyLock::new(|| GroupedScript::new("return 1"));
    static RELEASE: std::sync::LazyLock<GroupedScript> =
        std::sync::LazyLock::new(|| GroupedScript::new("return 2"));

    fn queued(script: &'static GroupedScript, key: &str) -> Queued {
        Queued {
            script,
            keys: vec![Key::from(key)],
            args: vec![Value::from(key)],
            reply: oneshot::channel().0,
        }
    }

    /// (script, first key) of each call of each run.
    fn shape(runs: &[Waiting]) -> Vec<Vec<(u8, String)>> {
        runs.iter()
            .map(|run| {
                run.iter()
                    .map(|q| {
                        let script = if std::ptr::eq(q.script, &*ACQUIRE) {
                            b'a'
                        } else {
                            b'r'
                        };
                        (script, q.keys[0].as_str().unwrap().to_owned())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_group_goes_by_script_unless_a_key_has_calls_of_two_scripts() {
        let (a, r) = (&*ACQUIRE, &*RELEASE);
        let by_script = runs(vec![queued(a, "k1"), queued(r, "k2"), queued(a, "k3")]);
        assert_eq!(
            shape(&by_script),
            [
                vec![(b'a', "k1".into()), (b'a', "k3".into())],
                vec![(b'r', "k2".into())]
            ]
        );
        // A release of k2 and the next attempt on k2: consecutive runs keep their order.
        let in_order = runs(vec![queued(a, "k1"), queued(r, "k2"), queued(a, "k2")]);
        assert_eq!(
            shape(&in_order),
            [
                vec![(b'a', "k1".into())],
                vec![(b'r', "k2".into())],
                vec![(b'a', "k2".into())]
            ]
        );
    }

    #[test]
    fn a_long_run_is_split_at_the_group_limit() {
        let group = (0..MAX_GROUP * 2 + 1)
            .map(|i| queued(&ACQUIRE, &format!("k{i}")))
            .collect();
        let sizes: Vec<usize> = runs(group).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_GROUP, MAX_GROUP, 1]);
    }

    #[test]
    fn the_flags_line_stays_first_and_the_rest_is_wrapped() {
        let script = GroupedScript::new("#!lua flags=allow-oom\nreturn KEYS[1]\n");
        let grouped = script.grouped.lua().unwrap();
        assert!(grouped.starts_with(
            "#!lua flags=allow-oom\nlocal function call_once(KEYS, ARGV)\nreturn KEYS[1]\n\nend\n"
        ));
        assert!(grouped.ends_with(DISPATCH));
        let plain = GroupedScript::new("return ARGV[1]");
        let grouped = plain.grouped.lua().unwrap();
        assert!(
            grouped.starts_with("\nlocal function call_once(KEYS, ARGV)\nreturn ARGV[1]\nend\n")
        );
        assert_eq!(plain.single.lua().map(|lua| &**lua), Some("return ARGV[1]"));
    }

    #[test]
    fn a_grouped_reply_is_a_value_or_an_error_reply() {
        let ok = Value::Array(vec![1.into(), Value::Array(vec![1.into(), 42.into()])]);
        assert_eq!(
            one_reply(ok).unwrap(),
            Value::Array(vec![1.into(), 42.into()])
        );
        let wrong_type = Value::Array(vec![0.into(), "WRONGTYPE Operation against a key".into()]);
        let error = one_reply(wrong_type).unwrap_err();
        assert_eq!(Refusal::of_reply(&error), Some(Refusal::WrongType));
        assert_eq!(error.details(), "WRONGTYPE Operation against a key");
        let not_a_lock = Value::Array(vec![0.into(), "LOCKVALUE the key k".into()]);
        assert_eq!(
            Refusal::of_reply(&one_reply(not_a_lock).unwrap_err()),
            Some(Refusal::NotALock)
        );
        for malformed in [
            Value::Null,
            Value::Array(vec![1.into()]),
            Value::Array(vec![7.into(), Value::Null]),
        ] {
            assert_eq!(
                *one_reply(malformed).unwrap_err().kind(),
                ErrorKind::Protocol
            );
        }
    }
}
