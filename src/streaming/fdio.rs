//! Async reads and writes on descriptors handed over by the shim: pipe
//! ends and pty masters, made non-blocking and driven by tokio's reactor.
//! A pty master reports EIO once every slave is closed; that reads as EOF.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use tokio::io::unix::AsyncFd;

pub struct Fd {
    fd: AsyncFd<OwnedFd>,
}

impl Fd {
    pub fn new(fd: OwnedFd) -> io::Result<Fd> {
        rustix::io::ioctl_fionbio(&fd, true)?;
        // SAFETY: the AsyncFd owns the OwnedFd, so the descriptor stays open
        // and the same for as long as it is registered.
        let fd = unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)?;
        Ok(Fd { fd })
    }

    pub fn raw(&self) -> i32 {
        self.fd.get_ref().as_raw_fd()
    }

    /// Reads some bytes; `Ok(0)` at EOF (or EIO on a pty master).
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut g = self.fd.readable().await?;
            match g.try_io(|f| rustix::io::read(f.get_ref(), &mut *buf).map_err(io::Error::from)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut g = self.fd.writable().await?;
            match g.try_io(|f| rustix::io::write(f.get_ref(), data).map_err(io::Error::from)) {
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
        Ok(())
    }

    /// Sets a terminal's window size (TIOCSWINSZ).
    pub fn resize(&self, cols: u16, rows: u16) -> io::Result<()> {
        let ws = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(self.fd.get_ref().as_fd(), ws)?;
        Ok(())
    }
}
