//! `TestCertificates` and `RedisServerBuilder::tls` against a real redis-server built with TLS.
//!
//! Deadlines are generous (a loaded 2-core machine); nothing asserts that something is fast.

use std::io::ErrorKind;
use std::path::Path;
use std::process::Command;

use lock_testkit::tls::TestCertificates;
use lock_testkit::{Backend, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::common::GENEROUS;

async fn tls_server(certs: &TestCertificates) -> RedisServer {
    RedisServer::builder()
        .backend(Backend::Local)
        .tls(certs)
        .start()
        .await
        .expect("redis-server with TLS starts")
}

fn pem_blocks(path: &Path, label: &str) -> usize {
    let text = std::fs::read_to_string(path).expect("readable PEM");
    text.matches(&format!("-----BEGIN {label}-----")).count()
}

#[test]
fn generate_writes_a_ca_and_a_server_certificate_signed_by_it() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::generate(dir.path().join("nested")).unwrap();

    assert_eq!(certs.dir, dir.path().join("nested"));
    assert_eq!(certs.ca, certs.dir.join("ca.pem"));
    assert_eq!(pem_blocks(&certs.ca, "CERTIFICATE"), 1);
    assert_eq!(pem_blocks(&certs.server_cert, "CERTIFICATE"), 1);
    assert_eq!(pem_blocks(&certs.ca_key, "PRIVATE KEY"), 1);
    assert_eq!(pem_blocks(&certs.server_key, "PRIVATE KEY"), 1);
    #[cfg(unix)]
    for key in [&certs.ca_key, &certs.server_key] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(key).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{} must be private", key.display());
    }

    // A second set is a different CA: nothing of one is trusted by the other.
    let other = TestCertificates::generate(dir.path().join("other")).unwrap();
    assert_ne!(
        std::fs::read(&certs.ca).unwrap(),
        std::fs::read(&other.ca).unwrap()
    );
    assert!(
        dir.path().join("nested").exists(),
        "generate leaves the dir to its caller"
    );

    let args = certs.server_args(6390);
    assert_eq!(
        args,
        [
            "--tls-port",
            "6390",
            "--tls-cert-file",
            &certs.server_cert.display().to_string(),
            "--tls-key-file",
            &certs.server_key.display().to_string(),
            "--tls-ca-cert-file",
            &certs.ca.display().to_string(),
            "--tls-auth-clients",
            "no",
        ]
    );
}

#[test]
fn generate_temp_removes_its_dir_with_the_last_clone() {
    let certs = TestCertificates::generate_temp().unwrap();
    let clone = certs.clone();
    assert!(certs.ca.exists() && certs.server_key.exists());
    drop(certs);
    assert!(clone.ca.exists(), "a clone keeps the files");
    let dir = clone.dir.clone();
    drop(clone);
    assert!(!dir.exists(), "{} must be removed", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_server_keeps_its_plain_port_and_listens_for_tls() {
    let certs = TestCertificates::generate_temp().unwrap();
    let server = tls_server(&certs).await;

    let tls_port = server.tls_port().expect("a TLS port");
    assert_ne!(tls_port, server.port());
    assert_eq!(server.tls_url(), format!("rediss://127.0.0.1:{tls_port}"));
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    assert!(format!("{server:?}").contains(&format!("tls_port: Some({tls_port})")));

    // `cmd` still works over the plain port, and the server runs with the given files.
    assert_eq!(server.cmd(&["PING"]).await.unwrap(), "PONG");
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "tls-port"]).await.unwrap(),
        format!("tls-port\n{tls_port}")
    );
    assert_eq!(
        server
            .cmd(&["CONFIG", "GET", "tls-ca-cert-file"])
            .await
            .unwrap(),
        format!("tls-ca-cert-file\n{}", certs.ca.display())
    );
    assert_eq!(
        server
            .cmd(&["CONFIG", "GET", "tls-auth-clients"])
            .await
            .unwrap(),
        "tls-auth-clients\nno"
    );

    // The TLS port accepts connections, but it is not a plain RESP port: a plain PING gets no
    // PONG (redis-server fails the handshake and closes the connection).
    let mut conn = timeout(GENEROUS, TcpStream::connect(("127.0.0.1", tls_port)))
        .await
        .expect("connect in time")
        .expect("the TLS port listens");
    conn.write_all(b"PING\r\n").await.unwrap();
    let mut reply = Vec::new();
    let read = timeout(GENEROUS, conn.read_to_end(&mut reply)).await;
    assert!(read.is_ok(), "redis-server must close a non-TLS connection");
    assert!(
        !String::from_utf8_lossy(&reply).contains("PONG"),
        "plain RESP answered on the TLS port: {reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_tls_server_keeps_its_tls_port() {
    let certs = TestCertificates::generate_temp().unwrap();
    let mut server = tls_server(&certs).await;
    let tls_port = server.tls_port().unwrap();

    server.kill().await.unwrap();
    let refused = TcpStream::connect(("127.0.0.1", tls_port)).await;
    assert!(refused.is_err(), "a killed server's TLS port must refuse");

    server.restart().await.unwrap();
    assert_eq!(server.tls_port(), Some(tls_port));
    assert_eq!(
        server.cmd(&["CONFIG", "GET", "tls-port"]).await.unwrap(),
        format!("tls-port\n{tls_port}")
    );
    timeout(GENEROUS, TcpStream::connect(("127.0.0.1", tls_port)))
        .await
        .expect("connect in time")
        .expect("the TLS port listens again");
}

/// A real TLS round trip with `redis-cli` (shipped with redis-server): trusting `ca.pem` it gets
/// PONG; trusting another CA the handshake fails on the certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_trusts_the_server_through_the_test_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let certs = TestCertificates::generate(dir.path().join("good")).unwrap();
    let other = TestCertificates::generate(dir.path().join("other")).unwrap();
    let server = tls_server(&certs).await;
    let port = server.tls_port().unwrap().to_string();

    let cli = |ca: &Path| {
        let (ca, port) = (ca.to_owned(), port.clone());
        tokio::task::spawn_blocking(move || {
            Command::new("redis-cli")
                .args(["--tls", "--cacert"])
                .arg(ca)
                .args(["-h", "127.0.0.1", "-p", &port, "PING"])
                .output()
        })
    };
    let trusted = match timeout(GENEROUS, cli(&certs.ca)).await.unwrap().unwrap() {
        Ok(output) => output,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            eprintln!("redis-cli is not on PATH: TLS round trip not checked here");
            return;
        }
        Err(e) => panic!("redis-cli: {e}"),
    };
    let stdout = String::from_utf8_lossy(&trusted.stdout);
    assert_eq!(
        stdout.trim(),
        "PONG",
        "stderr: {}",
        String::from_utf8_lossy(&trusted.stderr)
    );

    let untrusted = timeout(GENEROUS, cli(&other.ca))
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&untrusted.stdout),
        String::from_utf8_lossy(&untrusted.stderr)
    );
    assert!(!all.contains("PONG"), "{all}");
    assert!(all.to_lowercase().contains("certificate"), "{all}");
}

#[test]
#[should_panic(expected = "builder().tls(&certs)")]
fn tls_url_needs_a_tls_server() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(async {
        RedisServer::builder()
            .backend(Backend::Local)
            .start()
            .await
            .unwrap()
    });
    assert_eq!(server.tls_port(), None);
    let _ = server.tls_url();
}
