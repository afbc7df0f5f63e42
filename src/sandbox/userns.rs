//! A pod's user namespace options (CRI `NamespaceOption.userns_options`),
//! checked before anything is made.
//!
//! The kubelet sends mode NODE (the node's users) for every pod, and mode
//! POD with one uid and one gid mapping for a `hostUsers: false` pod. What
//! is acceptable is checked here as containerd and runc check it: only POD
//! and NODE; NODE without mappings; POD with exactly one uid and one gid
//! mapping, non-empty, that maps the pod's root (container id 0) and stays
//! within 32-bit ids. Which host ranges a node hands out is the kubelet's
//! policy, not the runtime's.
//!
//! A POD request runs the pod in its own user namespace (`crate::idmap`
//! makes it); the record keeps it as [`PodUserns`].

use crate::api::cri::{IdMapping, NamespaceMode, UserNamespace};
use crate::idmap::IdRange;

/// What a pod asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Userns {
    /// The node's users (no options, or mode NODE).
    Node,
    /// Its own user namespace with these mappings.
    Pod { uids: IdRange, gids: IdRange },
}

/// Checks `opts`; the error is the InvalidArgument message.
pub fn parse(opts: Option<&UserNamespace>) -> Result<Userns, String> {
    let Some(u) = opts else {
        return Ok(Userns::Node);
    };
    let uids = one_range("uid", &u.uids)?;
    let gids = one_range("gid", &u.gids)?;
    match NamespaceMode::try_from(u.mode) {
        Ok(NamespaceMode::Node) => match (uids, gids) {
            (None, None) => Ok(Userns::Node),
            _ => Err(format!(
                "userns_options: mode NODE takes no id mappings (got {} uid and {} gid mappings)",
                u.uids.len(),
                u.gids.len()
            )),
        },
        Ok(NamespaceMode::Pod) => match (uids, gids) {
            (Some(uids), Some(gids)) => Ok(Userns::Pod { uids, gids }),
            _ => Err(format!(
                "userns_options: mode POD needs one uid and one gid mapping (got {} uid and {} gid mappings)",
                u.uids.len(),
                u.gids.len()
            )),
        },
        Ok(m) => Err(format!(
            "userns_options: mode {} is not supported for user namespaces (only POD and NODE)",
            m.as_str_name()
        )),
        Err(_) => Err(format!("userns_options: unknown mode {}", u.mode)),
    }
}

/// The single mapping of `what` (none, or one valid range).
fn one_range(what: &str, maps: &[IdMapping]) -> Result<Option<IdRange>, String> {
    let m = match maps {
        [] => return Ok(None),
        [m] => m,
        _ => {
            return Err(format!(
                "userns_options: only one {what} mapping is supported, got {}",
                maps.len()
            ))
        }
    };
    if m.length == 0 {
        return Err(format!(
            "userns_options: the {what} mapping is empty (length 0)"
        ));
    }
    let end = |start: u32| u64::from(start) + u64::from(m.length);
    if end(m.container_id) > 1 << 32 || end(m.host_id) > 1 << 32 {
        return Err(format!(
            "userns_options: the {what} mapping {}:{}:{} goes past the largest id (4294967295)",
            m.container_id, m.host_id, m.length
        ));
    }
    if m.container_id != 0 {
        return Err(format!(
            "userns_options: the {what} mapping must map the pod's root ({what} 0), it starts at {}",
            m.container_id
        ));
    }
    Ok(Some(IdRange {
        container_id: m.container_id,
        host_id: m.host_id,
        length: m.length,
    }))
}

/// A pod's user namespace as its record keeps it: the pin every
/// process of the pod joins, and the mappings (for idmapped mounts and the
/// specs' `uidMappings`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PodUserns {
    pub pin: std::path::PathBuf,
    pub uids: IdRange,
    pub gids: IdRange,
}

impl PodUserns {
    /// The host ids of the pod's root (uid, gid).
    pub fn root(&self) -> (u32, u32) {
        (self.uids.host_id, self.gids.host_id)
    }

    /// The host ids that the pod's `(uid, gid)` are, when mapped.
    pub fn to_host(&self, uid: u32, gid: u32) -> Option<(u32, u32)> {
        Some((self.uids.to_host(uid)?, self.gids.to_host(gid)?))
    }

    /// The CRI options this namespace answers (PodSandboxStatus).
    pub fn to_cri(&self) -> UserNamespace {
        let m = |r: IdRange| {
            vec![IdMapping {
                container_id: r.container_id,
                host_id: r.host_id,
                length: r.length,
            }]
        };
        UserNamespace {
            mode: NamespaceMode::Pod as i32,
            uids: m(self.uids),
            gids: m(self.gids),
        }
    }

