//! The running test binary started again as a child process, for tests that need a lock client
//! (or anything else) in a process of its own: one to kill with `SIGKILL`, to let exit, or to
//! run next to the test in parallel.

use std::process::{Command, Stdio};

/// This test binary again, set up to run only the test `test` of the module whose
/// `module_path!()` is `module`, and nothing else: `--exact --ignored --nocapture
/// --test-threads=1`, stdin closed. Add the environment and stdio, then spawn it.
///
/// The child's test must be `#[ignore]`d, so the parent's ordinary run skips it, and should do
/// nothing unless an environment variable the caller sets on the returned command says it runs
/// as the child (a run with `--ignored` then passes it harmlessly).
///
/// `module` is the caller's `module_path!()`: `"it::fair"` in module `fair` of test binary `it`
/// names the test `fair::<test>`; a test at the root of its binary (`"shutdown"`) is just
/// `<test>`.
///
/// # Panics
///
/// When the path of the running executable cannot be found (`std::env::current_exe`).
///
/// ```no_run
/// const CHILD: &str = "MY_TEST_CHILD";
///
/// #[test]
/// fn a_holder_killed_with_sigkill_leaves_the_key_to_expire() {
///     let mut child = lock_testkit::test_child(module_path!(), "child_holds_a_lock")
///         .env(CHILD, "1")
///         .spawn()
///         .expect("start the child process");
///     // … wait until the child holds the lock, then:
///     child.kill().unwrap();
///     child.wait().unwrap();
/// }
///
/// #[test]
/// #[ignore = "the body of a child process the test above starts and kills"]
/// fn child_holds_a_lock() {
///     if std::env::var_os(CHILD).is_none() {
///         return;
///     }
///     // … acquire, then wait to be killed:
///     loop {
///         std::thread::park();
///     }
/// }
/// # fn main() {}
/// ```
pub fn test_child(module: &str, test: &str) -> Command {
    // libtest names a test by its path below the binary's root module.
    let name = match module.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    };
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .args([
            name.as_str(),
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdin(Stdio::null());
    command
}
