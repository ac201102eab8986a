//! [`eventually`]: waiting on a condition that another process brings about.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Polls `check` every 20 ms until it returns `true` or `deadline` has passed, then once more;
/// returns the last answer. For conditions no event announces (a server's state, another
/// process' output): give a generous deadline, and assert on the result.
pub async fn eventually<F, Fut>(deadline: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check().await
}
