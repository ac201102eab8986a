//! Where a lock lives in Redis: its key and its release channel, sharing one hash tag.

/// Maps lock names to Redis keys and channels.
///
/// A lock named `bill-run:2026-11` with prefix `lock:` lives at `lock:{bill-run:2026-11}` and
/// announces releases on `lock:{bill-run:2026-11}:released`; its fair waiters queue in
/// `lock:{bill-run:2026-11}:queue` and `…:timeout`. All share the hash tag (the part in
/// braces), so they hash to one Cluster slot and every script stays single-slot.
///
/// Braces in a name would move the hash tag, so the name is percent-encoded inside the tag:
/// `{` → `%7B`, `}` → `%7D`, and `%` → `%25` (so the encoding stays one-to-one). Every other
/// character, spaces and unicode included, is kept as is.
#[derive(Debug, Clone)]
pub(crate) struct KeyLayout {
    prefix: String,
}

impl KeyLayout {
    /// `prefix` must contain no braces (checked by the configuration).
    pub(crate) fn new(prefix: &str) -> Self {
        debug_assert!(!prefix.contains(['{', '}']));
        KeyLayout {
            prefix: prefix.to_owned(),
        }
    }

    /// The key holding the lock `name`.
    pub(crate) fn lock_key(&self, name: &str) -> String {
        self.lock_key_with(name, "")
    }

    /// The lock key of `name` followed by `suffix`, allocated once at its final size (a name
    /// without characters to encode): on the hot path, where every allocation shows.
    fn lock_key_with(&self, name: &str, suffix: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + name.len() + 2 + suffix.len());
        key.push_str(&self.prefix);
        key.push('{');
        push_encoded(&mut key, name);
        key.push('}');
        key.push_str(suffix);
        key
    }

    /// The queue of fair waiters of `name`: a sorted set of owner tokens by arrival.
    pub(crate) fn queue_key(&self, name: &str) -> String {
        self.lock_key_with(name, ":queue")
    }

    /// When each fair waiter of `name` is evicted: a sorted set of owner tokens by server time.
    pub(crate) fn timeout_key(&self, name: &str) -> String {
        self.lock_key_with(name, ":timeout")
    }

    /// The lock key of `name` and its fair queue and timeout keys, in the order the scripts
    /// take them.
    pub(crate) fn fair_keys(&self, name: &str) -> Vec<String> {
        vec![
            self.lock_key(name),
            self.queue_key(name),
            self.timeout_key(name),
        ]
    }

    /// The key of object `name` of another capability, e.g. `lock:idempotency:{create-42}` for
    /// `capability` `idempotency`: under the prefix, with the name as the hash tag, and never
    /// equal to a lock key (those have the tag right after the prefix). A capability's further
    /// keys and channels append a `:suffix`, so they share the tag.
    pub(crate) fn capability_key(&self, capability: &str, name: &str) -> String {
        let mut key = String::with_capacity(self.prefix.len() + capability.len() + name.len() + 3);
        key.push_str(&self.prefix);
        key.push_str(capability);
        key.push_str(":{");
        push_encoded(&mut key, name);
        key.push('}');
        key
    }

    /// The channel on which releases of `name` are published.
    pub(crate) fn release_channel(&self, name: &str) -> String {
        self.lock_key_with(name, ":released")
    }
}

impl KeyLayout {
    /// Appends `name` as it appears inside a key's hash tag: `%`, `{` and `}` percent-encoded.
    /// Also right for a `MATCH` glob over names, since none of the three is a glob character
    /// (except inside a `[…]` class, where the encoded form matches its characters).
    pub(crate) fn push_encoded(out: &mut String, name: &str) {
        push_encoded(out, name);
    }
}

fn push_encoded(out: &mut String, name: &str) {
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
}

/// The hash tag Redis Cluster would hash for `key` (the whole key when there is none).
#[cfg(test)]
fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{') {
        if let Some(len) = key[open + 1..].find('}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_channel_share_the_hash_tag_whatever_the_name() {
        let layout = KeyLayout::new("lock:");
        for name in [
            "plain",
            "}",
            "{",
            "{}",
            "a}b{c",
            "%7B",
            "ünï cødé",
            "}{}{",
            "%",
        ] {
            let key = layout.lock_key(name);
            let channel = layout.release_channel(name);
            assert_eq!(
                hash_tag(&key),
                hash_tag(&channel),
                "{name:?}: {key} / {channel}"
            );
            for other in layout.fair_keys(name) {
                assert_eq!(
                    hash_tag(&key),
                    hash_tag(&other),
                    "{name:?}: {key} / {other}"
                );
            }
            assert_ne!(hash_tag(&key), key, "{name:?} lost its hash tag: {key}");
        }
    }

    #[test]
    fn capability_keys_share_the_name_tag_and_never_meet_lock_keys() {
        let layout = KeyLayout::new("lock:");
        let key = layout.capability_key("idempotency", "a{b}");
        assert_eq!(key, "lock:idempotency:{a%7Bb%7D}");
        assert_eq!(hash_tag(&key), hash_tag(&layout.lock_key("a{b}")));
        // A lock named `idempotency:x` lives at `lock:{idempotency:x}`.
        assert_ne!(
            layout.capability_key("idempotency", "x"),
            layout.lock_key("idempotency:x")
        );
    }

    #[test]
    fn encoding_is_one_to_one() {
        let layout = KeyLayout::new("lock:");
        let names = ["{", "%7B", "%257B", "}", "%7D", "%", "%25"];
        let keys: std::collections::HashSet<_> = names.iter().map(|n| layout.lock_key(n)).collect();
        assert_eq!(keys.len(), names.len());
        assert_eq!(
            layout.lock_key("bill-run:2026-11"),
            "lock:{bill-run:2026-11}"
        );
        assert_eq!(layout.lock_key("a{b}"), "lock:{a%7Bb%7D}");
    }
}
