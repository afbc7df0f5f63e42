//! What runs a container in the shim: husk's own path (youki's
//! libcontainer, in a forked child: `fork.rs`) or an OCI runtime's command
//! line (`oci.rs`), chosen per container at its create. Everything else the
//! shim does (stdio, logs, reaping, exits, OOM counts, attach) is the same
//! for both.

use super::fork::{in_child, ResetSignals};
use super::monitor::Shim;
use super::oci::{Oci, OciError, Stdio3};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::Container;
use libcontainer::syscall::syscall::SyscallType;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// A runtime's failure: the shim API's code and the message.
pub(super) type Failure = (i32, String);

const INTERNAL: i32 = 13;

fn internal(e: String) -> Failure {
    (INTERNAL, e)
}

fn oci_failure(e: OciError) -> Failure {
    (e.code(), e.to_string())
}

/// What a create is given.
pub(super) struct Made<'a> {
    pub id: &'a str,
    pub bundle: &'a Path,
    pub console: Option<PathBuf>,
    pub io: Stdio3,
    /// The read end of the process's stderr, where an OCI runtime's own
    /// complaints land when its create fails.
    pub stderr_reader: Option<&'a OwnedFd>,
}

/// Whatever `fd` (non-blocking) holds now, as text, at most 4 KiB.
pub(super) fn pending_text(fd: Option<&OwnedFd>) -> String {
    let Some(fd) = fd else {
        return String::new();
    };
    let mut buf = vec![0u8; 4096];
    match rustix::io::read(fd, &mut buf) {
        Ok(n) => String::from_utf8_lossy(&buf[..n]).trim().to_string(),
        Err(_) => String::new(),
    }
}

/// `e`, with what the process's stderr holds when the log said nothing.
pub(super) fn with_stderr(e: OciError, stderr: Option<&OwnedFd>) -> Failure {
    let said = pending_text(stderr);
    let e = match e {
        OciError::Failed(m) if !said.is_empty() => {
            OciError::Failed(m.replace("(it said nothing)", &said))
        }
        e => e,
    };
    oci_failure(e)
}

