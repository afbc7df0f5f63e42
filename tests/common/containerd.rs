//! Debian's containerd 1.6 as a CRI peer: its own root, state and socket
//! in a temp dir, the test registry reachable through certs.d (plain
//! HTTP), the pause image from that registry, and a test-unique CNI
//! network (configured the way packaging/lib.sh's start_containerd does).
//! Dropping it stops containerd, kills its shims and what runs in the
//! test's cgroup, and unmounts what it left.

use super::cni::TestNetwork;
use super::images::{Format, Pusher};
use super::registry::Registry;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Containerd {
    pub dir: tempfile::TempDir,
    child: Option<Child>,
    pub reg: Registry,
    pub net: TestNetwork,
    pub cgroup_parent: String,
    _ipam: tempfile::TempDir,
}

impl Containerd {
    pub fn available() -> bool {
        Command::new("containerd")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("containerd.sock")
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("containerd.log")).unwrap_or_default()
    }

    pub async fn start() -> Containerd {
        let reg = Registry::start();
        Pusher::new(&reg)
            .image("k8s/pause", "test", &super::pod::pause_image(), Format::Oci)
            .await;
        let dir = tempfile::Builder::new()
            .prefix("husk-ctrd-test-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        let host = reg.host();
        let certs = d.join("certs.d").join(&host);
        std::fs::create_dir_all(&certs).unwrap();
        std::fs::write(
            certs.join("hosts.toml"),
            format!("server = \"http://{host}\"\n\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"),
        )
        .unwrap();
        let ipam = tempfile::tempdir().unwrap();
        let net = TestNetwork::new(ipam.path());
        net.write(&d.join("net.d"), vec![]);
        let config = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{host}/k8s/pause:test"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{certs}"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{netd}"
"#,
            root = d.join("root").display(),
            state = d.join("state").display(),
            sock = d.join("containerd.sock").display(),
            certs = d.join("certs.d").display(),
            netd = d.join("net.d").display(),
        );
        std::fs::write(d.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(d.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .stdin(Stdio::null())
            .spawn()
            .expect("containerd (Debian package containerd) must be installed");
        let c = Containerd {
            dir,
            child: Some(child),
            reg,
            net,
            cgroup_parent: format!("husk-test-{:08x}", rand::random::<u32>()),
            _ipam: ipam,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(ch) = husk::api::connect(&c.endpoint()).await {
                let mut rt = husk::api::cri::runtime_service_client::RuntimeServiceClient::new(ch);
                let ok = rt
                    .status(husk::api::cri::StatusRequest { verbose: false })
                    .await
                    .is_ok();
                if ok {
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "containerd did not start:\n{}",
                c.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        c
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let needle = self.dir.path().display().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.starts_with("/usr/bin/containerd-shim") && cmd.contains(&needle) {
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
        for h in super::pod::cgroup_hierarchies() {
            super::pod::remove_cgroup_tree(&h.join(&self.cgroup_parent));
        }
        for m in super::mounts_under(self.dir.path()).iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(m).status();
        }
    }
}
