//! The cgroup driver: who makes and owns the cgroups of pods.
//!
//! - `cgroupfs`: husk (through libcontainer) makes directories in the
//!   hierarchy. A `cgroup_parent` is an absolute path
//!   (`/kubepods/burstable/pod<uid>`); a container's cgroups path is
//!   `<parent>/<id>`.
//! - `systemd`: systemd owns the tree, as on every node where it is PID 1
//!   and kubeadm gives the kubelet `cgroupDriver: systemd`. A
//!   `cgroup_parent` is a slice (`kubepods-burstable-pod<uid>.slice`, or a
//!   path ending in one, as critest's `/test.slice`); the pause and each
//!   container get a transient scope `husk-<id>.scope` in it, made over
//!   D-Bus with `Delegate=yes` (libcontainer's systemd manager, as runc's
//!   under containerd). The OCI cgroups path is containerd's
//!   `slice:prefix:name` form, `<slice>:husk:<id>`, which `paths::fs_path` maps
//!   to the directory systemd makes for it.
//!
//! `auto` (the default) is systemd where systemd is PID 1 on a cgroup v2
//! host and cgroupfs elsewhere; it is resolved once, when the server
//! starts ([`Driver::resolve`]). libcontainer drives systemd on cgroup v2
//! only, so the systemd driver on a v1 host is refused, never degraded.

use super::layout::Layout;
use std::path::Path;
use std::sync::OnceLock;

/// The scope prefix: a container's unit is `husk-<id>.scope`.
pub const SCOPE_PREFIX: &str = "husk";

/// The slice pods go to when the CRI names no parent (systemd driver).
pub const DEFAULT_SLICE: &str = "husk.slice";

/// The parent pods go to when the CRI names none (cgroupfs driver).
pub const DEFAULT_PARENT: &str = "/husk";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Cgroupfs,
    Systemd,
}

/// Where systemd listens on the system bus.
const SYSTEM_BUS: &str = "/run/dbus/system_bus_socket";

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }

    /// The driver this host wants: systemd when it is PID 1 on cgroup v2.
    pub fn host_wants(layout: &Layout, systemd_booted: bool) -> Driver {
        if systemd_booted && layout.is_v2() {
            Driver::Systemd
        } else {
            Driver::Cgroupfs
        }
    }

    /// Resolves a configured name (`auto`, `cgroupfs`, `systemd`) on this
    /// host. The systemd driver (named, or the one `auto` picks) needs
    /// cgroup v2 and systemd as PID 1 reachable over D-Bus; each missing
    /// part is an error naming the fix.
    pub fn resolve(name: &str, layout: &Layout) -> Result<Driver, String> {
        let booted = systemd_booted();
        let d = match name {
            "auto" => Driver::host_wants(layout, booted),
            "cgroupfs" => Driver::Cgroupfs,
            "systemd" => Driver::Systemd,
            other => {
                return Err(format!(
                    "cgroup.driver: {other:?} is not one of \"auto\", \"systemd\", \"cgroupfs\""
                ))
            }
        };
        if d == Driver::Cgroupfs {
            return Ok(d);
        }
        if !layout.is_v2() {
            return Err("cgroup driver \"systemd\" needs a cgroup v2 host and this one is v1: set [cgroup] driver = \"cgroupfs\" (and the kubelet's cgroupDriver: cgroupfs), or boot with systemd.unified_cgroup_hierarchy=1".into());
        }
        if !booted {
            return Err("cgroup driver \"systemd\": systemd is not PID 1 here (/run/systemd/system is missing): set [cgroup] driver = \"cgroupfs\"".into());
        }
        super::systemd::probe().map_err(|e| {
            format!("cgroup driver \"systemd\" (configured: {name:?}): systemd is not reachable over D-Bus ({SYSTEM_BUS}, nor its private socket): {e}; start dbus (systemctl start dbus), or set [cgroup] driver = \"cgroupfs\"")
        })?;
        Ok(Driver::Systemd)
    }

    /// The driver of this server, as set when it started (cgroupfs until
    /// then, and in every process that never sets one).
    pub fn current() -> Driver {
        CURRENT.get().copied().unwrap_or(Driver::Cgroupfs)
    }

    /// Sets this process's driver; the first call wins.
    pub fn set_current(d: Driver) {
        let _ = CURRENT.set(d);
    }

    /// The CRI parent of a pod when its config names none.
    pub fn default_parent(self) -> &'static str {
        match self {
            Driver::Cgroupfs => DEFAULT_PARENT,
            Driver::Systemd => DEFAULT_SLICE,
        }
    }

    /// Refuses a `cgroup_parent` this driver cannot use, before anything
    /// is made: a slice under cgroupfs (a kubelet on the systemd driver
    /// talking to husk on cgroupfs), a path under systemd, relative paths
    /// and `.`/`..` components. Empty means the default parent.
    pub fn check_parent(self, parent: &str) -> Result<(), String> {
        if parent.is_empty() {
            return Ok(());
        }
        match self {
            Driver::Cgroupfs => check_cgroupfs_parent(parent),
            Driver::Systemd => slice_of(parent).map(|_| ()),
        }
    }

    /// The OCI `cgroupsPath` of pod member `id` under CRI parent `parent`
    /// (already checked): `<parent>/<id>`, or `<slice>:husk:<id>`.
    pub fn cgroups_path(self, parent: &str, id: &str) -> String {
        let parent = if parent.is_empty() {
            self.default_parent()
        } else {
            parent
        };
        match self {
            Driver::Cgroupfs => format!("{}/{id}", parent.trim_end_matches('/')),
            Driver::Systemd => {
                let slice = slice_of(parent).unwrap_or(DEFAULT_SLICE);
                format!("{slice}:{SCOPE_PREFIX}:{id}")
            }
        }
    }
}

