//! Admission: the checks a pod must pass before the kubelet runs anything
//! for it. A rejected pod is never run: it becomes phase Failed with the
//! reason and every problem found in the message, and the loop goes on.
//!
//! Checks follow the API server's validation where it matters to a node
//! (names, required fields, duplicate names and ports, quantities, probe
//! and handler shapes) and refuse, clearly, what husk's kubelet does not
//! provide (volume types other than emptyDir, hostPath, secret, configMap,
//! projected, downwardAPI and image; gRPC probes; `hostUsers: false`).

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::quantity;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};
use std::collections::HashSet;

/// Why a pod was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    /// `InvalidPod` (the spec is wrong) or `Unsupported` (husk lacks it).
    pub reason: String,
    pub message: String,
}

fn dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(dns_label)
}

struct Check {
    invalid: Vec<String>,
    unsupported: Vec<String>,
}

impl Check {
    fn bad(&mut self, m: String) {
        self.invalid.push(m);
    }
    fn no(&mut self, m: String) {
        self.unsupported.push(m);
    }
}

/// Validates a defaulted pod.
pub fn admit(pod: &Pod) -> Result<(), Rejection> {
    let mut c = Check {
        invalid: Vec::new(),
        unsupported: Vec::new(),
    };
    let name = defaults::name(pod);
    if name.is_empty() {
        c.bad("metadata.name: Required value".into());
    } else if !dns_subdomain(name) {
        c.bad(format!(
            "metadata.name: Invalid value {name:?}: must be a lowercase RFC 1123 subdomain"
        ));
    }
    let ns = defaults::namespace(pod);
    if !dns_label(ns) {
        c.bad(format!(
            "metadata.namespace: Invalid value {ns:?}: must be a lowercase RFC 1123 label"
        ));
    }
    match pod.spec.as_ref() {
        None => c.bad("spec: Required value".into()),
        Some(spec) => {
            if spec.containers.is_empty() {
                c.bad("spec.containers: Required value".into());
            }
            let rp = spec.restart_policy.as_deref().unwrap_or("Always");
            if !matches!(rp, "Always" | "OnFailure" | "Never") {
                c.bad(format!("spec.restartPolicy: Unsupported value {rp:?}: supported values: \"Always\", \"OnFailure\", \"Never\""));
            }
            let dns = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
            match dns {
                "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" => {}
                "None" => {
                    let servers = spec
                        .dns_config
                        .as_ref()
                        .and_then(|d| d.nameservers.as_ref())
                        .map(|n| n.len())
                        .unwrap_or(0);
                    if servers == 0 {
                        c.bad("spec.dnsConfig.nameservers: Required value: must provide at least one DNS nameserver when `dnsPolicy` is None".into());
                    }
                }
                other => c.bad(format!("spec.dnsPolicy: Unsupported value {other:?}")),
            }
            if spec.termination_grace_period_seconds.is_some_and(|g| g < 0) {
                c.bad("spec.terminationGracePeriodSeconds: must be non-negative".into());
            }
            if spec
                .ephemeral_containers
                .as_ref()
                .is_some_and(|e| !e.is_empty())
            {
                c.no("spec.ephemeralContainers: ephemeral containers are not supported".into());
            }
            // Never run a pod that asked for its own users with the node's.
            if spec.host_users == Some(false) {
                c.no("spec.hostUsers: user namespaces (hostUsers: false) are not supported".into());
            }
            let mut volumes = HashSet::new();
            for (i, v) in spec.volumes.iter().flatten().enumerate() {
                let at = format!("spec.volumes[{i}]");
                if !dns_label(&v.name) {
                    c.bad(format!("{at}.name: Invalid value {:?}", v.name));
                }
                if !volumes.insert(v.name.clone()) {
                    c.bad(format!("{at}.name: Duplicate value {:?}", v.name));
                }
                volume(&mut c, &at, v);
            }
            let mut names = HashSet::new();
            let mut host_ports = HashSet::new();
            let inits = spec.init_containers.iter().flatten().enumerate();
            let all = inits
                .map(|(i, x)| (format!("spec.initContainers[{i}]"), x, true))
                .chain(
                    spec.containers
                        .iter()
                        .enumerate()
                        .map(|(i, x)| (format!("spec.containers[{i}]"), x, false)),
                );
            for (at, ctr, init) in all {
                if !names.insert(ctr.name.clone()) {
                    c.bad(format!("{at}.name: Duplicate value {:?}", ctr.name));
                }
                container(&mut c, &at, ctr, init, &volumes, &mut host_ports);
            }
        }
    }
    if !c.invalid.is_empty() {
        let mut all = c.invalid;
        all.extend(c.unsupported);
        return Err(Rejection {
            reason: "InvalidPod".into(),
            message: format!("Pod is invalid: {}", all.join("; ")),
        });
    }
    if !c.unsupported.is_empty() {
        return Err(Rejection {
            reason: "Unsupported".into(),
            message: format!(
                "Pod uses what husk kubelet does not provide: {}",
                c.unsupported.join("; ")
            ),
        });
    }
    Ok(())
}

