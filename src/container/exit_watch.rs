//! The inotify instance that sees a pod's shim record an exit: a watch
//! per pod's exits dir, and the loop that reads what it saw (`exits.rs`
//! says what the container manager does with it).

use rustix::fs::inotify;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

/// What the watcher saw.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// `<id>.json` appeared: container `id` exited.
    Exit(String),
    /// Events were lost: look at every container.
    Overflow,
}

/// The inotify instance; `None` when the kernel refused one.
pub struct ExitWatch {
    pub(super) fd: Option<Arc<OwnedFd>>,
    /// Exits dirs the kernel refused a watch for (`max_user_watches`):
    /// their containers are asked about, not watched.
    unwatched: std::sync::Mutex<std::collections::HashSet<std::path::PathBuf>>,
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
                unwatched: Default::default(),
            },
            Err(e) => {
                tracing::warn!(error = %e, "no inotify: container exits are noticed only when a status is asked for");
                ExitWatch {
                    fd: None,
                    unwatched: Default::default(),
                }
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
        let mut unwatched = self.unwatched.lock().unwrap_or_else(|p| p.into_inner());
        match inotify::add_watch(fd.as_ref(), exits_dir, flags) {
            Ok(_) => {
                unwatched.remove(exits_dir);
            }
            Err(e) => {
                tracing::warn!(dir = %exits_dir.display(), error = %e, "cannot watch a pod's exits: they are noticed when a status or list asks");
                unwatched.insert(exits_dir.to_path_buf());
            }
        }
    }

    /// Whether an exit recorded in `exits_dir` reaches the records by
    /// itself.
    pub fn covers(&self, exits_dir: &Path) -> bool {
        self.fd.is_some()
            && !self
                .unwatched
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(exits_dir)
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

pub(super) fn read_loop(fd: Arc<OwnedFd>, mut on: impl FnMut(Seen) -> bool) {
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
    fn a_dir_the_kernel_would_not_watch_is_not_covered() {
        let d = tempfile::tempdir().expect("tempdir");
        let exits = d.path().join("exits");
        let w = ExitWatch::new();
        w.watch(&exits);
        assert!(!w.covers(&exits), "no such dir: no watch");
        std::fs::create_dir(&exits).expect("mkdir");
        w.watch(&exits);
        assert!(w.covers(&exits));
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
