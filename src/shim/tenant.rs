//! What an exec'd process needs that libcontainer's tenant builder leaves
//! out: the container's seccomp filter, and a clean signal state.
//!
//! libcontainer 0.7 rebuilds a tenant's `linux` section from namespaces,
//! cgroups path, personality and time offsets only, so an exec (ExecSync,
//! exec probes, `kubectl exec`) would run with no seccomp filter at all in a
//! container that has one. runc gives execs the container's filter; so does
//! husk, from [`TenantExecutor`], the last step before execve:
//!
//! - With `noNewPrivileges` the filter is loaded as is (no privilege is
//!   needed once no_new_privs is set).
//! - Without it, loading a filter needs CAP_SYS_ADMIN. The process file
//!   then asks libcontainer for the container's capabilities plus
//!   CAP_SYS_ADMIN and CAP_SETPCAP ([`widen`]); the executor drops those
//!   from the bounding set, loads the filter, and sets the effective,
//!   permitted and inheritable sets back to the container's before execve.
//!   A profile that forbids capset(2) fails the exec with that message
//!   rather than letting it run with extra capabilities.
//! - The signal mask and SIGPIPE are reset and every descriptor above
//!   stderr closed, as for the container itself (`payload.rs`).
//! - In a pod with its own user namespace, the exec joins it: libcontainer
//!   0.7's tenant builder joins every namespace of the container but the
//!   user namespace, which would leave an exec'd process with the node's
//!   users. The executor enters it ([`JoinUserns`]) with the pin opened by
//!   the shim (libcontainer's clones inherit the descriptor; execve closes
//!   it), takes the process's ids inside it, and then cuts the bounding
//!   set and the capabilities back to the container's: entering a user
//!   namespace grants every capability in it. The process file is widened
//!   for this as for a seccomp filter (CAP_SYS_ADMIN to enter).

use libcontainer::oci_spec::runtime::{LinuxSeccomp, Spec};
use libcontainer::workload::{Executor, ExecutorError, ExecutorValidationError};
use serde_json::Value;
use std::str::FromStr;

/// The capabilities an exec needs only long enough to load its filter.
const LOADING: [&str; 2] = ["CAP_SYS_ADMIN", "CAP_SETPCAP"];

/// The executor of exec'd processes; see the module documentation.
#[derive(Clone, Default)]
pub struct TenantExecutor {
    seccomp: Option<LinuxSeccomp>,
    userns: Option<JoinUserns>,
    /// The container's own capabilities, to return to after loading, when
    /// the process file was widened.
    restore: Option<Restore>,
}

#[derive(Clone, Default)]
struct Restore {
    bounding: Vec<String>,
    effective: Vec<String>,
    permitted: Vec<String>,
    inheritable: Vec<String>,
}

impl TenantExecutor {
    /// Prepares the executor for `process` (the container's process with
    /// the exec's command), from the container's `spec`; widens the
    /// process's capabilities when the filter needs them to load.
    pub fn prepare(spec: &Value, process: &mut Value) -> Result<Self, String> {
        let userns = JoinUserns::of(spec, process)?;
        let seccomp = match spec.get("linux").and_then(|l| l.get("seccomp")) {
            None | Some(Value::Null) => None,
            Some(s) => Some(
                serde_json::from_value::<LinuxSeccomp>(s.clone())
                    .map_err(|e| format!("the container's seccomp profile: {e}"))?,
            ),
        };
        let nnp = process.get("noNewPrivileges") == Some(&Value::Bool(true));
        let restore = if userns.is_some() || (seccomp.is_some() && !nnp) {
            Some(widen(process))
        } else {
            None
        };
        Ok(TenantExecutor {
            seccomp,
            userns,
            restore,
        })
    }
}