    /// `linux.uidMappings` and `linux.gidMappings` of an OCI spec.
    pub fn spec_mappings(&self) -> (serde_json::Value, serde_json::Value) {
        let m = |r: IdRange| serde_json::json!([{"containerID": r.container_id, "hostID": r.host_id, "size": r.length}]);
        (m(self.uids), m(self.gids))
    }
}

impl IdRange {
    /// The host id of `id` inside, when the range maps it.
    pub fn to_host(&self, id: u32) -> Option<u32> {
        let off = id.checked_sub(self.container_id)?;
        (off < self.length).then(|| self.host_id + off)
    }
}

/// Where a pod's user namespace is pinned.
pub fn pin_path(state: &std::path::Path, sandbox_id: &str) -> std::path::PathBuf {
    state.join("ns").join(sandbox_id).join("user")
}

impl Userns {
    /// A pod user namespace owns the pod's network, IPC and PID
    /// namespaces, so it cannot be combined with the node's (Kubernetes
    /// refuses hostUsers: false with hostNetwork, hostIPC and hostPID).
    pub fn check_modes(
        &self,
        host_net: bool,
        host_pid: bool,
        host_ipc: bool,
    ) -> Result<(), String> {
        let node: Vec<&str> = [(host_net, "network"), (host_pid, "PID"), (host_ipc, "IPC")]
            .into_iter()
            .filter_map(|(on, name)| on.then_some(name))
            .collect();
        match self {
            Userns::Pod { .. } if !node.is_empty() => Err(format!(
                "userns_options: a pod user namespace cannot be combined with the node's {} namespace",
                node.join(" and ")
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(container_id: u32, host_id: u32, length: u32) -> IdMapping {
        IdMapping {
            container_id,
            host_id,
            length,
        }
    }

    fn opts(mode: NamespaceMode, uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> UserNamespace {
        UserNamespace {
            mode: mode as i32,
            uids,
            gids,
        }
    }

    fn err(u: UserNamespace) -> String {
        parse(Some(&u)).expect_err("must be refused")
    }

    #[test]
    fn node_and_pod_as_the_kubelet_sends_them() {
        assert_eq!(parse(None), Ok(Userns::Node));
        assert_eq!(
            parse(Some(&opts(NamespaceMode::Node, vec![], vec![]))),
            Ok(Userns::Node)
        );
        let r = IdRange {
            container_id: 0,
            host_id: 65536 * 3,
            length: 65536,
        };
        assert_eq!(
            parse(Some(&opts(
                NamespaceMode::Pod,
                vec![map(0, 65536 * 3, 65536)],
                vec![map(0, 65536 * 3, 65536)]
            ))),
            Ok(Userns::Pod { uids: r, gids: r })
        );
        // The last id of the 32-bit space is reachable, not past it.
        assert!(parse(Some(&opts(
            NamespaceMode::Pod,
            vec![map(0, u32::MAX - 9, 10)],
            vec![map(0, 1000, 10)]
        )))
        .is_ok());
    }

    #[test]
    fn what_critest_and_containerd_refuse() {
        let m = || vec![map(0, 1000, 100000)];
        // More than one mapping.
        let two = vec![map(0, 1000, 100000), map(0, 2000, 100000)];
        assert!(err(opts(NamespaceMode::Pod, two.clone(), m())).contains("only one uid mapping"));
        assert!(err(opts(NamespaceMode::Pod, m(), two)).contains("only one gid mapping"));
        // The pod's root not mapped.
        let e = err(opts(NamespaceMode::Pod, vec![map(1, 1000, 100000)], m()));
        assert!(e.contains("must map the pod's root"), "{e}");
        // CONTAINER and TARGET.
        assert!(err(opts(NamespaceMode::Container, vec![], vec![])).contains("CONTAINER"));
        assert!(err(opts(NamespaceMode::Target, vec![], vec![])).contains("TARGET"));
        // Mappings with NODE, none with POD (or only one kind).
        assert!(err(opts(NamespaceMode::Node, m(), m())).contains("mode NODE takes no"));
        assert!(err(opts(NamespaceMode::Pod, vec![], vec![])).contains("mode POD needs"));
        assert!(err(opts(NamespaceMode::Pod, m(), vec![])).contains("mode POD needs"));
        // Empty and overflowing ranges.
        assert!(err(opts(NamespaceMode::Pod, vec![map(0, 1000, 0)], m())).contains("length 0"));
        let e = err(opts(NamespaceMode::Pod, m(), vec![map(0, u32::MAX, 2)]));
        assert!(e.contains("past the largest id"), "{e}");
        // An unknown mode number.
        let mut u = opts(NamespaceMode::Pod, m(), m());
        u.mode = 42;
        assert!(err(u).contains("unknown mode 42"));
    }
}
