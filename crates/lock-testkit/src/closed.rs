//! A loopback port that refuses connections for as long as the test needs it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use socket2::{Domain, Socket, Type};

/// A loopback port bound but never listened on: connecting to it is refused at once, and no
/// other process can take it while this value lives — unlike a port picked by binding a
/// listener and dropping it, which a `redis-server` another test starts may take meanwhile.
///
/// # Examples
///
/// ```
/// use lock_testkit::ClosedPort;
///
/// let closed = ClosedPort::new()?;
/// let refused = std::net::TcpStream::connect(("127.0.0.1", closed.port())).unwrap_err();
/// assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct ClosedPort {
    _socket: Socket,
    port: u16,
}

impl ClosedPort {
    /// Binds a free loopback port (chosen by the OS) without listening on it.
    ///
    /// # Errors
    /// The I/O error of creating or binding the socket.
    pub fn new() -> io::Result<ClosedPort> {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
        socket.bind(&SocketAddr::from((Ipv4Addr::LOCALHOST, 0)).into())?;
        let port = socket
            .local_addr()?
            .as_socket()
            .map(|address| address.port())
            .ok_or_else(|| io::Error::other("not an IP socket"))?;
        Ok(ClosedPort {
            _socket: socket,
            port,
        })
    }

    /// The port: `127.0.0.1:<port>` refuses connections while `self` lives.
    pub fn port(&self) -> u16 {
        self.port
    }
}