/// The container's spec, and its own process (user, env, cwd,
/// capabilities, rlimits as its bundle has them) with `args` swapped in,
/// for an exec (a terminal's gets TERM when the image set none).
pub(super) fn exec_process(
    bundle: &Path,
    args: &[String],
    tty: bool,
) -> Result<(serde_json::Value, serde_json::Value), String> {
    let spec: serde_json::Value = std::fs::read(bundle.join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or("cannot read the container's spec")?;
    let mut process = spec
        .get("process")
        .cloned()
        .ok_or("the container's spec has no process")?;
    process["args"] = serde_json::json!(args);
    process["terminal"] = serde_json::json!(tty);
    if tty {
        let mut env = process["env"].as_array().cloned().unwrap_or_default();
        if !env
            .iter()
            .any(|e| e.as_str().is_some_and(|s| s.starts_with("TERM=")))
        {
            env.push(serde_json::json!("TERM=xterm"));
            process["env"] = serde_json::json!(env);
        }
    }
    Ok((spec, process))
}

impl Shim {
    /// The OCI runtime that runs `id`, if one does (a shim started after a
    /// killed one learns it from the record).
    pub(super) fn oci_of(&self, id: &str) -> Option<Oci> {
        self.oci
            .get(id)
            .cloned()
            .or_else(|| Oci::load(&self.dir, id))
    }

    /// Creates the container; its init's pid.
    pub(super) fn runtime_create(&mut self, m: Made<'_>, oci: Option<Oci>) -> Result<i32, Failure> {
        let id = m.id;
        if let Some(o) = oci {
            o.save(&self.dir, id).map_err(internal)?;
            self.oci.insert(id.to_string(), o.clone());
            let pid_file = self.dir.join("oci").join(format!("{id}.pid"));
            let r = o.create(id, &pid_file, m.console.as_deref(), m.io);
            let _ = std::fs::remove_file(&pid_file);
            return r.map_err(|e| with_stderr(e, m.stderr_reader));
        }
        let youki = &self.youki;
        let (bundle, console, io) = (m.bundle, m.console, m.io);
        in_child(move || {
            let c = ContainerBuilder::new(id.to_string(), SyscallType::default())
                .validate_id()
                .map_err(|e| e.to_string())?
                .with_root_path(youki)
                .map_err(|e| e.to_string())?
                .with_executor(ResetSignals)
                .with_stdin(io.stdin)
                .with_stdout(io.stdout)
                .with_stderr(io.stderr)
                .with_console_socket(console.as_deref())
                .as_init(bundle)
                // libcontainer drives systemd only for a relative
                // cgroups path (`slice:husk:id`, the systemd driver's);
                // an absolute one is cgroupfs either way.
                .with_systemd(true)
                .with_detach(true)
                .build()
                .map_err(|e| format!("create container {id}: {e:#}"))?;
            c.pid()
                .map(|p| p.as_raw())
                .ok_or_else(|| "created container has no pid".to_string())
        })
        .map_err(internal)
    }

    /// Lets the created container's payload run.
    pub(super) fn runtime_start(&self, id: &str) -> Result<(), Failure> {
        if let Some(o) = self.oci_of(id) {
            return o.start(id).map_err(oci_failure);
        }
        let state = self.youki.join(id);
        in_child(|| {
            Container::load(state)
                .and_then(|mut c| c.start())
                .map(|()| 0)
                .map_err(|e| format!("{e:#}"))
        })
        .map(drop)
        .map_err(|e| internal(format!("start container {id}: {e}")))
    }

    /// Signals every process of the container (`all`), or its init
    /// through the runtime.
    pub(super) fn runtime_kill(&self, id: &str, signal: i32, all: bool) -> Result<(), Failure> {
        if let Some(o) = self.oci_of(id) {
            return o.kill(id, signal, all).map_err(oci_failure);
        }
        let sig = libcontainer::signal::Signal::try_from(signal)
            .map_err(|e| (3, format!("signal {signal}: {e}")))?;
        let state = self.youki.join(id);
        in_child(|| {
            Container::load(state)
                .and_then(|mut c| {
                    if c.can_kill() || all {
                        c.kill(sig, all)
                    } else {
                        Ok(())
                    }
                })
                .map(|()| 0)
                .map_err(|e| format!("{e:#}"))
        })
        .map(drop)
        .map_err(|e| internal(format!("kill container {id}: {e}")))
    }

    /// Deletes the runtime's state and cgroup of `id` (nothing to do when
    /// it has none), and the record of its runtime.
    pub(super) fn runtime_delete(&mut self, id: &str) -> Result<(), Failure> {
        if let Some(o) = self.oci_of(id) {
            let stopped = self
                .containers
                .get(id)
                .is_some_and(|e| e.status == super::monitor::Status::Stopped);
            o.delete(id, stopped).map_err(oci_failure)?;
            Oci::forget(&self.dir, id);
            self.oci.remove(id);
            return Ok(());
        }
        let state = self.youki.join(id);
        in_child(|| match Container::load(state) {
            Ok(mut c) => c.delete(true).map(|()| 0).map_err(|e| format!("{e:#}")),
            Err(_) => Ok(0),
        })
        .map(drop)
        .map_err(|e| internal(format!("delete container {id}: {e}")))?;
        let _ = std::fs::remove_dir_all(self.youki.join(id));
        Ok(())
    }

    /// What runs `id`, for its spans: an OCI runtime's path, or
    /// libcontainer.
    pub(super) fn runtime_label(&self, id: &str) -> String {
        self.oci_of(id)
            .map_or_else(|| "libcontainer".into(), |o| o.path.display().to_string())
    }

    /// Whether a previous shim left state of `id` for this one to delete.
    pub(super) fn runtime_has_leftover(&self, id: &str) -> bool {
        super::has_runtime_state(&self.dir, id)
    }
}