fn volume(c: &mut Check, at: &str, v: &k8s_openapi::api::core::v1::Volume) {
    if let Some(e) = &v.empty_dir {
        if let Some(m) = e.medium.as_deref() {
            if !matches!(m, "" | "Memory") {
                c.bad(format!("{at}.emptyDir.medium: Unsupported value {m:?}"));
            }
        }
        if let Some(q) = &e.size_limit {
            if quantity::value(&q.0).is_err() {
                c.bad(format!("{at}.emptyDir.sizeLimit: Invalid value {:?}", q.0));
            }
        }
    } else if let Some(h) = &v.host_path {
        if !h.path.starts_with('/') {
            c.bad(format!("{at}.hostPath.path: must be an absolute path"));
        }
        let t = h.type_.as_deref().unwrap_or("");
        if !matches!(
            t,
            "" | "DirectoryOrCreate"
                | "Directory"
                | "FileOrCreate"
                | "File"
                | "Socket"
                | "CharDevice"
                | "BlockDevice"
        ) {
            c.bad(format!("{at}.hostPath.type: Unsupported value {t:?}"));
        }
    } else if let Some(s) = &v.secret {
        if s.secret_name.as_deref().unwrap_or("").is_empty() {
            c.bad(format!("{at}.secret.secretName: Required value"));
        }
    } else if let Some(m) = &v.config_map {
        if m.name.is_empty() {
            c.bad(format!("{at}.configMap.name: Required value"));
        }
    } else if v.downward_api.is_some() {
    } else if let Some(i) = &v.image {
        // An image volume: the runtime mounts the image the kubelet pulls.
        if i.reference.as_deref().unwrap_or("").trim().is_empty() {
            c.bad(format!("{at}.image.reference: Required value"));
        }
        if let Some(p) = i.pull_policy.as_deref() {
            if !matches!(p, "Always" | "IfNotPresent" | "Never") {
                c.bad(format!("{at}.image.pullPolicy: Unsupported value {p:?}"));
            }
        }
    } else if let Some(p) = &v.projected {
        for (j, src) in p.sources.iter().flatten().enumerate() {
            let known = src.service_account_token.is_some()
                || src.config_map.is_some()
                || src.secret.is_some()
                || src.downward_api.is_some();
            if !known {
                c.no(format!(
                    "{at}.projected.sources[{j}]: only serviceAccountToken, configMap, secret and downwardAPI are supported"
                ));
            }
        }
    } else {
        let kind = serde_json::to_value(v)
            .ok()
            .and_then(|j| {
                j.as_object()
                    .and_then(|o| o.keys().find(|k| *k != "name").cloned())
            })
            .unwrap_or_else(|| "none".into());
        c.no(format!(
            "{at}: volume type {kind:?} is not supported (emptyDir, hostPath, secret, configMap, projected, downwardAPI and image are)"
        ));
    }
}

