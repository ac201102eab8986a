//! What the test modules share: a request sent to a router, its answer read, and a starter
//! built from TOML text.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::Request;
use axum::response::Response;
use tower::ServiceExt;

/// The answer of `app` to `request`.
pub(crate) async fn send(app: &Router, request: Request<Body>) -> Response {
    app.clone().oneshot(request).await.unwrap()
}

/// The body of `response`, up to 64 MiB.
pub(crate) async fn bytes(response: Response) -> Bytes {
    axum::body::to_bytes(response.into_body(), 64 << 20)
        .await
        .unwrap()
}

/// The body of `response` as text.
pub(crate) async fn text(response: Response) -> String {
    String::from_utf8(bytes(response).await.to_vec()).unwrap()
}

/// The body of `response` as JSON.
pub(crate) async fn json(response: Response) -> serde_json::Value {
    serde_json::from_slice(&bytes(response).await).unwrap()
}

/// The TOML text of a starter on `redis`, with every other setting at its default.
pub(crate) fn on_redis(redis: &lock_testkit::RedisServer) -> String {
    format!(
        "[telco.platform.lock.redis]\naddress = \"{}\"\n",
        redis.url()
    )
}

/// A starter built from the TOML text `config` alone.
pub(crate) async fn starter(config: &str) -> lock_starter::LockStarter {
    use lock_starter::figment::Figment;
    use lock_starter::figment::providers::{Format, Toml};

    lock_starter::LockStarter::builder()
        .figment(Figment::from(Toml::string(config)))
        .build()
        .await
        .expect("the starter builds")
}
