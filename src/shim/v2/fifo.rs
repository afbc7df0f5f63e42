//! The FIFOs a shim v2 runtime's processes get their stdio through.

use crate::shim::runtime_call::Failure;
use std::os::fd::OwnedFd;
use std::path::Path;

use super::INTERNAL;

/// A FIFO at `path`, made anew.
pub(super) fn fifo(path: &Path) -> Result<(), Failure> {
    let _ = std::fs::remove_file(path);
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        path,
        rustix::fs::Mode::from_raw_mode(0o600),
    )
    .map_err(|e| (INTERNAL, format!("mkfifo {}: {e}", path.display())))
}

/// `path` opened with `flags` (close-on-exec).
pub(super) fn open(path: &Path, flags: rustix::fs::OFlags) -> Result<OwnedFd, Failure> {
    rustix::fs::open(
        path,
        flags | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| (INTERNAL, format!("open {}: {e}", path.display())))
}

/// A new FIFO's read end, non-blocking (the loop never waits on it). A
/// read of it gives EOF before a writer opened it: it is read once the
/// shim's call that opens it (Create, Start of an exec) has returned.
pub(super) fn reader(path: &Path) -> Result<OwnedFd, Failure> {
    use rustix::fs::OFlags;
    fifo(path)?;
    open(path, OFlags::RDONLY | OFlags::NONBLOCK)
}

/// A new FIFO held both ways (a stdin: opening never waits, and the
/// shim's end sees EOF only once every holder closed it).
pub(super) fn both_ways(path: &Path) -> Result<OwnedFd, Failure> {
    fifo(path)?;
    open(path, rustix::fs::OFlags::RDWR)
}
