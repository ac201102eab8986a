//! Script calls: `EVALSHA`, and one reload and retry on `NOSCRIPT`.

use fred::prelude::*;
use fred::types::scripts::Script;

use crate::core::client::RedisCore;

/// Runs `script` with the keys and arguments `call` builds. After a `NOSCRIPT` (a `SCRIPT FLUSH`,
/// a failover to a server that never saw the script) it loads the script and calls once more,
/// building the arguments again: the first send keeps no copy of them, as fred's
/// `evalsha_with_reload` does for every call.
///
/// # Errors
/// The script's error reply or the command's failure, as fred reports them.
pub(crate) async fn call<R: FromValue>(
    client: &Client,
    script: &Script,
    call: impl Fn() -> (Vec<Key>, Vec<Value>),
) -> Result<R, Error> {
    let (keys, args) = call();
    let reply: Result<Value, Error> = client.evalsha(script.sha1().clone(), keys, args).await;
    let reply = match reply {
        Err(error) if error.details().starts_with("NOSCRIPT") => {
            script.load(client).await?;
            let (keys, args) = call();
            client.evalsha(script.sha1().clone(), keys, args).await
        }
        reply => reply,
    };
    reply?.convert()
}

/// Loads `scripts` in the background, so the first calls need no reload. A failure is logged at
/// `DEBUG`: each script then loads on first use.
pub(crate) fn preload(core: &RedisCore, scripts: Vec<Script>, capability: &'static str) {
    let client = core.client.clone();
    core.runtime.spawn(async move {
        for script in scripts {
            if let Err(error) = script.load(&client).await {
                tracing::debug!(%error, capability, "could not preload a script; it loads on first use");
                return;
            }
        }
    });
}
