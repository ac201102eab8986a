//! Test credentials that all carry one mark, and the check that a text shows none of them: for
//! the tests that a password never appears in an error, a `Debug`, a log line or CLI output.

/// In every secret below, and nowhere else.
pub const MARK: &str = "Pa55";
/// An ACL user's password.
pub const PASSWORD: &str = "s3cr3t-Pa55-word";
/// A password with `@`, `:` and `/`, written percent-encoded in URLs
/// ([`AT_PASSWORD_IN_URL`]).
pub const AT_PASSWORD: &str = "s3cr3t@Pa55:w/rd";
/// [`AT_PASSWORD`] percent-encoded.
pub const AT_PASSWORD_IN_URL: &str = "s3cr3t%40Pa55%3Aw%2Frd";
/// A wrong password.
pub const WRONG: &str = "wr0ng-Pa55-word";
/// The sentinels' password (a `sentinelPassword` query parameter).
pub const SENTINEL_PASSWORD: &str = "sentinel-Pa55-word";
/// The ACL user the passwords belong to.
pub const USER: &str = "app";

/// Panics, naming `what`, when `text` shows a secret.
#[track_caller]
pub fn assert_no_secret(what: &str, text: &str) {
    assert!(
        !text.contains(MARK) && !text.contains("s3cr3t"),
        "a password shows in {what}: {text}"
    );
}

/// Panics when `error`'s `Display` or `Debug`, or the `Display` of any of its sources, shows a
/// secret.
#[track_caller]
pub fn assert_error_has_no_secret(error: &(dyn std::error::Error + 'static)) {
    assert_no_secret("the error's Display", &error.to_string());
    assert_no_secret("the error's Debug", &format!("{error:?}"));
    let mut cause = error.source();
    while let Some(source) = cause {
        assert_no_secret("a source's Display", &source.to_string());
        cause = source.source();
    }
}
