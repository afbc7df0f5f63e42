//! Service environment variables, as the kubelet sets them (docker links
//! style): for the `kubernetes` Service of the `default` namespace always,
//! and for every Service of the pod's namespace when `enableServiceLinks`
//! (the default) is on; Services without a cluster IP are skipped. Env the
//! container sets itself overrides these.

use k8s_openapi::api::core::v1::{Pod, Service};

fn env_name(s: &str) -> String {
    s.to_uppercase().replace('-', "_")
}

/// The variables one Service contributes.
pub fn vars(svc: &Service) -> Vec<(String, String)> {
    let Some(spec) = &svc.spec else {
        return Vec::new();
    };
    let ip = spec.cluster_ip.clone().unwrap_or_default();
    if ip.is_empty() || ip == "None" {
        return Vec::new();
    }
    let name = env_name(svc.metadata.name.as_deref().unwrap_or(""));
    let ports = spec.ports.clone().unwrap_or_default();
    let mut out = vec![(format!("{name}_SERVICE_HOST"), ip.clone())];
    let host = if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.clone()
    };
    if let Some(first) = ports.first() {
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        let proto = first.protocol.as_deref().unwrap_or("TCP").to_lowercase();
        out.push((
            format!("{name}_PORT"),
            format!("{proto}://{host}:{}", first.port),
        ));
    }
    for p in &ports {
        if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
            out.push((
                format!("{name}_SERVICE_PORT_{}", env_name(n)),
                p.port.to_string(),
            ));
        }
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        let base = format!("{name}_PORT_{}_{}", p.port, proto.to_uppercase());
        let lower = proto.to_lowercase();
        out.push((base.clone(), format!("{lower}://{host}:{}", p.port)));
        out.push((format!("{base}_PROTO"), lower));
        out.push((format!("{base}_PORT"), p.port.to_string()));
        out.push((format!("{base}_ADDR"), ip.clone()));
    }
    out
}

/// The variables for `pod` from the Services of its namespace (`own`)
/// and of `default` (`defaults`), sorted by name as the kubelet sorts them.
pub fn for_pod(pod: &Pod, own: &[Service], defaults: &[Service]) -> Vec<(String, String)> {
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut chosen: Vec<&Service> = Vec::new();
    if links {
        chosen.extend(own.iter());
    }
    let master = defaults
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("kubernetes"));
    if let Some(m) = master {
        if !chosen.iter().any(|s| s.metadata.uid == m.metadata.uid) {
            chosen.push(m);
        }
    }
    let mut out: Vec<(String, String)> = chosen.into_iter().flat_map(vars).collect();
    out.sort();
    out.dedup_by(|a, b| a.0 == b.0);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn svc(y: &str) -> Service {
        serde_yaml::from_str(y).unwrap()
    }

    #[test]
    fn services_become_link_variables() {
        let k = svc("metadata: {name: kubernetes, namespace: default, uid: k}\nspec: {clusterIP: 10.0.0.1, ports: [{name: https, port: 443, protocol: TCP}]}\n");
        let web = svc("metadata: {name: my-web, namespace: ns, uid: w}\nspec: {clusterIP: 10.0.0.9, ports: [{port: 80}, {name: dns, port: 53, protocol: UDP}]}\n");
        let headless = svc("metadata: {name: h, namespace: ns, uid: h}\nspec: {clusterIP: None, ports: [{port: 1}]}\n");
        let pod: Pod =
            serde_yaml::from_str("metadata: {name: p, namespace: ns}\nspec: {containers: []}\n")
                .unwrap();
        let v: std::collections::HashMap<String, String> =
            for_pod(&pod, &[web.clone(), headless], std::slice::from_ref(&k))
                .into_iter()
                .collect();
        assert_eq!(v["KUBERNETES_SERVICE_HOST"], "10.0.0.1");
        assert_eq!(v["KUBERNETES_SERVICE_PORT"], "443");
        assert_eq!(v["KUBERNETES_SERVICE_PORT_HTTPS"], "443");
        assert_eq!(v["KUBERNETES_PORT"], "tcp://10.0.0.1:443");
        assert_eq!(v["KUBERNETES_PORT_443_TCP_ADDR"], "10.0.0.1");
        assert_eq!(v["MY_WEB_SERVICE_PORT"], "80");
        assert_eq!(v["MY_WEB_PORT_53_UDP"], "udp://10.0.0.9:53");
        assert_eq!(v["MY_WEB_SERVICE_PORT_DNS"], "53");
        assert!(!v.keys().any(|k| k.starts_with("H_")));
        let off: Pod = serde_yaml::from_str("metadata: {name: p, namespace: ns}\nspec: {enableServiceLinks: false, containers: []}\n").unwrap();
        let v = for_pod(&off, &[web], &[k]);
        assert!(v.iter().all(|(k, _)| k.starts_with("KUBERNETES_")), "{v:?}");
    }
}
