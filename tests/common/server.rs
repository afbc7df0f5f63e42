//! A `husk serve` process with its own root, state, socket and config dirs.

use husk::api::cri::image_service_client::ImageServiceClient;
use husk::api::cri::runtime_service_client::RuntimeServiceClient;
use husk::api::cri::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tonic::transport::Channel;

pub struct Husk {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    pub extra: Vec<String>,
}

impl Husk {
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("run/husk.sock")
    }
    pub fn certs_d(&self) -> PathBuf {
        self.dir.path().join("certs.d")
    }
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    pub async fn start() -> Husk {
        Husk::start_with(Vec::new()).await
    }

    pub async fn start_with(extra: Vec<String>) -> Husk {
        Husk::start_with_config(extra, "").await
    }

    /// A server whose config file holds `config` (flags still win).
    pub async fn start_with_config(extra: Vec<String>, config: &str) -> Husk {
        let dir = tempfile::Builder::new()
            .prefix("husk-test-")
            .tempdir()
            .unwrap();
        std::fs::create_dir_all(dir.path().join("certs.d")).unwrap();
        std::fs::write(dir.path().join("none.toml"), config).unwrap();
        let mut h = Husk {
            dir,
            child: None,
            extra,
        };
        h.spawn().await;
        h
    }

    /// Writes `<certs.d>/<host>/hosts.toml`.
    pub fn hosts_toml(&self, host: &str, text: &str) {
        let d = self.certs_d().join(host);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("hosts.toml"), text).unwrap();
    }

    /// The socket NRI plugins dial.
    pub fn nri_socket(&self) -> std::path::PathBuf {
        self.dir.path().join("nri.sock")
    }

    pub fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_husk"));
        c.arg("serve")
            .arg("--config")
            .arg(self.dir.path().join("none.toml"));
        // A test may put the root elsewhere (a small tmpfs of its own).
        if !self.extra.iter().any(|a| a == "--root") {
            c.arg("--root").arg(self.root());
        }
        c.arg("--state")
            .arg(self.dir.path().join("run"))
            .arg("--listen")
            .arg(self.socket())
            .arg("--registry-config-dir")
            .arg(self.certs_d())
            .arg("--cni-conf-dir")
            .arg(self.dir.path().join("net.d"));
        // NRI's socket and plugin dirs are the test's own.
        if !self.extra.iter().any(|a| a == "--nri-socket") {
            c.arg("--nri-socket").arg(self.nri_socket());
        }
        if !self.extra.iter().any(|a| a == "--nri-plugin-path") {
            c.arg("--nri-plugin-path")
                .arg(self.dir.path().join("nri-plugins"))
                .arg("--nri-plugin-config-path")
                .arg(self.dir.path().join("nri-conf"));
        }
        // A test whose config file sets the level keeps it (a reload may
        // change it; a flag would win over the file).
        let file = std::fs::read_to_string(self.dir.path().join("none.toml")).unwrap_or_default();
        if !file.contains("log_level") {
            c.arg("--log-level").arg("debug");
        }
        c.args(&self.extra);
        // A suite run may pin where pods' mounts live; a test that names
        // it keeps its own.
        if let Ok(m) = std::env::var("HUSK_TEST_MOUNT_NAMESPACE") {
            if !m.is_empty() && !self.extra.iter().any(|a| a == "--mount-namespace") {
                c.arg("--mount-namespace").arg(m);
            }
        }
        // A suite run may pin the cgroup driver (the systemd node VM runs
        // cgroupfs tests too); a test that names one keeps its own.
        if let Ok(d) = std::env::var("HUSK_TEST_CGROUP_DRIVER") {
            if !self.extra.iter().any(|a| a == "--cgroup-driver") {
                c.arg("--cgroup-driver").arg(d);
            }
        }
        c
    }

    pub async fn spawn(&mut self) {
        // An explicit config file (empty unless the test gave one): the
        // flags carry the rest.
        let config = self.dir.path().join("none.toml");
        if !config.exists() {
            std::fs::write(config, "").unwrap();
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("husk.log"))
            .unwrap();
        let child = self
            .command()
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        self.wait_ready().await;
    }

    /// Waits until the socket answers and recovery is done.
    pub async fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(ch) = husk::api::connect(&self.endpoint()).await {
                let mut c = ImageServiceClient::new(ch);
                if c.list_images(ListImagesRequest { filter: None })
                    .await
                    .is_ok()
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "husk did not become ready:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("husk.log")).unwrap_or_default()
    }

    /// Sends SIGHUP and waits (30 s at most) for its outcome, "config
    /// reloaded" or "config reload failed"; the log written since.
    pub async fn reload(&self) -> String {
        let mark = self.log().len();
        // SAFETY: kill(2) of the test's own server.
        unsafe { libc::kill(self.pid() as i32, libc::SIGHUP) };
        crate::wait_for!(30, "the reload", {
            let l = self.log()[mark..].to_string();
            (l.contains("config reloaded") || l.contains("config reload failed")).then_some(l)
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut c = self.child.take().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        c.wait().unwrap()
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    pub async fn channel(&self) -> Channel {
        husk::api::connect(&self.endpoint()).await.unwrap()
    }

    pub async fn images(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel().await)
    }

    /// A client that takes answers as large as the kubelet's (16 MiB)
    /// and more: ExecSync may return 16 MiB per stream.
    pub async fn runtime(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel().await).max_decoding_message_size(64 << 20)
    }

    /// Status (not verbose).
    pub async fn runtime_status(&self) -> StatusResponse {
        self.runtime()
            .await
            .status(StatusRequest { verbose: false })
            .await
            .expect("Status")
            .into_inner()
    }

    pub async fn pull(&self, image: &str) -> Result<String, tonic::Status> {
        self.pull_auth(image, None).await
    }

    pub async fn pull_auth(
        &self,
        image: &str,
        auth: Option<AuthConfig>,
    ) -> Result<String, tonic::Status> {
        self.images()
            .await
            .pull_image(PullImageRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                auth,
                sandbox_config: None,
            })
            .await
            .map(|r| r.into_inner().image_ref)
    }

    pub async fn list(&self) -> Vec<Image> {
        self.images()
            .await
            .list_images(ListImagesRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .images
    }

    pub async fn status(&self, image: &str) -> Option<Image> {
        self.images()
            .await
            .image_status(ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                verbose: true,
            })
            .await
            .unwrap()
            .into_inner()
            .image
    }

    pub async fn remove(&self, image: &str) -> Result<(), tonic::Status> {
        self.images()
            .await
            .remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
            })
            .await
            .map(|_| ())
    }

    /// The snapshot `fs` dirs of an image, bottom first, read from disk.
    pub fn layer_dirs(&self, image_id: &str) -> Vec<PathBuf> {
        let rec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(
                self.root()
                    .join("images")
                    .join(format!("{}.json", image_id.trim_start_matches("sha256:"))),
            )
            .unwrap(),
        )
        .unwrap();
        rec["chain_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                let name = c.as_str().unwrap().replace(':', "-");
                let id = std::fs::read_to_string(self.root().join("snapshots/chains").join(name))
                    .unwrap();
                self.root().join("snapshots").join(id.trim()).join("fs")
            })
            .collect()
    }

    /// Mounts the image read-only at a new dir and returns it (unmounted on drop).
    pub fn mount_image(&self, image_id: &str) -> Mounted {
        let dirs = self.layer_dirs(image_id);
        if dirs.len() == 1 {
            return Mounted(dirs[0].clone(), false);
        }
        let target = self
            .dir
            .path()
            .join(format!("view-{}", rand::random::<u32>()));
        std::fs::create_dir_all(&target).unwrap();
        let lower: Vec<String> = dirs.iter().rev().map(|d| d.display().to_string()).collect();
        let st = Command::new("mount")
            .args([
                "-t",
                "overlay",
                "overlay",
                "-o",
                &format!("lowerdir={}", lower.join(":")),
            ])
            .arg(&target)
            .status()
            .unwrap();
        assert!(st.success(), "mount image view");
        Mounted(target, true)
    }
}

/// A read-only view of an image; the bool says whether it is a mount.
pub struct Mounted(pub PathBuf, bool);

impl Mounted {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if self.1 {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
}

impl Drop for Husk {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_raw(c.id() as i32).unwrap(),
                rustix::process::Signal::TERM,
            );
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Shims of pods a failed test did not remove (argv[0] is the full
        // path of the binary, so the needle is matched anywhere).
        let needle = format!("husk shim --dir {}/", self.dir.path().display());
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .contains(&needle)
            {
                if let Some(pid) = e
                    .file_name()
                    .to_str()
                    .and_then(|p| p.parse().ok())
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        for m in super::mounts_under(self.dir.path()).iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}
