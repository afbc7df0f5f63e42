//! PodSandboxConfig from a pod, as the kubelet builds it: metadata,
//! hostname, log directory, DNS, host-port mappings, labels and
//! annotations, cgroup parent by QoS class, namespaces and the pod's
//! security context.

use crate::api::cri::*;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::labels;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::{Pod, SeccompProfile};
use std::path::PathBuf;

/// `<pod_log_root>/<ns>_<name>_<uid>`.
pub fn log_dir(s: &Settings, pod: &Pod) -> PathBuf {
    s.pod_log_root.join(format!(
        "{}_{}_{}",
        defaults::namespace(pod),
        defaults::name(pod),
        defaults::uid(pod)
    ))
}

/// The hostname and domain the pod sees (kubelet: GeneratePodHostNameAndDomain).
pub fn hostname_and_domain(s: &Settings, pod: &Pod) -> (String, String) {
    let spec = pod.spec.as_ref();
    let mut host = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| defaults::name(pod).to_string());
    if host.len() > 63 {
        host.truncate(63);
        while host.ends_with(['-', '.']) {
            host.pop();
        }
    }
    let domain = match spec.and_then(|s| s.subdomain.as_deref()) {
        Some(sub) if !sub.is_empty() => {
            format!(
                "{sub}.{}.svc.{}",
                defaults::namespace(pod),
                s.cluster_domain
            )
        }
        _ => String::new(),
    };
    (host, domain)
}

fn host_resolv(s: &Settings) -> (Vec<String>, Vec<String>, Vec<String>) {
    let text = std::fs::read_to_string(&s.resolv_conf).unwrap_or_default();
    let (mut servers, mut searches, mut options) = (vec![], vec![], vec![]);
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => servers.extend(f.next().map(str::to_string)),
            Some("search") | Some("domain") => searches = f.map(str::to_string).collect(),
            Some("options") => options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    (servers, searches, options)
}

/// The DNS config by dnsPolicy (ClusterFirst, ClusterFirstWithHostNet,
/// Default, None), with dnsConfig merged in.
pub fn dns(s: &Settings, pod: &Pod) -> DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let host_net = defaults::host_network(pod);
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !host_net,
        _ => false,
    };
    let (mut servers, mut searches, mut options) = match policy {
        "None" => (vec![], vec![], vec![]),
        // Without cluster DNS, ClusterFirst falls back to the host's config.
        _ if cluster && !s.cluster_dns.is_empty() => {
            let ns = defaults::namespace(pod);
            let d = &s.cluster_domain;
            let mut search = vec![format!("{ns}.svc.{d}"), format!("svc.{d}"), d.clone()];
            search.extend(host_resolv(s).1);
            (s.cluster_dns.clone(), search, vec!["ndots:5".to_string()])
        }
        _ => host_resolv(s),
    };
    if let Some(cfg) = spec.and_then(|s| s.dns_config.as_ref()) {
        for n in cfg.nameservers.iter().flatten() {
            if !servers.contains(n) {
                servers.push(n.clone());
            }
        }
        for n in cfg.searches.iter().flatten() {
            if !searches.contains(n) {
                searches.push(n.clone());
            }
        }
        for o in cfg.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            options.retain(|x| x.split(':').next() != Some(name.as_str()));
            options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    searches.truncate(32);
    DnsConfig {
        servers,
        searches,
        options,
    }
}

/// The pod's cgroup parent: `<cgroup_root>[/burstable|/besteffort]/pod<uid>`,
/// or on the systemd driver that path's slice
/// (`kubepods-burstable-pod<uid>.slice`).
pub fn cgroup_parent(s: &Settings, pod: &Pod) -> String {
    let path = cgroup_path(s, pod);
    if s.systemd_cgroups && !path.is_empty() {
        crate::cgroup::paths::slice_name(&path)
    } else {
        path
    }
}

/// The pod's cgroup as a cgroupfs path, whatever the driver.
pub fn cgroup_path(s: &Settings, pod: &Pod) -> String {
    if s.cgroup_root.is_empty() {
        return String::new();
    }
    let root = s.cgroup_root.trim_end_matches('/');
    let uid = defaults::uid(pod);
    match defaults::qos_class(pod) {
        "Guaranteed" => format!("{root}/pod{uid}"),
        "Burstable" => format!("{root}/burstable/pod{uid}"),
        _ => format!("{root}/besteffort/pod{uid}"),
    }
}

pub fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => Protocol::Udp as i32,
        Some("SCTP") => Protocol::Sctp as i32,
        _ => Protocol::Tcp as i32,
    }
}

/// Namespace modes: host network/IPC/PID, or a shared PID namespace.
pub fn namespaces(pod: &Pod) -> NamespaceOption {
    let spec = pod.spec.as_ref();
    let flag = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let node = NamespaceMode::Node as i32;
    NamespaceOption {
        network: if flag(|s| s.host_network) {
            node
        } else {
            NamespaceMode::Pod as i32
        },
        ipc: if flag(|s| s.host_ipc) {
            node
        } else {
            NamespaceMode::Pod as i32
        },
        pid: if flag(|s| s.host_pid) {
            node
        } else if flag(|s| s.share_process_namespace) {
            NamespaceMode::Pod as i32
        } else {
            NamespaceMode::Container as i32
        },
        ..Default::default()
    }
}

