//! Made ahead for the next pod: a pod sandbox id whose shim is already
//! running and whose namespaces are already pinned, so that RunPodSandbox
//! neither waits for a shim to start (a fork and an exec, one to two
//! milliseconds) nor for the kernel to make a network namespace (about
//! one).
//!
//! The spare is made where a pod of that id keeps them: the shim in
//! `<state>/s/<id>/`, a network, a UTS and an IPC namespace (`lo` up)
//! pinned under `<state>/ns/<id>/`. A pod takes the spare by taking its id
//! as its own: nothing is moved or told, and only the pod's host name is
//! then set in the UTS namespace. A pod that has no use for the namespaces
//! (the node's network or IPC, or a user namespace of its own) takes the
//! id and the shim, and the set is removed.
//!
//! A spare differs from a pod by having no dir under `<root>/sandboxes`,
//! which RunPodSandbox makes first of all. So a spare a killed server left
//! is undone at the next start with the other remnants that have no
//! record (`recover.rs`), as one whose network was never set up.
//!
//! A new spare is made on a thread of its own once the pod that took the
//! last one is up, after the server has had no RPC in flight for
//! [`QUIET`]: its CPU time (the namespace, the shim's start) is then not
//! taken from the RPCs that follow a pod's start on a small node. A pod's
//! StopPodSandbox, which waits on the CNI plugins' DEL for tens of
//! milliseconds with the CPU mostly idle, has it made at once
//! ([`Spare::nudge`]): pods started back to back after a removal find one
//! too. At most one exists; the server removes it when it stops.

use super::shim_call::{shim_call, wait_gone};
use crate::api::shim::{shim_request::Request, ShutdownRequest};
use crate::network::netns::{self, Kind};
use crate::shim::client;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KINDS: [Kind; 3] = [Kind::Net, Kind::Uts, Kind::Ipc];

/// How long the server must have had no RPC in flight before a spare is
/// made.
pub const QUIET: Duration = Duration::from_millis(20);

/// How long a spare waits for the server to go quiet before it is made
/// anyway.
const QUIET_AT_MOST: Duration = Duration::from_secs(5);

/// A spare as a pod takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// The pod sandbox id, whose shim runs in `<state>/s/<id>/`.
    pub id: String,
    /// Whether its namespaces are pinned under `<state>/ns/<id>/`.
    pub namespaces: bool,
}

/// What is made ahead (see the module's header).
pub struct Spare {
    state: PathBuf,
    exe: PathBuf,
    ready: Mutex<Option<Taken>>,
    making: AtomicBool,
    /// Set when the server stops: nothing more is made or kept.
    closed: AtomicBool,
    /// Set by [`Spare::nudge`]: make it now, quiet or not.
    nudged: AtomicBool,
    /// Whether the server is quiet enough to make one (from the RPC count).
    quiet: fn(Duration) -> bool,
}

