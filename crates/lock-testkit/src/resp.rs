//! A minimal RESP2 client: send one command on a fresh connection, read one reply.
//!
//! The testkit must not depend on a Redis client library (only `lock-redis` may use `fred`), and
//! shelling out to `redis-cli` per command would cost a process per call, so this speaks the
//! protocol directly. It understands the five RESP2 reply types and nothing else.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$3\r\nfoo` or the nil bulk `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...` or the nil array `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// Renders the reply the way `redis-cli --raw` prints it: strings as their text, integers as
    /// digits, nil as an empty string, array elements one per line (nested arrays flattened).
    pub(crate) fn to_text(&self) -> String {
        let mut lines = Vec::new();
        self.push_lines(&mut lines);
        lines.join("\n")
    }

    fn push_lines(&self, lines: &mut Vec<String>) {
        match self {
            Reply::Simple(s) | Reply::Error(s) => lines.push(s.clone()),
            Reply::Integer(i) => lines.push(i.to_string()),
            Reply::Bulk(Some(bytes)) => lines.push(String::from_utf8_lossy(bytes).into_owned()),
            Reply::Bulk(None) | Reply::Array(None) => lines.push(String::new()),
            Reply::Array(Some(items)) => items.iter().for_each(|item| item.push_lines(lines)),
        }
    }
}

/// Encodes a command as a RESP array of bulk strings (binary safe, no quoting rules).
pub(crate) fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Parses one reply from the start of `buf`: `Ok(None)` when more bytes are needed, otherwise the
/// reply and how many bytes it used.
pub(crate) fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, String> {
    parse_at(buf, 0)
}

fn parse_at(buf: &[u8], pos: usize) -> Result<Option<(Reply, usize)>, String> {
    let Some((line, after)) = line_at(buf, pos) else {
        return Ok(None);
    };
    let (&kind, rest) = line.split_first().ok_or("empty RESP line")?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    let number = || -> Result<i64, String> {
        std::str::from_utf8(rest)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("bad RESP length or integer `{}`", text()))
    };
    match kind {
        b'+' => Ok(Some((Reply::Simple(text()), after))),
        b'-' => Ok(Some((Reply::Error(text()), after))),
        b':' => Ok(Some((Reply::Integer(number()?), after))),
        b'$' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some((Reply::Bulk(None), after)));
            }
            let len = usize::try_from(len).map_err(|e| e.to_string())?;
            let end = after + len;
            if buf.len() < end + 2 {
                return Ok(None);
            }
            if &buf[end..end + 2] != b"\r\n" {
                return Err("bulk string not terminated by CRLF".to_owned());
            }
            Ok(Some((Reply::Bulk(Some(buf[after..end].to_vec())), end + 2)))
        }
        b'*' => {
            let len = number()?;
            if len < 0 {
                return Ok(Some((Reply::Array(None), after)));
            }
            let mut items = Vec::new();
            let mut next = after;
            for _ in 0..len {
                match parse_at(buf, next)? {
                    Some((item, used)) => {
                        items.push(item);
                        next = used;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(Some(items)), next)))
        }
        other => Err(format!("unknown RESP type byte {other:#04x}")),
    }
}

/// The line starting at `pos` (without its CRLF) and the position after the CRLF.
fn line_at(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(pos..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], pos + end + 2))
}

/// Connects to `host:port`, sends `args` as one command and returns its reply.
///
/// With a `password`, an `AUTH` is pipelined in front of the command; if it is refused, its
/// error reply is returned instead of the command's.
///
/// After the reply, the client half-closes the connection and reads until the server closes its
/// side, which Redis does only once it has freed the client: when this returns, the connection
/// no longer shows up in `CLIENT LIST`, `INFO clients` or a `CLIENT KILL` count of a later call.
/// (A pipelined `QUIT` would do the same but show up in `INFO commandstats`.)
///
/// No timeout here: callers wrap this in `tokio::time::timeout`.
pub(crate) async fn request(
    host: &str,
    port: u16,
    password: Option<&str>,
    args: &[&str],
) -> io::Result<Reply> {
    let mut stream = TcpStream::connect((host, port)).await?;
    stream.set_nodelay(true)?;
    let mut out = Vec::new();
    if let Some(password) = password {
        out.extend_from_slice(&encode(&["AUTH", password]));
    }
    out.extend_from_slice(&encode(args));
    stream.write_all(&out).await?;

    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 4096];
    let mut replies = Vec::new();
    let wanted = if password.is_some() { 2 } else { 1 };
    while replies.len() < wanted {
        if let Some((reply, used)) = parse(&buf).map_err(invalid_data)? {
            buf.drain(..used);
            replies.push(reply);
            continue;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection before it replied",
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    // Half-close; the server sees end of stream, frees the client and closes its side.
    stream.shutdown().await?;
    while stream.read(&mut chunk).await? != 0 {}
    let reply = replies.pop().expect("at least one reply");
    match replies.pop() {
        Some(auth @ Reply::Error(_)) => Ok(auth),
        _ => Ok(reply),
    }
}

fn invalid_data(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(input: &[u8]) -> Reply {
        let (reply, used) = parse(input).unwrap().unwrap();
        assert_eq!(used, input.len(), "whole input consumed");
        reply
    }

    #[test]
    fn encodes_commands_as_bulk_arrays() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_reply_type() {
        assert_eq!(parsed(b"+PONG\r\n"), Reply::Simple("PONG".into()));
        assert_eq!(parsed(b"-ERR no\r\n"), Reply::Error("ERR no".into()));
        assert_eq!(parsed(b":-7\r\n"), Reply::Integer(-7));
        assert_eq!(parsed(b"$-1\r\n"), Reply::Bulk(None));
        assert_eq!(
            parsed(b"$4\r\na\r\nb\r\n"),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(parsed(b"*-1\r\n"), Reply::Array(None));
        assert_eq!(
            parsed(b"*2\r\n$2\r\nch\r\n*1\r\n:0\r\n"),
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"ch".to_vec())),
                Reply::Array(Some(vec![Reply::Integer(0)])),
            ]))
        );
    }

    #[test]
    fn incomplete_input_asks_for_more() {
        for input in [
            &b""[..],
            b"+PON",
            b"$5\r\nab",
            b"*2\r\n:1\r\n",
            b"$2\r\nab\r",
        ] {
            assert_eq!(parse(input).unwrap(), None, "{input:?}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(parse(b"?x\r\n").is_err());
        assert!(parse(b":x\r\n").is_err());
        assert!(parse(b"$2\r\nabcd\r\n").is_err());
    }

    #[test]
    fn text_rendering_matches_redis_cli_raw() {
        assert_eq!(Reply::Integer(12).to_text(), "12");
        assert_eq!(Reply::Bulk(None).to_text(), "");
        assert_eq!(Reply::Array(Some(vec![])).to_text(), "");
        let numsub = Reply::Array(Some(vec![
            Reply::Bulk(Some(b"ch".to_vec())),
            Reply::Integer(0),
        ]));
        assert_eq!(numsub.to_text(), "ch\n0");
    }
}
