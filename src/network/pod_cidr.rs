//! The node's pod CIDR, set by UpdateRuntimeConfig, and its CNI form.
//!
//! The kubelet sends the node's pod CIDRs (comma-separated for dual stack).
//! They are kept in `<root>/runtime-config.json` (`{"version", "pod_cidr"}`,
//! written atomically) so a restarted server keeps them, and every CNI
//! attachment made afterwards carries them as the `ipRanges` capability
//! argument: one range set per CIDR (`[[{"subnet": …}], …]`), which the CNI
//! conventions define and host-local prepends to its configured ranges. A
//! plugin receives it only when its config declares
//! `"capabilities": {"ipRanges": true}`.

use serde::{Deserialize, Serialize};
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
struct Record {
    version: u32,
    pod_cidr: String,
}

fn path(root: &Path) -> PathBuf {
    root.join("runtime-config.json")
}

/// The CIDRs of a pod CIDR string, checked: an address, a prefix length
/// within its family, no host bits set.
pub fn parse(pod_cidr: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for c in pod_cidr.split(',').map(str::trim) {
        let (ip, len) = c
            .split_once('/')
            .ok_or_else(|| format!("pod CIDR {c:?} has no prefix length"))?;
        let ip: IpAddr = ip
            .parse()
            .map_err(|_| format!("pod CIDR {c:?}: {ip:?} is not an IP address"))?;
        let len: u32 = len
            .parse()
            .map_err(|_| format!("pod CIDR {c:?}: bad prefix length"))?;
        let masked_ok = match ip {
            IpAddr::V4(a) if len <= 32 => {
                let bits = u32::from(a);
                len == 32 || bits & (u32::MAX >> len) == 0
            }
            IpAddr::V6(a) if len <= 128 => {
                let bits = u128::from(a);
                len == 128 || bits & (u128::MAX >> len) == 0
            }
            _ => return Err(format!("pod CIDR {c:?}: prefix length too long")),
        };
        if !masked_ok {
            return Err(format!(
                "pod CIDR {c:?} has host bits set (give the network address)"
            ));
        }
        out.push(c.to_string());
    }
    Ok(out)
}

/// Records the pod CIDR (already checked with [`parse`]).
pub fn save(root: &Path, pod_cidr: &str) -> io::Result<()> {
    crate::store::atomic::write_json(
        &path(root),
        &Record {
            version: VERSION,
            pod_cidr: pod_cidr.to_string(),
        },
    )
}

/// The recorded pod CIDR, if any.
pub fn load(root: &Path) -> Option<String> {
    match crate::store::atomic::read_json::<Record>(&path(root)) {
        Ok(r) => r.map(|r| r.pod_cidr).filter(|c| !c.is_empty()),
        Err(e) => {
            tracing::warn!(error = %e, "unreadable runtime-config.json; no pod CIDR");
            None
        }
    }
}

/// The `ipRanges` capability argument for the recorded pod CIDR.
pub fn ip_ranges(root: &Path) -> Option<serde_json::Value> {
    let cidrs = parse(&load(root)?).ok()?;
    Some(serde_json::Value::Array(
        cidrs
            .into_iter()
            .map(|c| serde_json::json!([{ "subnet": c }]))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_checks_cidrs() {
        assert_eq!(
            parse("10.244.1.0/24, fd00:1::/64").expect("ok"),
            vec!["10.244.1.0/24".to_string(), "fd00:1::/64".to_string()]
        );
        for bad in [
            "10.244.1.0",
            "10.244.1.5/24",
            "10.0.0.0/33",
            "x/8",
            "fd00::1/64",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn saved_cidr_becomes_ip_ranges() {
        let d = tempfile::tempdir().expect("tempdir");
        assert!(ip_ranges(d.path()).is_none());
        save(d.path(), "10.9.8.0/24,fd00:9::/64").expect("save");
        assert_eq!(
            ip_ranges(d.path()).expect("ranges"),
            serde_json::json!([[{"subnet": "10.9.8.0/24"}], [{"subnet": "fd00:9::/64"}]])
        );
    }
}
