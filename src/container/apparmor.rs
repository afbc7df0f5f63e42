//! AppArmor for containers.
//!
//! - Where the kernel has no AppArmor (as on this project's CI machines),
//!   a requested profile is ignored with a warning naming the container,
//!   as containerd does; the container runs.
//! - Where it has AppArmor, `Localhost` names a profile the node has
//!   loaded and it becomes the process's `apparmorProfile`; `Unconfined`
//!   or no request applies none. husk ships no default AppArmor profile,
//!   so `RuntimeDefault` is refused with a message rather than silently
//!   run unconfined.
//! - Privileged containers get none.

use super::SpecError;
use crate::api::cri::{security_profile::ProfileType, SecurityProfile};

/// Whether the running kernel enforces AppArmor.
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

enum Request {
    None,
    Default,
    Named(String),
}

fn request(p: Option<&SecurityProfile>, deprecated: &str) -> Request {
    match p {
        Some(p) => match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::Unconfined) => Request::None,
            Ok(ProfileType::Localhost) => Request::Named(p.localhost_ref.clone()),
            _ => Request::Default,
        },
        None => match deprecated {
            "" | "unconfined" => Request::None,
            "runtime/default" => Request::Default,
            other => Request::Named(other.trim_start_matches("localhost/").to_string()),
        },
    }
}

/// The `process.apparmorProfile` of container `id`, or None.
pub fn profile(
    id: &str,
    p: Option<&SecurityProfile>,
    deprecated: &str,
    privileged: bool,
    kernel_has_apparmor: bool,
) -> Result<Option<String>, SpecError> {
    let req = request(p, deprecated);
    if privileged || matches!(req, Request::None) {
        return Ok(None);
    }
    if !kernel_has_apparmor {
        let what = match &req {
            Request::Named(n) => format!("profile {n:?}"),
            _ => "the runtime default profile".to_string(),
        };
        tracing::warn!(
            container_id = id,
            "AppArmor {what} ignored: this kernel has no AppArmor"
        );
        return Ok(None);
    }
    match req {
        Request::Named(n) if n.is_empty() => Err(SpecError(
            "apparmor: a Localhost profile needs a profile name".into(),
        )),
        Request::Named(n) => Ok(Some(n)),
        _ => Err(SpecError(
            "apparmor: husk has no default AppArmor profile; ask for a Localhost profile loaded on the node, or Unconfined".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(profile("c", Some(&p), "", false, false).expect("ok"), None);
        }
        assert_eq!(
            profile("c", None, "localhost/x", false, false).expect("ok"),
            None
        );
    }

    #[test]
    fn with_apparmor_localhost_applies_and_default_is_refused() {
        let lh = sp(ProfileType::Localhost, "k8s-nginx");
        assert_eq!(
            profile("c", Some(&lh), "", false, true).expect("ok"),
            Some("k8s-nginx".into())
        );
        assert_eq!(
            profile("c", None, "localhost/k8s-nginx", false, true).expect("ok"),
            Some("k8s-nginx".into())
        );
        assert_eq!(profile("c", Some(&lh), "", true, true).expect("ok"), None);
        assert_eq!(
            profile("c", None, "unconfined", false, true).expect("ok"),
            None
        );
        let rd = sp(ProfileType::RuntimeDefault, "");
        assert!(profile("c", Some(&rd), "", false, true).is_err());
    }
}
