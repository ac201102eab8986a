//! The end of a serving example: a module of each (`#[path = "common/shutdown.rs"] mod
//! shutdown;`).

/// Returns on Ctrl-C on a terminal or SIGTERM from Kubernetes or systemd.
pub(crate) async fn signal() {
    let mut terminate =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let sigterm = async {
        match terminate.as_mut() {
            Some(terminate) => {
                terminate.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = sigterm => {}
    }
}