/// The pod's user namespace an exec joins, and its ids inside.
#[derive(Clone)]
pub struct JoinUserns {
    fd: std::sync::Arc<std::os::fd::OwnedFd>,
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

impl JoinUserns {
    /// The user namespace of the container's `spec`, opened, with the
    /// ids of `process`; None when it has none of its own.
    fn of(spec: &Value, process: &Value) -> Result<Option<JoinUserns>, String> {
        let path = spec["linux"]["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["type"] == "user")
            .and_then(|n| n["path"].as_str());
        let Some(path) = path else {
            return Ok(None);
        };
        let fd = std::fs::File::open(path)
            .map_err(|e| format!("open the pod's user namespace {path}: {e}"))?;
        let user = &process["user"];
        let id = |k: &str| user[k].as_u64().unwrap_or(0) as u32;
        Ok(Some(JoinUserns {
            fd: std::sync::Arc::new(fd.into()),
            uid: id("uid"),
            gid: id("gid"),
            groups: user["additionalGids"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|g| g.as_u64().map(|g| g as u32))
                .collect(),
        }))
    }

    /// Enters the namespace and takes the ids inside; the effective set
    /// is then every capability in it (cut back by the caller).
    fn enter(&self) -> Result<(), ExecutorError> {
        use std::os::fd::AsFd;
        let e = |what: &str| {
            let err = std::io::Error::last_os_error();
            other(format!("join the pod's user namespace: {what}: {err}"))
        };
        rustix::thread::move_into_link_name_space(
            self.fd.as_fd(),
            Some(rustix::thread::LinkNameSpaceType::User),
        )
        .map_err(|err| other(format!("join the pod's user namespace: setns: {err}")))?;
        // SAFETY: plain libc calls on valid arguments in the exec'd process
        // (single-threaded), before execve.
        unsafe {
            if libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0 {
                return Err(e("keep capabilities"));
            }
            if libc::setgroups(self.groups.len(), self.groups.as_ptr()) < 0 {
                return Err(e("setgroups"));
            }
            if libc::setresgid(self.gid, self.gid, self.gid) < 0 {
                return Err(e("setresgid"));
            }
            if libc::setresuid(self.uid, self.uid, self.uid) < 0 {
                return Err(e("setresuid"));
            }
        }
        let all = caps::read(None, caps::CapSet::Permitted).map_err(other)?;
        caps::set(None, caps::CapSet::Effective, &all).map_err(other)
    }
}

/// Adds [`LOADING`] to the bounding, effective and permitted sets of
/// `process`; returns the sets as they were.
fn widen(process: &mut Value) -> Restore {
    let caps = &mut process["capabilities"];
    let take = |caps: &Value, k: &str| -> Vec<String> {
        caps.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let r = Restore {
        bounding: take(caps, "bounding"),
        effective: take(caps, "effective"),
        permitted: take(caps, "permitted"),
        inheritable: take(caps, "inheritable"),
    };
    for (k, have) in [
        ("bounding", &r.bounding),
        ("effective", &r.effective),
        ("permitted", &r.permitted),
    ] {
        let mut v = have.clone();
        for c in LOADING {
            if !v.iter().any(|x| x == c) {
                v.push(c.to_string());
            }
        }
        caps[k] = serde_json::json!(v);
    }
    r
}

fn set_of(names: &[String]) -> Result<caps::CapsHashSet, String> {
    names
        .iter()
        .map(|n| caps::Capability::from_str(n).map_err(|e| format!("capability {n}: {e}")))
        .collect()
}

fn other(e: impl std::fmt::Display) -> ExecutorError {
    ExecutorError::Other(e.to_string())
}

impl Executor for TenantExecutor {
    fn exec(&self, spec: &Spec) -> Result<(), ExecutorError> {
        if let Some(u) = &self.userns {
            u.enter()?;
        }
        if let Some(r) = &self.restore {
            let keep = set_of(&r.bounding).map_err(other)?;
            // Entering a user namespace filled the bounding set; otherwise
            // only the loading capabilities were added.
            let added: Vec<caps::Capability> = if self.userns.is_some() {
                caps::read(None, caps::CapSet::Bounding)
                    .map_err(other)?
                    .into_iter()
                    .collect()
            } else {
                LOADING
                    .iter()
                    .map(|c| caps::Capability::from_str(c).map_err(other))
                    .collect::<Result<_, _>>()?
            };
            for c in added {
                if !keep.contains(&c) {
                    caps::drop(None, caps::CapSet::Bounding, c)
                        .map_err(|e| other(format!("drop {c} from the bounding set: {e}")))?;
                }
            }
        }
        if let Some(seccomp) = &self.seccomp {
            libcontainer::seccomp::initialize_seccomp(seccomp)
                .map_err(|e| other(format!("load the container's seccomp filter: {e}")))?;
        }
        if let Some(r) = &self.restore {
            let eff = set_of(&r.effective).map_err(other)?;
            let perm = set_of(&r.permitted).map_err(other)?;
            let inh = set_of(&r.inheritable).map_err(other)?;
            caps::set(None, caps::CapSet::Effective, &eff)
                .and_then(|_| caps::set(None, caps::CapSet::Inheritable, &inh))
                .and_then(|_| caps::set(None, caps::CapSet::Permitted, &perm))
                .map_err(|e| other(format!("restore the container's capabilities: {e}")))?;
        }
        super::payload::before_execve()?;
        super::lookpath::exec(spec)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        super::lookpath::validate(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_filter_means_nothing_to_widen() {
        let mut p = json!({"capabilities": {"bounding": ["CAP_CHOWN"]}});
        let e = TenantExecutor::prepare(&json!({"linux": {}}), &mut p).expect("prepare");
        assert!(e.seccomp.is_none() && e.restore.is_none() && e.userns.is_none());
        assert_eq!(p["capabilities"]["bounding"], json!(["CAP_CHOWN"]));
    }

    #[test]
    fn a_filter_without_nnp_widens_and_remembers() {
        let spec = json!({"linux": {"seccomp": {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [{"names": ["chmod"], "action": "SCMP_ACT_ERRNO"}]}}});
        let caps = json!({"bounding": ["CAP_CHOWN"], "effective": ["CAP_CHOWN"], "permitted": ["CAP_CHOWN"], "inheritable": []});
        let mut p = json!({ "capabilities": caps.clone() });
        let e = TenantExecutor::prepare(&spec, &mut p).expect("prepare");
        assert!(e.seccomp.is_some());
        let r = e.restore.expect("widened");
        assert_eq!(r.bounding, ["CAP_CHOWN"]);
        assert_eq!(
            p["capabilities"]["effective"],
            json!(["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SETPCAP"])
        );
        assert_eq!(p["capabilities"]["inheritable"], json!([]));

        let mut p = json!({ "capabilities": caps, "noNewPrivileges": true });
        let e = TenantExecutor::prepare(&spec, &mut p).expect("prepare");
        assert!(e.seccomp.is_some() && e.restore.is_none());
        assert_eq!(p["capabilities"]["bounding"], json!(["CAP_CHOWN"]));
    }
}
