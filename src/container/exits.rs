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

use super::exit_watch::{read_loop, Seen};
use super::manager::ContainerManager;
use super::record::ContainerState;
use std::sync::{Arc, Weak};

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
