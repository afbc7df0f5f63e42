//! An OCI runtime's command line (runc, crun, runsc, youki's CLI) driven
//! from the shim, as containerd-shim-runc-v2 drives runc: `create --bundle
//! --pid-file [--console-socket]`, `start`, `kill [--all]`, `delete
//! --force`, `exec --detach --process --pid-file`. The shim stays the
//! containers' monitor: the runtime's `create` and `exec --detach` exit once
//! the process is made, and the process, orphaned, comes to the shim (a
//! child subreaper), which reaps it and records its exit as for its own.
//!
//! Every call runs under the handler's timeout: one that takes longer is
//! SIGKILLed and the call fails as [`OciError::Timeout`]. What a failed call
//! said comes back in the error: the last error of its `--log` (JSON, one
//! object per line, as runc, crun and runsc write it), else its stderr.
//! `create` and `exec` hand their stdio to the process they make, so their
//! stderr is the process's: the caller reads what came on that pipe.
//!
//! Which runtime runs a container is kept in `<dir>/oci/<id>.json`, so a
//! shim started after one that was killed still deletes it through its
//! runtime.

use crate::api::shim::OciRuntime;
use std::io::{Read, Seek};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

/// The timeout of a call when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// How an OCI runtime call failed.
#[derive(Debug, PartialEq)]
pub enum OciError {
    /// It could not be run, or it failed: what it said.
    Failed(String),
    /// It outran its timeout and was killed.
    Timeout(String),
}

impl OciError {
    /// The shim API's code for it.
    pub fn code(&self) -> i32 {
        match self {
            OciError::Failed(_) => 9,
            OciError::Timeout(_) => 4,
        }
    }
}

impl std::fmt::Display for OciError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OciError::Failed(m) | OciError::Timeout(m) => f.write_str(m),
        }
    }
}

/// One container's runtime, as recorded under `<dir>/oci/`.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Oci {
    pub path: PathBuf,
    pub root: PathBuf,
    pub global_args: Vec<String>,
    pub no_pivot_root: bool,
    pub timeout: Duration,
    /// The container's bundle (its config.json), for execs.
    pub bundle: PathBuf,
    /// Where each call's `--log` goes (truncated before each).
    pub log: PathBuf,
}

/// The stdio a created process gets.
pub struct Stdio3 {
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

pub(super) fn record_path(dir: &Path, id: &str) -> PathBuf {
    dir.join("oci").join(format!("{id}.json"))
}

impl Oci {
    pub fn new(dir: &Path, r: &OciRuntime, bundle: &Path) -> Oci {
        Oci {
            path: r.path.clone().into(),
            root: r.root.clone().into(),
            global_args: r.global_args.clone(),
            no_pivot_root: r.no_pivot_root,
            timeout: match r.timeout_ms {
                0 => DEFAULT_TIMEOUT,
                ms => Duration::from_millis(ms as u64),
            },
            bundle: bundle.to_path_buf(),
            log: dir.join("oci").join("runtime.log"),
        }
    }

    /// Records that `id` runs under this runtime.
    pub fn save(&self, dir: &Path, id: &str) -> Result<(), String> {
        std::fs::create_dir_all(dir.join("oci")).map_err(|e| e.to_string())?;
        crate::store::atomic::write_state_json(&record_path(dir, id), self)
            .map_err(|e| format!("record the runtime of {id}: {e}"))
    }

    /// The runtime `id` was recorded under, if any.
    pub fn load(dir: &Path, id: &str) -> Option<Oci> {
        crate::store::atomic::read_json(&record_path(dir, id))
            .ok()
            .flatten()
    }

    /// Forgets the record of `id`.
    pub fn forget(dir: &Path, id: &str) {
        let _ = std::fs::remove_file(record_path(dir, id));
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.path);
        c.arg("--root")
            .arg(&self.root)
            .arg("--log")
            .arg(&self.log)
            .arg("--log-format")
            .arg("json")
            .args(&self.global_args);
        c
    }

    /// Runs `c` to its end or its timeout, its stdout and stderr captured;
    /// what it wrote on stdout.
    fn run(&self, mut c: Command, what: &str) -> Result<Vec<u8>, OciError> {
        let out = memfd("out")?;
        let err = memfd("err")?;
        c.stdin(Stdio::null())
            .stdout(Stdio::from(clone(&out)?))
            .stderr(Stdio::from(clone(&err)?));
        let status = self.finish(c, what)?;
        if status.success() {
            return Ok(read_all(out));
        }
        let said = self.said(&read_all(err));
        Err(OciError::Failed(format!(
            "{what}: {} {status}: {said}",
            self.path.display()
        )))
    }

