//! How the container manager learns that a container exited on its own.
//!
//! The pod's shim records each exit by renaming `<id>.json` into
//! `<shim dir>/exits/` (see `shim::monitor`). One inotify instance watches
//! the exits dir of every pod that has containers (a watch is added before
//! a container is created in the pod, so no exit can come first); a
//! dedicated OS thread reads it and calls `refresh` for the container named
//! by each new file, which records the exit and raises STOPPED. Nothing
//! polls: a quiet node costs one blocked thread.
//!
//! At start the thread first refreshes every container recorded as running
//! (exits that happened while the server was down), and it does the same if
//! the kernel reports an inotify queue overflow. A watch disappears by
//! itself when the pod's state dir is removed. Without inotify (the watcher
//! could not be created), exits are still found by the next ContainerStatus
//! or ListContainers, as before; a warning says so.

use super::manager::{ContainerManager, ContainerState};
use rustix::fs::inotify;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::{Arc, Weak};

/// What the watcher saw.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    /// `<id>.json` appeared: container `id` exited.
    Exit(String),
    /// Events were lost: look at every container.
    Overflow,
}

/// The inotify instance; `None` when the kernel refused one.
pub struct ExitWatch {
    fd: Option<Arc<OwnedFd>>,
}

impl Default for ExitWatch {
    fn default() -> Self {
        Self::new()
    }
}

impl ExitWatch {
    pub fn new() -> ExitWatch {
        match inotify::init(inotify::CreateFlags::CLOEXEC) {
            Ok(fd) => ExitWatch {
                fd: Some(Arc::new(fd)),
            },
            Err(e) => {
                tracing::warn!(error = %e, "no inotify: container exits are noticed only when a status is asked for");
                ExitWatch { fd: None }
            }
        }
    }

    /// Watches a pod's exits dir (idempotent: the kernel keeps one watch
    /// per directory).
    pub fn watch(&self, exits_dir: &Path) {
        let Some(fd) = &self.fd else { return };
        let flags = inotify::WatchFlags::MOVED_TO
            | inotify::WatchFlags::CREATE
            | inotify::WatchFlags::ONLYDIR;
        if let Err(e) = inotify::add_watch(fd.as_ref(), exits_dir, flags) {
            tracing::warn!(dir = %exits_dir.display(), error = %e, "cannot watch a pod's exits");
        }
    }
}

/// The container id an exits-dir file name stands for (temp files of the
/// atomic write start with a dot and are skipped).
fn exit_of(name: &str) -> Option<String> {
    if name.starts_with('.') {
        return None;
    }
    name.strip_suffix(".json")
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

fn read_loop(fd: Arc<OwnedFd>, mut on: impl FnMut(Seen) -> bool) {
    let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
    let mut reader = inotify::Reader::new(fd.as_ref(), &mut buf);
    loop {
        let seen = match reader.next() {
            Ok(ev) => {
                if ev.events().contains(inotify::ReadFlags::QUEUE_OVERFLOW) {
                    Some(Seen::Overflow)
                } else {
                    ev.file_name()
                        .and_then(|n| n.to_str().ok())
                        .and_then(exit_of)
                        .map(Seen::Exit)
                }
            }
            Err(rustix::io::Errno::INTR) => None,
            Err(e) => {
                tracing::error!(error = %e, "reading container exits stopped");
                return;
            }
        };
        if let Some(s) = seen {
            if !on(s) {
                return;
            }
        }
    }
}

impl ContainerManager {
    /// Starts watching for exits: watches the exits dir of every pod with
    /// containers, then (on its own thread) catches up with exits recorded
    /// while the server was down and follows new ones.
    pub fn watch_exits(self: &Arc<Self>) {
        let pods: std::collections::HashSet<String> = self
            .lock()
            .0
            .values()
            .map(|r| r.sandbox_id.clone())
            .collect();
        for p in &pods {
            self.exits.watch(&self.sandboxes.shim_dir(p).join("exits"));
        }
        let Some(fd) = self.exits.fd.clone() else {
            return;
        };
        let weak: Weak<ContainerManager> = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("husk-exits".into())
            .spawn(move || {
                if let Some(m) = weak.upgrade() {
                    m.refresh_running();
                }
                read_loop(fd, |seen| {
                    let Some(m) = weak.upgrade() else {
                        return false;
                    };
                    match seen {
                        Seen::Exit(id) => {
                            m.refresh(&id);
                        }
                        Seen::Overflow => m.refresh_running(),
                    }
                    true
                });
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start the exit watcher thread");
        }
    }

    /// Makes sure exits in `sandbox_id`'s pod are watched.
    pub(super) fn watch_pod_exits(&self, sandbox_id: &str) {
        self.exits
            .watch(&self.sandboxes.shim_dir(sandbox_id).join("exits"));
    }

    /// Brings every running container's record up to date.
    fn refresh_running(&self) {
        let ids: Vec<String> = self
            .lock()
            .0
            .values()
            .filter(|r| r.state == ContainerState::Running)
            .map(|r| r.id.clone())
            .collect();
        for id in ids {
            self.refresh(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_file_names() {
        assert_eq!(exit_of("abc.json"), Some("abc".into()));
        assert_eq!(exit_of(".abc.json.tmp-1-2"), None);
        assert_eq!(exit_of("abc.txt"), None);
        assert_eq!(exit_of(".json"), None);
    }

    #[test]
    fn sees_files_renamed_into_a_watched_dir() {
        let d = tempfile::tempdir().expect("tempdir");
        let w = ExitWatch::new();
        let fd = w.fd.clone().expect("inotify");
        w.watch(d.path());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            read_loop(fd, |s| tx.send(s).is_ok());
        });
        crate::store::atomic::write_json(&d.path().join("c1.json"), &1).expect("write");
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("an event");
        assert_eq!(got, Seen::Exit("c1".into()));
    }
}
