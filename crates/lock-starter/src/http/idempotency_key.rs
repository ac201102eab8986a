//! The `Idempotency-Key` header's value, read as an RFC 8941 String, and the record key it
//! becomes: method, path, caller scope and client key.

use axum::http::header::GetAll;
use axum::http::{HeaderValue, Method};
use sha2::{Digest, Sha256};

/// The longest client key accepted, in bytes once unquoted: 512, the limit of every key.
pub(crate) const MAX_CLIENT_KEY_BYTES: usize = lock_core::MAX_KEY_BYTES;

/// Why an `Idempotency-Key` header is refused (400): the rule it breaks, for the problem body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyProblem {
    /// A stable name of the rule: `repeated`, `empty`, `quoting`, `escape`, `parameters`,
    /// `list`, `visible-ascii`, `length`, or `required` (no header where the layer requires one).
    pub(crate) rule: &'static str,
    /// What is wrong, one sentence part.
    pub(crate) problem: String,
}

impl KeyProblem {
    fn new(rule: &'static str, problem: impl Into<String>) -> Self {
        KeyProblem {
            rule,
            problem: problem.into(),
        }
    }
}

/// The client's key from the header's field lines: one line holding a String (`"abc"`, with
/// `\"` and `\\` escapes) or, leniently, the bare characters (`abc`); both give `abc`. The key
/// is 1 to 512 visible ASCII characters (no spaces); parameters and lists are refused.
pub(crate) fn client_key(lines: GetAll<'_, HeaderValue>) -> Result<String, KeyProblem> {
    let mut lines = lines.iter();
    let Some(value) = lines.next() else {
        return Err(KeyProblem::new("empty", "the header is empty"));
    };
    if lines.next().is_some() {
        return Err(KeyProblem::new(
            "repeated",
            "the header is given more than once; send it once",
        ));
    }
    let text = value.as_bytes().trim_ascii();
    let key = match text.first() {
        None => return Err(KeyProblem::new("empty", "the header is empty")),
        Some(b'"') => unquote(&text[1..])?,
        Some(_) => bare(text)?,
    };
    if key.is_empty() {
        return Err(KeyProblem::new("empty", "the key is empty"));
    }
    if key.len() > MAX_CLIENT_KEY_BYTES {
        return Err(KeyProblem::new(
            "length",
            format!(
                "the key is {} bytes, longer than {MAX_CLIENT_KEY_BYTES} bytes",
                key.len()
            ),
        ));
    }
    Ok(key)
}

/// A key written without quotes: visible ASCII, and none of the characters that would make it
/// a malformed String (`"`, `\`), a parameter (`;`) or a list (`,`).
fn bare(text: &[u8]) -> Result<String, KeyProblem> {
    for &byte in text {
        match byte {
            b'"' | b'\\' => {
                return Err(KeyProblem::new(
                    "quoting",
                    "an unquoted key holds a quote or backslash; quote the key and escape them as \\\" and \\\\",
                ));
            }
            b';' => return Err(parameters()),
            b',' => return Err(list()),
            _ if !is_visible(byte) => return Err(not_visible()),
            _ => {}
        }
    }
    Ok(String::from_utf8_lossy(text).into_owned())
}

/// The rest of a String after its opening quote: characters up to the closing quote, `\"` and
/// `\\` unescaped, and nothing after it.
fn unquote(text: &[u8]) -> Result<String, KeyProblem> {
    let mut key = Vec::with_capacity(text.len());
    let mut bytes = text.iter().copied();
    loop {
        match bytes.next() {
            None => {
                return Err(KeyProblem::new(
                    "quoting",
                    "the quoted key has no closing quote",
                ));
            }
            Some(b'"') => break,
            Some(b'\\') => match bytes.next() {
                Some(escaped @ (b'"' | b'\\')) => key.push(escaped),
                _ => {
                    return Err(KeyProblem::new(
                        "escape",
                        "a backslash in a quoted key escapes only \" or \\",
                    ));
                }
            },
            Some(byte) if is_visible(byte) => key.push(byte),
            Some(_) => return Err(not_visible()),
        }
    }
    let rest: Vec<u8> = bytes.collect();
    match rest.trim_ascii_start().first() {
        None => Ok(String::from_utf8_lossy(&key).into_owned()),
        Some(b';') => Err(parameters()),
        Some(b',') => Err(list()),
        Some(_) => Err(KeyProblem::new(
            "quoting",
            "characters follow the closing quote",
        )),
    }
}

fn is_visible(byte: u8) -> bool {
    (0x21..=0x7e).contains(&byte)
}

fn not_visible() -> KeyProblem {
    KeyProblem::new(
        "visible-ascii",
        "the key holds a character other than visible ASCII (spaces, control characters and non-ASCII are refused)",
    )
}

fn parameters() -> KeyProblem {
    KeyProblem::new(
        "parameters",
        "the key carries parameters (`;`), which are not accepted",
    )
}

fn list() -> KeyProblem {
    KeyProblem::new("list", "the header holds a list (`,`); send one key")
}

