//! The pod and QoS cgroups of the systemd driver: each is a transient
//! slice unit that systemd makes and owns (`kubepods.slice`,
//! `kubepods-burstable.slice`, `kubepods-burstable-pod<uid>.slice`), its
//! limits unit properties (MemoryMax, CPUWeight, CPUQuotaPerSecUSec,
//! TasksMax), so that a `systemctl daemon-reload` keeps them. A slice is
//! started with StartTransientUnit (Wants= its parent slice), changed with
//! SetUnitProperties once it exists, and stopped with StopUnit; all over
//! [`crate::dbus`]. The runtime is given the slice's name as the pod's
//! `cgroup_parent` and puts its scopes beneath.

use super::config::{weight, ResourceConfig, PERIOD};
use super::CgroupError;
use crate::cgroup::paths::{expand_slice, parent_slice, slice_name};
use crate::dbus::{Connection, DbusError, Value};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// Where systemd puts the slice's cgroup.
pub fn slice_dir(name: &str) -> PathBuf {
    PathBuf::from(format!("/sys/fs/cgroup{}", expand_slice(name)))
}

/// `r` as unit properties; an unlimited value is systemd's infinity.
pub fn properties(r: &ResourceConfig) -> Vec<(&'static str, Value)> {
    let max = |v: i64| if v <= 0 { u64::MAX } else { v as u64 };
    let mut p = Vec::new();
    if let Some(s) = r.cpu_shares {
        p.push(("CPUWeight", Value::U64(weight(s))));
    }
    if let Some(q) = r.cpu_quota {
        // Per second, rounded up to systemd's 10 ms steps (as runc does).
        let per_sec = if q <= 0 {
            u64::MAX
        } else {
            (q as u64 * 1_000_000 / PERIOD).div_ceil(10_000) * 10_000
        };
        p.push(("CPUQuotaPerSecUSec", Value::U64(per_sec)));
        p.push(("CPUQuotaPeriodUSec", Value::U64(PERIOD)));
    }
    if let Some(m) = r.memory {
        p.push(("MemoryMax", Value::U64(max(m))));
    }
    if let Some(n) = r.pids {
        p.push(("TasksMax", Value::U64(max(n))));
    }
    p
}

/// This kubelet's connection to systemd, made again when it breaks (a
/// re-executed systemd closes it).
pub struct Slices {
    conn: Mutex<Connection>,
}

fn error(name: &str, what: &str, e: DbusError) -> CgroupError {
    CgroupError {
        path: name.into(),
        what: what.into(),
        err: e.to_string(),
    }
}

impl Slices {
    /// Connects to systemd, or says why it cannot.
    pub fn connect() -> Result<Slices, DbusError> {
        Ok(Slices {
            conn: Mutex::new(Connection::systemd()?),
        })
    }

    /// One manager call; once more on a new connection when this one
    /// broke (a re-executed systemd closes it).
    fn call(&self, member: &str, signature: &str, body: Vec<u8>) -> Result<(), DbusError> {
        let mut c = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        match c.call(MANAGER_PATH, MANAGER, member, signature, body.clone()) {
            Err(DbusError::Io(..)) => {
                *c = Connection::systemd()?;
                c.call(MANAGER_PATH, MANAGER, member, signature, body)
            }
            other => other,
        }
    }

    /// Starts the slice for `path` with `r`, or sets `r` on it if it is
    /// already there; returns once its cgroup exists.
    pub fn apply(&self, path: &str, r: &ResourceConfig) -> Result<(), CgroupError> {
        let name = slice_name(path);
        let limits = properties(r);
        let mut w = crate::dbus::wire::Writer::default();
        w.str(&name);
        w.str("replace");
        let mut props = vec![
            ("Description", Value::Str(format!("husk kubelet {path}"))),
            ("Wants", Value::Strs(vec![parent_slice(&name)])),
            ("DefaultDependencies", Value::Bool(false)),
            ("MemoryAccounting", Value::Bool(true)),
            ("CPUAccounting", Value::Bool(true)),
            ("IOAccounting", Value::Bool(true)),
            ("TasksAccounting", Value::Bool(true)),
        ];
        props.extend(limits.iter().cloned());
        w.properties(&props);
        w.array(8, |_| {});
        match self.call("StartTransientUnit", "ssa(sv)a(sa(sv))", w.buf) {
            Ok(()) => {}
            Err(e) if e.remote_name() == Some("org.freedesktop.systemd1.UnitExists") => {
                if !limits.is_empty() {
                    let mut w = crate::dbus::wire::Writer::default();
                    w.str(&name);
                    w.bool(true);
                    w.properties(&limits);
                    self.call("SetUnitProperties", "sba(sv)", w.buf)
                        .map_err(|e| error(&name, "set unit properties", e))?;
                }
            }
            Err(e) => return Err(error(&name, "start transient unit", e)),
        }
        let dir = slice_dir(&name);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !dir.is_dir() {
            if Instant::now() > deadline {
                return Err(CgroupError {
                    path: name,
                    what: "wait for the slice's cgroup".into(),
                    err: format!("{} did not appear in 10 s", dir.display()),
                });
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }

    /// Whether the slice for `path` has its cgroup.
    pub fn exists(&self, path: &str) -> bool {
        slice_dir(&slice_name(path)).is_dir()
    }

    /// Stops the slice for `path`; systemd removes its cgroup and forgets
    /// the transient unit. A slice that is not there is already gone.
    pub fn remove(&self, path: &str) -> Result<(), CgroupError> {
        let name = slice_name(path);
        let mut w = crate::dbus::wire::Writer::default();
        w.str(&name);
        w.str("replace");
        match self.call("StopUnit", "ss", w.buf) {
            Err(e) if e.remote_name() != Some("org.freedesktop.systemd1.NoSuchUnit") => {
                Err(error(&name, "stop unit", e))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_lives_in_its_own_cgroup_directory() {
        assert_eq!(
            slice_dir("kubepods-besteffort.slice"),
            PathBuf::from("/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice")
        );
    }

    #[test]
    fn limits_become_properties() {
        let p = properties(&ResourceConfig {
            cpu_shares: Some(204),
            cpu_quota: Some(20_001),
            memory: Some(64 << 20),
            pids: Some(-1),
        });
        let get = |n: &str| p.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
        assert_eq!(get("CPUWeight"), Some(Value::U64(8)));
        assert_eq!(get("CPUQuotaPerSecUSec"), Some(Value::U64(210_000)));
        assert_eq!(get("MemoryMax"), Some(Value::U64(64 << 20)));
        assert_eq!(get("TasksMax"), Some(Value::U64(u64::MAX)));
        let none = properties(&ResourceConfig {
            cpu_quota: Some(-1),
            ..Default::default()
        });
        assert_eq!(
            none.first(),
            Some(&("CPUQuotaPerSecUSec", Value::U64(u64::MAX)))
        );
        assert_eq!(none.len(), 2);
    }
}
