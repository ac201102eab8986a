//! What a person at a terminal sees, on a real pseudo-terminal: the confirmation prompt of
//! `release --force` and the spinner `run` shows while it waits for a held lock; and that a
//! `run` killed there takes its command along.

use std::time::Duration;

use crate::common::{
    BINARY, PROCESS_SLACK, Reap, alive, assert_force_released, environment, eventually, hold,
    other_pod, read_pid, redis_and_dir, redis_and_other_pod,
};
use lock_starter::lock::{LockHandle, ReleaseOutcome};
use lock_starter::redis::LockState;
use rexpect::process::WaitStatus;
use rexpect::session::{Options, PtySession};

/// How long one expectation on the terminal may take: generous, the machine may be loaded.
const EXPECT_TIMEOUT: Duration = Duration::from_secs(30);

/// `platform-lock args…` with stdin, stdout and stderr on a new pseudo-terminal.
fn on_terminal(address: &str, args: &[&str]) -> PtySession {
    let mut command = std::process::Command::new(BINARY);
    command.args(args).env_clear().envs(environment(address));
    let options = Options::new().timeout_ms(Some(EXPECT_TIMEOUT.as_millis() as u64));
    rexpect::spawn_with_options(command, options).expect("platform-lock starts on a pty")
}

/// Waits for the end of the output and the exit; the exit code and what was shown last.
fn finish(mut session: PtySession) -> (i32, String) {
    let rest = session
        .exp_eof()
        .expect("platform-lock did not end on the terminal");
    match session.process().wait().unwrap() {
        WaitStatus::Exited(_, code) => (code, rest),
        other => panic!("platform-lock did not exit normally: {other:?}; it showed: {rest}"),
    }
}

/// Runs the blocking terminal steps off the async test's threads.
async fn blocking<T: Send + 'static>(steps: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(steps).await {
        Ok(value) => value,
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// The prompt naming the holder the operator is about to release.
fn prompt(key: &str, owner: &str, token: u64) -> String {
    format!("Release lock {key} held by {owner} (token {token})? [y/N] ")
}

