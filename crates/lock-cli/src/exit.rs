//! The exit codes of `platform-lock` (the `--help` text in `args.rs` lists them for users).

/// Redis was unreachable, timed out or refused.
pub(crate) const EXIT_REDIS: u8 = 1;
/// The operator answered no at the `release --force` prompt. Shares 1 with [`EXIT_REDIS`]:
/// both mean "nothing was released", which is what a runbook script branches on.
pub(crate) const EXIT_DECLINED: u8 = 1;
/// `release --force`: the lock changed hands between being shown and being released, so
/// nothing was released (as [`EXIT_DECLINED`]).
pub(crate) const EXIT_HOLDER_CHANGED: u8 = 1;
/// stdout could not be written (other than by its reader going away, which is no failure).
pub(crate) const EXIT_OUTPUT: u8 = 1;
/// Bad arguments; also `release --force` without `--yes` when nobody can be asked.
pub(crate) const EXIT_USAGE: u8 = 2;
/// `run`: the lease was lost, or about to run out, while the command ran (sysexits
/// `EX_SOFTWARE`).
pub(crate) const EXIT_LEASE_LOST: u8 = 70;
/// `run`: the lock was not acquired within the wait (sysexits `EX_TEMPFAIL`: try again later).
pub(crate) const EXIT_NOT_ACQUIRED: u8 = 75;
/// Bad configuration, or the lock is disabled (sysexits `EX_CONFIG`).
pub(crate) const EXIT_CONFIG: u8 = 78;
/// `run`: the command exists but could not be executed (as a shell reports it).
pub(crate) const EXIT_CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found (as a shell reports it).
pub(crate) const EXIT_NOT_FOUND: u8 = 127;