fn container(
    c: &mut Check,
    at: &str,
    ctr: &Container,
    init: bool,
    volumes: &HashSet<String>,
    host_ports: &mut HashSet<(i32, String, String)>,
) {
    if !dns_label(&ctr.name) {
        c.bad(format!(
            "{at}.name: Invalid value {:?}: must be a lowercase RFC 1123 label",
            ctr.name
        ));
    }
    if ctr.image.as_deref().unwrap_or("").trim().is_empty() {
        c.bad(format!("{at}.image: Required value"));
    }
    if let Some(p) = ctr.image_pull_policy.as_deref() {
        if !matches!(p, "Always" | "IfNotPresent" | "Never") {
            c.bad(format!("{at}.imagePullPolicy: Unsupported value {p:?}"));
        }
    }
    if init && ctr.restart_policy.is_some() {
        c.no(format!(
            "{at}.restartPolicy: sidecar init containers are not supported"
        ));
    }
    if init
        && (ctr.liveness_probe.is_some()
            || ctr.readiness_probe.is_some()
            || ctr.startup_probe.is_some())
    {
        c.bad(format!("{at}: init containers may not have probes"));
    }
    if init && ctr.lifecycle.is_some() {
        c.bad(format!(
            "{at}.lifecycle: init containers may not have lifecycle handlers"
        ));
    }
    let mut port_names = HashSet::new();
    for (i, p) in ctr.ports.iter().flatten().enumerate() {
        let pat = format!("{at}.ports[{i}]");
        if !(1..=65535).contains(&p.container_port) {
            c.bad(format!(
                "{pat}.containerPort: Invalid value {}: must be between 1 and 65535",
                p.container_port
            ));
        }
        let hp = p.host_port.unwrap_or(0);
        if !(0..=65535).contains(&hp) {
            c.bad(format!(
                "{pat}.hostPort: Invalid value {hp}: must be between 1 and 65535"
            ));
        }
        let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
        if !matches!(proto.as_str(), "TCP" | "UDP" | "SCTP") {
            c.bad(format!("{pat}.protocol: Unsupported value {proto:?}"));
        }
        if let Some(n) = &p.name {
            if n.is_empty() || n.len() > 15 || !port_names.insert(n.clone()) {
                c.bad(format!("{pat}.name: Invalid or duplicate value {n:?}"));
            }
        }
        if hp > 0 {
            let key = (hp, proto.clone(), p.host_ip.clone().unwrap_or_default());
            if !host_ports.insert(key) {
                c.bad(format!("{pat}.hostPort: Duplicate value \"{hp}/{proto}\""));
            }
        }
    }
    if let Some(r) = &ctr.resources {
        for (kind, m) in [("requests", &r.requests), ("limits", &r.limits)] {
            for (k, q) in m.iter().flatten() {
                if quantity::milli_value(&q.0).is_err() || q.0.starts_with('-') {
                    c.bad(format!("{at}.resources.{kind}[{k}]: Invalid value {:?}: must be a valid non-negative quantity", q.0));
                }
            }
        }
        let res = defaults::resources(ctr);
        if let (Some(rq), Some(l)) = (res.cpu_request_milli, res.cpu_limit_milli) {
            if rq > l {
                c.bad(format!(
                    "{at}.resources.requests[cpu]: must be less than or equal to cpu limit"
                ));
            }
        }
        if let (Some(rq), Some(l)) = (res.memory_request, res.memory_limit) {
            if rq > l {
                c.bad(format!(
                    "{at}.resources.requests[memory]: must be less than or equal to memory limit"
                ));
            }
        }
    }
    let mut env_names = HashSet::new();
    for (i, e) in ctr.env.iter().flatten().enumerate() {
        let eat = format!("{at}.env[{i}]");
        if e.name.is_empty() || e.name.contains('=') {
            c.bad(format!("{eat}.name: Invalid value {:?}", e.name));
        }
        env_names.insert(e.name.clone());
        if let Some(src) = &e.value_from {
            if e.value.is_some() {
                c.bad(format!(
                    "{eat}.valueFrom: may not be specified when `value` is not empty"
                ));
            }
            if let Some(r) = &src.secret_key_ref {
                if r.name.is_empty() || r.key.is_empty() {
                    c.bad(format!(
                        "{eat}.valueFrom.secretKeyRef: name and key are required"
                    ));
                }
            } else if let Some(r) = &src.config_map_key_ref {
                if r.name.is_empty() || r.key.is_empty() {
                    c.bad(format!(
                        "{eat}.valueFrom.configMapKeyRef: name and key are required"
                    ));
                }
            } else if src.file_key_ref.is_some() {
                c.no(format!("{eat}.valueFrom.fileKeyRef: not supported"));
            } else if let Some(f) = &src.field_ref {
                if !crate::kubelet::spec::downward::field_supported(&f.field_path) {
                    c.bad(format!(
                        "{eat}.valueFrom.fieldRef.fieldPath: Unsupported value {:?}",
                        f.field_path
                    ));
                }
            } else if let Some(r) = &src.resource_field_ref {
                if !matches!(
                    r.resource.as_str(),
                    "limits.cpu" | "limits.memory" | "requests.cpu" | "requests.memory"
                ) {
                    c.bad(format!(
                        "{eat}.valueFrom.resourceFieldRef.resource: Unsupported value {:?}",
                        r.resource
                    ));
                }
            } else {
                c.bad(format!("{eat}.valueFrom: must specify one source"));
            }
        }
    }
    for (i, f) in ctr.env_from.iter().flatten().enumerate() {
        if f.secret_ref.is_some() == f.config_map_ref.is_some() {
            c.bad(format!(
                "{at}.envFrom[{i}]: must specify one of configMapRef or secretRef"
            ));
        }
    }
    let mut paths = HashSet::new();
    for (i, m) in ctr.volume_mounts.iter().flatten().enumerate() {
        let mat = format!("{at}.volumeMounts[{i}]");
        if !volumes.contains(&m.name) {
            c.bad(format!("{mat}.name: Not found: {:?}", m.name));
        }
        if !m.mount_path.starts_with('/') {
            c.bad(format!("{mat}.mountPath: must be an absolute path"));
        }
        if !paths.insert(m.mount_path.clone()) {
            c.bad(format!(
                "{mat}.mountPath: Invalid value {:?}: must be unique",
                m.mount_path
            ));
        }
        if let Some(sp) = &m.sub_path {
            if sp.starts_with('/') || sp.split('/').any(|s| s == "..") {
                c.bad(format!(
                    "{mat}.subPath: must be a relative path without '..'"
                ));
            }
        }
        if m.sub_path_expr.is_some() {
            c.no(format!("{mat}.subPathExpr: not supported"));
        }
    }
    if ctr.volume_devices.as_ref().is_some_and(|v| !v.is_empty()) {
        c.no(format!(
            "{at}.volumeDevices: block volumes are not supported"
        ));
    }
    if let Some(p) = ctr.termination_message_policy.as_deref() {
        if !matches!(p, "File" | "FallbackToLogsOnError") {
            c.bad(format!(
                "{at}.terminationMessagePolicy: Unsupported value {p:?}"
            ));
        }
    }
    if let Some(p) = ctr.termination_message_path.as_deref() {
        if !p.starts_with('/') {
            c.bad(format!(
                "{at}.terminationMessagePath: must be an absolute path"
            ));
        }
    }
    for (kind, p) in [
        ("livenessProbe", &ctr.liveness_probe),
        ("readinessProbe", &ctr.readiness_probe),
        ("startupProbe", &ctr.startup_probe),
    ] {
        if let Some(p) = p {
            probe(c, &format!("{at}.{kind}"), p, kind != "readinessProbe");
        }
    }
    if let Some(l) = &ctr.lifecycle {
        for (kind, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
            if let Some(h) = h {
                handler(c, &format!("{at}.lifecycle.{kind}"), h);
            }
        }
    }
}