/// Runs `release --force KEY` on a terminal, waits for the prompt naming `holder`, answers
/// `answer`, and returns the exit code and what was shown after the prompt.
async fn answer_release_prompt(
    url: &str,
    key: &str,
    holder: &LockHandle,
    answer: &str,
) -> (i32, String) {
    let asked = prompt(key, holder.owner(), holder.fencing_token());
    let (url, key, answer) = (url.to_owned(), key.to_owned(), answer.to_owned());
    blocking(move || {
        let mut session = on_terminal(&url, &["release", "--force", &key]);
        session.exp_string(&asked).expect("no confirmation prompt");
        session.send_line(&answer).unwrap();
        finish(session)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_no_at_the_release_prompt_leaves_the_lock_held() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let handle = hold(&pod, "bill-run:2026-11").await;
    let (code, shown) = answer_release_prompt(&url, "bill-run:2026-11", &handle, "n").await;
    // 1: nothing released (documented in --help).
    assert_eq!(code, 1, "{shown}");
    assert!(shown.contains("not released"), "{shown}");
    assert!(handle.is_held(), "{:?}", handle.status());
    match pod.status("bill-run:2026-11").await.unwrap().state {
        LockState::Held { fencing_token, .. } => assert_eq!(fencing_token, handle.fencing_token()),
        other => panic!("the declined release changed the lock: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_yes_at_the_release_prompt_releases_the_lock() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let handle = hold(&pod, "bill-run:2026-11").await;
    let owner = handle.owner().to_owned();
    let (code, shown) = answer_release_prompt(&url, "bill-run:2026-11", &handle, "y").await;
    assert_eq!(code, 0, "{shown}");
    assert!(
        shown.contains(&format!("released lock `bill-run:2026-11` held by {owner}")),
        "{shown}"
    );
    assert_force_released(&pod, &handle, "bill-run:2026-11").await;
}

/// The operator is shown one holder; before they answer, that holder releases and another pod
/// takes the lock. Their "y" must not free the new holder's lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_yes_for_a_holder_that_is_gone_does_not_release_the_new_one() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let first = hold(&pod, "bill-run:2026-11").await;
    let asked = prompt("bill-run:2026-11", first.owner(), first.fencing_token());
    let address = url.clone();
    let session = blocking(move || {
        let mut session = on_terminal(&address, &["release", "--force", "bill-run:2026-11"]);
        session.exp_string(&asked).expect("no confirmation prompt");
        session
    })
    .await;
    assert_eq!(first.release().await.unwrap(), ReleaseOutcome::Released);
    let next_pod = other_pod(&url).await;
    let second = hold(&next_pod, "bill-run:2026-11").await;
    let (code, shown) = blocking(move || {
        let mut session = session;
        session.send_line("y").unwrap();
        finish(session)
    })
    .await;
    assert_eq!(code, 1, "{shown}");
    assert!(shown.contains("changed hands"), "{shown}");
    assert!(shown.contains(second.owner()), "{shown}");
    assert!(second.is_held(), "{:?}", second.status());
    match pod.status("bill-run:2026-11").await.unwrap().state {
        LockState::Held { holder, .. } => assert_eq!(holder, second.owner()),
        other => panic!("the new holder's lock was touched: {other:?}"),
    }
}

/// On a terminal, `run` waiting for a held lock shows a spinner naming the holder's instance
/// id, redrawn in place; when the holder releases, the command runs at once and the spinner's
/// line is cleared first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_run_spins_naming_the_holder_until_it_is_granted() {
    let (_redis, url, pod) = redis_and_other_pod().await;
    let held = hold(&pod, "job").await;
    let address = url.clone();
    let session = blocking(move || {
        let mut session = on_terminal(
            &address,
            &[
                "run",
                "--key",
                "job",
                "--wait",
                "30s",
                "--",
                "sh",
                "-c",
                "echo \"ran with token $PLATFORM_LOCK_FENCING_TOKEN\"",
            ],
        );
        // Two successive frames: it turns, and it names the holder (its instance id).
        session
            .exp_string("| waiting for lock job, held by demo-pod")
            .expect("no spinner naming the holder");
        let between = session
            .exp_string("/ waiting for lock job, held by demo-pod")
            .expect("the spinner does not turn");
        assert!(
            between.contains("\r\x1b[2K"),
            "not redrawn in place: {between:?}"
        );
        session
    })
    .await;
    assert!(pod.status("job").await.unwrap().is_held());
    let token = held.fencing_token();
    assert_eq!(held.release().await.unwrap(), ReleaseOutcome::Released);
    let (code, shown) = blocking(move || {
        let mut session = session;
        let before = session
            .exp_string("ran with token ")
            .expect("the command did not run once the lock was released");
        assert!(
            before.ends_with("\r\x1b[2K"),
            "the spinner's line was not cleared before the command's output: {before:?}"
        );
        finish(session)
    })
    .await;
    assert_eq!(code, 0, "{shown}");
    let granted: u64 = shown.trim().parse().expect("the fencing token");
    assert!(granted > token, "{granted} <= {token}");
    assert!(!pod.status("job").await.unwrap().is_held());
}

/// On a terminal the command stays in the terminal's foreground group, and the guardian kills
/// the command itself when `run` is SIGKILLed. As at a shell prompt, `run` is not the session
/// leader (whose death would hang up the terminal and so end the command anyway): a shell
/// that stays on the terminal starts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_terminal_a_sigkilled_run_takes_its_command_along() {
    let (redis, url, dir) = redis_and_dir().await;
    let (shell_file, run_file) = (dir.path().join("shell.pid"), dir.path().join("run.pid"));
    let script = format!(
        "echo $$ > '{}'; echo $PPID > '{}'; echo ready; while :; do sleep 1; done",
        shell_file.display(),
        run_file.display()
    );
    let session = blocking(move || {
        let mut login = std::process::Command::new("sh");
        login
            .args([
                "-c",
                r#""$0" run --key job -- sh -c "$1"; echo "run ended"; sleep 300"#,
                BINARY,
                &script,
            ])
            .env_clear()
            .envs(environment(&url));
        let options = Options::new().timeout_ms(Some(EXPECT_TIMEOUT.as_millis() as u64));
        let mut session = rexpect::spawn_with_options(login, options).expect("sh starts on a pty");
        session
            .exp_string("ready")
            .expect("the command never said ready");
        session
    })
    .await;
    let (shell, run) = (read_pid(&shell_file), read_pid(&run_file));
    let _reap = Reap(shell);
    nix::sys::signal::kill(run, nix::sys::signal::Signal::SIGKILL).unwrap();
    assert!(
        eventually(PROCESS_SLACK, || async { !alive(shell) }).await,
        "the command (pid {shell}) runs on without the lock after run was SIGKILLed"
    );
    drop(session);
    drop(redis);
}

/// Input piped into `run` started at a terminal (`echo … | platform-lock run …`): a person is at
/// the terminal, so the command stays in its foreground group and can still ask it for input (a
/// password prompt), rather than being stopped for reading it from a background group while
/// the lock stays held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_piped_input_at_a_terminal_the_command_can_read_the_terminal() {
    let (redis, url, _dir) = redis_and_dir().await;
    let code = blocking(move || {
        let mut login = std::process::Command::new("sh");
        login
            .args([
                "-c",
                r#"echo piped | "$0" run --key job -- sh -c 'read x </dev/tty; echo "got $x"'"#,
                BINARY,
            ])
            .env_clear()
            .envs(environment(&url));
        let options = Options::new().timeout_ms(Some(EXPECT_TIMEOUT.as_millis() as u64));
        let mut session = rexpect::spawn_with_options(login, options).expect("sh starts on a pty");
        session.send_line("typed").unwrap();
        session
            .exp_string("got typed")
            .expect("the command could not read the terminal");
        finish(session).0
    })
    .await;
    assert_eq!(code, 0);
    drop(redis);
}
