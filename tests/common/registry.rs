//! A real distribution registry (Debian's `docker-registry`) on 127.0.0.1.

use std::io::Write;
use std::path::PathBuf;
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
        let port = super::free_port();
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
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}",
            dir.path().join("data").display()
        );
        let cfg = dir.path().join("config.yml");
        std::fs::File::create(&cfg)
            .unwrap()
            .write_all(config.as_bytes())
            .unwrap();
        let log = dir.path().join("registry.log");
        let logf = std::fs::File::create(&log).unwrap();
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&cfg)
            .stdout(logf.try_clone().unwrap())
            .stderr(logf)
            .stdin(Stdio::null())
            .spawn()
            .expect("docker-registry (Debian package docker-registry) must be installed");
        let reg = Registry {
            port,
            dir,
            child,
            log,
            user: user.map(|(u, p)| (u.to_string(), p.to_string())),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "registry did not start: {}",
                std::fs::read_to_string(&reg.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        reg
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

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
