//! `release --force`: the runbooks' force unlock, asking first when a person is there to ask.

use std::io::{BufRead, IsTerminal, Write};

use lock_starter::redis::{ForceReleased, LockState};

use crate::Redis;
use crate::exit::{EXIT_DECLINED, EXIT_HOLDER_CHANGED, EXIT_USAGE};
use crate::output::{self, Failure};

/// `platform-lock release --force KEY [--yes]`.
pub(crate) async fn force(redis: &Redis, key: &str, yes: bool) -> Result<(), Failure> {
    let status = redis
        .lock
        .status(key)
        .await
        .map_err(|error| redis.failure(&format!("reading lock `{key}`"), &error))?;
    let LockState::Held {
        holder,
        fencing_token,
        ..
    } = &status.state
    else {
        return output::to_stdout(|out| {
            writeln!(out, "lock `{key}` is not held; nothing to release")
        });
    };
    if !yes {
        // Without a terminal nobody can answer: a script must say --yes, not hang or guess.
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                EXIT_USAGE,
                format!(
                    "refusing to force-release lock `{key}` without confirmation: stdin is not a \
                     terminal; add --yes"
                ),
            ));
        }
        eprint!("Release lock {key} held by {holder} (token {fencing_token})? [y/N] ");
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        let _ = std::io::stdin().lock().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            return Err(Failure::new(
                EXIT_DECLINED,
                format!("not released: lock `{key}` is still held by {holder}"),
            ));
        }
    }
    // Only the grant that was shown (and confirmed): the prompt may have waited for minutes,
    // and by then the lock may belong to a healthy new holder nobody looked at.
    let released = redis
        .lock
        .force_release_grant(key, *fencing_token)
        .await
        .map_err(|error| redis.failure(&format!("releasing lock `{key}`"), &error))?;
    match released {
        ForceReleased::Released {
            holder,
            fencing_token,
            notified_clients,
            ..
        } => output::to_stdout(|out| {
            writeln!(
                out,
                "released lock `{key}` held by {holder} (fencing token {fencing_token}); \
                 {notified_clients} waiting client(s) notified"
            )
        }),
        ForceReleased::HolderChanged {
            holder: now,
            fencing_token: now_token,
            ..
        } => Err(Failure::new(
            EXIT_HOLDER_CHANGED,
            format!(
                "not released: lock `{key}` changed hands since it was read (shown: {holder}, \
                 token {fencing_token}; now: {now}, token {now_token}); check the new holder, \
                 then run the command again if it must go"
            ),
        )),
        _ => output::to_stdout(|out| {
            writeln!(out, "lock `{key}` was no longer held; nothing changed")
        }),
    }
}
