//! Randomized tests: seeds that can be replayed, a small generator, and names that differ
//! between runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The seed of a randomized test: the number in the environment variable `var` when it holds
/// one, otherwise a fresh one. Printed as `var=<seed>`, so a failing run can be replayed.
pub fn seed(var: &str) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(clock);
    eprintln!("{var}={seed}");
    seed
}

/// A number that differs between runs and between processes, for names that must not collide
/// with those of a concurrent run on the same server.
pub fn unique_suffix() -> u64 {
    clock() ^ (u64::from(std::process::id()) << 32)
}

fn clock() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

/// xorshift64*: a seeded random number generator for tests. The seed must not be 0.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index in `0..len`.
    pub fn index(&mut self, len: usize) -> usize {
        (self.next_u64() % len as u64) as usize
    }

    /// A duration of `lo..=hi` milliseconds.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + self.below(hi - lo + 1))
    }
}
