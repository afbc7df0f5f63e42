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
        .args(["--disable-kvm", "--cpus", CPUS, "--memory", "3G", "--rwdir"])
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

/// Boots `kernel` with systemd as PID 1 and runs `script` (sh) as a
/// systemd service, `husk-guest.service`, with `dir` shared writable at
/// the same path; the guest powers itself off when the script ends. Gives
/// up after `deadline`.
///
/// virtme-ng's own init is replaced (`init=`, the kernel command line
/// given last wins): `init.sh` makes a copy-on-write root over the host's
/// read-only one (an overlay on a tmpfs, so that dpkg and systemctl can
/// write /usr, /etc and /var, and nothing reaches the host), mounts `dir`
/// in it (wherever it lives: /tmp stays the host's, copy-on-write), installs the two units, and switches root to
/// /lib/systemd/systemd with `systemd.unit=husk-guest.target` (basic.target
/// and the script, no getty or logind).
pub fn run_systemd(
    kernel: &Path,
    append: &str,
    dir: &Path,
    script: &str,
    deadline: Duration,
) -> Outcome {
    let d = dir.display();
    let files = [
        (
            "init.sh",
            format!(
                "#!/bin/sh\nset -e\nR=/media/root\n\
                 mount -t tmpfs -o mode=0755 cow /media\n\
                 mkdir /media/upper /media/work $R\n\
                 mount -t overlay -o lowerdir=/,upperdir=/media/upper,workdir=/media/work,xino=off cow $R\n\
                 mkdir -p $R{d}\n\
                 mount -t 9p -o trans=virtio,version=9p2000.L,access=any,msize=524288 virtme.initmount0 $R{d}\n\
                 rm -f $R/.dockerenv\n\
                 ln -sf /dev/null $R/etc/systemd/system/tmp.mount\n\
                 : > $R/etc/fstab\n\
                 cp {d}/husk-guest.service {d}/husk-guest.target $R/etc/systemd/system/\n\
                 exec switch_root $R /lib/systemd/systemd\n"
            ),
        ),
        (
            "husk-guest.target",
            "[Unit]\nDescription=husk node VM\nRequires=basic.target\nAfter=basic.target\n\
             Wants=husk-guest.service\nAllowIsolate=yes\n"
                .to_string(),
        ),
        (
            "husk-guest.service",
            format!(
                "[Unit]\nDescription=husk node VM script\nAfter=basic.target\n\
                 SuccessAction=poweroff-force\nFailureAction=poweroff-force\n\
                 [Service]\nType=exec\nExecStart=/bin/sh {d}/guest.sh\n\
                 StandardOutput=journal+console\nStandardError=journal+console\n"
            ),
        ),
        (
            "guest.sh",
            format!(
                "#!/bin/sh\n( {script} ) >{d}/guest.out 2>&1\nrc=$?\necho $rc >{d}/guest.rc\n\
                 echo $rc >/dev/virtio-ports/virtme.ret 2>/dev/null\nexit $rc\n"
            ),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.join(name), text).expect("write a guest file");
    }
    std::fs::set_permissions(
        dir.join("init.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod init.sh");
    let cmdline = format!(
        "init={d}/init.sh console=ttyS0 panic=-1 systemd.unit=husk-guest.target \
         systemd.show_status=1 audit=off {append}"
    );
    let console = Command::new("timeout")
        .args(["-k", "10", &deadline.as_secs().to_string(), "vng", "--run"])
        .arg(kernel)
        .args(["--disable-kvm", "--cpus", CPUS, "--memory", "3G", "--rwdir"])
        .arg(dir)
        // --verbose: the serial console (kernel, systemd) on stderr. The
        // second -append, last on qemu's command line, replaces vng's.
        .args(["--exec", "true", "--verbose"])
        .arg(format!("--qemu-opts=-append '{cmdline}'"))
        .output()
        .unwrap_or_else(|e| panic!("vng: {e} (make setup installs virtme-ng)"));
    Outcome {
        code: std::fs::read_to_string(dir.join("guest.rc"))
            .ok()
            .and_then(|s| s.trim().parse().ok()),
        output: std::fs::read_to_string(dir.join("guest.out")).unwrap_or_default(),
        console: format!(
            "{}{}",
            String::from_utf8_lossy(&console.stdout),
            String::from_utf8_lossy(&console.stderr)
        ),
    }
}

/// A guest's emulated CPUs: one, so that the suite's two node VMs run
/// side by side on a two-core machine (each guest runs its tests one at a
/// time; emulation, not parallelism, is what they wait on).
const CPUS: &str = "1";

/// Whether this process runs inside a node VM that the suite booted.
pub fn in_guest() -> bool {
    std::env::var_os("HUSK_NODE_VM").is_some()
}
