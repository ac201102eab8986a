//! TLS for test servers: a throw-away CA, a server certificate it signs, and the redis-server
//! arguments that open a TLS port next to the plain one.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use lock_testkit::RedisServer;
//! use lock_testkit::tls::TestCertificates;
//!
//! let certs = TestCertificates::generate_temp()?; // removed when `certs` is dropped
//! let server = RedisServer::builder().tls(&certs).start().await?;
//! // "rediss://127.0.0.1:<tls port>": trust `certs.ca` in the client under test.
//! let url = server.tls_url();
//! // The plain port keeps working, for `cmd` and for clients without TLS.
//! assert_eq!(server.cmd(&["PING"]).await?, "PONG");
//! # let _ = url;
//! # Ok(()) }
//! ```

use std::fs;
use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

/// File names written by [`TestCertificates::generate`].
const CA_CERT: &str = "ca.pem";
const CA_KEY: &str = "ca-key.pem";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server-key.pem";

/// A CA of its own and a server certificate for `127.0.0.1` and `localhost` signed by it, as PEM
/// files in one directory. Every call makes new keys, so two sets never trust each other.
///
/// From [`generate`](Self::generate) the files stay as long as the caller keeps the directory;
/// from [`generate_temp`](Self::generate_temp) they are removed when the last clone is dropped.
/// Keep them while a server started with them runs (redis-server reads them at start and
/// restart).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TestCertificates {
    /// The directory holding the files.
    pub dir: PathBuf,
    /// The CA certificate (`ca.pem`): what a client trusts to accept the server.
    pub ca: PathBuf,
    /// The CA's private key (`ca-key.pem`, PKCS#8), for signing further certificates.
    pub ca_key: PathBuf,
    /// The server certificate (`server.pem`): subject alternative names `127.0.0.1` and
    /// `localhost`, extended key usage server authentication, signed by the CA.
    pub server_cert: PathBuf,
    /// The server's private key (`server-key.pem`, PKCS#8).
    pub server_key: PathBuf,
    /// The temp dir of [`generate_temp`](Self::generate_temp), removed with the last clone.
    temp_dir: Option<Arc<tempfile::TempDir>>,
}

impl TestCertificates {
    /// Generates a CA and a server certificate signed by it (ECDSA P-256) and writes them to
    /// `dir` (created if missing) as `ca.pem`, `ca-key.pem`, `server.pem` and `server-key.pem`,
    /// replacing files of those names.
    ///
    /// # Errors
    /// The I/O error of creating the directory or writing a file; key or certificate
    /// generation failures as [`io::ErrorKind::Other`].
    pub fn generate(dir: impl AsRef<Path>) -> io::Result<TestCertificates> {
        let dir = dir.as_ref();
        fs::create_dir_all(dir)?;

        let ca_key = KeyPair::generate().map_err(io::Error::other)?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = name("lock-testkit test CA");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key).map_err(io::Error::other)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let server_key = KeyPair::generate().map_err(io::Error::other)?;
        let mut server_params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .map_err(io::Error::other)?;
        server_params.distinguished_name = name("localhost");
        server_params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        server_params.use_authority_key_identifier_extension = true;
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .map_err(io::Error::other)?;

        let certs = TestCertificates {
            temp_dir: None,
            dir: dir.to_owned(),
            ca: dir.join(CA_CERT),
            ca_key: dir.join(CA_KEY),
            server_cert: dir.join(SERVER_CERT),
            server_key: dir.join(SERVER_KEY),
        };
        fs::write(&certs.ca, ca_cert.pem())?;
        write_private(&certs.ca_key, &ca_key.serialize_pem())?;
        fs::write(&certs.server_cert, server_cert.pem())?;
        write_private(&certs.server_key, &server_key.serialize_pem())?;
        Ok(certs)
    }

    /// [`generate`](Self::generate) in a new temp dir, which is removed when the returned value
    /// and all its clones are dropped.
    ///
    /// # Errors
    /// As [`generate`](Self::generate), and the error of creating the temp dir.
    pub fn generate_temp() -> io::Result<TestCertificates> {
        let temp_dir = tempfile::Builder::new()
            .prefix("lock-testkit-tls-")
            .tempdir()?;
        let mut certs = Self::generate(temp_dir.path())?;
        certs.temp_dir = Some(Arc::new(temp_dir));
        Ok(certs)
    }

    /// The redis-server arguments that open a TLS port with these certificates: `--tls-port`,
    /// `--tls-cert-file`, `--tls-key-file`, `--tls-ca-cert-file` and `--tls-auth-clients no`
    /// (clients need no certificate of their own). The plain `--port` stays open.
    pub fn server_args(&self, tls_port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-port".to_owned(),
            tls_port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&self.server_cert),
            "--tls-key-file".to_owned(),
            path(&self.server_key),
            "--tls-ca-cert-file".to_owned(),
            path(&self.ca),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ]
    }
}

fn name(common_name: &str) -> DistinguishedName {
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    name.push(DnType::OrganizationName, "lock-testkit");
    name
}

/// Writes a private key readable by its owner only (on Unix).
fn write_private(path: &Path, pem: &str) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    io::Write::write_all(&mut options.open(path)?, pem.as_bytes())
}

/// How many TLS ports a start tries: each failure means another process bound the port between
/// our probe and redis-server's bind.
pub(crate) const TLS_PORT_ATTEMPTS: u32 = 4;

/// A loopback port that was free a moment ago, for `--tls-port`.
pub(crate) fn free_tls_port() -> io::Result<u16> {
    Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port())
}
