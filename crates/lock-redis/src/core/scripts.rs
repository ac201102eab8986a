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

/// Loads `scripts`, so the first calls need no reload. Skipped while Redis is unreachable; a
/// failure is logged at `DEBUG`. Either way each script loads on first use.
pub(crate) async fn preload(core: &RedisCore, scripts: &[&Script], capability: &'static str) {
    if core.unreachable("SCRIPT LOAD").is_some() {
        return;
    }
    for script in scripts {
        if let Err(error) = script.load(&core.client).await {
            tracing::debug!(%error, capability, "could not preload a script; it loads on first use");
            return;
        }
    }
}

/// The Lua source of a script: an optional `#!lua flags=…` line (which must come first), then
/// the named files of the calling module's `scripts/` folder, without `.lua`, in order.
macro_rules! lua {
    (flags = $flags:literal; $($file:literal),+ $(,)?) => {
        concat!("#!lua flags=", $flags, "\n", $crate::core::scripts::lua!($($file),+))
    };
    ($($file:literal),+ $(,)?) => {
        concat!($(include_str!(concat!("scripts/", $file, ".lua"))),+)
    };
}
pub(crate) use lua;

/// Declares a capability's `Scripts`, one field a script, each hashed once from its Lua source;
/// the fields after `;` are operators' scripts, loaded on first use rather than preloaded.
macro_rules! scripts {
    (
        $($(#[$doc:meta])* $field:ident: $source:expr),+ $(,)?
        $(; $($(#[$lazy_doc:meta])* $lazy:ident: $lazy_source:expr),+ $(,)?)?
    ) => {
        /// The scripts, hashed once. `EVALSHA` with a reload on `NOSCRIPT` (after a
        /// `SCRIPT FLUSH` or a failover to a server that never saw them).
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $($(#[$doc])* pub(crate) $field: fred::types::scripts::Script,)+
            $($($(#[$lazy_doc])* pub(crate) $lazy: fred::types::scripts::Script,)+)?
        }

        impl Scripts {
            pub(crate) fn new() -> Self {
                Scripts {
                    $($field: fred::types::scripts::Script::from_lua($source),)+
                    $($($lazy: fred::types::scripts::Script::from_lua($lazy_source),)+)?
                }
            }

            /// The scripts loaded when the capability is built: all but the operators'.
            pub(crate) fn preloaded(&self) -> Vec<&fred::types::scripts::Script> {
                vec![$(&self.$field),+]
            }
        }
    };
}
pub(crate) use scripts;
