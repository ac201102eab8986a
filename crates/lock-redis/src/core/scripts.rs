//! Script calls: `EVALSHA`, and one reload and retry on `NOSCRIPT`.

use fred::prelude::*;
use fred::types::scripts::Script;
use fred::types::{ClusterHash, CustomCommand};

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

/// As [`call`], for a script whose effect a second run would repeat (a queue push, a
/// compare-and-set): sent once. fred re-sends a command whose connection failed before its
/// reply, after the reconnect, so the script could run twice and answer for the second run
/// only; here the caller gets the failure instead, and the script may or may not have run.
///
/// Not on a Cluster: fred follows a `MOVED` reply by sending the command again through the
/// same count of attempts, so one attempt would fail every write after a slot moved. There a
/// lost reply may still run the script twice.
///
/// # Errors
/// As [`call`].
pub(crate) async fn call_once<R: FromValue>(
    client: &Client,
    script: &Script,
    call: impl Fn() -> (Vec<Key>, Vec<Value>),
) -> Result<R, Error> {
    if client.is_clustered() {
        return self::call(client, script, call).await;
    }
    let once = client.with_options(&Options {
        max_attempts: Some(1),
        ..Options::default()
    });
    let evalsha = || {
        let (keys, args) = call();
        // The slot of the first key: the scripts' keys share one hash tag.
        let slot = keys
            .first()
            .map(|key| fred::util::redis_keyslot(key.as_bytes()));
        let command = CustomCommand::new(
            "EVALSHA",
            slot.map_or(ClusterHash::Random, ClusterHash::Custom),
            false,
        );
        let mut all: Vec<Value> = Vec::with_capacity(2 + keys.len() + args.len());
        all.push(script.sha1().clone().into());
        all.push(Value::Integer(keys.len() as i64));
        all.extend(keys.into_iter().map(|key| Value::Bytes(key.into_bytes())));
        all.extend(args);
        once.custom::<Value, Value>(command, all)
    };
    let reply = match evalsha().await {
        Err(error) if error.details().starts_with("NOSCRIPT") => {
            script.load(client).await?;
            evalsha().await
        }
        reply => reply,
    };
    reply?.convert()
}

/// Loads `scripts`, so the first calls need no reload. Skipped unless Redis answers; a
/// failure is logged at `DEBUG`. Either way each script loads on first use.
pub(crate) async fn preload(core: &RedisCore, scripts: &[&Script], capability: &'static str) {
    if !core.answering() {
        return;
    }
    for script in scripts {
        if let Err(error) = script.load(&core.client).await {
            tracing::debug!(%error, capability, "could not preload a script; it loads on first use");
            return;
        }
    }
}

/// The Lua source of a script: an optional `#!lua flags=…` line (which must come first), an
/// optional library of `core/scripts/` (`core "name";`), then the named files of the calling
/// module's `scripts/` folder, without `.lua`, in order.
macro_rules! lua {
    (flags = $flags:literal; $($rest:tt)+) => {
        concat!("#!lua flags=", $flags, "\n", $crate::core::scripts::lua!($($rest)+))
    };
    (core $library:literal; $($file:literal),+ $(,)?) => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/core/scripts/", $library, ".lua")),
            $crate::core::scripts::lua!($($file),+)
        )
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
