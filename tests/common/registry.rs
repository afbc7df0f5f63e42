//! A real distribution registry (Debian's `docker-registry`) on 127.0.0.1.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Registry {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Child,
    pub log: PathBuf,
    pub user: Option<(String, String)>,
}

impl Registry {
    pub fn start() -> Registry {
        Registry::start_with(None)
    }

    /// With htpasswd (bcrypt) basic auth for `user:password`.
    pub fn start_with(user: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let mut auth = String::new();
        if let Some((u, p)) = user {
            let out = Command::new("htpasswd")
                .args(["-Bbn", u, p])
                .output()
                .unwrap();
            assert!(out.status.success(), "htpasswd failed");
            let path = dir.path().join("htpasswd");
            std::fs::write(&path, out.stdout).unwrap();
            auth = format!(
                "auth:\n  htpasswd:\n    realm: husk-test\n    path: {}\n",
                path.display()
            );
        }
        let user = user.map(|(u, p)| (u.to_string(), p.to_string()));
        // A port picked free can be taken again before the registry binds
        // it (by another test, or by a connect that lands on itself), so
        // the registry counts as up only once it answers as a registry,
        // and a registry that exited is started again on another port.
        let mut tries = 0;
        loop {
            tries += 1;
            let port = super::free_port();
            let (mut child, log) = spawn(dir.path(), port, &auth);
            match wait_up(&mut child, &log, port) {
                Ok(()) => {
                    return Registry {
                        port,
                        dir,
                        child,
                        log,
                        user,
                    }
                }
                Err(why) if tries < 5 => {
                    eprintln!("registry on port {port} did not come up ({why}); another port");
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Err(why) => panic!("registry did not start: {why}"),
            }
        }
    }

    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// GET requests for blobs so far, per digest.
    pub fn blob_gets(&self, digest: &str) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter(|l| l.contains("\"GET /v2/") && l.contains(&format!("/blobs/{digest}")))
            .count()
    }

    /// Overwrites a stored blob's bytes (same length), as a tampering
    /// registry or a corrupted disk would serve them.
    pub fn tamper_blob(&self, digest: &str) {
        let hex = digest.trim_start_matches("sha256:");
        let p = self
            .dir
            .path()
            .join("data/docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data");
        let mut data = std::fs::read(&p).unwrap();
        let last = data.len() - 1;
        data[last] ^= 0xff;
        std::fs::write(&p, data).unwrap();
    }
}

/// Starts `docker-registry serve` on `port` with its data and log in `dir`.
fn spawn(dir: &Path, port: u16, auth: &str) -> (Child, PathBuf) {
    let config = format!(
        "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
        dir.join("data").display()
    );
    let cfg = dir.join("config.yml");
    std::fs::File::create(&cfg)
        .unwrap()
        .write_all(config.as_bytes())
        .unwrap();
    let log = dir.join("registry.log");
    let logf = std::fs::File::create(&log).unwrap();
    let child = Command::new("docker-registry")
        .arg("serve")
        .arg(&cfg)
        .stdout(logf.try_clone().unwrap())
        .stderr(logf)
        .stdin(Stdio::null())
        .spawn()
        .expect("docker-registry (Debian package docker-registry) must be installed");
    (child, log)
}

/// Whether 127.0.0.1:`port` answers `GET /v2/` with the registry's API
/// version header (200, or 401 when auth is on).
fn answers_as_registry(port: u16) -> bool {
    use std::io::Read;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut head = Vec::new();
    let _ = s.read_to_end(&mut head);
    String::from_utf8_lossy(&head)
        .to_ascii_lowercase()
        .contains("docker-distribution-api-version")
}

/// Waits until `child` answers `GET /v2/` on `port` as a registry.
fn wait_up(child: &mut Child, log: &Path, port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(Some(st)) = child.try_wait() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("exited with {st}: {text}"));
        }
        if answers_as_registry(port) {
            return Ok(());
        }
        if Instant::now() >= deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            return Err(format!("no answer in 20 s: {text}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
