//! Validation of a PodSandboxConfig before anything is created.

use crate::api::cri::{NamespaceMode, NamespaceOption, PodSandboxConfig};

/// Sysctls that are namespaced (and so may be set per pod), as the kubelet
/// and runc allow them; `net.*` needs the pod's own network namespace.
fn sysctl_allowed(key: &str, host_network: bool, host_ipc: bool) -> Result<(), String> {
    if crate::network::netns::sysctl_path(key).is_none() {
        return Err(format!("sysctl {key:?} is not a sysctl name"));
    }
    let ipc = matches!(
        key,
        "kernel.sem"
            | "kernel.shmall"
            | "kernel.shmmax"
            | "kernel.shmmni"
            | "kernel.shm_rmid_forced"
            | "kernel.msgmax"
            | "kernel.msgmnb"
            | "kernel.msgmni"
    ) || key.starts_with("fs.mqueue.");
    if ipc {
        return if host_ipc {
            Err(format!(
                "sysctl {key:?} is not allowed with the host's IPC namespace"
            ))
        } else {
            Ok(())
        };
    }
    if key.starts_with("net.") {
        return if host_network {
            Err(format!(
                "sysctl {key:?} is not allowed with the host's network namespace"
            ))
        } else {
            Ok(())
        };
    }
    Err(format!(
        "sysctl {key:?} is not namespaced and cannot be set per pod"
    ))
}

/// Checks a config and returns the user namespace it asks for; the error
/// is the InvalidArgument message.
pub fn config(c: &PodSandboxConfig) -> Result<super::userns::Userns, String> {
    let m = c.metadata.as_ref().ok_or("metadata is required")?;
    if m.name.is_empty() {
        return Err("metadata.name is required".into());
    }
    if m.namespace.is_empty() {
        return Err("metadata.namespace is required".into());
    }
    if m.uid.is_empty() {
        return Err("metadata.uid is required".into());
    }
    let ns = namespace_options(c);
    let mode = |v: i32, what: &str, allow_container: bool| -> Result<NamespaceMode, String> {
        match NamespaceMode::try_from(v) {
            Ok(m @ (NamespaceMode::Pod | NamespaceMode::Node)) => Ok(m),
            Ok(NamespaceMode::Container) if allow_container => Ok(NamespaceMode::Container),
            Ok(m) => Err(format!(
                "namespace_options.{what}: {m:?} is not valid for a pod"
            )),
            Err(_) => Err(format!("namespace_options.{what}: unknown mode {v}")),
        }
    };
    let userns = super::userns::parse(ns.userns_options.as_ref())?;
    let net = mode(ns.network, "network", false)?;
    mode(ns.pid, "pid", true)?;
    let ipc = mode(ns.ipc, "ipc", false)?;
    let host_net = net == NamespaceMode::Node;
    let host_ipc = ipc == NamespaceMode::Node;
    if let Some(l) = &c.linux {
        for (k, v) in &l.sysctls {
            if v.contains('\n') {
                return Err(format!("sysctl {k:?}: value may not contain a newline"));
            }
            sysctl_allowed(k, host_net, host_ipc)?;
        }
    }
    if let Some(d) = &c.dns_config {
        for s in &d.servers {
            if s.parse::<std::net::IpAddr>().is_err() {
                return Err(format!("dns_config.servers: {s:?} is not an IP address"));
            }
        }
        for o in &d.options {
            if o.is_empty() || o.contains(char::is_whitespace) {
                return Err(format!(
                    "dns_config.options: {o:?} is not a resolver option"
                ));
            }
        }
        for s in &d.searches {
            if s.is_empty() || s.contains(char::is_whitespace) {
                return Err(format!("dns_config.searches: {s:?} is not a domain"));
            }
        }
    }
    if !c.log_directory.is_empty() && !c.log_directory.starts_with('/') {
        return Err(format!(
            "log_directory {:?} must be an absolute path",
            c.log_directory
        ));
    }
    if !host_net && !c.hostname.is_empty() {
        hostname(&c.hostname)?;
    }
    if let Some(l) = &c.linux {
        crate::cgroup::Driver::current().check_parent(&l.cgroup_parent)?;
    }
    if let Some(sc) = c.linux.as_ref().and_then(|l| l.security_context.as_ref()) {
        if sc.run_as_group.is_some() && sc.run_as_user.is_none() {
            return Err("linux.security_context.run_as_group is set without run_as_user".into());
        }
        // The kernel reads -1 (4294967295) as "unchanged": root.
        for (field, id) in [
            ("run_as_user", sc.run_as_user),
            ("run_as_group", sc.run_as_group),
        ] {
            if let Some(v) = id {
                crate::security::ids::in_range(v.value, &format!("linux.security_context.{field}"))
                    .map_err(|e| e.0)?;
            }
        }
    }
    for p in &c.port_mappings {
        if p.host_port < 0
            || p.host_port > 65535
            || p.container_port <= 0
            || p.container_port > 65535
        {
            return Err(format!(
                "port_mappings: {}:{} is out of range",
                p.host_port, p.container_port
            ));
        }
    }
    Ok(userns)
}

