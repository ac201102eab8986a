//! The JSON events the pod examples print for the demo, one per line on stdout. A module of
//! each such example (`#[path = "common/events.rs"] mod events;`).

use std::path::Path;
use std::process::ExitCode;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_starter::LockStarter;
use serde_json::{Value, json};

/// This process's pod name, set once the configuration is read.
pub(crate) static POD: OnceLock<String> = OnceLock::new();

/// One JSON event on stdout: wall-clock microseconds (shared by every process on the host),
/// the pod, the event and its fields.
pub(crate) fn emit(event: &str, mut fields: Value) {
    let micros = now_us();
    let pod = POD.get().cloned().unwrap_or_default();
    if let Value::Object(map) = &mut fields {
        map.insert("t_us".into(), micros.into());
        map.insert("pod".into(), pod.into());
        map.insert("event".into(), event.into());
    }
    println!("{fields}");
}

/// The `config_error` event with `error`'s message, and the exit code of a bad configuration.
pub(crate) fn config_error(error: impl std::fmt::Display) -> ExitCode {
    emit("config_error", json!({ "message": error.to_string() }));
    ExitCode::from(78)
}

/// The `failed` event with `error`'s code and message, and the exit code of a failure.
#[allow(dead_code, reason = "not every pod example fails this way")]
pub(crate) fn failed(error: &impl lock_starter::Problem) -> ExitCode {
    emit(
        "failed",
        json!({ "code": error.code(), "message": error.to_string() }),
    );
    ExitCode::FAILURE
}

/// The starter from the TOML file `config`, if one is given, and the environment; a bad
/// configuration is a `config_error` event and its exit code.
pub(crate) async fn start(config: Option<&Path>) -> Result<LockStarter, ExitCode> {
    let mut builder = LockStarter::builder();
    if let Some(path) = config {
        builder = builder.toml_file(path);
    }
    builder.build().await.map_err(config_error)
}

/// Waits until the Unix time `start_at_ms`, if one is given, so pods started one by one run
/// together.
#[allow(dead_code, reason = "not every pod example starts at a set time")]
pub(crate) async fn wait_until(start_at_ms: Option<u64>) {
    if let Some(start_at) = start_at_ms {
        let wait_ms = start_at.saturating_sub(now_us() / 1000);
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    }
}

/// Wall-clock microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
