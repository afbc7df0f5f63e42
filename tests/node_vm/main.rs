//! husk on a cgroup v2 node, proven in a VM the suite boots: Debian's
//! stock kernel (6.1 on Debian 12) with `cgroup_no_v1=all`, this machine's
//! file system shared in (see `common/vm.rs`).
//!
//! The one host test, [`cgroup_v2_node`], boots the guest and runs this
//! same test binary inside it with `--ignored guest_`: the guest tests
//! below are ignored on the host (they need the guest's kernel) and run
//! one after another in the guest, each against its own registry, husk
//! serve and CNI network, as the host suite does:
//!
//! - `limits.rs`: a pod's limits read back from inside the container (its
//!   own cgroup namespace and read-only cgroup2 mount) and outside; device
//!   access through the eBPF program; updates; stats; bad input.
//! - `oom.rs`: OOMKilled from `memory.events`, for the container's own
//!   limit, its pod's, and an exec.
//! - `managers.rs`: husk kubelet's pod and QoS cgroups on v2 and the OOM
//!   watcher on this kernel's `/dev/kmsg`.
//! - `lifecycle.rs`: a pod without a pause (its sysctls set by the
//!   server); exec, attach and port-forward; kill -9 of husk serve and
//!   recovery; nothing left after removal, cgroups included; stop through
//!   `cgroup.kill`.
//! - `systemd.rs` and `package.rs` run in the second node, [`systemd_node`],
//!   where systemd is PID 1: the systemd cgroup driver, and the Debian
//!   package installed, run and removed under systemd.
//! - `userns.rs`: user namespaces where tmpfs cannot be idmapped (6.1):
//!   Status and `husk check`, a hostUsers: false pod on ext4, the clear
//!   refusal of an idmapped tmpfs volume.
//! - `security.rs`: no runtime descriptor at a payload's execve, and the
//!   sealed binary of the shims (a memfd copy where overlayfs refuses the
//!   guest's share), a volume at /dev and neighbours racing a nested mount
//!   onto /dev, /dev/pts or /proc, on this kernel.
//! - `handlers.rs`: OCI runtime handlers (Debian's crun, and runc) on v2
//!   and under the systemd driver: limits, execs, OOM kills, stops, scopes.
//! - `nri.rs`: an NRI plugin's resource adjustments in the container's
//!   cgroup, under both drivers (the systemd one in the systemd node).
//! - `kernel.rs`: `husk check`, AppArmor (husk's default profile, Localhost
//!   profiles, an unloaded one), seccomp and mount propagation on this
//!   kernel.
#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
mod common;

mod handlers;
mod kernel;
mod lifecycle;
mod limits;
mod managers;
mod nri;
mod oom;
mod package;
mod security;
mod shim_v2;
mod systemd;
mod userns;

use common::ctr::pod_config;
use common::pod::Pod;
use common::server::Husk;
use husk::api::cri::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Guest tests, by name: the host test expects each to pass.
const GUEST_TESTS: [&str; 11] = [
    "handlers::guest_oci_handlers_crun_and_runc",
    "kernel::guest_check_apparmor_seccomp_propagation",
    "lifecycle::guest_exec_attach_port_forward_restart_and_cleanup",
    "limits::guest_limits_devices_updates_and_stats",
    "managers::guest_kubelet_pod_cgroups_and_oom_events",
    "nri::guest_nri_resources_in_the_container_cgroup",
    "oom::guest_oom_kills_are_reported",
    "security::guest_masks_dev_volumes_and_racing_neighbours",
    "security::guest_no_runtime_descriptor_and_a_sealed_shim",
    "shim_v2::guest_shim_v2_handler_on_cgroup_v2",
    "userns::guest_user_namespaces_on_this_kernel",
];

/// The systemd node's guest tests, by name.
const SYSTEMD_TESTS: [&str; 7] = [
    "handlers::in_systemd_vm_oci_handler_scopes",
    "nri::in_systemd_vm_nri_resources_in_the_scope",
    "package::in_systemd_vm_the_package_under_systemd",
    "shim_v2::in_systemd_vm_shim_v2_handler_scopes",
    "systemd::in_systemd_vm_kubelet_pod_slices",
    "systemd::in_systemd_vm_no_dbus_is_a_clear_error",
    "systemd::in_systemd_vm_scopes_limits_reload_oom_and_cleanup",
];

/// The cgroupfs driver's test that the systemd node runs too.
const SYSTEMD_NODE_CGROUPFS: &str = "limits::guest_limits_devices_updates_and_stats";

/// What a node VM needs: the kernel, and the directory shared with the
/// guest (not under /tmp, which the guest mounts over). None when not
/// root. The two node VMs run at once, each on one emulated CPU (see
/// `common::vm`): their guests run their tests one at a time, so two
/// one-CPU guests finish in about the time one two-CPU guest takes.
fn vm_setup(prefix: &str) -> Option<(PathBuf, tempfile::TempDir)> {
    if !common::require_root() {
        return None;
    }
    let kernel = common::vm::kernel()
        .expect("no kernel in /boot: make setup installs Debian's linux-image-amd64");
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    Some((kernel, dir))
}

