//! Made ahead for the next pod: one pinned set of namespaces (a network
//! namespace with `lo` up, a UTS and an IPC namespace) and one started
//! shim, so that RunPodSandbox takes each with a rename instead of waiting
//! for the kernel to make a network namespace (about a millisecond) and
//! for a shim to start (a fork and an exec, one to two).
//!
//! The set lives under `<state>/spare-ns/<random>/{net,uts,ipc}`. Taking it
//! renames that directory to the pod's `<state>/ns/<id>/`: the pins are
//! mount points inside it and move with it, and the pod's host name is then
//! set in the UTS namespace.
//!
//! The shim is started in `<state>/spare-shim/<random>/`. Taking it renames
//! that directory to the pod's `<state>/s/<id>/` (its listening socket and
//! pid file move with it), writes the new socket path to `address`, and
//! tells the shim its new dir (`Adopt`), which it then also names on its
//! command line (`shim/title.rs`).
//!
//! New ones are made on threads of their own once the pod that took the
//! last ones is up; at most one of each exists. The server removes them
//! when it stops; ones left by a killed server are removed when the next
//! one opens the state dir. Pods in a user namespace of their own, or
//! sharing the node's network or IPC namespace, make their namespaces as
//! before.

use super::manager::shim_call;
use crate::api::shim::{shim_request::Request, AdoptRequest, ShutdownRequest};
use crate::network::netns::{self, Kind};
use crate::shim::client;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KINDS: [Kind; 3] = [Kind::Net, Kind::Uts, Kind::Ipc];

/// One kind of thing made ahead: where it is made, the one ready, and
/// whether one is being made.
struct Slot {
    dir: PathBuf,
    ready: Mutex<Option<PathBuf>>,
    making: AtomicBool,
}