/// A hostname the kernel takes and resolvers agree with: at most 63
/// characters of letters, digits, `-` and `.`, neither first nor last a
/// `-` or `.`.
fn hostname(h: &str) -> Result<(), String> {
    if h.len() > 63 {
        return Err(format!("hostname {h:?} is longer than 63 characters"));
    }
    let ok_chars = h
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '.');
    let ok_ends = !h.starts_with(['-', '.']) && !h.ends_with(['-', '.']);
    if !ok_chars || !ok_ends {
        return Err(format!(
            "hostname {h:?} is not a valid host name (letters, digits, '-' and '.')"
        ));
    }
    Ok(())
}

/// The pod's namespace options, the defaults where it gives none.
fn namespace_options(c: &PodSandboxConfig) -> NamespaceOption {
    c.linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// The network, PID and IPC modes of a validated pod (an unknown mode,
/// refused by [`config`], reads as POD).
pub fn namespace_modes(c: &PodSandboxConfig) -> (NamespaceMode, NamespaceMode, NamespaceMode) {
    let ns = namespace_options(c);
    let m = |v: i32| NamespaceMode::try_from(v).unwrap_or(NamespaceMode::Pod);
    (m(ns.network), m(ns.pid), m(ns.ipc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::cri::*;

    fn base() -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: "p".into(),
                uid: "u".into(),
                namespace: "n".into(),
                attempt: 0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn hostnames_are_checked_and_may_be_left_out() {
        let with = |h: &str| {
            let mut c = base();
            c.hostname = h.into();
            config(&c)
        };
        assert!(with("").is_ok());
        assert!(with("web-0.example").is_ok());
        assert!(with(&"a".repeat(63)).is_ok());
        assert!(with(&"a".repeat(64)).expect_err("long").contains("63"));
        assert!(with("bad_name").is_err());
        assert!(with("-x").is_err());
    }

    #[test]
    fn requires_metadata_and_checks_sysctls_and_dns() {
        assert!(config(&base()).is_ok());
        let mut c = base();
        if let Some(m) = c.metadata.as_mut() {
            m.uid.clear();
        }
        assert!(config(&c).expect_err("uid").contains("uid"));
        let mut c = base();
        c.linux = Some(LinuxPodSandboxConfig {
            sysctls: [("kernel.hostname".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        assert!(config(&c).expect_err("sysctl").contains("kernel.hostname"));
        let mut c = base();
        c.linux = Some(LinuxPodSandboxConfig {
            sysctls: [("net.//.kernel.core_pattern".to_string(), "x".to_string())].into(),
            ..Default::default()
        });
        assert!(config(&c)
            .expect_err("climbing sysctl")
            .contains("not a sysctl name"));
        let mut c = base();
        c.linux = Some(LinuxPodSandboxConfig {
            sysctls: [("net.ipv4.ip_forward".to_string(), "1".to_string())].into(),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Node as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(config(&c)
            .expect_err("net with host")
            .contains("host's network"));
        let mut c = base();
        c.dns_config = Some(DnsConfig {
            servers: vec!["not-an-ip".into()],
            ..Default::default()
        });
        assert!(config(&c).is_err());
        let mut c = base();
        c.linux = Some(LinuxPodSandboxConfig {
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(NamespaceOption {
                    network: NamespaceMode::Target as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(config(&c).is_err());
    }
}
