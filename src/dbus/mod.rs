//! A small D-Bus client for systemd's manager: a blocking connection that
//! authenticates as this process's uid (`EXTERNAL`) and makes method
//! calls, one at a time, waiting for their reply.
//!
//! As root it speaks to systemd's private socket (`/run/systemd/private`,
//! no bus daemon in between, as the kubelet's and runc's clients do); it
//! falls back to the system bus, where it says `Hello` first. Signals and
//! other traffic on the connection are skipped. The wire format is in
//! [`wire`].

pub mod wire;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;
pub use wire::Value;

pub const SYSTEMD_PRIVATE: &str = "/run/systemd/private";
pub const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum DbusError {
    #[error("D-Bus {0}: {1}")]
    Io(String, std::io::Error),
    #[error("D-Bus authentication: {0}")]
    Auth(String),
    #[error("D-Bus protocol: {0}")]
    Protocol(String),
    /// The peer answered with an error.
    #[error("{name}: {message}")]
    Remote { name: String, message: String },
}

impl DbusError {
    /// The remote error's name, if the peer answered with one.
    pub fn remote_name(&self) -> Option<&str> {
        match self {
            DbusError::Remote { name, .. } => Some(name),
            _ => None,
        }
    }
}

/// One connection.
pub struct Connection {
    stream: BufReader<UnixStream>,
    serial: u32,
    /// Whether calls name a destination (a bus; not a direct peer).
    bus: bool,
}

/// How long one call may take: systemd answers unit calls at once, and a
/// busy one within seconds.
const TIMEOUT: Duration = Duration::from_secs(25);

impl Connection {
    /// systemd's private socket as root, else the system bus.
    pub fn systemd() -> Result<Connection, DbusError> {
        if rustix::process::geteuid().is_root() {
            if let Ok(c) = Connection::open(Path::new(SYSTEMD_PRIVATE), false) {
                return Ok(c);
            }
        }
        Connection::open(Path::new(SYSTEM_BUS), true)
    }

    /// Connects to `path` and authenticates; on a bus, says Hello.
    pub fn open(path: &Path, bus: bool) -> Result<Connection, DbusError> {
        let io = |what: &str| {
            let what = format!("{what} {}", path.display());
            move |e| DbusError::Io(what, e)
        };
        let s = UnixStream::connect(path).map_err(io("connect"))?;
        s.set_read_timeout(Some(TIMEOUT)).map_err(io("timeout"))?;
        s.set_write_timeout(Some(TIMEOUT)).map_err(io("timeout"))?;
        let mut c = Connection {
            stream: BufReader::new(s),
            serial: 0,
            bus,
        };
        c.auth().map_err(|e| match e {
            DbusError::Io(w, e) => DbusError::Io(format!("{w} on {}", path.display()), e),
            e => e,
        })?;
        if bus {
            c.call(
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "Hello",
                "",
                Vec::new(),
            )?;
        }
        Ok(c)
    }

    fn auth(&mut self) -> Result<(), DbusError> {
        let uid = rustix::process::geteuid().as_raw().to_string();
        let hex: String = uid.bytes().map(|b| format!("{b:02x}")).collect();
        let s = self.stream.get_mut();
        s.write_all(format!("\0AUTH EXTERNAL {hex}\r\n").as_bytes())
            .map_err(|e| DbusError::Io("auth".into(), e))?;
        let mut line = String::new();
        self.stream
            .read_line(&mut line)
            .map_err(|e| DbusError::Io("auth".into(), e))?;
        if !line.starts_with("OK ") {
            return Err(DbusError::Auth(format!(
                "EXTERNAL as uid {uid} refused: {:?}",
                line.trim_end()
            )));
        }
        self.stream
            .get_mut()
            .write_all(b"BEGIN\r\n")
            .map_err(|e| DbusError::Io("auth".into(), e))
    }