static CURRENT: OnceLock<Driver> = OnceLock::new();

/// Whether systemd is PID 1 here (what sd_booted(3) checks).
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

fn check_cgroupfs_parent(parent: &str) -> Result<(), String> {
    let slice = parent.contains(':')
        || parent
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .is_some_and(|last| last.ends_with(".slice"));
    if slice {
        return Err(format!(
            "cgroup_parent {parent:?} is a systemd slice, but husk's cgroup driver is \"cgroupfs\": set [cgroup] driver = \"systemd\" in husk's config (or the kubelet's cgroupDriver: cgroupfs); the two must match"
        ));
    }
    if !parent.starts_with('/') {
        return Err(format!(
            "cgroup_parent {parent:?} is relative; the \"cgroupfs\" cgroup driver needs an absolute path such as /kubepods/burstable/pod<uid>"
        ));
    }
    if parent.split('/').any(|c| c == ".." || c == ".") {
        return Err(format!(
            "cgroup_parent {parent:?} may not contain . or .. components (cgroup driver \"cgroupfs\")"
        ));
    }
    Ok(())
}

/// The slice a systemd-driver `cgroup_parent` names: its last element,
/// which must be a valid slice name (`a-b-c.slice`: unit-name characters,
/// no empty dash-separated part).
fn slice_of(parent: &str) -> Result<&str, String> {
    let last = parent
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("");
    let stem = last.strip_suffix(".slice").unwrap_or("");
    let chars_ok = stem
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '\\'));
    if stem.is_empty() || !chars_ok || last.len() > 255 {
        return Err(format!(
            "cgroup_parent {parent:?} does not end in a systemd slice, and husk's cgroup driver is \"systemd\": give a slice such as kubepods-burstable-pod<uid>.slice (or set [cgroup] driver = \"cgroupfs\" and the kubelet's cgroupDriver: cgroupfs; the two must match)"
        ));
    }
    if stem != "-" && stem.split('-').any(str::is_empty) {
        return Err(format!(
            "cgroup_parent {parent:?}: {last:?} is not a valid slice name (an empty part between dashes)"
        ));
    }
    Ok(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_driver_makes_its_own_cgroups_path() {
        let s = Driver::Systemd;
        assert_eq!(
            s.cgroups_path("kubepods-burstable-pod1.slice", "c1"),
            "kubepods-burstable-pod1.slice:husk:c1"
        );
        assert_eq!(s.cgroups_path("/test.slice", "c1"), "test.slice:husk:c1");
        assert_eq!(
            s.cgroups_path("/kubepods.slice/kubepods-besteffort.slice/", "c1"),
            "kubepods-besteffort.slice:husk:c1"
        );
        assert_eq!(s.cgroups_path("", "c1"), "husk.slice:husk:c1");
        let f = Driver::Cgroupfs;
        assert_eq!(f.cgroups_path("/kubepods/pod1/", "c1"), "/kubepods/pod1/c1");
        assert_eq!(f.cgroups_path("", "c1"), "/husk/c1");
    }

    #[test]
    fn systemd_parents_are_slices() {
        for ok in [
            "",
            "/test.slice",
            "kubepods-burstable-pod1.slice",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice",
        ] {
            assert!(Driver::Systemd.check_parent(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            (
                "/kubepods/burstable/pod1",
                "does not end in a systemd slice",
            ),
            ("kubepods", "does not end in a systemd slice"),
            (".slice", "does not end in a systemd slice"),
            ("a:b:c", "does not end in a systemd slice"),
            ("kubepods--x.slice", "empty part between dashes"),
        ] {
            let e = Driver::Systemd.check_parent(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn cgroupfs_parents_are_absolute_paths_not_slices() {
        for ok in ["", "/kubepods/burstable/pod1", "/husk"] {
            assert!(Driver::Cgroupfs.check_parent(ok).is_ok(), "{ok}");
        }
        for (bad, why) in [
            ("kubepods-burstable-pod1.slice", "systemd slice"),
            ("/kubepods.slice/kubepods-burstable.slice", "systemd slice"),
            ("system.slice:husk:pod1", "systemd slice"),
            ("kubepods/pod1", "relative"),
            ("/kubepods/../etc", ". or .."),
        ] {
            let e = Driver::Cgroupfs.check_parent(bad).expect_err(bad);
            assert!(e.contains(why) && e.contains("cgroupfs"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_host_wants_systemd_only_where_it_is_pid_1_on_v2() {
        let v2 = Layout::from_mountinfo("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw");
        let v1 = Layout::from_mountinfo(
            "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory",
        );
        assert_eq!(Driver::host_wants(&v2, true), Driver::Systemd);
        assert_eq!(Driver::host_wants(&v2, false), Driver::Cgroupfs);
        assert_eq!(Driver::host_wants(&v1, true), Driver::Cgroupfs);
        assert!(Driver::resolve("systemd", &v1)
            .expect_err("v1")
            .contains("cgroup v2"));
        assert!(Driver::resolve("cgroup", &v2)
            .expect_err("typo")
            .contains("not one of"));
        assert_eq!(Driver::resolve("cgroupfs", &v2), Ok(Driver::Cgroupfs));
    }
}
