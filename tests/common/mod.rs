//! Shared harness for the root integration tests: a real `docker-registry`
//! on a free 127.0.0.1 port, images built from busybox-static and pushed
//! over the distribution API, and `husk serve` instances with private
//! roots, sockets and config dirs.
#![allow(dead_code, clippy::unwrap_used)]

pub mod apiserver;
pub mod apiserver_wire;
pub mod cluster;
pub mod cni;
pub mod containerd;
pub mod ctr;
pub mod deb;
pub mod images;
pub mod kubelet;
pub mod managers;
pub mod masks;
pub mod nri_plugin;
pub mod otlp;
pub mod pod;
pub mod registry;
pub mod scrape;
pub mod server;
pub mod stream;
pub mod token_auth;
pub mod userns;
pub mod vm;

use std::path::Path;

/// Skips (with a message) when not root: these tests need mounts.
pub fn require_root() -> bool {
    if rustix::process::geteuid().is_root() {
        true
    } else {
        eprintln!("skipping: needs root");
        false
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A file of `../shared/` beside the checkout (the real plugins, shims
/// and runtimes the suite runs); the suite needs it there.
pub fn shared(rel: &str) -> std::path::PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared")
        .join(rel);
    assert!(
        p.exists(),
        "{} is missing: the suite runs the real runtimes of ../shared/ beside the checkout",
        p.display()
    );
    p
}

/// Writes `text` to `path` as an executable (mode 0755).
///
/// The file is written by a child `sh`, not by this process: a test binary
/// runs tests on many threads, and a thread that forks while another holds
/// the file open for writing gives its child that descriptor until the
/// child execs. An exec of the file in that window fails with ETXTBSY
/// ("Text file busy"). A file this process never opened for writing cannot
/// be busy.
pub fn write_executable(path: &Path, text: &str) {
    use std::io::Write;
    let mut child = std::process::Command::new("sh")
        .args(["-c", "cat > \"$0\" && chmod 755 \"$0\""])
        .arg(path)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write the executable");
    let ok = child.wait().expect("wait sh").success();
    assert!(ok, "write {}", path.display());
}

/// Number of files (not dirs) under `dir`.
pub fn count_files(dir: &Path) -> usize {
    let mut n = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(e.path());
            } else {
                n += 1;
            }
        }
    }
    n
}

/// Mount points strictly below `dir` right now (`dir` itself may be a
/// mount: with `--mount-namespace pod` the server's root is its own
/// private bind).
pub fn mounts_below(dir: &Path) -> Vec<String> {
    let top = dir.display().to_string();
    mounts_under(dir)
        .into_iter()
        .filter(|m| *m != top)
        .collect()
}

/// Mount points under `dir` right now.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .filter(|m| Path::new(m).starts_with(dir))
        .collect()
}

/// A TCP proxy on 127.0.0.1 that slows responses to about `bytes_per_sec`,
/// so a test can act in the middle of a transfer.
pub async fn throttle_proxy(
    upstream: u16,
    bytes_per_sec: usize,
) -> (u16, tokio::task::JoinHandle<()>) {
    fault_proxy(upstream, Fault::Throttle { bytes_per_sec }).await
}

/// GETs `path` from 127.0.0.1:`port` (HTTP/1.0), retrying for about five
/// seconds until the answer contains `want`; returns the last answer.
pub fn http_get_until(port: u16, path: &str, want: &str) -> String {
    use std::io::{Read, Write};
    let mut body = String::new();
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        body.clear();
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            s.set_read_timeout(Some(std::time::Duration::from_secs(2)))
                .unwrap();
            s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
                .unwrap();
            let _ = s.read_to_string(&mut body);
            if body.contains(want) {
                break;
            }
        }
    }
    body
}

/// What a `fault_proxy` does to each connection's answer stream.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    /// Everything passes, at about this rate.
    Throttle { bytes_per_sec: usize },
    /// A TCP reset (SO_LINGER 0, then close) once `after` bytes passed.
    Reset { after: usize },
    /// Nothing more is sent once `after` bytes passed; the connection stays open.
    Stall { after: usize },
}

/// A TCP proxy on 127.0.0.1 to `upstream` that applies `fault` to every
/// connection's answer stream.
pub async fn fault_proxy(upstream: u16, fault: Fault) -> (u16, tokio::task::JoinHandle<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let h = tokio::spawn(async move {
        loop {
            let Ok((client, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", upstream)).await
                else {
                    return;
                };
                let (mut sr, mut sw) = server.into_split();
                let (mut cr, mut cw) = client.into_split();
                let up = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut cr, &mut sw).await;
                    let _ = sw.shutdown().await;
                });
                let chunk = 16 * 1024;
                let (after, pause) = match fault {
                    Fault::Throttle { bytes_per_sec } => (
                        usize::MAX,
                        Some(std::time::Duration::from_secs_f64(
                            chunk as f64 / bytes_per_sec as f64,
                        )),
                    ),
                    Fault::Reset { after } | Fault::Stall { after } => (after, None),
                };
                let mut sent = 0usize;
                let mut buf = vec![0u8; chunk];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n.min(after.saturating_sub(sent)),
                    };
                    if cw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                    sent += n;
                    if let Some(p) = pause {
                        tokio::time::sleep(p).await;
                    }
                    if sent >= after {
                        match fault {
                            Fault::Reset { .. } => {
                                // No FIN first: the close resets.
                                let _ = rustix::net::sockopt::set_socket_linger(
                                    cw.as_ref(),
                                    Some(std::time::Duration::ZERO),
                                );
                                cw.forget();
                                up.abort();
                                return;
                            }
                            _ => tokio::time::sleep(std::time::Duration::from_secs(3600)).await,
                        }
                        break;
                    }
                }
                let _ = cw.shutdown().await;
                up.abort();
            });
        }
    });
    (port, h)
}

/// A writer the test can read back.
#[derive(Clone, Default)]
pub struct Buf(pub std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Buf {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl tokio::io::AsyncWrite for Buf {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        b: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.0.lock().unwrap().extend_from_slice(b);
        std::task::Poll::Ready(Ok(b.len()))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// A tmpfs of `size` mounted on a fresh directory (a small file system a
/// test can fill), unmounted on drop.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn new(size: &str) -> Tmpfs {
        let dir = tempfile::Builder::new()
            .prefix("husk-tmpfs-")
            .tempdir()
            .unwrap();
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount tmpfs on {}", dir.path().display());
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// (capacity, available) in bytes.
    pub fn space(&self) -> (u64, u64) {
        let s = rustix::fs::statvfs(self.path()).unwrap();
        (s.f_blocks * s.f_frsize, s.f_bavail * s.f_frsize)
    }

    /// Writes `bytes` into a file named `name`.
    pub fn fill(&self, name: &str, bytes: u64) {
        let f = std::fs::File::create(self.path().join(name)).unwrap();
        let mut w = std::io::BufWriter::new(f);
        let chunk = vec![7u8; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            std::io::Write::write_all(&mut w, &chunk[..n]).unwrap();
            left -= n as u64;
        }
        std::io::Write::flush(&mut w).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Whatever is still mounted inside (overlays of a runtime's root)
        // goes with it.
        let _ = std::process::Command::new("umount")
            .arg("-R")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}
