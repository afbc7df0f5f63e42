//! Namespaces made ahead: one pinned set (a network namespace with `lo`
//! up, a UTS and an IPC namespace) kept ready for the next pod, so that
//! RunPodSandbox takes it with a rename instead of waiting for the kernel
//! to make a network namespace (about a millisecond, most of the pod's
//! namespace step).
//!
//! The set lives under `<state>/spare-ns/<random>/{net,uts,ipc}`. Taking it
//! renames that directory to the pod's `<state>/ns/<id>/`: the pins are
//! mount points inside it and move with it, and the pod's host name is then
//! set in the UTS namespace. A new set is made on a thread of its own once
//! the pod that took the last one is up. At most one set exists. The server
//! removes it when it stops; one left by a killed server is removed when
//! the next one opens the state dir. Pods in a user namespace of their own,
//! or sharing the node's network or IPC namespace, make theirs as before.

use crate::network::netns::{self, Kind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const KINDS: [Kind; 3] = [Kind::Net, Kind::Uts, Kind::Ipc];

/// The namespaces made ahead (see the module's header).
pub struct Spare {
    dir: PathBuf,
    ready: Mutex<Option<PathBuf>>,
    making: AtomicBool,
}

impl Spare {
    /// The spare sets under `<state>/spare-ns`; any left there by an
    /// earlier server are removed.
    pub fn open(state: &Path) -> Spare {
        let spare = Spare {
            dir: state.join("spare-ns"),
            ready: Mutex::new(None),
            making: AtomicBool::new(false),
        };
        for ent in std::fs::read_dir(&spare.dir)
            .into_iter()
            .flatten()
            .flatten()
        {
            remove_set(&ent.path());
        }
        spare
    }

    /// Moves the ready set to `target` (the pod's namespace dir, which must
    /// not exist) and sets `hostname` in it. False when no set was ready or
    /// the move failed; then nothing is left at `target`.
    pub fn take(&self, target: &Path, hostname: &str) -> bool {
        let Some(set) = self.lock().take() else {
            return false;
        };
        let moved = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::rename(&set, target));
        if let Err(e) = moved {
            tracing::warn!(error = %e, "could not take the namespaces made ahead");
            remove_set(&set);
            return false;
        }
        if let Err(e) = netns::set_hostname(&target.join(Kind::Uts.proc_name()), hostname) {
            tracing::warn!(error = %e, "could not set the host name in the namespaces made ahead");
            remove_set(target);
            return false;
        }
        true
    }

    /// Makes a new set on a thread of its own, unless one is ready or
    /// being made.
    pub fn refill(self: &Arc<Self>) {
        if self.lock().is_some() || self.making.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("spare-ns".into())
            .spawn(move || {
                let set = this.dir.join(format!("{:016x}", rand::random::<u64>()));
                let pins: Vec<(Kind, PathBuf)> = KINDS
                    .iter()
                    .map(|k| (*k, set.join(k.proc_name())))
                    .collect();
                match netns::create_set(&pins, None, true) {
                    Ok(()) => *this.lock() = Some(set),
                    Err(e) => {
                        tracing::debug!(error = %e, "could not make namespaces ahead");
                        let _ = std::fs::remove_dir(&set);
                    }
                }
                this.making.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.making.store(false, Ordering::Release);
        }
    }

    /// Removes the ready set (the server is stopping).
    pub fn clear(&self) {
        if let Some(set) = self.lock().take() {
            remove_set(&set);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PathBuf>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Unpins a set's namespaces and removes its directory.
fn remove_set(set: &Path) {
    for k in KINDS {
        if let Err(e) = netns::remove(&set.join(k.proc_name())) {
            tracing::warn!(pin = %set.join(k.proc_name()).display(), error = %e, "remove a namespace made ahead");
        }
    }
    let _ = std::fs::remove_dir(set);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn wait_ready(s: &Spare) -> bool {
        for _ in 0..500 {
            if s.lock().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_set_is_made_taken_once_and_cleared() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let spare = Arc::new(Spare::open(state.path()));
        let target = state.path().join("ns").join("pod");
        assert!(
            !spare.take(&target, "x"),
            "nothing is ready before a refill"
        );
        spare.refill();
        assert!(wait_ready(&spare));
        assert!(spare.take(&target, "pod-host"));
        assert!(!spare.take(&state.path().join("ns").join("other"), "y"));
        for k in KINDS {
            assert!(crate::sys::mounts_under(&target).contains(&target.join(k.proc_name())));
        }
        assert_eq!(
            netns::interfaces(&target.join("net")).unwrap(),
            vec!["lo".to_string()]
        );
        let uts = std::fs::File::open(target.join("uts")).unwrap();
        let name = std::thread::spawn(move || {
            rustix::thread::move_into_link_name_space(
                std::os::fd::AsFd::as_fd(&uts),
                Some(rustix::thread::LinkNameSpaceType::HostNameAndNISDomainName),
            )
            .unwrap();
            rustix::system::uname()
                .nodename()
                .to_string_lossy()
                .into_owned()
        })
        .join()
        .unwrap();
        assert_eq!(name, "pod-host");
        // A new set, then one left as a killed server leaves it.
        spare.refill();
        assert!(wait_ready(&spare));
        assert_eq!(crate::sys::mounts_under(&spare.dir).len(), 3);
        let reopened = Spare::open(state.path());
        assert!(crate::sys::mounts_under(&reopened.dir).is_empty());
        assert_eq!(std::fs::read_dir(&reopened.dir).unwrap().count(), 0);
        reopened.clear();
        spare.clear();
        for k in KINDS {
            netns::remove(&target.join(k.proc_name())).unwrap();
        }
    }
}
