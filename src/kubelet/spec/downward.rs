//! The downward API's values, shared by env (fieldRef, resourceFieldRef)
//! and downwardAPI volumes: a pod's fields and a container's resources,
//! as the kubelet formats them.

use crate::kubelet::kit::defaults;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::{Container, Pod};

/// Whether a fieldRef path is one a pod may use.
pub fn field_supported(path: &str) -> bool {
    match path {
        "metadata.name"
        | "metadata.namespace"
        | "metadata.uid"
        | "spec.nodeName"
        | "spec.serviceAccountName"
        | "status.podIP"
        | "status.podIPs"
        | "status.hostIP"
        | "status.hostIPs"
        | "metadata.labels"
        | "metadata.annotations" => true,
        p if (p.starts_with("metadata.labels['") || p.starts_with("metadata.annotations['"))
            && p.ends_with("']") =>
        {
            true
        }
        _ => false,
    }
}

/// A downward-API field of the pod (env `fieldRef`, downwardAPI volumes).
pub fn pod_field(pod: &Pod, path: &str, pod_ips: &[String], host_ip: &str) -> String {
    let meta_map = |m: Option<&std::collections::BTreeMap<String, String>>| {
        m.map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", go_quote(v)))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
    };
    let key = |prefix: &str| path.strip_prefix(prefix).and_then(|r| r.strip_suffix("']"));
    match path {
        "metadata.name" => defaults::name(pod).into(),
        "metadata.namespace" => defaults::namespace(pod).into(),
        "metadata.uid" => defaults::uid(pod).into(),
        "spec.nodeName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default(),
        "spec.serviceAccountName" => pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        "status.hostIP" | "status.hostIPs" => host_ip.into(),
        "metadata.labels" => meta_map(pod.metadata.labels.as_ref()),
        "metadata.annotations" => meta_map(pod.metadata.annotations.as_ref()),
        _ => {
            if let Some(k) = key("metadata.labels['") {
                pod.metadata
                    .labels
                    .as_ref()
                    .and_then(|m| m.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else if let Some(k) = key("metadata.annotations['") {
                pod.metadata
                    .annotations
                    .as_ref()
                    .and_then(|m| m.get(k))
                    .cloned()
                    .unwrap_or_default()
            } else {
                String::new()
            }
        }
    }
}

/// A string quoted as Go's `%q` quotes it (the downward API's format for
/// label and annotation values).
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn resource_value(
    s: &Settings,
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
) -> String {
    let r = defaults::resources(c);
    let div = |d: &str, milli: bool| -> i64 {
        let v = if milli {
            crate::kubelet::kit::quantity::milli_value(d)
        } else {
            crate::kubelet::kit::quantity::value(d)
        };
        v.ok().filter(|v| *v > 0).unwrap_or(1)
    };
    match resource {
        "limits.cpu" | "requests.cpu" => {
            let m = if resource == "limits.cpu" {
                // An unset limit reads as the node's capacity.
                r.cpu_limit_milli.unwrap_or(num_cpus_milli())
            } else {
                r.cpu_request_milli.unwrap_or(0)
            };
            let d = div(divisor.unwrap_or("1"), true);
            ((m + d - 1) / d).to_string()
        }
        _ => {
            let b = if resource == "limits.memory" {
                r.memory_limit.unwrap_or(s.memory_capacity)
            } else {
                r.memory_request.unwrap_or(0)
            };
            let d = div(divisor.unwrap_or("1"), false);
            ((b + d - 1) / d).to_string()
        }
    }
}

fn num_cpus_milli() -> i64 {
    std::thread::available_parallelism()
        .map(|n| n.get() as i64 * 1000)
        .unwrap_or(1000)
}
