//! [`BranchToken`], which a branch's consumer releases it with, and the branch id rules.

use std::fmt;
use std::str::FromStr;

use crate::branches::error::{BranchError, InvalidBranchToken};
use crate::branches::sub_key::SubKey;
use crate::key::truncate_for_display;

/// The longest branch id accepted: 256 bytes of UTF-8.
pub const MAX_BRANCH_ID_BYTES: usize = 256;

/// A suggested message header name for a [`BranchToken`]'s text: `platform-branch-token`.
pub const BRANCH_TOKEN_HEADER: &str = "platform-branch-token";

/// The version tag that starts every token's text.
const VERSION: &str = "br1";

/// Checks a branch id: 1 to [`MAX_BRANCH_ID_BYTES`] bytes of UTF-8 without control characters.
///
/// # Errors
/// [`BranchError::InvalidArgument`] (`BRANCHES_INVALID_ARGUMENT`) naming the id and the rule.
///
/// # Examples
///
/// ```
/// use lock_core::branches::validate_branch_id;
///
/// assert!(validate_branch_id("search-index").is_ok());
/// let error = validate_branch_id("").unwrap_err();
/// assert_eq!(
///     error.to_string(),
///     "invalid branch id \"\": it is empty; a branch id is 1 to 256 bytes of UTF-8 with no control characters"
/// );
/// ```
pub fn validate_branch_id(branch: &str) -> Result<(), BranchError> {
    let problem = if branch.is_empty() {
        "it is empty"
    } else if branch.len() > MAX_BRANCH_ID_BYTES {
        "it is longer than 256 bytes"
    } else if branch.chars().any(char::is_control) {
        "it contains a control character"
    } else {
        return Ok(());
    };
    Err(BranchError::InvalidArgument {
        name: "branch id",
        value: format!("{:?}", truncate_for_display(branch)),
        problem: format!(
            "{problem}; a branch id is 1 to {MAX_BRANCH_ID_BYTES} bytes of UTF-8 with no control characters"
        ),
    })
}

/// One branch of one master invocation, which its consumer passes to
/// [`Branches::release_branch`](crate::branches::Branches::release_branch) when done.
///
/// It travels as text ([`Display`](fmt::Display), [`FromStr`]), for example in a
/// [`BRANCH_TOKEN_HEADER`]: `br1|<invocation>|<r or u>|<master key>|<branch id>`, where `u`
/// marks a branch the producer could not register. The text is printable ASCII of at most 2332
/// bytes, the names percent-encoded. docs/branches.md, section "Branch tokens", has the
/// grammar.
///
/// # Examples
///
/// ```
/// use lock_core::branches::BranchToken;
///
/// let token: BranchToken = "br1|42|r|ticket:4711|search index".replace(' ', "%20").parse()?;
/// assert_eq!(token.master_key(), "ticket:4711");
/// assert_eq!(token.invocation(), 42);
/// assert_eq!(token.branch(), "search index");
/// assert!(token.is_registered());
/// assert_eq!(token.to_string(), "br1|42|r|ticket:4711|search%20index");
/// # Ok::<(), lock_core::branches::InvalidBranchToken>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BranchToken {
    sub_key: SubKey,
    branch: String,
    registered: bool,
}

impl BranchToken {
    /// The token of `branch` under `sub_key`; `registered` says whether the registration was
    /// confirmed.
    pub(crate) fn new(sub_key: SubKey, branch: &str, registered: bool) -> Self {
        BranchToken {
            sub_key,
            branch: branch.to_owned(),
            registered,
        }
    }

    /// The master invocation this branch belongs to.
    pub fn sub_key(&self) -> &SubKey {
        &self.sub_key
    }

    /// The master lock's key.
    pub fn master_key(&self) -> &str {
        self.sub_key.master_key()
    }

    /// The master invocation id, the fencing token of the master's lock grant.
    pub fn invocation(&self) -> u64 {
        self.sub_key.invocation()
    }