impl Slot {
    fn at(dir: PathBuf) -> Arc<Slot> {
        Arc::new(Slot {
            dir,
            ready: Mutex::new(None),
            making: AtomicBool::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<PathBuf>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(&self) -> Option<PathBuf> {
        self.lock().take()
    }

    /// Runs `make` on a thread of its own with a new path under the slot's
    /// dir, unless one is ready or being made; keeps the path when `make`
    /// succeeds (which leaves nothing there when it fails).
    fn refill(
        self: &Arc<Self>,
        name: &'static str,
        make: impl FnOnce(&Path) -> io::Result<()> + Send + 'static,
    ) {
        if self.lock().is_some() || self.making.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                // As long as a pod's dir (`s/<32 hex>`) or longer: a shim's
                // command line is rewritten in place to name the pod's.
                let path = this.dir.join(format!("{:032x}", rand::random::<u128>()));
                match make(&path) {
                    Ok(()) => *this.lock() = Some(path),
                    Err(e) => tracing::debug!(error = %e, name, "could not make ahead"),
                }
                this.making.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.making.store(false, Ordering::Release);
        }
    }
}

/// What is made ahead (see the module's header).
pub struct Spare {
    ns: Arc<Slot>,
    shim: Arc<Slot>,
    exe: PathBuf,
}

impl Spare {
    /// The spares under `<state>/spare-ns` and `<state>/spare-shim` (shims
    /// of `exe`); any left there by an earlier server are removed.
    pub fn open(state: &Path, exe: &Path) -> Spare {
        let spare = Spare {
            ns: Slot::at(state.join("spare-ns")),
            shim: Slot::at(state.join("spare-shim")),
            exe: exe.to_path_buf(),
        };
        for set in entries(&spare.ns.dir) {
            remove_set(&set);
        }
        for dir in entries(&spare.shim.dir) {
            remove_shim(&dir);
        }
        spare
    }

    /// Moves the ready set to `target` (the pod's namespace dir, which must
    /// not exist) and sets `hostname` in it. False when no set was ready or
    /// the move failed; then nothing is left at `target`.
    pub fn take_namespaces(&self, target: &Path, hostname: &str) -> bool {
        let Some(set) = self.ns.take() else {
            return false;
        };
        if let Err(e) = move_dir(&set, target) {
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

    /// Moves the ready shim to `target` (the pod's shim dir, which must not
    /// exist) and has it adopt that dir. False when none was ready or the
    /// move failed; then nothing is left at `target`.
    pub fn take_shim(&self, target: &Path) -> bool {
        let Some(dir) = self.shim.take() else {
            return false;
        };
        let adopted = move_dir(&dir, target)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let sock = target.join("shim.sock").display().to_string();
                crate::store::atomic::write_state_file(&target.join("address"), sock.as_bytes())
                    .map_err(|e| e.to_string())
            })
            .and_then(|()| {
                let dir = target.display().to_string();
                shim_call(target, Request::Adopt(AdoptRequest { dir }))
                    .map(drop)
                    .map_err(|e| e.to_string())
            });
        if let Err(e) = adopted {
            tracing::warn!(error = %e, "could not take the shim started ahead");
            // Its command line names one dir or the other.
            remove_shim(&dir);
            remove_shim(target);
            return false;
        }
        true
    }

    /// Makes new ones on threads of their own, where none is ready or
    /// being made.
    pub fn refill(&self) {
        self.ns.refill("spare-ns", |set| {
            let pins: Vec<(Kind, PathBuf)> = KINDS
                .iter()
                .map(|k| (*k, set.join(k.proc_name())))
                .collect();
            netns::create_set(&pins, None, true).inspect_err(|_| {
                let _ = std::fs::remove_dir(set);
            })
        });
        let exe = self.exe.clone();
        self.shim.refill("spare-shim", move |dir| {
            client::spawn(&exe, dir).inspect_err(|_| remove_shim(dir))
        });
    }

    /// Removes the ready ones (the server is stopping).
    pub fn clear(&self) {
        if let Some(set) = self.ns.take() {
            remove_set(&set);
        }
        if let Some(dir) = self.shim.take() {
            let _ = shim_call(&dir, Request::Shutdown(ShutdownRequest::default()));
            super::teardown::wait_gone(&dir, Duration::from_secs(5));
            remove_shim(&dir);
        }
    }
}

/// The entries of `dir`, if it exists.
fn entries(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .collect()
}

/// Renames `from` to `to`, making `to`'s parent first.
fn move_dir(from: &Path, to: &Path) -> io::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(from, to)
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

/// Kills a shim started ahead (it never had containers) and removes its
/// dir.
fn remove_shim(dir: &Path) {
    client::kill_strays(dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn wait_ready(s: &Spare) -> bool {
        for _ in 0..500 {
            if s.ns.lock().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        false
    }

    #[test]
    fn a_set_of_namespaces_is_made_taken_once_and_cleared() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let spare = Arc::new(Spare::open(state.path(), Path::new("/nonexistent/husk")));
        let target = state.path().join("ns").join("pod");
        assert!(
            !spare.take_namespaces(&target, "x"),
            "nothing is ready before a refill"
        );
        spare.refill();
        assert!(wait_ready(&spare));
        assert!(spare.take_namespaces(&target, "pod-host"));
        assert!(!spare.take_namespaces(&state.path().join("ns").join("other"), "y"));
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
        assert_eq!(crate::sys::mounts_under(&spare.ns.dir).len(), 3);
        let reopened = Spare::open(state.path(), Path::new("/nonexistent/husk"));
        assert!(crate::sys::mounts_under(&reopened.ns.dir).is_empty());
        assert_eq!(std::fs::read_dir(&reopened.ns.dir).unwrap().count(), 0);
        // A shim that could not be started left nothing.
        assert!(entries(&spare.shim.dir).is_empty());
        reopened.clear();
        spare.clear();
        for k in KINDS {
            netns::remove(&target.join(k.proc_name())).unwrap();
        }
    }
}
