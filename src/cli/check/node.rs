//! The node's kernel side of `husk check`: the cgroup layout and each
//! controller the kubelet may ask for (on v2, whether the root delegates
//! it), the cgroup driver the host wants against the configured one,
//! seccomp, and AppArmor (and whether husk's default profile is loaded or
//! can be).

use super::{check, Check, Level};
use crate::cgroup::{Driver, Layout};

/// The configured cgroup driver against the one this host wants
/// (systemd where it is PID 1 on cgroup v2); `resolve` is
/// `Driver::resolve`, which for systemd also reaches it over D-Bus.
pub(super) fn cgroup_driver(
    configured: &str,
    wants: Driver,
    resolve: impl Fn(&str) -> Result<Driver, String>,
) -> Check {
    let name = "cgroup driver";
    let why = match wants {
        Driver::Systemd => "systemd is PID 1 on cgroup v2",
        Driver::Cgroupfs => "systemd does not manage cgroup v2 here",
    };
    let kubelet = |d: Driver| format!("the kubelet's cgroupDriver must be {}", d.name());
    match resolve(configured) {
        Err(e) => check(name, Level::Fail, e, "set [cgroup] driver in husk's config"),
        Ok(d) if d == wants => check(
            name,
            Level::Ok,
            format!(
                "{configured:?}: {} (this host wants {}: {why}); {}",
                d.name(),
                wants.name(),
                kubelet(d)
            ),
            "",
        ),
        Ok(d) => check(
            name,
            Level::Warn,
            format!(
                "{configured:?}: {}, but this host wants {} ({why}); {}",
                d.name(),
                wants.name(),
                kubelet(d)
            ),
            format!(
                "set [cgroup] driver = \"{}\" (or \"auto\"), and the kubelet's cgroupDriver to match",
                wants.name()
            ),
        ),
    }
}

/// The controllers the kubelet may ask for, whether each is required, and
/// what husk does without it.
pub(super) const CONTROLLERS: [(&str, bool, &str); 7] = [
    ("cpu", true, "CPU shares and quotas cannot be set"),
    (
        "memory",
        true,
        "memory limits and OOM reporting cannot work",
    ),
    ("pids", false, "pod PID limits are not enforced"),
    ("cpuset", false, "cpuset limits are skipped (logged once)"),
    (
        "hugetlb",
        false,
        "hugepage limits are skipped (logged once), as runc does",
    ),
    (
        "devices",
        false,
        "device rules are not enforced by a cgroup",
    ),
    ("freezer", false, "containers cannot be frozen"),
];

pub(super) fn cgroups(layout: &Layout) -> Vec<Check> {
    let mut out = vec![check(
        "cgroups",
        Level::Ok,
        if layout.is_v2() {
            "cgroup v2 (unified)"
        } else {
            "cgroup v1 (each controller mounted on its own)"
        },
        "",
    )];
    for (name, required, without) in CONTROLLERS {
        // v2 has no devices or freezer controllers: eBPF and cgroup.freeze
        // take their place.
        if layout.is_v2() && matches!(name, "devices" | "freezer") {
            continue;
        }
        let label = format!("cgroup {name}");
        out.push(if layout.has(name) {
            check(&label, Level::Ok, present(layout, name), "")
        } else if required {
            check(
                &label,
                Level::Fail,
                format!("missing: {without}"),
                format!("enable the {name} controller (kernel config or cgroup_enable={name})"),
            )
        } else {
            check(
                &label,
                Level::Warn,
                format!("missing: {without}"),
                format!("enable the {name} controller to have them enforced"),
            )
        });
    }
    out
}

pub(super) fn seccomp() -> Check {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    if status.lines().any(|l| l.starts_with("Seccomp:")) {
        check(
            "seccomp",
            Level::Ok,
            "the kernel filters syscalls (RuntimeDefault works)",
            "",
        )
    } else {
        check(
            "seccomp",
            Level::Warn,
            "the kernel has no seccomp: RuntimeDefault and Localhost profiles fail",
            "run a kernel built with CONFIG_SECCOMP_FILTER",
        )
    }
}

/// Whether `hostUsers: false` pods can run: idmapped mounts of the
/// root's filesystem (image layers) and of tmpfs (secret and projected
/// volumes). A warning, not a failure: other pods are not affected.
pub(super) fn user_namespaces(s: &crate::idmap::Support, reach: Result<(), String>) -> Check {
    if let Err(e) = reach {
        return check(
            "user namespaces",
            Level::Warn,
            format!("hostUsers: false pods are refused: {e}"),
            "chmod o+x the directories named",
        );
    }
    match (&s.root, &s.tmpfs) {
        (Ok(()), Ok(())) => check(
            "user namespaces",
            Level::Ok,
            "idmapped mounts of the root's filesystem and of tmpfs work: hostUsers: false pods run (Status advertises user_namespaces)",
            "",
        ),
        (Err(e), _) => check(
            "user namespaces",
            Level::Warn,
            format!("hostUsers: false pods are refused: {e}"),
            "put the root on a filesystem that can be idmapped (ext4, xfs, btrfs) on Linux 5.19 or later",
        ),
        (Ok(()), Err(e)) => check(
            "user namespaces",
            Level::Warn,
            format!("the root's filesystem can be idmapped, but not tmpfs ({e}): hostUsers: false pods with secret, configMap or projected volumes fail, and Status advertises no user_namespaces"),
            "run Linux 6.3 or later",
        ),
    }
}