    /// The branch id the producer registered.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// Whether the producer's registration was confirmed. A consumer releases every token all
    /// the same, since an unconfirmed registration may have arrived.
    pub fn is_registered(&self) -> bool {
        self.registered
    }
}

impl fmt::Display for BranchToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let flag = if self.registered { 'r' } else { 'u' };
        write!(f, "{VERSION}|{}|{flag}|", self.invocation())?;
        write_encoded(f, self.master_key())?;
        f.write_str("|")?;
        write_encoded(f, &self.branch)
    }
}

impl FromStr for BranchToken {
    type Err = InvalidBranchToken;

    /// Parses the text [`Display`](fmt::Display) writes.
    ///
    /// # Errors
    /// [`InvalidBranchToken`] naming the part that is wrong.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let invalid = |problem: String| InvalidBranchToken {
            token: truncate_for_display(text),
            problem,
        };
        let shown = truncate_for_display;
        let fields: Vec<&str> = text.split('|').collect();
        if fields.first() != Some(&VERSION) {
            let found = shown(fields.first().copied().unwrap_or_default());
            return Err(invalid(format!(
                "it starts with {found:?}, not the version tag `{VERSION}`"
            )));
        }
        let [_, invocation, flag, master, branch] = fields[..] else {
            return Err(invalid(format!(
                "it has {} `|`-separated fields, not 5",
                fields.len()
            )));
        };
        // Digits alone, no leading zero: each token has one text.
        let canonical = invocation.bytes().all(|b| b.is_ascii_digit())
            && (invocation == "0" || !invocation.starts_with('0'));
        let invocation: u64 = invocation
            .parse()
            .ok()
            .filter(|_| canonical)
            .ok_or_else(|| {
                invalid(format!(
                    "the invocation {:?} is not a whole number from 0 to {}, in decimal digits with no leading zero",
                    shown(invocation),
                    u64::MAX
                ))
            })?;
        let registered = match flag {
            "r" => true,
            "u" => false,
            other => {
                return Err(invalid(format!(
                    "the flag {:?} is neither `r` (registered) nor `u` (unregistered)",
                    shown(other)
                )));
            }
        };
        let master = decode(master).map_err(|p| invalid(format!("the master key {p}")))?;
        crate::key::validate_key(&master)
            .map_err(|e| invalid(format!("the master key is not accepted: {e}")))?;
        let branch = decode(branch).map_err(|p| invalid(format!("the branch id {p}")))?;
        validate_branch_id(&branch)
            .map_err(|e| invalid(format!("the branch id is not accepted: {e}")))?;
        Ok(BranchToken::new(
            SubKey::new(master, invocation),
            &branch,
            registered,
        ))
    }
}

/// Whether `byte` is written as itself: printable ASCII except the escape and the separator.
fn is_plain(byte: u8) -> bool {
    (0x21..=0x7e).contains(&byte) && byte != b'%' && byte != b'|'
}

fn write_encoded(f: &mut fmt::Formatter<'_>, text: &str) -> fmt::Result {
    for byte in text.bytes() {
        if is_plain(byte) {
            write!(f, "{}", byte as char)?;
        } else {
            write!(f, "%{byte:02X}")?;
        }
    }
    Ok(())
}