    /// Calls `interface.member` on systemd's `path` (or, for the bus
    /// itself, on the bus) and waits for its reply.
    pub fn call(
        &mut self,
        path: &str,
        interface: &str,
        member: &str,
        signature: &str,
        body: Vec<u8>,
    ) -> Result<(), DbusError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let dest = if !self.bus {
            None
        } else if interface == "org.freedesktop.DBus" {
            Some("org.freedesktop.DBus")
        } else {
            Some("org.freedesktop.systemd1")
        };
        let msg = wire::Call {
            dest,
            path,
            interface,
            member,
            signature,
            body,
        }
        .encode(self.serial);
        self.stream
            .get_mut()
            .write_all(&msg)
            .map_err(|e| DbusError::Io(format!("send {member}"), e))?;
        loop {
            let got = self.receive(member)?;
            if got.reply_serial != Some(self.serial) {
                continue;
            }
            return match got.kind {
                wire::METHOD_RETURN => Ok(()),
                wire::ERROR => Err(DbusError::Remote {
                    name: got.error_name.unwrap_or_default(),
                    message: got.first_string.unwrap_or_default(),
                }),
                _ => continue,
            };
        }
    }

    fn receive(&mut self, member: &str) -> Result<wire::Received, DbusError> {
        let io = |e| DbusError::Io(format!("reply to {member}"), e);
        let mut fixed = [0u8; 16];
        self.stream.read_exact(&mut fixed).map_err(io)?;
        let (fields, body_len) = wire::lengths(&fixed).map_err(DbusError::Protocol)?;
        let head_len = (16 + fields).div_ceil(8) * 8;
        if head_len + body_len > 128 << 20 {
            return Err(DbusError::Protocol(format!(
                "a message of {} bytes",
                head_len + body_len
            )));
        }
        let mut head = vec![0u8; head_len];
        head[..16].copy_from_slice(&fixed);
        self.stream.read_exact(&mut head[16..]).map_err(io)?;
        let mut body = vec![0u8; body_len];
        self.stream.read_exact(&mut body).map_err(io)?;
        wire::parse(&head, &body).map_err(DbusError::Protocol)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    /// An error reply to `serial`, little-endian, by hand.
    fn error_reply(serial: u32, name: &str, text: &str) -> Vec<u8> {
        let mut body = wire::Writer::default();
        body.str(text);
        let mut f = wire::Writer::default();
        f.struct_start();
        f.byte(4);
        f.signature("s");
        f.str(name);
        f.struct_start();
        f.byte(5);
        f.signature("u");
        f.u32(serial);
        f.struct_start();
        f.byte(8);
        f.signature("g");
        f.signature("s");
        let mut m = vec![b'l', wire::ERROR, 0, 1];
        m.extend_from_slice(&(body.buf.len() as u32).to_le_bytes());
        m.extend_from_slice(&7u32.to_le_bytes());
        m.extend_from_slice(&(f.buf.len() as u32).to_le_bytes());
        m.extend_from_slice(&f.buf);
        while m.len() % 8 != 0 {
            m.push(0);
        }
        m.extend_from_slice(&body.buf);
        m
    }

    /// A peer on a socket in a fresh dir: it accepts one connection, reads
    /// the AUTH line and hands the stream and that line to `then`.
    fn peer(
        then: impl FnOnce(&mut BufReader<UnixStream>, Vec<u8>) + Send + 'static,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        std::thread::JoinHandle<()>,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bus");
        let l = UnixListener::bind(&path).unwrap();
        let h = std::thread::spawn(move || {
            let (s, _) = l.accept().unwrap();
            let mut r = BufReader::new(s);
            let mut line = Vec::new();
            r.read_until(b'\n', &mut line).unwrap();
            then(&mut r, line);
        });
        (dir, path, h)
    }

    #[test]
    fn a_call_skips_other_traffic_and_returns_the_peers_error() {
        let (_dir, path, peer) = peer(|r, mut line| {
            assert!(line.starts_with(b"\0AUTH EXTERNAL "), "{line:?}");
            r.get_mut().write_all(b"OK 0123456789abcdef\r\n").unwrap();
            line.clear();
            r.read_until(b'\n', &mut line).unwrap();
            assert_eq!(line, b"BEGIN\r\n");
            let mut fixed = [0u8; 16];
            r.read_exact(&mut fixed).unwrap();
            let (fields, body) = wire::lengths(&fixed).unwrap();
            let mut rest = vec![0u8; (16 + fields).div_ceil(8) * 8 - 16 + body];
            r.read_exact(&mut rest).unwrap();
            // Traffic that is not the reply first: another call, and an
            // error to a serial that is not the caller's.
            let other = wire::Call {
                dest: None,
                path: "/x",
                interface: "x.Y",
                member: "Z",
                signature: "",
                body: Vec::new(),
            };
            r.get_mut().write_all(&other.encode(3)).unwrap();
            r.get_mut()
                .write_all(&error_reply(99, "x.Other", "not yours"))
                .unwrap();
            r.get_mut()
                .write_all(&error_reply(
                    1,
                    "org.freedesktop.systemd1.NoSuchUnit",
                    "gone",
                ))
                .unwrap();
        });
        let mut c = Connection::open(&path, false).unwrap();
        let e = c
            .call(
                "/org/freedesktop/systemd1",
                "org.freedesktop.systemd1.Manager",
                "StopUnit",
                "",
                Vec::new(),
            )
            .unwrap_err();
        peer.join().unwrap();
        assert_eq!(e.remote_name(), Some("org.freedesktop.systemd1.NoSuchUnit"));
        assert_eq!(e.to_string(), "org.freedesktop.systemd1.NoSuchUnit: gone");
    }

    #[test]
    fn a_refused_login_says_so() {
        let (_dir, path, peer) = peer(|r, _| {
            r.get_mut().write_all(b"REJECTED EXTERNAL\r\n").unwrap();
        });
        let e = Connection::open(&path, false).err().unwrap();
        peer.join().unwrap();
        assert!(e.to_string().contains("refused"), "{e}");
    }
}
