//! Who on the node may reach what husk keeps (CVE-2021-41103,
//! CVE-2024-25621): nothing an image ships — a setuid binary, a device
//! node, a world-writable directory — and nothing of a pod may be reached
//! by the node's unprivileged users.
//!
//! ```text
//! <root>             0711  searched by a user-namespaced pod's root, never listed
//!   containers/      0711  likewise
//!     <id>/          0700  (0710 root:<pod's gid> in a pod with its own user namespace)
//!   sandboxes/       0711
//!     <id>/          0700  (0710 root:<pod's gid>)
//!   everything else  0700  (content, snapshots, images, cni-cache, …)
//! <state>            0711
//!   ns/              0711
//!     <id>/          0700  (0710 root:<pod's gid>): the namespace pins
//!   everything else  0700  (s/: the shims' dirs and sockets, …)
//! ```
//!
//! The private top-level dirs are made here, 0700 from the start, before
//! the stores open them.
//!
//! A pod with its own user namespace runs its containers' inits as an
//! unprivileged user of the node, which must search down to their root
//! file systems, mount sources and namespace pins: for such a pod only
//! its own dirs open to its own gid, and only for search. Modes are set
//! when the server starts (so an older, open layout is closed on upgrade)
//! and as each pod's dirs are made.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// The top-level dirs under root and state that are searched, not listed.
const SEARCHED: [&str; 3] = ["containers", "sandboxes", "ns"];

fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Makes `path` (and missing parents) as 0700 from the start, so that no
/// one else ever holds a descriptor of it.
pub fn make_private(path: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    chmod(path, 0o700)
}

/// Closes a pod's dir to everyone but root, or, for a pod with its own
/// user namespace (`userns_root` = its root's node uid and gid), opens it
/// to that gid for search only.
pub fn for_pod(path: &Path, userns_root: Option<(u32, u32)>) -> io::Result<()> {
    match userns_root {
        None => chmod(path, 0o700),
        Some((_, gid)) => {
            std::os::unix::fs::chown(path, Some(0), Some(gid))?;
            chmod(path, 0o710)
        }
    }
}

/// Sets the layout's modes at start: root and state 0711, the searched
/// dirs 0711, every other top-level dir 0700, and each pod's dir under
/// the searched ones closed to others (a pod dir already opened to a
/// pod's gid keeps it).
pub fn secure_layout(root: &Path, state: &Path) -> io::Result<()> {
    for top in [root, state] {
        std::fs::create_dir_all(top)?;
        chmod(top, 0o711)?;
        for ent in std::fs::read_dir(top)? {
            let ent = ent?;
            if !ent.file_type()?.is_dir() {
                continue;
            }
            let name = ent.file_name();
            if SEARCHED.iter().any(|s| name == *s) {
                chmod(&ent.path(), 0o711)?;
                for pod in std::fs::read_dir(ent.path())? {
                    let pod = pod?;
                    let md = pod.metadata()?;
                    if md.is_dir() {
                        let mode = if md.gid() == 0 { 0o700 } else { 0o710 };
                        chmod(&pod.path(), mode)?;
                    }
                }
            } else {
                chmod(&ent.path(), 0o700)?;
            }
        }
    }
    for (at, dir) in [
        (root, "content"),
        (root, "snapshots"),
        (root, "images"),
        (root, "cni-cache"),
        (state, "s"),
    ] {
        make_private(&at.join(dir))?;
    }
    for dir in SEARCHED {
        let at = if dir == "ns" { state } else { root };
        let p = at.join(dir);
        std::fs::create_dir_all(&p)?;
        chmod(&p, 0o711)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).expect("stat").permissions().mode() & 0o7777
    }

    #[test]
    fn an_open_layout_is_closed_at_start() {
        let t = tempfile::tempdir().expect("tmp");
        let (root, state) = (t.path().join("root"), t.path().join("state"));
        for d in ["snapshots/1/fs", "containers/c1/rootfs", "sandboxes/p1"] {
            std::fs::create_dir_all(root.join(d)).expect("mkdir");
        }
        std::fs::create_dir_all(state.join("s/p1")).expect("mkdir");
        std::fs::create_dir_all(state.join("ns/p2")).expect("mkdir");
        std::os::unix::fs::chown(state.join("ns/p2"), Some(0), Some(100000)).expect("chown");
        secure_layout(&root, &state).expect("secure");
        assert_eq!(mode(&root), 0o711);
        assert_eq!(mode(&state), 0o711);
        assert_eq!(mode(&root.join("snapshots")), 0o700);
        assert_eq!(mode(&root.join("containers")), 0o711);
        assert_eq!(mode(&root.join("containers/c1")), 0o700);
        assert_eq!(mode(&root.join("sandboxes/p1")), 0o700);
        assert_eq!(mode(&state.join("s")), 0o700);
        assert_eq!(
            mode(&state.join("ns/p2")),
            0o710,
            "a userns pod keeps its gid's search"
        );

        make_private(&root.join("containers/c2")).expect("private");
        assert_eq!(mode(&root.join("containers/c2")), 0o700);
        for_pod(&root.join("containers/c2"), Some((100000, 100000))).expect("userns");
        let md = std::fs::metadata(root.join("containers/c2")).expect("stat");
        assert_eq!(
            (md.uid(), md.gid(), md.permissions().mode() & 0o7777),
            (0, 100000, 0o710)
        );
    }
}