/// Undoes [`write_encoded`], accepting only what it writes (so each token has one text); the
/// error completes "the master key …" / "the branch id …".
fn decode(field: &str) -> Result<String, String> {
    let mut bytes = Vec::with_capacity(field.len());
    let mut rest = field.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let digit = |b: &u8| matches!(b, b'0'..=b'9' | b'A'..=b'F');
            let byte = tail
                .get(..2)
                .filter(|h| h.iter().all(digit))
                .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok())
                .ok_or_else(|| {
                    "has a `%` not followed by two upper-case hex digits (0-9, A-F)".to_owned()
                })?;
            if is_plain(byte) {
                return Err(format!(
                    "has `%{byte:02X}` for `{}`, which is written as itself",
                    byte as char
                ));
            }
            bytes.push(byte);
            rest = &tail[2..];
        } else if is_plain(byte) {
            bytes.push(byte);
            rest = tail;
        } else {
            return Err(format!(
                "has the byte 0x{byte:02X}, which must be percent-encoded"
            ));
        }
    }
    String::from_utf8(bytes).map_err(|_| "is not UTF-8 once decoded".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(master: &str, branch: &str, registered: bool) -> BranchToken {
        BranchToken::new(SubKey::new(master, 7), branch, registered)
    }

    #[test]
    fn every_accepted_name_round_trips_as_printable_ascii() {
        for (master, branch) in [
            ("ticket:4711", "search"),
            ("a|b", "c|d"),
            ("100%", "%41"),
            ("ünï cødé {7}", "🔒 index"),
            ("x", &"b".repeat(MAX_BRANCH_ID_BYTES)),
        ] {
            for registered in [true, false] {
                let original = token(master, branch, registered);
                let text = original.to_string();
                assert!(text.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{text}");
                assert_eq!(text.parse::<BranchToken>().unwrap(), original, "{text}");
            }
        }
    }

    #[test]
    fn bad_text_is_refused_naming_the_problem() {
        let cases = [
            ("", "not the version tag"),
            ("br2|1|r|m|b", "not the version tag `br1`"),
            ("br1|1|r|m", "4 `|`-separated fields, not 5"),
            ("br1|-1|r|m|b", "invocation \"-1\" is not a whole number"),
            ("br1|+42|r|m|b", "invocation \"+42\" is not a whole number"),
            ("br1|0042|r|m|b", "with no leading zero"),
            (
                "br1|1|r|m|%74",
                "has `%74` for `t`, which is written as itself",
            ),
            ("br1|1|r|m|%7c", "two upper-case hex digits"),
            (
                "br1|1|r|m|%+A",
                "`%` not followed by two upper-case hex digits",
            ),
            ("br1|1|x|m|b", "neither `r` (registered) nor `u`"),
            (
                "br1|1|r|m%2|b",
                "`%` not followed by two upper-case hex digits",
            ),
            ("br1|1|r|m|b c", "0x20, which must be percent-encoded"),
            ("br1|1|r|%FF|b", "not UTF-8"),
            ("br1|1|r||b", "master key is not accepted"),
            ("br1|1|r|m|%0A", "branch id is not accepted"),
        ];
        for (text, expected) in cases {
            let error = text.parse::<BranchToken>().unwrap_err();
            assert!(error.to_string().contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_longest_token_is_2332_bytes() {
        let longest = BranchToken::new(
            SubKey::new("é".repeat(crate::MAX_KEY_BYTES / 2), u64::MAX),
            &"é".repeat(MAX_BRANCH_ID_BYTES / 2),
            true,
        );
        let text = longest.to_string();
        assert_eq!(text.len(), 2332);
        assert_eq!(text.parse::<BranchToken>().unwrap(), longest);
    }

    #[test]
    fn a_long_token_is_cut_in_its_error_wherever_it_is_wrong() {
        let long = "x".repeat(5 * 1024);
        for text in [
            long.clone(),
            format!("br1|{long}|r|m|b"),
            format!("br1|1|{long}|m|b"),
            format!("br1|1|r|{long}|b"),
            format!("br1|1|r|m|{long}"),
            format!("br1|1|r|m|b|{long}"),
        ] {
            let error = text.parse::<BranchToken>().unwrap_err();
            let message = error.to_string();
            assert!(message.len() < 600, "{} bytes: {message}", message.len());
            assert!(
                message.contains(&format!("({} bytes)", text.len())),
                "{message}"
            );
            assert!(error.token.len() < 100, "{}", error.token);
        }
    }

    #[test]
    fn branch_ids_follow_the_rule() {
        assert!(validate_branch_id("ok id / ünï").is_ok());
        assert!(validate_branch_id(&"x".repeat(MAX_BRANCH_ID_BYTES + 1)).is_err());
        let error = validate_branch_id("a\tb").unwrap_err();
        assert_eq!(error.code(), "BRANCHES_INVALID_ARGUMENT");
        assert!(error.to_string().contains("control character"), "{error}");
    }
}