/// Where pods' mounts live (`mount_namespace`) and, for "pod", whether
/// the server can keep them there with its `dirs` (root and state).
pub(super) fn mount_namespace(mode: &str, dirs: &[&std::path::Path]) -> Check {
    mount_namespace_with(mode, || crate::sandbox::podns::can_keep_pods_mounts(dirs))
}

/// [`mount_namespace`], `can` asked only for "pod".
fn mount_namespace_with(mode: &str, can: impl FnOnce() -> std::io::Result<()>) -> Check {
    let name = "mount namespace";
    if mode != "pod" {
        return check(
            name,
            Level::Ok,
            format!("{mode:?}: each pod's mounts (5 a pod) are in the node's mount table"),
            "",
        );
    }
    match can() {
        Ok(()) => check(
            name,
            Level::Ok,
            "\"pod\": each pod's mounts live in its monitor's own mount namespace; root and state are (or will be) private mounts",
            "",
        ),
        Err(e) => check(
            name,
            Level::Fail,
            format!("\"pod\": husk serve will not start: {e}"),
            "set mount_namespace = \"node\" until those pods are gone, or run Linux 5.2 or later",
        ),
    }
}

/// "present", and on v2 whether the root delegates it to the cgroups
/// below (`cgroup.subtree_control`); husk enables it on the way down when
/// it does not, and a parent with processes of its own would refuse.
fn present(layout: &Layout, name: &str) -> String {
    match layout {
        Layout::V2(root) => {
            let delegated = crate::cgroup::v2_controllers(root)
                .iter()
                .any(|c| c.name == name && c.delegated);
            if delegated {
                "present, delegated by the root (cgroup.subtree_control)".into()
            } else {
                "present; not yet in the root's cgroup.subtree_control (husk enables it for pods)"
                    .into()
            }
        }
        Layout::V1(_) => "present".into(),
    }
}

pub(super) fn apparmor() -> Check {
    use crate::security::apparmor::{Host, Kernel, DEFAULT_PROFILE};
    if crate::security::apparmor::host().is_none() {
        return check(
            "AppArmor",
            Level::Ok,
            "not in this kernel: AppArmor requests are ignored with a warning",
            "",
        );
    }
    if Kernel.loaded().iter().any(|p| p == DEFAULT_PROFILE) {
        return check(
            "AppArmor",
            Level::Ok,
            format!(
                "enabled: Localhost profiles apply; RuntimeDefault is {DEFAULT_PROFILE} (loaded)"
            ),
            "",
        );
    }
    let parser = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("apparmor_parser").is_file()));
    if parser {
        check(
            "AppArmor",
            Level::Ok,
            format!("enabled: Localhost profiles apply; RuntimeDefault loads {DEFAULT_PROFILE} with apparmor_parser at first use"),
            "",
        )
    } else {
        check(
            "AppArmor",
            Level::Warn,
            "enabled, but apparmor_parser is missing: RuntimeDefault containers fail",
            "install Debian's apparmor package",
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::worst;
    use super::*;

    #[test]
    fn pod_mode_is_checked_only_when_asked_for_and_a_refusal_fails() {
        let never = || -> std::io::Result<()> { panic!("asked in node mode") };
        assert_eq!(mount_namespace_with("node", never).status, Level::Ok);
        assert_eq!(mount_namespace_with("pod", || Ok(())).status, Level::Ok);
        let c = mount_namespace_with("pod", || Err(std::io::Error::other("2 mounts under /r")));
        assert_eq!(c.status, Level::Fail);
        assert!(
            c.message.contains("will not start: 2 mounts under /r"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_hybrid_host_without_hugetlb_warns_and_without_memory_fails() {
        let l = Layout::from_mountinfo(
            "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
        );
        let c = cgroups(&l);
        let get = |n: &str| c.iter().find(|x| x.check == n).expect(n).status;
        assert_eq!(get("cgroup cpu"), Level::Ok);
        assert_eq!(get("cgroup hugetlb"), Level::Warn);
        assert_eq!(worst(&c), Level::Warn);
        let l = Layout::from_mountinfo("32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu");
        assert_eq!(worst(&cgroups(&l)), Level::Fail);
    }
}