#[test]
fn cgroup_v2_node() {
    let Some((kernel, dir)) = vm_setup("node-vm-") else {
        return;
    };
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "{} && {GUEST_TMP_SETUP} && export HUSK_NODE_VM=1 RUST_BACKTRACE=1{} && \
         cat /proc/self/cgroup /proc/version && \
         {} --ignored --test-threads=1 ::guest_",
        show_binaries(&exe),
        suite_env(),
        exe.display()
    );
    let o = common::vm::run(
        &kernel,
        "cgroup_no_v1=all",
        dir.path(),
        &format!("{}{script}", watchdog(WATCHDOG)),
        GUEST_DEADLINE,
    );
    judge(&kernel, &o, o.output.contains("0::/\n"), &GUEST_TESTS);
}

/// The suite's own settings of this run, passed on to the guest's tests
/// (` NAME=value` words for its `export`): where pods' mounts live
/// (`HUSK_TEST_MOUNT_NAMESPACE`, `common::server`).
fn suite_env() -> String {
    ["HUSK_TEST_MOUNT_NAMESPACE"]
        .iter()
        .filter_map(|k| {
            let v = std::env::var(k).ok()?;
            let ok = v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            (ok && !v.is_empty()).then(|| format!(" {k}={v}"))
        })
        .collect()
}

/// The guest tests' scratch dir: a tmpfs of their own (the guest's /tmp
/// is a copy-on-write overlay, where an overlay upper dir cannot live),
/// mounted beside /tmp, not over it, so that a checkout under /tmp stays
/// visible in the guest.
const GUEST_TMP: &str = "/run/husk-vm-tmp";

/// The guest script's first step: [`GUEST_TMP`] made, and TMPDIR and the
/// working directory set to it.
const GUEST_TMP_SETUP: &str = "mkdir -p /run/husk-vm-tmp && \
     mount -t tmpfs -o size=2g,mode=1777 tmpfs /run/husk-vm-tmp && \
     export TMPDIR=/run/husk-vm-tmp && cd /run/husk-vm-tmp";

/// The guest's init (virtme-ng's) mounts tmpfs over /var/tmp, /var/log and
/// /run: a checkout there, and with it the test binaries, is hidden in the
/// guest. The shell prefix that shows them again: their directory (the
/// profile's, which holds this test binary and husk) bound from a
/// non-recursive bind of the guest's root, the host's file system beneath
/// those mounts. Where they are visible it does nothing.
fn show_binaries(exe: &Path) -> String {
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary sits in <profile>/deps/");
    format!(
        "if [ ! -e {exe} ]; then mkdir -p /run/husk-vm-host {dir} && \
         mount --bind / /run/husk-vm-host && \
         mount --bind /run/husk-vm-host{dir} {dir}; fi",
        exe = exe.display(),
        dir = dir.display()
    )
}

/// How long a guest may take, boot included: its tests take 5 to 10
/// minutes on one emulated CPU beside the other guest.
const GUEST_DEADLINE: Duration = Duration::from_secs(22 * 60);

/// Guest tests still running this long are stuck: the watchdog shows why
/// and stops them, before the deadline kills the guest unseen.
const WATCHDOG: Duration = Duration::from_secs(18 * 60);

/// A shell prefix for a guest script: after `after`, print the guest's
/// processes, the kernel stacks of the test binary's threads and the
/// tails of the husk serve logs, then kill the tests (the script goes on
/// to its end, with their failure).
fn watchdog(after: Duration) -> String {
    format!(
        "( sleep {s}; echo; echo '--- watchdog: the guest tests still run after {s} s'; \
           ps -eo pid,ppid,stat,etimes,wchan:30,args; \
           for p in $(pgrep -f -- '--ignored --test-threads'); do \
             for t in /proc/$p/task/*; do echo \"--- $t $(cat $t/comm) $(cat $t/wchan)\"; cat $t/stack; done; \
           done; \
           for l in {tmp}/*/husk.log; do echo \"--- $l\"; tail -n 30 $l; done; \
           pkill -f -- '--ignored --test-threads' ) >&2 & ",
        s = after.as_secs(),
        tmp = GUEST_TMP,
    )
}