fn probe(c: &mut Check, at: &str, p: &Probe, success_must_be_one: bool) {
    let handlers = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if handlers != 1 {
        c.bad(format!("{at}: must specify exactly one handler type"));
    }
    if p.grpc.is_some() {
        c.no(format!("{at}.grpc: gRPC probes are not supported"));
    }
    if p.exec
        .as_ref()
        .is_some_and(|e| e.command.as_ref().is_none_or(|c| c.is_empty()))
    {
        c.bad(format!("{at}.exec.command: Required value"));
    }
    for (f, v, min) in [
        ("periodSeconds", p.period_seconds, 1),
        ("timeoutSeconds", p.timeout_seconds, 1),
        ("successThreshold", p.success_threshold, 1),
        ("failureThreshold", p.failure_threshold, 1),
        ("initialDelaySeconds", p.initial_delay_seconds, 0),
    ] {
        if v.is_some_and(|v| v < min) {
            c.bad(format!("{at}.{f}: must be greater than or equal to {min}"));
        }
    }
    if success_must_be_one && p.success_threshold.is_some_and(|s| s != 1) {
        c.bad(format!("{at}.successThreshold: must be 1"));
    }
}

fn handler(c: &mut Check, at: &str, h: &LifecycleHandler) {
    let n = [
        h.exec.is_some(),
        h.http_get.is_some(),
        h.tcp_socket.is_some(),
        h.sleep.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if n != 1 {
        c.bad(format!("{at}: must specify exactly one handler type"));
    }
    if h.tcp_socket.is_some() {
        c.bad(format!(
            "{at}.tcpSocket: not supported as a lifecycle handler"
        ));
    }
    if h.sleep.as_ref().is_some_and(|s| s.seconds < 0) {
        c.bad(format!("{at}.sleep.seconds: must be non-negative"));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn check(yaml: &str) -> Result<(), Rejection> {
        let mut p: Pod = serde_yaml::from_str(yaml).unwrap();
        defaults::apply(&mut p);
        admit(&p)
    }

    #[test]
    fn a_plain_pod_is_admitted() {
        check("metadata: {name: web}\nspec:\n  containers:\n  - {name: c, image: busybox, ports: [{containerPort: 80, hostPort: 8080}]}\n").unwrap();
    }

    #[test]
    fn every_problem_is_named() {
        let r = check(
            "metadata: {name: Bad_Name}\nspec:\n  containers:\n  - {name: c, image: i, resources: {limits: {cpu: 1x}}}\n  - {name: c}\n",
        )
        .unwrap_err();
        assert_eq!(r.reason, "InvalidPod");
        assert!(r.message.contains("metadata.name"), "{}", r.message);
        assert!(r.message.contains("Duplicate value \"c\""), "{}", r.message);
        assert!(
            r.message.contains("spec.containers[1].image: Required"),
            "{}",
            r.message
        );
        assert!(r.message.contains("limits[cpu]"), "{}", r.message);
    }

    #[test]
    fn duplicate_host_ports_and_missing_volumes() {
        let r = check("metadata: {name: a}\nspec:\n  containers:\n  - {name: a, image: i, ports: [{containerPort: 1, hostPort: 9}], volumeMounts: [{name: v, mountPath: /v}]}\n  - {name: b, image: i, ports: [{containerPort: 2, hostPort: 9}]}\n").unwrap_err();
        assert!(r.message.contains("hostPort: Duplicate"), "{}", r.message);
        assert!(r.message.contains("Not found: \"v\""), "{}", r.message);
    }

    #[test]
    fn other_volume_types_are_unsupported_not_invalid() {
        let r = check("metadata: {name: a}\nspec:\n  volumes: [{name: v, nfs: {server: s, path: /p}}]\n  containers:\n  - name: a\n    image: i\n").unwrap_err();
        assert_eq!(r.reason, "Unsupported");
        assert!(
            r.message.contains("\"nfs\" is not supported"),
            "{}",
            r.message
        );
        check("metadata: {name: a}\nspec:\n  volumes: [{name: s, secret: {secretName: x}}, {name: p, projected: {sources: [{serviceAccountToken: {path: token}}]}}]\n  containers:\n  - name: a\n    image: i\n    env: [{name: X, valueFrom: {secretKeyRef: {name: s, key: k}}}]\n    envFrom: [{configMapRef: {name: m}}]\n").unwrap();
        let r = check("metadata: {name: a}\nspec:\n  containers:\n  - name: a\n    image: i\n    envFrom: [{prefix: P}]\n").unwrap_err();
        assert_eq!(r.reason, "InvalidPod");
    }

    #[test]
    fn host_users_false_is_unsupported_and_true_runs() {
        let r = check("metadata: {name: a}\nspec:\n  hostUsers: false\n  containers:\n  - {name: a, image: i}\n").unwrap_err();
        assert_eq!(r.reason, "Unsupported");
        assert!(r.message.contains("spec.hostUsers"), "{}", r.message);
        check("metadata: {name: a}\nspec:\n  hostUsers: true\n  containers:\n  - {name: a, image: i}\n").unwrap();
    }
}
