//! OOM kills counted while a container runs.
//!
//! The server reads a container's `oom_kill` count when it learns of the
//! exit, which is enough while the cgroup outlives the container (the
//! cgroupfs driver: libcontainer removes it at delete). Under the systemd
//! driver the cgroup is a scope that systemd stops, and removes, as soon
//! as its last process exits, often before the init is reaped. So the
//! shim watches each container's `memory.events` with inotify (the kernel
//! signals a change of the file at each OOM event), wakes on it, and keeps
//! the highest count it saw; the exit record carries it. On v1 the count
//! (`memory.oom_control`) is read at the exit, as the cgroup stays.
//!
//! The shim may still lose that race: it serves one request at a time, and
//! a container that is OOM-killed the moment it starts dies while the shim
//! is still answering StartContainer; systemd can remove the scope before
//! the shim reads it (runc, conmon and containerd know the same race). So
//! the count of the pod's cgroup (the slice, which outlives its
//! containers, and counts its children's kills) is taken when the watch
//! starts: a container whose scope is gone, that died of SIGKILL, while
//! the pod's count went up, was OOM-killed.
//!
//! The inotify instance is made only when a watch needs it: on v2, for a
//! container under the systemd driver (a `slice:prefix:name` cgroups
//! path), and it is closed when the shim's last such container goes.
//! Instances are counted per user (`fs.inotify.max_user_instances`, 128
//! by default) and every shim runs as root: on v1 or under the cgroupfs
//! driver, where the cgroup outlives the container, a shim holds none. A
//! shim refused one does without (the count at the exit, and the pod's).

use crate::cgroup::{oom_kills_in, Layout};
use rustix::fs::inotify;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

struct Watched {
    dir: PathBuf,
    v2: bool,
    wd: Option<i32>,
    seen: u64,
    /// The pod cgroup's count when the watch started.
    parent_base: Option<u64>,
}

impl Watched {
    fn read(&mut self) -> u64 {
        if let Some(n) = oom_kills_in(&self.dir, self.v2) {
            self.seen = self.seen.max(n);
        }
        self.seen
    }

    /// The count at an exit with `exit_code`; see the module header for
    /// a cgroup that is gone.
    fn at_exit(&mut self, exit_code: i32) -> u64 {
        let seen = self.read();
        if seen > 0 || self.dir.exists() || exit_code != 128 + libc::SIGKILL {
            return seen;
        }
        let parent_now = self.dir.parent().and_then(|p| oom_kills_in(p, self.v2));
        match (self.parent_base, parent_now) {
            (Some(base), Some(now)) if now > base => 1,
            _ => 0,
        }
    }
}

pub struct OomWatch {
    fd: Option<OwnedFd>,
    /// The kernel refused an instance once: not asked again.
    refused: bool,
    by_id: HashMap<String, Watched>,
}

/// Whether a container's cgroup may go before the shim reads it: a
/// systemd scope (`slice:prefix:name`), on v2.
fn needs_watch(v2: bool, cgroups_path: &str) -> bool {
    v2 && cgroups_path.contains(':')
}

impl OomWatch {
    pub fn new() -> OomWatch {
        OomWatch {
            fd: None,
            refused: false,
            by_id: HashMap::new(),
        }
    }

    /// The inotify instance, made on first need.
    fn instance(&mut self) -> Option<&OwnedFd> {
        if self.fd.is_none() && !self.refused {
            match inotify::init(inotify::CreateFlags::CLOEXEC | inotify::CreateFlags::NONBLOCK) {
                Ok(fd) => self.fd = Some(fd),
                Err(e) => {
                    eprintln!("husk shim: no inotify for OOM events: {e}");
                    self.refused = true;
                }
            }
        }
        self.fd.as_ref()
    }

    /// The descriptor to poll, when there is one.
    pub fn fd(&self) -> Option<&OwnedFd> {
        self.fd.as_ref()
    }

    /// Starts counting for container `id`, whose cgroups path is in its
    /// bundle's `config.json`.
    /// Watches container `id`'s memory cgroup: `cgroups_path` (the
    /// spec's), or when empty the one its bundle's spec names.
    pub fn watch(&mut self, id: &str, bundle: &Path, cgroups_path: &str) {
        let path = if cgroups_path.is_empty() {
            match spec_cgroups_path(bundle) {
                Some(p) => p,
                None => return,
            }
        } else {
            cgroups_path.to_string()
        };
        let layout = Layout::host();
        let Some(dir) = layout.dir("memory", &path) else {
            return;
        };
        let v2 = layout.is_v2();
        let wd = match needs_watch(v2, &path).then(|| self.instance()).flatten() {
            Some(fd) => {
                inotify::add_watch(fd, dir.join("memory.events"), inotify::WatchFlags::MODIFY)
                    .map_err(|e| eprintln!("husk shim: watch OOM events of {id}: {e}"))
                    .ok()
            }
            None => None,
        };
        let parent_base = dir.parent().and_then(|p| oom_kills_in(p, v2));
        let mut w = Watched {
            dir,
            v2,
            wd,
            seen: 0,
            parent_base,
        };
        w.read();
        self.by_id.insert(id.to_string(), w);
    }

