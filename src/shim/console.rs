//! A terminal for a container or an exec: the console socket the runtime
//! sends the pty master over, and the checks that what came is one.

use crate::api::shim::StreamFds;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub(super) fn console_listener(dir: &Path) -> Result<(UnixListener, PathBuf), String> {
    let path = dir.join(format!("console-{:08x}.sock", rand::random::<u32>()));
    let l = UnixListener::bind(&path).map_err(|e| format!("console socket: {e}"))?;
    Ok((l, path))
}

/// Receives the terminal master libcontainer sent to the console socket.
pub(super) fn receive_master(l: &UnixListener, path: &Path) -> Result<OwnedFd, String> {
    let _ = l.set_nonblocking(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let conn = loop {
        match l.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                let _ = std::fs::remove_file(path);
                return Err(format!("console socket: {e}"));
            }
        }
    };
    let _ = std::fs::remove_file(path);
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut name = [0u8; 64];
    let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = RecvAncillaryBuffer::new(&mut space);
    rustix::net::recvmsg(
        &conn,
        &mut [std::io::IoSliceMut::new(&mut name)],
        &mut anc,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| format!("console socket: {e}"))?;
    for m in anc.drain() {
        if let RecvAncillaryMessage::ScmRights(mut it) = m {
            if let Some(fd) = it.next() {
                check_pty_master(&fd)?;
                return Ok(fd);
            }
        }
    }
    Err("the console socket carried no terminal".into())
}

/// What came over the console socket must be a pseudo-terminal master of
/// a devpts (`ptmx`, 5:2, on a file system with devpts' magic, answering
/// TIOCGPTN), whoever sent it: a runtime tricked into opening a file of
/// the container's choosing (CVE-2025-52565) gets its container refused,
/// not its file read as the container's output.
pub(super) fn check_pty_master(fd: &OwnedFd) -> Result<(), String> {
    const DEVPTS_SUPER_MAGIC: i64 = 0x1cd1;
    let st = rustix::fs::fstat(fd).map_err(|e| format!("console: fstat: {e}"))?;
    let fs = rustix::fs::fstatfs(fd).map_err(|e| format!("console: fstatfs: {e}"))?;
    let (major, minor) = (rustix::fs::major(st.st_rdev), rustix::fs::minor(st.st_rdev));
    let is_char =
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::CharacterDevice;
    #[allow(clippy::unnecessary_cast)]
    let magic = fs.f_type as i64;
    if !is_char || (major, minor) != (5, 2) || magic != DEVPTS_SUPER_MAGIC {
        return Err(format!(
            "console: the terminal sent over the console socket is not a devpts ptmx \
             (type {:?}, device {major}:{minor}, file system magic {magic:#x}): refused",
            rustix::fs::FileType::from_raw_mode(st.st_mode)
        ));
    }
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes one unsigned int through a valid pointer to
    // a local; the fd is owned and open.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPTN, &mut n) };
    if r != 0 {
        return Err(format!(
            "console: the terminal sent is not a pty master (TIOCGPTN: {}): refused",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Receives a stream exec's terminal master into `mine`; on a failure
/// the process just started (`pid`) is killed.
pub(super) fn take_master(
    l: &UnixListener,
    path: &Path,
    pid: i32,
    mine: &mut Vec<OwnedFd>,
    which: &mut StreamFds,
) -> Result<(), String> {
    match receive_master(l, path) {
        Ok(m) => {
            mine.push(m);
            which.pty = true;
            Ok(())
        }
        Err(e) => {
            // SAFETY: kill(2) on the process just started.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            Err(e)
        }
    }
}
