//! Seccomp profiles for containers.
//!
//! - Unset (and the deprecated empty path) or `Unconfined`: no filter.
//! - `RuntimeDefault`: husk's default profile, which refuses (EPERM) the
//!   system calls Docker's and containerd's default profiles keep from
//!   unprivileged containers: kernel modules, kexec, mount and the new
//!   mount API, namespaces (unshare/setns), ptrace and cross-process memory
//!   access, BPF and perf, keyrings, clock and swap changes, reboot.
//!   Unlike containerd's allowlist it allows what it does not name.
//! - `Localhost`: the OCI fields (`defaultAction`, `architectures`,
//!   `syscalls`, `defaultErrnoRet`, `flags`) of the JSON profile at the path.
//! - Privileged containers get no filter.

use super::SpecError;
use crate::api::cri::{security_profile::ProfileType, SecurityProfile};
use serde_json::{json, Value};

/// The system calls the default profile refuses.
pub const DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "get_mempolicy",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "ptrace",
    "query_module",
    "quotactl",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "swapoff",
    "swapon",
    "sysfs",
    "syslog",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
];

/// The default profile in OCI form.
pub fn runtime_default() -> Value {
    json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
        "syscalls": [{"names": DENIED, "action": "SCMP_ACT_ERRNO", "errnoRet": 1}],
    })
}

/// The `linux.seccomp` of a container, or None for no filter.
pub fn profile(
    p: Option<&SecurityProfile>,
    deprecated_path: &str,
    privileged: bool,
) -> Result<Option<Value>, SpecError> {
    if privileged {
        return Ok(None);
    }
    let (kind, reference) = match p {
        Some(p) => (
            ProfileType::try_from(p.profile_type).unwrap_or(ProfileType::RuntimeDefault),
            p.localhost_ref.clone(),
        ),
        None => match deprecated_path {
            "" | "unconfined" => return Ok(None),
            "runtime/default" | "docker/default" => (ProfileType::RuntimeDefault, String::new()),
            other => (
                ProfileType::Localhost,
                other.trim_start_matches("localhost/").to_string(),
            ),
        },
    };
    match kind {
        ProfileType::Unconfined => Ok(None),
        ProfileType::RuntimeDefault => Ok(Some(runtime_default())),
        ProfileType::Localhost => {
            let text = std::fs::read(&reference)
                .map_err(|e| SpecError(format!("seccomp profile {reference:?}: {e}")))?;
            let v: Value = serde_json::from_slice(&text)
                .map_err(|e| SpecError(format!("seccomp profile {reference:?}: {e}")))?;
            let mut out = serde_json::Map::new();
            for k in [
                "defaultAction",
                "defaultErrnoRet",
                "architectures",
                "flags",
                "syscalls",
            ] {
                if let Some(x) = v.get(k) {
                    out.insert(k.to_string(), x.clone());
                }
            }
            if !out.contains_key("defaultAction") {
                return Err(SpecError(format!(
                    "seccomp profile {reference:?} has no defaultAction"
                )));
            }
            Ok(Some(Value::Object(out)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profile_selection() {
        assert_eq!(profile(None, "", false).expect("unset"), None);
        let rd = SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        };
        assert!(profile(Some(&rd), "", false).expect("default").is_some());
        assert_eq!(profile(Some(&rd), "", true).expect("privileged"), None);
        let un = SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        };
        assert_eq!(profile(Some(&un), "", false).expect("unconfined"), None);
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("p.json");
        std::fs::write(&f, r#"{"defaultAction":"SCMP_ACT_ERRNO","archMap":[],"syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#).expect("w");
        let lh = SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: f.display().to_string(),
        };
        let v = profile(Some(&lh), "", false)
            .expect("localhost")
            .expect("some");
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        assert!(v.get("archMap").is_none(), "only OCI fields pass");
        let missing = SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: "/nonexistent".into(),
        };
        assert!(profile(Some(&missing), "", false).is_err());
    }
}
