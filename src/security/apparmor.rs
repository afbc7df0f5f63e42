//! AppArmor for containers.
//!
//! - Where the kernel has no AppArmor (as on this project's CI machines),
//!   a requested profile is ignored with a warning naming the container,
//!   as containerd does; the container runs.
//! - Where it has AppArmor, the `apparmor` field and the deprecated
//!   `apparmor_profile` string mean the same three things:
//!   - `Localhost` (`localhost/<name>` in the string form; the kubelet also
//!     sends the prefix in `localhost_ref`) names a profile the node has
//!     loaded. A profile that is not loaded is refused with a message
//!     naming it, before anything is created.
//!   - `RuntimeDefault` (`runtime/default`) is husk's own profile
//!     [`DEFAULT_PROFILE`], loaded with `apparmor_parser` the first time a
//!     container asks for it, as containerd loads its own.
//!   - `Unconfined` applies none.
//!   - No request at all is `RuntimeDefault`, as containerd and CRI-O apply
//!     their default profile to every unprivileged container; if husk's
//!     profile cannot be loaded (no `apparmor_parser`), such a container
//!     runs unconfined with a warning instead of failing.
//! - Privileged containers get none.

use super::ProfileError;
use crate::api::cri::{security_profile::ProfileType, SecurityProfile};
use std::sync::Mutex;

/// The name of husk's default profile.
pub const DEFAULT_PROFILE: &str = "husk-default";

/// husk's default profile: what a container may do, and the kernel
/// interfaces it may not write or reach (the proc and sys knobs of the
/// node, mounts, the security file system). Signals are received from the
/// unconfined shim and server, and exchanged within the profile.
const DEFAULT_PROFILE_TEXT: &str = r#"#include <tunables/global>

profile husk-default flags=(attach_disconnected,mediate_deleted) {
  #include <abstractions/base>

  network,
  capability,
  file,
  umount,
  signal (receive) peer=unconfined,
  signal (send,receive) peer=husk-default,
  ptrace (trace,read,tracedby,readby) peer=husk-default,

  deny mount,

  # Only a process's own /proc/<pid> and /proc/sys/kernel/shm* are writable.
  deny @{PROC}/* w,
  deny @{PROC}/{[^1-9],[^1-9][^0-9],[^1-9s][^0-9y][^0-9s],[^1-9][^0-9][^0-9][^0-9/]*}/** w,
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  deny /sys/[^f]*/** wklx,
  deny /sys/f[^s]*/** wklx,
  deny /sys/fs/[^c]*/** wklx,
  deny /sys/fs/c[^g]*/** wklx,
  deny /sys/fs/cg[^r]*/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
}
"#;

/// Whether the running kernel enforces AppArmor.
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

#[derive(Debug, PartialEq)]
enum Request {
    None,
    Unspecified,
    Default,
    Named(String),
}

fn request(p: Option<&SecurityProfile>, deprecated: &str) -> Request {
    match p {
        Some(p) => match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::Unconfined) => Request::None,
            Ok(ProfileType::Localhost) => Request::Named(
                p.localhost_ref
                    .strip_prefix("localhost/")
                    .unwrap_or(&p.localhost_ref)
                    .to_string(),
            ),
            _ => Request::Default,
        },
        None => match deprecated {
            "" => Request::Unspecified,
            "unconfined" => Request::None,
            "runtime/default" => Request::Default,
            other => Request::Named(other.trim_start_matches("localhost/").to_string()),
        },
    }
}

/// Where the node's policy lives, and how a profile gets there; a seam
/// for tests.
pub trait Host {
    /// Names of the profiles loaded in the kernel.
    fn loaded(&self) -> Vec<String>;
    /// Loads (or replaces) a profile from its text.
    fn load(&self, text: &str) -> Result<(), String>;
}

/// The kernel's securityfs and Debian's `apparmor_parser`.
pub struct Kernel;