    /// Runs `c` (its stdio set) to its end, or kills it at the timeout.
    fn finish(&self, mut c: Command, what: &str) -> Result<ExitStatus, OciError> {
        let _ = std::fs::create_dir_all(self.log.parent().unwrap_or(Path::new("/")));
        let _ = std::fs::write(&self.log, b"");
        let name = self.path.display().to_string();
        let mut child = c
            .spawn()
            .map_err(|e| OciError::Failed(format!("{what}: cannot run {name}: {e}")))?;
        // The parent's copies of the child's stdio go now: a reader of
        // them sees their end when the child's are closed.
        drop(c);
        match wait(&mut child, self.timeout) {
            Some(s) => Ok(s),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(OciError::Timeout(format!(
                    "{what}: {name} did not answer in {:?}; it was killed",
                    self.timeout
                )))
            }
        }
    }

    /// What a failed call said: the last error in its log, else `stderr`.
    pub fn said(&self, stderr: &[u8]) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let logged = log
            .lines()
            .rev()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| matches!(v["level"].as_str(), Some("error" | "fatal")))
            .find_map(|v| v["msg"].as_str().map(str::to_string));
        let text = String::from_utf8_lossy(stderr);
        let text = text.trim();
        let tail = &text[text.len().saturating_sub(2048)..];
        let tail = tail.trim_start_matches(|c: char| !c.is_ascii());
        match logged {
            Some(m) => m,
            None if !tail.is_empty() => tail.to_string(),
            None => "(it said nothing)".into(),
        }
    }

    /// `create`: the init, stopped before the payload's exec; its pid.
    pub fn create(
        &self,
        id: &str,
        pid_file: &Path,
        console: Option<&Path>,
        io: Stdio3,
    ) -> Result<i32, OciError> {
        let _ = std::fs::remove_file(pid_file);
        let mut c = self.command();
        c.arg("create")
            .arg("--bundle")
            .arg(&self.bundle)
            .arg("--pid-file")
            .arg(pid_file);
        if let Some(s) = console {
            c.arg("--console-socket").arg(s);
        }
        if self.no_pivot_root {
            c.arg("--no-pivot");
        }
        c.arg(id)
            .stdin(Stdio::from(io.stdin))
            .stdout(Stdio::from(io.stdout))
            .stderr(Stdio::from(io.stderr));
        self.run_with_io(c, &format!("create container {id}"))?;
        read_pid(pid_file).map_err(|e| OciError::Failed(format!("create container {id}: {e}")))
    }

    /// `exec --detach`: `process` (a process.json) in container `id`; the
    /// new process's pid.
    pub fn exec(
        &self,
        id: &str,
        process: &Path,
        pid_file: &Path,
        console: Option<&Path>,
        io: Stdio3,
    ) -> Result<i32, OciError> {
        let _ = std::fs::remove_file(pid_file);
        let mut c = self.command();
        c.arg("exec")
            .arg("--detach")
            .arg("--pid-file")
            .arg(pid_file)
            .arg("--process")
            .arg(process);
        if let Some(s) = console {
            c.arg("--tty").arg("--console-socket").arg(s);
        }
        c.arg(id)
            .stdin(Stdio::from(io.stdin))
            .stdout(Stdio::from(io.stdout))
            .stderr(Stdio::from(io.stderr));
        self.run_with_io(c, &format!("exec in {id}"))?;
        let pid = read_pid(pid_file).map_err(|e| OciError::Failed(format!("exec in {id}: {e}")));
        let _ = std::fs::remove_file(pid_file);
        pid
    }

    /// Runs a call whose stdio the caller set (create, exec).
    fn run_with_io(&self, c: Command, what: &str) -> Result<(), OciError> {
        match self.finish(c, what)? {
            s if s.success() => Ok(()),
            // What it said is on the process's stderr: the caller adds it.
            s => Err(OciError::Failed(format!(
                "{what}: {} {s}: {}",
                self.path.display(),
                self.said(b"")
            ))),
        }
    }

    pub fn start(&self, id: &str) -> Result<(), OciError> {
        let mut c = self.command();
        c.arg("start").arg(id);
        self.run(c, &format!("start container {id}")).map(drop)
    }

    /// `kill [--all] id signal`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), OciError> {
        let mut c = self.command();
        c.arg("kill");
        if all {
            c.arg("--all");
        }
        c.arg(id).arg(signal.to_string());
        self.run(c, &format!("kill container {id}")).map(drop)
    }

    /// Deletes `id`'s state and cgroup: `delete id` when its processes are
    /// gone (as containerd's shim does: runc 1.4's `--force` spends a tenth
    /// of a second making sure), else, or when that fails, `delete --force
    /// id`. A runtime that fails because it has no such container (crun
    /// says so; runc succeeds) has nothing to delete.
    pub fn delete(&self, id: &str, stopped: bool) -> Result<(), OciError> {
        let what = format!("delete container {id}");
        if stopped {
            let mut c = self.command();
            c.arg("delete").arg(id);
            if self.run(c, &what).is_ok() {
                return Ok(());
            }
        }
        let mut c = self.command();
        c.arg("delete").arg("--force").arg(id);
        match self.run(c, &what) {
            Ok(_) => Ok(()),
            Err(e @ OciError::Failed(_)) if self.path.exists() => match self.exists(id) {
                Ok(false) => Ok(()),
                _ => Err(e),
            },
            Err(e) => Err(e),
        }
    }

    /// Whether the runtime knows container `id` (its `state` answers).
    fn exists(&self, id: &str) -> Result<bool, OciError> {
        let mut c = self.command();
        c.arg("state").arg(id);
        match self.run(c, &format!("state of container {id}")) {
            Ok(_) => Ok(true),
            Err(OciError::Failed(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn memfd(name: &str) -> Result<OwnedFd, OciError> {
    rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| OciError::Failed(format!("memfd: {e}")))
}

fn clone(fd: &OwnedFd) -> Result<OwnedFd, OciError> {
    fd.try_clone()
        .map_err(|e| OciError::Failed(format!("dup: {e}")))
}

fn read_all(fd: OwnedFd) -> Vec<u8> {
    let mut f = std::fs::File::from(fd);
    let mut v = Vec::new();
    let _ = f.rewind();
    let _ = f.take(1 << 20).read_to_end(&mut v);
    v
}

fn read_pid(pid_file: &Path) -> Result<i32, String> {
    let s = std::fs::read_to_string(pid_file)
        .map_err(|e| format!("the runtime wrote no pid file {}: {e}", pid_file.display()))?;
    s.trim()
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("pid file {} holds {s:?}", pid_file.display()))
}

/// Waits for `child` at most `timeout` (a pidfd polled: no busy loop);
/// None when it is still running.
fn wait(child: &mut std::process::Child, timeout: Duration) -> Option<ExitStatus> {
    // SAFETY: pidfd_open(2) of our own child, which is not yet reaped.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, child.id() as libc::c_int, 0) };
    if fd < 0 {
        // No pidfds: poll the child's state.
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(s)) = child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        return child.try_wait().ok().flatten();
    }
    // SAFETY: the descriptor was just opened and is ours alone.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll(2) on one descriptor we own.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oci(dir: &Path, path: &str, timeout_ms: u32) -> Oci {
        Oci::new(
            dir,
            &OciRuntime {
                path: path.into(),
                root: dir.join("root").display().to_string(),
                timeout_ms,
                ..Default::default()
            },
            &dir.join("bundle"),
        )
    }

    /// An executable shell script `name` in `dir` running `body`: its path.
    ///
    /// A child `sh` writes it: the tests run on many threads, and a fork by
    /// another thread while this one held the file open for writing would
    /// leave that child a writable descriptor until it execs, so the exec of
    /// the script here could fail with ETXTBSY.
    fn script(dir: &Path, name: &str, body: &str) -> String {
        use std::io::Write;
        let path = dir.join(name);
        let mut sh = std::process::Command::new("sh")
            .args(["-c", "cat > \"$0\" && chmod 755 \"$0\""])
            .arg(&path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let mut stdin = sh.stdin.take().expect("stdin");
        stdin
            .write_all(format!("#!/bin/sh\n{body}\n").as_bytes())
            .expect("write");
        drop(stdin);
        assert!(sh.wait().expect("wait").success(), "write {name}");
        path.display().to_string()
    }

    #[test]
    fn a_hung_runtime_is_killed_at_its_timeout() {
        let d = tempfile::tempdir().expect("tmp");
        let o = oci(d.path(), &script(d.path(), "hang", "exec sleep 60"), 200);
        let t0 = std::time::Instant::now();
        let e = o.start("c").expect_err("hangs");
        assert!(matches!(e, OciError::Timeout(_)), "{e:?}");
        assert_eq!(e.code(), 4);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "killed, not waited out"
        );
    }

    #[test]
    fn a_container_the_runtime_does_not_know_has_nothing_to_delete() {
        let d = tempfile::tempdir().expect("tmp");
        // delete fails; state fails for "gone" (no such container) and
        // answers for "here".
        let rt = script(
            d.path(),
            "rt",
            "for a in \"$@\"; do case \"$a\" in delete) exit 1;; \
             state) shift 7; [ \"$1\" = here ] && { echo '{}'; exit 0; }; exit 1;; esac; done",
        );
        let o = oci(d.path(), &rt, 0);
        assert_eq!(o.delete("gone", true), Ok(()));
        assert!(
            o.delete("here", true).is_err(),
            "it has state: the failure stands"
        );
    }

    #[test]
    fn what_a_failed_call_said_comes_back() {
        let d = tempfile::tempdir().expect("tmp");
        // The log's last error wins over stderr; without a log, stderr.
        let fail = script(
            d.path(),
            "fail",
            "log=$4\necho 'plain words' >&2\n\
             [ \"$7\" = kill ] && echo '{\"level\":\"error\",\"msg\":\"no such container\"}' > \"$log\"\nexit 3",
        );
        let o = oci(d.path(), &fail, 0);
        let e = o.start("c").expect_err("fails");
        assert_eq!(e.code(), 9);
        assert!(e.to_string().contains("plain words"), "{e}");
        let e = o.kill("c", 9, false).expect_err("fails");
        assert!(e.to_string().contains("no such container"), "{e}");
        assert!(!e.to_string().contains("plain words"), "{e}");
        let missing = oci(d.path(), "/nonexistent/runtime", 0);
        let e = missing.delete("c", false).expect_err("missing");
        assert!(e.to_string().contains("/nonexistent/runtime"), "{e}");
        assert_eq!(e.code(), 9);
    }
}
