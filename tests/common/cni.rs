//! A test-unique CNI network: its own bridge name, /24 subnet and
//! host-local data dir, removed when dropped.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestNetwork {
    pub bridge: String,
    pub subnet_prefix: String,
    pub name: String,
    pub ipam_dir: PathBuf,
}

impl TestNetwork {
    pub fn new(ipam_dir: &Path) -> TestNetwork {
        let r: u32 = rand::random();
        let bridge = format!("hk{r:08x}");
        TestNetwork {
            subnet_prefix: format!("10.{}.{}", 200 + (r % 50), (r >> 8) % 250),
            name: format!("net-{bridge}"),
            bridge,
            ipam_dir: ipam_dir.to_path_buf(),
        }
    }

    /// The conflist: bridge + host-local, portmap, then `extra` plugins.
    pub fn conflist(&self, extra: Vec<serde_json::Value>) -> serde_json::Value {
        let mut plugins = vec![
            json!({
                "type": "bridge", "bridge": self.bridge, "isGateway": true, "ipMasq": false,
                "ipam": {"type": "host-local", "dataDir": self.ipam_dir,
                         "ranges": [[{"subnet": format!("{}.0/24", self.subnet_prefix)}]]}
            }),
            json!({"type": "portmap", "capabilities": {"portMappings": true}}),
        ];
        plugins.extend(extra);
        json!({"cniVersion": "1.0.0", "name": self.name, "plugins": plugins})
    }

    /// Writes the conflist as `<dir>/10-test.conflist`.
    pub fn write(&self, dir: &Path, extra: Vec<serde_json::Value>) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("10-test.conflist"),
            serde_json::to_vec_pretty(&self.conflist(extra)).unwrap(),
        )
        .unwrap();
    }

    /// host-local leases held now.
    pub fn leases(&self) -> usize {
        std::fs::read_dir(self.ipam_dir.join(&self.name))
            .map(|rd| {
                rd.flatten()
                    .filter(|e| {
                        let n = e.file_name().to_string_lossy().to_string();
                        n != "lock" && !n.starts_with("last_reserved_ip")
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    /// veths attached to the bridge now.
    pub fn veths(&self) -> usize {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).lines().count()
    }
}

impl Drop for TestNetwork {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Lines of iptables-save that mention `needle`.
pub fn iptables_mentions(needle: &str) -> usize {
    let out = Command::new("iptables-save").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(needle))
        .count()
}