impl Host for Kernel {
    fn loaded(&self) -> Vec<String> {
        std::fs::read_to_string("/sys/kernel/security/apparmor/profiles")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.rsplit_once(" (").map(|(n, _)| n.to_string()))
            .collect()
    }

    fn load(&self, text: &str) -> Result<(), String> {
        use std::io::Write;
        let mut child = std::process::Command::new("apparmor_parser")
            .arg("--replace")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| {
                format!("apparmor_parser: {e} (install Debian's apparmor package to load it)")
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(text.as_bytes())
                .map_err(|e| format!("apparmor_parser: {e}"))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| format!("apparmor_parser: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "apparmor_parser: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

/// Loads husk's default profile unless the kernel has it already (once
/// per process: a profile replaced behind husk's back is the operator's).
fn ensure_default(host: &dyn Host) -> Result<(), ProfileError> {
    static LOADED: Mutex<bool> = Mutex::new(false);
    let mut done = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    if *done {
        return Ok(());
    }
    if !host.loaded().iter().any(|n| n == DEFAULT_PROFILE) {
        host.load(DEFAULT_PROFILE_TEXT).map_err(|e| {
            ProfileError(format!(
                "apparmor: the runtime default profile {DEFAULT_PROFILE} could not be loaded: {e}"
            ))
        })?;
    }
    *done = true;
    Ok(())
}

/// The `process.apparmorProfile` of container `id`, or None.
pub fn profile(
    id: &str,
    p: Option<&SecurityProfile>,
    deprecated: &str,
    privileged: bool,
    host: Option<&dyn Host>,
) -> Result<Option<String>, ProfileError> {
    let req = request(p, deprecated);
    if privileged || req == Request::None {
        return Ok(None);
    }
    let Some(host) = host else {
        if req == Request::Unspecified {
            return Ok(None);
        }
        let what = match &req {
            Request::Named(n) => format!("profile {n:?}"),
            _ => "the runtime default profile".to_string(),
        };
        tracing::warn!(
            container_id = id,
            "AppArmor {what} ignored: this kernel has no AppArmor"
        );
        return Ok(None);
    };
    match req {
        Request::Named(n) if n.is_empty() => Err(ProfileError(
            "apparmor: a Localhost profile needs a profile name".into(),
        )),
        Request::Named(n) => {
            if host.loaded().contains(&n) {
                Ok(Some(n))
            } else {
                Err(ProfileError(format!(
                    "apparmor: profile {n:?} is not loaded on this node (load it with apparmor_parser first)"
                )))
            }
        }
        Request::Unspecified => match ensure_default(host) {
            Ok(()) => Ok(Some(DEFAULT_PROFILE.to_string())),
            Err(e) => {
                tracing::warn!(container_id = id, "{e}: the container runs unconfined");
                Ok(None)
            }
        },
        _ => {
            ensure_default(host)?;
            Ok(Some(DEFAULT_PROFILE.to_string()))
        }
    }
}

/// The host to use: the kernel's when it has AppArmor, else none.
pub fn host() -> Option<&'static dyn Host> {
    kernel_enabled().then_some(&Kernel as &dyn Host)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    struct Fake {
        loaded: RefCell<Vec<String>>,
        loads: RefCell<usize>,
    }

    impl Host for Fake {
        fn loaded(&self) -> Vec<String> {
            self.loaded.borrow().clone()
        }
        fn load(&self, text: &str) -> Result<(), String> {
            assert!(text.contains("profile husk-default"));
            *self.loads.borrow_mut() += 1;
            self.loaded.borrow_mut().push(DEFAULT_PROFILE.into());
            Ok(())
        }
    }

    fn fake(loaded: &[&str]) -> Fake {
        Fake {
            loaded: RefCell::new(loaded.iter().map(|s| s.to_string()).collect()),
            loads: RefCell::new(0),
        }
    }

    fn sp(t: ProfileType, r: &str) -> SecurityProfile {
        SecurityProfile {
            profile_type: t as i32,
            localhost_ref: r.into(),
        }
    }

    #[test]
    fn without_apparmor_requests_are_ignored() {
        for p in [
            sp(ProfileType::RuntimeDefault, ""),
            sp(ProfileType::Localhost, "k8s-nginx"),
        ] {
            assert_eq!(profile("c", Some(&p), "", false, None).expect("ok"), None);
        }
        assert_eq!(
            profile("c", None, "localhost/x", false, None).expect("ok"),
            None
        );
    }

    #[test]
    fn localhost_applies_with_or_without_its_prefix_and_must_be_loaded() {
        let h = fake(&["k8s-nginx", "other"]);
        for r in ["k8s-nginx", "localhost/k8s-nginx"] {
            let lh = sp(ProfileType::Localhost, r);
            assert_eq!(
                profile("c", Some(&lh), "", false, Some(&h)).expect("ok"),
                Some("k8s-nginx".into())
            );
        }
        assert_eq!(
            profile("c", None, "localhost/k8s-nginx", false, Some(&h)).expect("ok"),
            Some("k8s-nginx".into())
        );
        let missing = sp(ProfileType::Localhost, "localhost/nope");
        let e = profile("c", Some(&missing), "", false, Some(&h)).expect_err("not loaded");
        assert!(e.0.contains("\"nope\" is not loaded"), "{e}");
        let lh = sp(ProfileType::Localhost, "k8s-nginx");
        assert_eq!(
            profile("c", Some(&lh), "", true, Some(&h)).expect("ok"),
            None
        );
        assert_eq!(
            profile("c", None, "unconfined", false, Some(&h)).expect("ok"),
            None
        );
    }

    #[test]
    fn runtime_default_is_husks_profile_loaded_once() {
        let h = fake(&[]);
        let rd = sp(ProfileType::RuntimeDefault, "");
        for _ in 0..2 {
            assert_eq!(
                profile("c", Some(&rd), "", false, Some(&h)).expect("ok"),
                Some(DEFAULT_PROFILE.into())
            );
        }
        assert_eq!(
            profile("c", None, "runtime/default", false, Some(&h)).expect("ok"),
            Some(DEFAULT_PROFILE.into())
        );
        assert_eq!(
            profile("c", None, "", false, Some(&h)).expect("ok"),
            Some(DEFAULT_PROFILE.into()),
            "no request is the runtime default"
        );
        assert_eq!(profile("c", None, "", true, Some(&h)).expect("ok"), None);
        assert_eq!(profile("c", None, "", false, None).expect("ok"), None);
        assert!(*h.loads.borrow() <= 1);
    }
}
