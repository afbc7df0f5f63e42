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

/// Copies a shim's `log` FIFO into the monitor's log on a thread of its
/// own (a shim that logs while the monitor waits on its call must never
/// block on a full FIFO). The thread reads its own end: it sees EOF, and
/// ends, once the shim and the monitor's end held in the conn are closed.
pub(super) fn copy_log(path: &Path) -> Result<(), Failure> {
    use rustix::fs::OFlags;
    let fd = open(path, OFlags::RDONLY | OFlags::NONBLOCK)?;
    let f = std::fs::File::from(fd);
    let flags = rustix::fs::fcntl_getfl(&f).map_err(|e| (INTERNAL, format!("fcntl: {e}")))?;
    rustix::fs::fcntl_setfl(&f, flags - OFlags::NONBLOCK)
        .map_err(|e| (INTERNAL, format!("fcntl: {e}")))?;
    std::thread::Builder::new()
        .name("v2-log".into())
        .spawn(move || {
            use std::io::Read;
            let mut f = f;
            let mut buf = [0u8; 16 * 1024];
            while let Ok(n) = f.read(&mut buf) {
                if n == 0 {
                    break;
                }
                eprint!("{}", String::from_utf8_lossy(&buf[..n]));
            }
        })
        .map_err(|e| (INTERNAL, format!("a thread for the shim's log: {e}")))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chatty_shim_never_waits_on_its_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        fifo(&path).expect("fifo");
        let _held = open(&path, rustix::fs::OFlags::RDWR).expect("held");
        copy_log(&path).expect("copy");
        // Far more than a pipe holds, with nobody but the copier reading.
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            use std::io::Write;
            let mut w = std::fs::OpenOptions::new()
                .write(true)
                .open(&p)
                .expect("writer");
            let line = [b'x'; 1023];
            for _ in 0..1024 {
                w.write_all(&line).expect("write");
                w.write_all(b"\n").expect("write");
            }
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(30))
            .expect("the shim's 1 MiB of log was taken");
    }
}