impl Spare {
    /// Spares of shims of `exe`, with their state under `state`, made once
    /// `quiet` says the server has been so for the time it is given.
    pub fn new(state: &Path, exe: &Path, quiet: fn(Duration) -> bool) -> Arc<Spare> {
        Arc::new(Spare {
            state: state.to_path_buf(),
            exe: exe.to_path_buf(),
            ready: Mutex::new(None),
            making: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            nudged: AtomicBool::new(false),
            quiet,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Taken>> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the spare, if one is ready.
    pub fn take(&self) -> Option<Taken> {
        self.lock().take()
    }

    /// Removes the namespaces of a spare taken by a pod that makes its own
    /// or has none.
    pub fn remove_namespaces(&self, taken: &mut Taken) {
        if taken.namespaces {
            remove_set(&self.state.join("ns").join(&taken.id));
            taken.namespaces = false;
        }
    }

    /// Has a spare made now rather than once the server is quiet (the
    /// caller waits on something else meanwhile), unless one is ready.
    pub fn nudge(self: &Arc<Self>) {
        if self.lock().is_none() {
            self.nudged.store(true, Ordering::Release);
            self.refill();
        }
    }

    /// Makes a new spare on a thread of its own once the server is quiet,
    /// unless one is ready or being made.
    pub fn refill(self: &Arc<Self>) {
        if self.lock().is_some() || self.making.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("spare".into())
            .spawn(move || {
                let waited = std::time::Instant::now();
                while !(this.quiet)(QUIET)
                    && !this.nudged.swap(false, Ordering::AcqRel)
                    && waited.elapsed() < QUIET_AT_MOST
                    && !this.closed.load(Ordering::Acquire)
                {
                    std::thread::sleep(QUIET / 2);
                }
                this.nudged.store(false, Ordering::Release);
                if !this.closed.load(Ordering::Acquire) {
                    let id = format!("{:032x}", rand::random::<u128>());
                    match this.make(&id) {
                        Ok(made) => {
                            let mut ready = this.lock();
                            if this.closed.load(Ordering::Acquire) {
                                drop(ready);
                                this.remove(made);
                            } else {
                                *ready = Some(made);
                            }
                        }
                        Err(e) => tracing::debug!(error = %e, "could not make a spare"),
                    }
                }
                this.making.store(false, Ordering::Release);
            });
        if spawned.is_err() {
            self.making.store(false, Ordering::Release);
        }
    }

    /// Starts the shim of `id` (on a thread) while its namespaces are made.
    /// A spare without namespaces is still of use; one without a shim is
    /// not, and leaves nothing.
    fn make(&self, id: &str) -> io::Result<Taken> {
        let dir = self.state.join("s").join(id);
        let (exe, d) = (self.exe.clone(), dir.clone());
        let shim = std::thread::spawn(move || client::spawn(&exe, &d));
        let set = self.state.join("ns").join(id);
        let pins: Vec<(Kind, PathBuf)> = KINDS
            .iter()
            .map(|k| (*k, netns::pin_path(&self.state, *k, id)))
            .collect();
        let namespaces = match netns::create_set(&pins, None, true) {
            Ok(()) => true,
            Err(e) => {
                tracing::debug!(error = %e, "could not make a spare's namespaces");
                let _ = std::fs::remove_dir(&set);
                false
            }
        };
        let started = shim
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the shim's thread panicked")));
        if let Err(e) = started {
            remove_shim(&dir);
            if namespaces {
                remove_set(&set);
            }
            return Err(e);
        }
        Ok(Taken {
            id: id.to_string(),
            namespaces,
        })
    }

    /// Removes the spare that is ready, and one being made once it is
    /// (the server is stopping); none is made after.
    pub fn clear(&self) {
        let ready = {
            let mut ready = self.lock();
            self.closed.store(true, Ordering::Release);
            ready.take()
        };
        if let Some(t) = ready {
            self.remove(t);
        }
        let waited = std::time::Instant::now();
        while self.making.load(Ordering::Acquire) && waited.elapsed() < QUIET_AT_MOST {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Stops a spare's shim and removes it and its namespaces.
    fn remove(&self, t: Taken) {
        let dir = self.state.join("s").join(&t.id);
        let _ = shim_call(&dir, Request::Shutdown(ShutdownRequest::default()));
        wait_gone(&dir, Duration::from_secs(5));
        remove_shim(&dir);
        if t.namespaces {
            remove_set(&self.state.join("ns").join(&t.id));
        }
    }
}

/// Unpins a set's namespaces and removes its directory.
fn remove_set(set: &Path) {
    for k in KINDS {
        if let Err(e) = netns::remove(&set.join(k.proc_name())) {
            tracing::warn!(pin = %set.join(k.proc_name()).display(), error = %e, "remove a spare namespace");
        }
    }
    let _ = std::fs::remove_dir(set);
}

/// Kills a spare shim (it never had containers) and removes its dir.
fn remove_shim(dir: &Path) {
    client::kill_strays(dir);
    let _ = std::fs::remove_dir_all(dir);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entries(dir: &Path) -> usize {
        std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
    }

    #[test]
    fn without_a_shim_nothing_is_kept() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let spare = Spare::new(state.path(), Path::new("/nonexistent/husk"), |_| true);
        assert_eq!(spare.take(), None, "nothing is ready before a refill");
        assert!(spare.make("a").is_err());
        assert!(crate::sys::mounts_under(state.path()).is_empty());
        assert_eq!(entries(&state.path().join("ns")), 0);
        assert_eq!(entries(&state.path().join("s")), 0);
    }

    #[test]
    fn a_spare_waits_for_the_server_to_be_quiet() {
        static QUIET_NOW: AtomicBool = AtomicBool::new(false);
        let state = tempfile::tempdir().unwrap();
        let spare = Spare::new(state.path(), Path::new("/nonexistent/husk"), |_| {
            QUIET_NOW.load(Ordering::Relaxed)
        });
        spare.refill();
        std::thread::sleep(QUIET * 5);
        assert!(spare.making.load(Ordering::Acquire), "still waiting");
        assert_eq!(entries(&state.path().join("s")), 0, "nothing made yet");
        QUIET_NOW.store(true, Ordering::Relaxed);
        for _ in 0..500 {
            if !spare.making.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !spare.making.load(Ordering::Acquire),
            "made (or failed) once quiet"
        );
    }

    #[test]
    fn a_nudge_makes_one_without_waiting_for_quiet() {
        let state = tempfile::tempdir().unwrap();
        // Never quiet: only the nudge (or the 5 s bound) ends the wait.
        let spare = Spare::new(state.path(), Path::new("/nonexistent/husk"), |_| false);
        spare.refill();
        std::thread::sleep(QUIET * 2);
        assert!(spare.making.load(Ordering::Acquire), "waiting for quiet");
        spare.nudge();
        for _ in 0..100 {
            if !spare.making.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            !spare.making.load(Ordering::Acquire),
            "made (or failed) at the nudge, well before the 5 s bound"
        );
        assert!(!spare.nudged.load(Ordering::Acquire), "the nudge was used");
    }

    #[test]
    fn none_is_made_once_the_server_stops() {
        let state = tempfile::tempdir().unwrap();
        let spare = Spare::new(state.path(), Path::new("/nonexistent/husk"), |_| false);
        spare.refill();
        assert!(spare.making.load(Ordering::Acquire));
        spare.clear();
        assert!(!spare.making.load(Ordering::Acquire), "the wait ended");
        spare.refill();
        assert_eq!(spare.take(), None);
        assert_eq!(entries(&state.path().join("s")), 0);
        assert_eq!(entries(&state.path().join("ns")), 0);
    }

    #[test]
    fn a_set_taken_without_its_namespaces_is_removed() {
        if !rustix::process::geteuid().is_root() {
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let spare = Spare::new(state.path(), Path::new("/nonexistent/husk"), |_| true);
        let set = state.path().join("ns").join("b");
        let pins: Vec<(Kind, PathBuf)> = KINDS
            .iter()
            .map(|k| (*k, set.join(k.proc_name())))
            .collect();
        netns::create_set(&pins, None, true).unwrap();
        assert_eq!(
            netns::interfaces(&set.join("net")).unwrap(),
            vec!["lo".to_string()]
        );
        *spare.lock() = Some(Taken {
            id: "b".into(),
            namespaces: true,
        });
        let mut t = spare.take().unwrap();
        assert_eq!((t.id.as_str(), t.namespaces), ("b", true));
        assert_eq!(spare.take(), None, "taken once");
        spare.remove_namespaces(&mut t);
        assert!(!t.namespaces);
        assert!(crate::sys::mounts_under(state.path()).is_empty());
        assert!(!set.exists());
    }
}