/// Asserts that the guest booted to its tests (`booted`), that they
/// passed, and that each of `tests` is among them; prints the run.
fn judge(kernel: &Path, o: &common::vm::Outcome, booted: bool, tests: &[&str]) {
    let show = || {
        format!(
            "kernel {}\n--- guest output ---\n{}\n--- console (tail) ---\n{}",
            kernel.display(),
            o.output,
            tail(&o.console, 60)
        )
    };
    assert!(booted, "the guest did not boot to the test:\n{}", show());
    assert_eq!(o.code, Some(0), "guest tests failed:\n{}", show());
    for t in tests {
        assert!(
            o.output.contains(&format!("test {t} ... ok")),
            "{t} did not pass in the guest:\n{}",
            show()
        );
    }
    println!("{}", show());
}

/// A cgroup v2 node with systemd as PID 1, as kubeadm nodes are: husk's
/// systemd cgroup driver and the Debian package (built here from this
/// build's binary) run under it.
#[test]
fn systemd_node() {
    let Some((kernel, dir)) = vm_setup("systemd-vm-") else {
        return;
    };
    let deb = common::deb::build_package(dir.path());
    let deb = deb.display();
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        "{GUEST_TMP_SETUP} && export HUSK_NODE_VM=1 RUST_BACKTRACE=1 HUSK_DEB={deb}{env} && \
         cat /proc/1/comm /proc/self/cgroup && \
         timeout 180 systemctl is-system-running --wait; \
         HUSK_TEST_CGROUP_DRIVER=cgroupfs {exe} --ignored --test-threads=1 {}",
        // One guest test alone, when a run is for it. By default the
        // systemd driver's tests, and the limits test on cgroupfs: both
        // drivers on a systemd node.
        std::env::var("HUSK_VM_TESTS")
            .unwrap_or_else(|_| format!("in_systemd_vm_ {}", SYSTEMD_NODE_CGROUPFS)),
        exe = exe.display(),
        env = suite_env(),
    );
    let o = common::vm::run_systemd(
        &kernel,
        "cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1",
        dir.path(),
        &format!("{}{script}", watchdog(WATCHDOG)),
        GUEST_DEADLINE,
    );
    let mut tests = SYSTEMD_TESTS.to_vec();
    tests.push(SYSTEMD_NODE_CGROUPFS);
    // The script prints PID 1's name first.
    judge(&kernel, &o, o.output.starts_with("systemd\n"), &tests);
}

fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Guest tests start here: they must not run on the host by accident.
fn guest() {
    assert!(
        common::vm::in_guest(),
        "a guest test: it runs inside the node VM that cgroup_v2_node boots"
    );
    assert!(
        Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
        "the guest is not a cgroup v2 node"
    );
}

/// A kubelet-style pod cgroup parent (`/kubepods/burstable/pod<uid>`),
/// unique to the test.
fn kubelet_parent(p: &mut Pod) -> String {
    p.cgroup_parent = format!("kubepods/burstable/pod{:08x}", rand::random::<u32>());
    format!("/{}", p.cgroup_parent)
}

/// The pod config of `name` under `parent`.
fn pod_under(p: &Pod, name: &str, parent: &str) -> PodSandboxConfig {
    let mut c = pod_config(p, name);
    c.linux.as_mut().unwrap().cgroup_parent = parent.into();
    c
}

/// The unified hierarchy's directory of `cgroups_path`.
fn v2_dir(cgroups_path: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup").join(cgroups_path.trim_start_matches('/'))
}

/// The cgroup driver a runtime answers in RuntimeConfig.
async fn driver_of(
    mut rt: husk::api::cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
) -> CgroupDriver {
    let rc = rt
        .runtime_config(RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    CgroupDriver::try_from(rc.linux.unwrap_or_default().cgroup_driver).unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .trim()
        .to_string()
}

/// ExecSync `sh -c script`: (exit code, stdout, stderr).
async fn sh(h: &Husk, id: &str, script: &str) -> (i32, String, String) {
    let r = h
        .runtime()
        .await
        .exec_sync(ExecSyncRequest {
            container_id: id.into(),
            cmd: vec!["/bin/sh".into(), "-c".into(), script.into()],
            timeout: 120,
        })
        .await
        .unwrap_or_else(|e| panic!("exec {script:?} in {id}: {e:?}"))
        .into_inner();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).trim().to_string(),
        String::from_utf8_lossy(&r.stderr).trim().to_string(),
    )
}

/// ExecSync that must succeed; its stdout.
async fn out(h: &Husk, id: &str, script: &str) -> String {
    let (code, o, e) = sh(h, id, script).await;
    assert_eq!(code, 0, "{script:?} in {id}: {o}\n{e}");
    o
}

/// Child cgroups of `dir` (none when it does not exist).
fn child_cgroups(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Removes `/kubepods/...` parents made for a test, deepest first, as the
/// kubelet removes a pod's cgroup (only empty ones go).
fn remove_parent(parent: &str) {
    let mut d = v2_dir(parent);
    while d != Path::new("/sys/fs/cgroup") {
        common::pod::remove_cgroup_tree(&d);
        if !d.pop() || !child_cgroups(&d).is_empty() {
            break;
        }
    }
}
