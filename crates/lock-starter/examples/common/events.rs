//! The JSON events the pod examples print for the demo, one per line on stdout. A module of
//! each such example (`#[path = "common/events.rs"] mod events;`).

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

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

/// Wall-clock microseconds since the Unix epoch.
pub(crate) fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
