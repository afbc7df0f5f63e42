//! What runs a container in the shim: husk's own path (youki's
//! libcontainer, in a forked child: `fork.rs`) or an OCI runtime's command
//! line (`oci.rs`), chosen per container at its create; or a containerd
//! shim v2 runtime (`v2/`), which runs the processes itself. Everything else the
//! shim does (stdio, logs, reaping, exits, OOM counts, attach) is the same
//! for both.

use super::fork::{in_child, ResetSignals};
use super::monitor::Shim;
use super::oci::Oci;
use super::runtime_call::{internal, oci_failure, with_stderr, Failure, Made};
use libcontainer::container::builder::ContainerBuilder;
use libcontainer::container::Container;
use libcontainer::syscall::syscall::SyscallType;

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
        .map_err(|e| super::lookpath::failure(&format!("create container {id}"), e))
    }

    /// Lets the created container's payload run.
    pub(super) fn runtime_start(&mut self, id: &str) -> Result<(), Failure> {
        if self.v2.has(id) {
            return self.v2_start(id);
        }
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
    pub(super) fn runtime_kill(&mut self, id: &str, signal: i32, all: bool) -> Result<(), Failure> {
        if self.v2_adopt(id) {
            return self.v2_kill(id, signal, all);
        }
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
        if self.v2_adopt(id) {
            return self.v2_delete(id);
        }
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
            Ok(mut c) => super::delete::without_scan(&c)
                .unwrap_or_else(|| c.delete(true).map(|()| 0).map_err(|e| format!("{e:#}"))),
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
        if self.v2.has(id) {
            return "shim v2".into();
        }
        self.oci_of(id)
            .map_or_else(|| "libcontainer".into(), |o| o.path.display().to_string())
    }

    /// Whether a previous shim left state of `id` for this one to delete.
    pub(super) fn runtime_has_leftover(&self, id: &str) -> bool {
        super::has_runtime_state(&self.dir, id)
    }
}