/// A seccomp profile for CRI; unset means Unconfined (the kubelet's
/// default without `--seccomp-default`).
pub fn seccomp(s: &Settings, p: Option<&SeccompProfile>) -> SecurityProfile {
    use security_profile::ProfileType;
    match p.map(|p| p.type_.as_str()) {
        Some("RuntimeDefault") => SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some("Localhost") => SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: s
                .root
                .join("seccomp")
                .join(
                    p.and_then(|p| p.localhost_profile.clone())
                        .unwrap_or_default(),
                )
                .display()
                .to_string(),
        },
        _ => SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    }
}

/// The whole sandbox config for `attempt`.
pub fn build(s: &Settings, pod: &Pod, attempt: u32) -> PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let mut l = labels::pod_labels(
        &s.node_name,
        defaults::name(pod),
        defaults::namespace(pod),
        defaults::uid(pod),
    );
    for (k, v) in pod.metadata.labels.iter().flatten() {
        l.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let annotations = pod
        .metadata
        .annotations
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let mut port_mappings = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten() {
            let hp = p.host_port.unwrap_or(0);
            if hp <= 0 {
                continue;
            }
            port_mappings.push(PortMapping {
                protocol: protocol(p.protocol.as_deref()),
                container_port: p.container_port,
                host_port: hp,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let hostname = if defaults::host_network(pod) {
        String::new()
    } else {
        hostname_and_domain(s, pod).0
    };
    let psc = spec.security_context.clone().unwrap_or_default();
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    if let Some(g) = psc.fs_group {
        groups.push(g);
    }
    let privileged = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    let sysctls = psc
        .sysctls
        .iter()
        .flatten()
        .map(|x| (x.name.clone(), x.value.clone()))
        .collect();
    PodSandboxConfig {
        metadata: Some(PodSandboxMetadata {
            name: defaults::name(pod).into(),
            uid: defaults::uid(pod).into(),
            namespace: defaults::namespace(pod).into(),
            attempt,
        }),
        hostname,
        log_directory: log_dir(s, pod).display().to_string(),
        dns_config: Some(dns(s, pod)),
        port_mappings,
        labels: l,
        annotations,
        linux: Some(LinuxPodSandboxConfig {
            cgroup_parent: cgroup_parent(s, pod),
            security_context: Some(LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(pod)),
                run_as_user: psc.run_as_user.map(|v| Int64Value { value: v }),
                run_as_group: psc.run_as_group.map(|v| Int64Value { value: v }),
                supplemental_groups: groups,
                privileged,
                seccomp: Some(seccomp(s, psc.seccomp_profile.as_ref())),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> Pod {
        let mut p: Pod = serde_yaml::from_str(yaml).unwrap();
        p.metadata.uid = Some("u1".into());
        defaults::apply(&mut p);
        p
    }

    #[test]
    fn sandbox_config_carries_the_kubelet_fields() {
        let mut s = Settings::new("unix:///x");
        s.node_name = "n1".into();
        s.cluster_dns = vec!["10.96.0.10".into()];
        let p = pod("metadata: {name: web, namespace: prod, labels: {app: web}}\nspec:\n  dnsConfig: {nameservers: [1.1.1.1], options: [{name: ndots, value: '2'}]}\n  containers:\n  - name: c\n    image: i\n    ports: [{containerPort: 80, hostPort: 8080}, {containerPort: 81}]\n");
        let c = build(&s, &p, 2);
        assert_eq!(c.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(c.hostname, "web");
        assert_eq!(c.log_directory, "/var/log/pods/prod_web_u1");
        assert_eq!(c.labels[labels::POD_UID], "u1");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.port_mappings.len(), 1);
        assert_eq!(c.port_mappings[0].host_port, 8080);
        let dns = c.dns_config.unwrap();
        assert_eq!(dns.servers, vec!["10.96.0.10", "1.1.1.1"]);
        assert_eq!(dns.searches[0], "prod.svc.cluster.local");
        assert_eq!(dns.options, vec!["ndots:2"]);
        assert_eq!(c.linux.unwrap().cgroup_parent, "/kubepods/besteffort/podu1");
    }

    #[test]
    fn dns_none_uses_only_the_pod_config() {
        let s = Settings::new("unix:///x");
        let p = pod("metadata: {name: a}\nspec:\n  dnsPolicy: None\n  dnsConfig: {nameservers: [9.9.9.9], searches: [x.local]}\n  containers: [{name: c, image: i}]\n");
        let d = dns(&s, &p);
        assert_eq!(d.servers, vec!["9.9.9.9"]);
        assert_eq!(d.searches, vec!["x.local"]);
        assert!(d.options.is_empty());
    }
}
