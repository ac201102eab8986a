//! Holds one lock until killed, like a pod in the middle of its critical section.
//!
//! `lock-holder <key> <lease>` where lease is `watchdog` or a duration (`3s`). Configuration
//! comes from the environment (`TELCO_PLATFORM_LOCK_*`). Prints one line per event on stdout:
//! `ACQUIRED <owner> <fencing token>`, `NOT_ACQUIRED <reason> <holder>`, `LOST <reason>`.

use std::process::ExitCode;

use platform_lock_tests::consumer::{lock_from_environment, parse_lease};

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [key, lease] = args.as_slice() else {
        eprintln!("usage: lock-holder <key> <watchdog|DURATION>");
        return ExitCode::from(2);
    };
    let lease = match parse_lease(lease) {
        Ok(lease) => lease,
        Err(e) => {
            eprintln!("bad lease {lease:?}: {e}");
            return ExitCode::from(2);
        }
    };
    let lock = match lock_from_environment().await {
        Ok(lock) => lock,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(78);
        }
    };
    match lock.acquire(key, lease).await {
        Ok(handle) => {
            println!("ACQUIRED {} {}", handle.owner(), handle.fencing_token());
            let reason = handle.lost().await;
            println!("LOST {reason}");
            ExitCode::FAILURE
        }
        Err(error) => {
            let details = error.details();
            let holder = details.get("holder").map_or("-", String::as_str);
            println!("NOT_ACQUIRED {} {holder}", details["reason"]);
            ExitCode::from(75)
        }
    }
}
