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
//! - The signal mask and SIGPIPE are reset, as for the container itself.

use libcontainer::oci_spec::runtime::{LinuxSeccomp, Spec};
use libcontainer::workload::{
    default::DefaultExecutor, Executor, ExecutorError, ExecutorValidationError,
};
use serde_json::Value;
use std::str::FromStr;

/// The capabilities an exec needs only long enough to load its filter.
const LOADING: [&str; 2] = ["CAP_SYS_ADMIN", "CAP_SETPCAP"];

/// The executor of exec'd processes; see the module documentation.
#[derive(Clone, Default)]
pub struct TenantExecutor {
    seccomp: Option<LinuxSeccomp>,
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
        let Some(s) = spec.get("linux").and_then(|l| l.get("seccomp")) else {
            return Ok(TenantExecutor::default());
        };
        if s.is_null() {
            return Ok(TenantExecutor::default());
        }
        let seccomp: LinuxSeccomp = serde_json::from_value(s.clone())
            .map_err(|e| format!("the container's seccomp profile: {e}"))?;
        let nnp = process.get("noNewPrivileges") == Some(&Value::Bool(true));
        let restore = if nnp { None } else { Some(widen(process)) };
        Ok(TenantExecutor {
            seccomp: Some(seccomp),
            restore,
        })
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
        // SAFETY: plain libc calls on a zeroed sigset in the exec'd
        // process (single-threaded), right before execve.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
        if let Some(seccomp) = &self.seccomp {
            if let Some(r) = &self.restore {
                let keep = set_of(&r.bounding).map_err(other)?;
                for c in LOADING {
                    let c = caps::Capability::from_str(c).map_err(other)?;
                    if !keep.contains(&c) {
                        caps::drop(None, caps::CapSet::Bounding, c)
                            .map_err(|e| other(format!("drop {c} from the bounding set: {e}")))?;
                    }
                }
            }
            libcontainer::seccomp::initialize_seccomp(seccomp)
                .map_err(|e| other(format!("load the container's seccomp filter: {e}")))?;
            if let Some(r) = &self.restore {
                let eff = set_of(&r.effective).map_err(other)?;
                let perm = set_of(&r.permitted).map_err(other)?;
                let inh = set_of(&r.inheritable).map_err(other)?;
                caps::set(None, caps::CapSet::Effective, &eff)
                    .and_then(|_| caps::set(None, caps::CapSet::Inheritable, &inh))
                    .and_then(|_| caps::set(None, caps::CapSet::Permitted, &perm))
                    .map_err(|e| {
                        other(format!(
                            "restore the container's capabilities under its seccomp profile: {e}"
                        ))
                    })?;
            }
        }
        DefaultExecutor {}.exec(spec)
    }

    fn validate(&self, spec: &Spec) -> Result<(), ExecutorValidationError> {
        DefaultExecutor {}.validate(spec)
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
        assert!(e.seccomp.is_none() && e.restore.is_none());
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
