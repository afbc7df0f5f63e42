//! Telling systemd that a service has started (`sd_notify(READY=1)`) or
//! is reloading (`RELOADING=1`), for
//! units with `Type=notify`: one datagram to `$NOTIFY_SOCKET`, a path or,
//! with a leading `@`, an abstract socket name. Without the variable
//! (not started by such a unit) nothing is sent.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

/// Sends READY=1 to the notify socket of the unit that started this
/// process, if any; returns whether one was there.
pub fn ready() -> bool {
    match notify(std::env::var_os("NOTIFY_SOCKET").as_deref(), "READY=1") {
        Ok(sent) => sent,
        Err(e) => {
            tracing::warn!(error = %e, "could not tell systemd the service is ready");
            false
        }
    }
}

/// Tells the unit's manager a reload began (READY=1 follows when it is
/// done), with the monotonic time systemd asks of it.
pub fn reloading() -> bool {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1000;
    let state = format!("RELOADING=1\nMONOTONIC_USEC={usec}");
    notify(std::env::var_os("NOTIFY_SOCKET").as_deref(), &state).unwrap_or(false)
}

/// Sends `state` (`KEY=VALUE` lines) to `socket`; Ok(false) without one.
pub fn notify(socket: Option<&OsStr>, state: &str) -> io::Result<bool> {
    let Some(s) = socket.filter(|s| !s.is_empty()) else {
        return Ok(false);
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = s.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), Path::new(s))?;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_reaches_a_path_and_an_abstract_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).expect("bind");
        assert!(notify(Some(path.as_os_str()), "READY=1").expect("send"));
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("husk-notify-test-{}", std::process::id());
        let addr =
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("addr");
        let abs = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        let at = format!("@{name}");
        assert!(notify(Some(OsStr::new(&at)), "READY=1").expect("send"));
        let n = abs.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1");

        assert!(!notify(None, "READY=1").expect("none"));
        assert!(!notify(Some(OsStr::new("")), "READY=1").expect("empty"));
        assert!(notify(Some(dir.path().join("gone").as_os_str()), "READY=1").is_err());
    }
}
