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
//!   `slice:prefix:name` form, `<slice>:husk:<id>`, which [`fs_path`] maps
//!   to the directory systemd makes for it.
//!
//! `auto` (the default) is systemd where systemd is PID 1 on a cgroup v2
//! host and cgroupfs elsewhere; it is resolved once, when the server
//! starts ([`Driver::resolve`]). libcontainer drives systemd on cgroup v2
//! only, so the systemd driver on a v1 host is refused, never degraded.

use super::Layout;
use std::borrow::Cow;
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

/// `a-b.slice` as the path systemd gives it: `/a.slice/a-b.slice`.
pub fn expand_slice(slice: &str) -> String {
    let stem = slice.strip_suffix(".slice").unwrap_or(slice);
    if stem == "-" || stem.is_empty() {
        return String::new();
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
        prefix.push('-');
    }
    path
}

/// The slice name of a cgroupfs-style path, as the kubelet's systemd
/// driver names it: `/kubepods/burstable/pod<uid>` →
/// `kubepods-burstable-pod<uid>.slice`, dashes within a part turned into
/// underscores; a path already ending in a slice (`/system.slice`) is
/// that slice; `/` is the root slice `-.slice`.
pub fn slice_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.last() {
        None => "-.slice".into(),
        Some(last) if last.ends_with(".slice") => last.to_string(),
        Some(_) => {
            let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
            format!("{}.slice", escaped.join("-"))
        }
    }
}

/// The slice a slice lives in: `a-b.slice` → `a.slice`, `a.slice` → `-.slice`.
pub fn parent_slice(name: &str) -> String {
    let stem = name.strip_suffix(".slice").unwrap_or(name);
    match stem.rsplit_once('-') {
        Some((p, _)) if !p.is_empty() => format!("{p}.slice"),
        _ => "-.slice".into(),
    }
}

/// The directory (from the hierarchy's root) of an OCI cgroups path:
/// itself for a cgroupfs path, the scope's place for `slice:prefix:name`.
pub fn fs_path(cgroups_path: &str) -> Cow<'_, str> {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    match parts.as_slice() {
        [slice, prefix, name] => {
            Cow::Owned(format!("{}/{prefix}-{name}.scope", expand_slice(slice)))
        }
        _ => Cow::Borrowed(cgroups_path),
    }
}

/// The directory of the parent of an OCI cgroups path (the pod's cgroup
/// or slice), from the hierarchy's root.
pub fn parent_fs_path(cgroups_path: &str) -> String {
    let own = fs_path(cgroups_path);
    own.rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_as_systemd_lays_them_out() {
        assert_eq!(
            expand_slice("kubepods-burstable-pod1.slice"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
        );
        assert_eq!(expand_slice("-.slice"), "");
        assert_eq!(fs_path("test.slice:husk:abc"), "/test.slice/husk-abc.scope");
        assert_eq!(fs_path("/kubepods/pod1/abc"), "/kubepods/pod1/abc");
        assert_eq!(parent_fs_path("a-b.slice:husk:c"), "/a.slice/a-b.slice");
        assert_eq!(parent_fs_path("/p/c"), "/p");
        assert_eq!(
            crate::cgroup::systemd::unit_of("a.slice:husk:c").as_deref(),
            Some("husk-c.scope")
        );
        assert_eq!(crate::cgroup::systemd::unit_of("/p/c"), None);
    }

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
    #[test]
    fn slices_are_named_as_the_kubelet_names_them() {
        assert_eq!(slice_name("/kubepods"), "kubepods.slice");
        assert_eq!(
            slice_name("/kubepods/burstable/pod1a-2b"),
            "kubepods-burstable-pod1a_2b.slice"
        );
        assert_eq!(slice_name("/"), "-.slice");
        assert_eq!(slice_name("/system.slice"), "system.slice");
        assert_eq!(parent_slice("kubepods-burstable.slice"), "kubepods.slice");
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
    }
}