    /// Reads the counts of the containers whose file changed.
    pub fn on_ready(&mut self) {
        let Some(fd) = &self.fd else { return };
        let mut changed: Vec<i32> = Vec::new();
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 4096];
        let mut reader = inotify::Reader::new(fd, &mut buf);
        loop {
            match reader.next() {
                Ok(ev) => changed.push(ev.wd()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => break,
            }
        }
        for w in self.by_id.values_mut() {
            if w.wd.is_some_and(|wd| changed.contains(&wd)) {
                w.read();
            }
        }
    }

    /// The count for `id` at its exit with `exit_code`: the highest seen,
    /// or read now (events still queued are read first).
    pub fn exited(&mut self, id: &str, exit_code: i32) -> u64 {
        self.on_ready();
        self.by_id
            .get_mut(id)
            .map(|w| w.at_exit(exit_code))
            .unwrap_or(0)
    }

    /// Stops watching `id` (deleted); the instance goes with the last
    /// watch.
    pub fn forget(&mut self, id: &str) {
        if let (Some(w), Some(fd)) = (self.by_id.remove(id), &self.fd) {
            if let Some(wd) = w.wd {
                let _ = inotify::remove_watch(fd, wd);
            }
        }
        if self.by_id.values().all(|w| w.wd.is_none()) {
            self.fd = None;
        }
    }
}

fn spec_cgroups_path(bundle: &Path) -> Option<String> {
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).ok()?).ok()?;
    spec["linux"]["cgroupsPath"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_only_where_a_cgroup_may_go_first() {
        assert!(needs_watch(true, "kubepods.slice:husk:abc"));
        assert!(!needs_watch(true, "/kubepods/pod1/abc"), "v2, cgroupfs");
        assert!(!needs_watch(false, "kubepods.slice:husk:abc"), "v1");
        let mut w = OomWatch::new();
        assert!(w.fd().is_none(), "none until needed");
        assert!(w.instance().is_some());
        w.forget("nothing");
        assert!(w.fd().is_none(), "closed with the last watch");
    }

    #[test]
    fn the_highest_count_seen_survives_the_cgroup() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(d.path().join("memory.events"), "oom 1\noom_kill 1\n").expect("w");
        let mut w = Watched {
            dir: d.path().to_path_buf(),
            v2: true,
            wd: None,
            seen: 0,
            parent_base: None,
        };
        assert_eq!(w.read(), 1);
        std::fs::remove_file(d.path().join("memory.events")).expect("rm");
        assert_eq!(w.read(), 1, "a count seen is kept when the scope is gone");
    }

    #[test]
    fn a_scope_gone_unread_falls_back_to_its_pods_count() {
        let pod = tempfile::tempdir().expect("tempdir");
        std::fs::write(pod.path().join("memory.events"), "oom_kill 2\n").expect("w");
        let w = |base| Watched {
            dir: pod.path().join("husk-c.scope"),
            v2: true,
            wd: None,
            seen: 0,
            parent_base: Some(base),
        };
        assert_eq!(w(1).at_exit(137), 1, "SIGKILL while the pod's count rose");
        assert_eq!(w(2).at_exit(137), 0, "no kill in the pod meanwhile");
        assert_eq!(w(1).at_exit(1), 0, "not a SIGKILL");
        std::fs::create_dir(pod.path().join("husk-c.scope")).expect("mkdir");
        assert_eq!(
            w(1).at_exit(137),
            0,
            "a scope that is there speaks for itself"
        );
    }

    #[test]
    fn the_cgroups_path_comes_from_the_bundle() {
        let d = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            d.path().join("config.json"),
            r#"{"linux":{"cgroupsPath":"a.slice:husk:c1"}}"#,
        )
        .expect("w");
        assert_eq!(
            spec_cgroups_path(d.path()).as_deref(),
            Some("a.slice:husk:c1")
        );
        assert_eq!(spec_cgroups_path(Path::new("/nonexistent")), None);
    }
}
