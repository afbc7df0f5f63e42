//! Per-pod files shared by the pod's containers: resolv.conf, hostname and
//! hosts, written into the sandbox's dir.

use crate::api::cri::DnsConfig;
use std::path::Path;

/// resolv.conf from the pod's DNS config; without one, the host's.
pub fn resolv_conf(dns: Option<&DnsConfig>) -> std::io::Result<String> {
    let Some(d) =
        dns.filter(|d| !d.servers.is_empty() || !d.searches.is_empty() || !d.options.is_empty())
    else {
        return std::fs::read_to_string("/etc/resolv.conf").or_else(|_| Ok(String::new()));
    };
    let mut s = String::new();
    if !d.searches.is_empty() {
        s.push_str(&format!("search {}\n", d.searches.join(" ")));
    }
    for n in &d.servers {
        s.push_str(&format!("nameserver {n}\n"));
    }
    if !d.options.is_empty() {
        s.push_str(&format!("options {}\n", d.options.join(" ")));
    }
    Ok(s)
}

/// /etc/hosts for a pod: localhost entries and the pod's own name.
pub fn hosts(hostname: &str, ip: Option<&str>) -> String {
    let mut s = String::from(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    if let Some(ip) = ip {
        s.push_str(&format!("{ip}\t{hostname}\n"));
    }
    s
}

/// Writes resolv.conf, hostname and hosts into `dir`, owned by `owner`
/// (the pod's root in a pod user namespace) when given.
pub fn write_all(
    dir: &Path,
    dns: Option<&DnsConfig>,
    hostname: &str,
    ip: Option<&str>,
    owner: Option<(u32, u32)>,
) -> std::io::Result<()> {
    let files = [
        ("resolv.conf", resolv_conf(dns)?),
        ("hostname", format!("{hostname}\n")),
        ("hosts", hosts(hostname, ip)),
    ];
    for (name, text) in files {
        let p = dir.join(name);
        crate::store::atomic::write_state_file(&p, text.as_bytes())?;
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(&p, Some(uid), Some(gid))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_from_dns_config() {
        let d = DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec![
                "default.svc.cluster.local".into(),
                "svc.cluster.local".into(),
            ],
            options: vec!["ndots:5".into()],
        };
        assert_eq!(
            resolv_conf(Some(&d)).expect("conf"),
            "search default.svc.cluster.local svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
        assert!(hosts("web-0", Some("10.1.0.5")).ends_with("10.1.0.5\tweb-0\n"));
    }
}
