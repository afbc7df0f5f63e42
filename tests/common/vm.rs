//! A node VM: Debian's stock kernel (`linux-image-amd64`) booted under
//! qemu's software emulation by virtme-ng (`vng`), with this machine's
//! file system shared in read-only (its writable directories are
//! copy-on-write overlays that vanish with the guest), running one shell
//! script as root. The suite's node shapes are kernel command lines on it
//! (`cgroup_no_v1=all` for a pure cgroup v2 node).
//!
//! KVM cannot run a guest on these machines (no nested virtualization),
//! so the guest is emulated: a fork costs tens of times what it costs on
//! the host. Nothing here, nor in a guest test, asserts a duration.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The kernel to boot: Debian 12's 6.1 when installed (the kernel most
/// nodes of that release run), else the newest `/boot/vmlinuz-*`.
pub fn kernel() -> Option<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir("/boot")
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    all.sort();
    all.iter()
        .find(|p| p.to_string_lossy().contains("vmlinuz-6.1."))
        .or(all.last())
        .cloned()
}

/// What a guest run printed and how it ended.
pub struct Outcome {
    /// The script's exit code; None when the guest never wrote one (it
    /// did not boot, or it was killed at the deadline).
    pub code: Option<i32>,
    pub output: String,
    pub console: String,
}

/// Boots `kernel` with `append` on its command line and runs `script`
/// (sh) in the guest, with `dir` shared writable at the same path; gives
/// up after `deadline`.
pub fn run(kernel: &Path, append: &str, dir: &Path, script: &str, deadline: Duration) -> Outcome {
    let script_path = dir.join("guest.sh");
    let out = dir.join("guest.out");
    let rc = dir.join("guest.rc");
    std::fs::write(
        &script_path,
        format!(
            "#!/bin/sh\n( {script} ) >{out} 2>&1\necho $? >{rc}\n",
            out = out.display(),
            rc = rc.display()
        ),
    )
    .expect("write the guest script");
    let console = Command::new("timeout")
        .args(["-k", "10", &deadline.as_secs().to_string(), "vng", "--run"])
        .arg(kernel)
        .args(["--disable-kvm", "--cpus", "2", "--memory", "3G", "--rwdir"])
        .arg(dir)
        .args(["--append", append, "--exec"])
        .arg(format!("sh {}", script_path.display()))
        .output()
        .unwrap_or_else(|e| panic!("vng: {e} (make setup installs virtme-ng)"));
    Outcome {
        code: std::fs::read_to_string(&rc)
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        output: std::fs::read_to_string(&out).unwrap_or_default(),
        console: format!(
            "{}{}",
            String::from_utf8_lossy(&console.stdout),
            String::from_utf8_lossy(&console.stderr)
        ),
    }
}

/// Whether this process runs inside a node VM that the suite booted.
pub fn in_guest() -> bool {
    std::env::var_os("HUSK_NODE_VM").is_some()
}
