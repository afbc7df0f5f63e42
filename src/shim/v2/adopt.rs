//! A record of each task (`<dir>/v2/<id>.json`: its shim's address and
//! binary, its bundle), so that a monitor started after one that was
//! killed can still end what the old one left running: it dials the shim
//! again (Connect) and kills and deletes the task there, or, when the shim
//! is gone too, runs its binary's `delete`.

use super::client::{CallError, Client};
use super::start::Launch;
use super::{Conn, Task};
use crate::api::containerd::{ConnectRequest, ConnectResponse, WaitRequest, WaitResponse};
use crate::api::shim::ShimV2;
use crate::shim::monitor::Shim;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    address: String,
    version: i32,
    bundle: PathBuf,
    binary: PathBuf,
    timeout_ms: u64,
    grpc_address: String,
    socket_dir: String,
}

fn record_path(dir: &Path, id: &str) -> PathBuf {
    dir.join("v2").join(format!("{id}.json"))
}

/// Whether a monitor left a record of task `id` in `dir`.
pub fn has_record(dir: &Path, id: &str) -> bool {
    record_path(dir, id).exists()
}

impl Shim {
    /// Records task `id`, once its shim created it.
    pub(super) fn v2_save(&self, id: &str, version: i32) {
        let Some(t) = self.v2.tasks.get(id) else {
            return;
        };
        let r = Record {
            address: t.address.clone(),
            version,
            bundle: t.bundle.clone(),
            binary: t.binary.clone(),
            timeout_ms: t.timeout.as_millis() as u64,
            grpc_address: t.runtime.grpc_address.clone(),
            socket_dir: t.runtime.socket_dir.clone(),
        };
        let path = record_path(&self.dir, id);
        let saved = std::fs::create_dir_all(self.dir.join("v2"))
            .and_then(|()| crate::store::atomic::write_state_json(&path, &r));
        if let Err(e) = saved {
            eprintln!("husk shim: record task {id}: {e}");
        }
    }

    pub(super) fn v2_forget_record(&self, id: &str) {
        let _ = std::fs::remove_file(record_path(&self.dir, id));
    }

    /// Takes over task `id` that a killed monitor left (true when there
    /// was one): its shim dialled again, or cleaned with `delete` when it
    /// is gone.
    pub(in crate::shim) fn v2_adopt(&mut self, id: &str) -> bool {
        if self.v2.has(id) {
            return true;
        }
        let Some(r) = std::fs::read(record_path(&self.dir, id))
            .ok()
            .and_then(|b| serde_json::from_slice::<Record>(&b).ok())
        else {
            return false;
        };
        if self.v2.events.is_none() {
            self.v2.events = super::events::Events::bind(&self.dir.join("ev.sock")).ok();
        }
        let timeout = Duration::from_millis(r.timeout_ms.max(1000));
        let mut address = r.address.clone();
        if !self.v2.conns.contains_key(&address) {
            match Client::connect(&address, r.version) {
                Ok(mut client) => {
                    let pid = client
                        .call::<_, ConnectResponse>(
                            "Connect",
                            &ConnectRequest { id: id.to_string() },
                            timeout,
                        )
                        .map(|c| c.shim_pid as i32)
                        .unwrap_or(0);
                    self.v2.conns.insert(
                        address.clone(),
                        Conn {
                            client,
                            version: r.version,
                            pid,
                            tasks: Default::default(),
                            log: None,
                        },
                    );
                }
                Err(_) => {
                    // The shim died with the monitor: its `delete` cleans.
                    let launch = Launch {
                        binary: &r.binary,
                        id,
                        bundle: &r.bundle,
                        grpc_address: &r.grpc_address,
                        ttrpc_address: &self.dir.join("ev.sock"),
                        socket_dir: &r.socket_dir,
                        options: None,
                        timeout,
                    };
                    if let Err((_, e)) = launch.delete(&self.dir.join("v2io").join(".delete")) {
                        eprintln!("husk shim: delete {id} after its shim died: {e}");
                    }
                    super::remove_socket(&address);
                    address.clear();
                }
            }
        }
        if let Some(c) = self.v2.conns.get_mut(&address) {
            c.tasks.insert(id.to_string());
        }
        self.v2.tasks.insert(
            id.to_string(),
            Task {
                address,
                bundle: r.bundle,
                io: self.dir.join("v2io").join(id),
                binary: r.binary,
                runtime: ShimV2 {
                    grpc_address: r.grpc_address,
                    socket_dir: r.socket_dir,
                    ..Default::default()
                },
                timeout,
                adopted: true,
                oom_kills: 0,
            },
        );
        true
    }

    /// Waits for an adopted task to have exited (its kill was just sent).
    pub(super) fn v2_wait(&mut self, id: &str) {
        let _: Result<WaitResponse, CallError> = self.v2_call(
            id,
            "Wait",
            &WaitRequest {
                id: id.to_string(),
                exec_id: String::new(),
            },
        );
    }
}