/// The record of `client_key` at `method` `path` for the caller `scope` (`None`: unscoped).
///
/// Readable when it fits the 512-byte key limit: `http POST /tickets <key>` unscoped,
/// `http POST /tickets @<sha-256 of the scope> <key>` scoped. The scope is always hashed: it is
/// often a credential or personal data, and record keys are seen in Redis and in logs. Past the
/// limit, a hash of the path, scope and key, `http POST #<sha-256>`, so a long path never
/// shortens the keys a client may send. The client key holds no space, so the parts never run
/// into each other.
pub(crate) fn record_key(
    method: &Method,
    path: &str,
    scope: Option<&str>,
    client_key: &str,
) -> String {
    let scope_part = scope.map_or_else(String::new, |scope| {
        format!("@{} ", hex(&Sha256::digest(scope.as_bytes())))
    });
    let key = format!("http {method} {path} {scope_part}{client_key}");
    if key.len() <= lock_core::MAX_KEY_BYTES {
        return key;
    }
    let mut hash = Sha256::new();
    hash.update(path.as_bytes());
    hash.update([0]);
    if let Some(scope) = scope {
        // A NUL and the length: a client key holds neither, so no unscoped input is alike.
        hash.update([0]);
        hash.update((scope.len() as u64).to_be_bytes());
        hash.update(scope.as_bytes());
    }
    hash.update(client_key.as_bytes());
    format!("http {method} #{}", hex(&hash.finalize()))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;

    use super::*;

    fn parse(lines: &[&[u8]]) -> Result<String, KeyProblem> {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append("idempotency-key", HeaderValue::from_bytes(line).unwrap());
        }
        client_key(headers.get_all("idempotency-key"))
    }

    fn rule(lines: &[&[u8]]) -> &'static str {
        parse(lines).unwrap_err().rule
    }

    #[test]
    fn quoted_and_bare_keys_are_the_same_key() {
        assert_eq!(parse(&[b"\"abc\""]).unwrap(), "abc");
        assert_eq!(parse(&[b"abc"]).unwrap(), "abc");
        assert_eq!(parse(&[b"  \"abc\"  "]).unwrap(), "abc");
        assert_eq!(parse(&[br#""a\"b\\c""#]).unwrap(), r#"a"b\c"#);
        assert_eq!(
            parse(&[b"8e03978e-40d5-43e8-bc93-6894a57f9324"]).unwrap(),
            "8e03978e-40d5-43e8-bc93-6894a57f9324"
        );
    }

    #[test]
    fn each_refused_form_names_its_rule() {
        assert_eq!(rule(&[b"a", b"b"]), "repeated");
        assert_eq!(rule(&[b""]), "empty");
        assert_eq!(rule(&[b"\"\""]), "empty");
        assert_eq!(rule(&[b"\"abc"]), "quoting");
        assert_eq!(rule(&[b"\"abc\"x"]), "quoting");
        assert_eq!(rule(&[b"ab\"c"]), "quoting");
        assert_eq!(rule(&[b"ab\\c"]), "quoting");
        assert_eq!(rule(&[br#""a\b""#]), "escape");
        assert_eq!(rule(&[br#""a\"#]), "escape");
        assert_eq!(rule(&[b"\"a\";p=1"]), "parameters");
        assert_eq!(rule(&[b"a;p=1"]), "parameters");
        assert_eq!(rule(&[b"\"a\", \"b\""]), "list");
        assert_eq!(rule(&[b"a,b"]), "list");
        assert_eq!(rule(&[b"a b"]), "visible-ascii");
        assert_eq!(rule(&[b"\"a b\""]), "visible-ascii");
        assert_eq!(rule(&[b"\"a\tb\""]), "visible-ascii");
        assert_eq!(rule(&["Zürich".as_bytes()]), "visible-ascii");
        assert_eq!(parse(&["k".repeat(512).as_bytes()]).unwrap().len(), 512);
        assert_eq!(rule(&["k".repeat(513).as_bytes()]), "length");
        let quoted = format!("\"{}\"", "k".repeat(512));
        assert_eq!(parse(&[quoted.as_bytes()]).unwrap().len(), 512);
    }

    #[test]
    fn record_keys_keep_callers_and_forms_apart() {
        let post = Method::POST;
        assert_eq!(record_key(&post, "/t", None, "k"), "http POST /t k");
        let alice = record_key(&post, "/t", Some("alice"), "k");
        assert!(
            alice.starts_with("http POST /t @") && alice.ends_with(" k"),
            "{alice}"
        );
        assert!(!alice.contains("alice"), "the scope is hashed: {alice}");
        let keys = [
            record_key(&post, "/t", None, "k"),
            record_key(&post, "/t", Some("alice"), "k"),
            record_key(&post, "/t", Some("bob"), "k"),
            record_key(&post, "/t", Some(""), "k"),
            record_key(&post, "/t", Some("alice"), &"k".repeat(512)),
            record_key(&post, "/t", Some("bob"), &"k".repeat(512)),
            record_key(&post, "/t", None, &"k".repeat(512)),
        ];
        for (i, a) in keys.iter().enumerate() {
            assert!(a.len() <= lock_core::MAX_KEY_BYTES, "{a}");
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }
}
