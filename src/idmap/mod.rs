//! User namespaces of pods and idmapped mounts: the pod's namespaces made
//! inside its user namespace ([`ns`]), and trees seen through it
//! ([`mount`]).

pub mod mount;
pub mod ns;
mod range;

pub use mount::IdmapError;
pub use range::IdRange;

use std::path::Path;

/// What this node can idmap: the root's filesystem (image layers, the
/// pod's files) and tmpfs (the kubelet's secret, configMap and projected
/// volumes). Each is Ok or the error that says why not.
pub struct Support {
    pub root: Result<(), String>,
    pub tmpfs: Result<(), String>,
}

impl Support {
    /// Probes the filesystem of `root` (its nearest existing ancestor) and
    /// tmpfs.
    pub fn probe(root: &Path) -> Support {
        let mut at = root;
        while !at.exists() {
            match at.parent() {
                Some(p) => at = p,
                None => break,
            }
        }
        Support {
            root: mount::probe(at).map_err(|e| e.to_string()),
            tmpfs: mount::probe_tmpfs().map_err(|e| e.to_string()),
        }
    }

    /// Whether `hostUsers: false` pods work as the kubelet runs them: every
    /// kubelet pod has a service account token on tmpfs.
    pub fn pods(&self) -> bool {
        self.root.is_ok() && self.tmpfs.is_ok()
    }

    /// The probe of `root`, made once per process.
    pub fn cached(root: &Path) -> &'static Support {
        static ONCE: std::sync::OnceLock<Support> = std::sync::OnceLock::new();
        ONCE.get_or_init(|| Support::probe(root))
    }
}

/// Whether an unprivileged user of the node (the pod's root, outside its
/// user namespace) can search every directory from `/` down to `path`:
/// the container's init resolves its bundle, mount sources and namespace
/// pins under husk's directories after it has joined the pod's user
/// namespace, where the node's root-owned directories are only what
/// "others" may do with them. The error names the first that refuses; a
/// part that does not exist yet is not checked.
pub fn searchable(path: &Path) -> Result<(), String> {
    searchable_by(path, None)
}

/// [`searchable`] for the user `ids` (node uid and gid; `None`: any
/// unprivileged user), who may also search by owner or group: a pod's
/// own dirs open to its root's gid alone (`store::modes`).
pub fn searchable_by(path: &Path, ids: Option<(u32, u32)>) -> Result<(), String> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut at = std::path::PathBuf::from("/");
    for c in path.components().skip(1) {
        at.push(c);
        let md = match std::fs::metadata(&at) {
            Ok(m) => m,
            // Not made yet: husk makes it (0755) when it needs it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", at.display())),
        };
        let mode = md.permissions().mode();
        let bit = match ids {
            Some((uid, _)) if md.uid() == uid => 0o100,
            Some((_, gid)) if md.gid() == gid => 0o010,
            _ => 0o001,
        };
        if mode & bit == 0 {
            return Err(format!(
                "a pod with its own user namespace runs as an unprivileged user of the node, \
                 which cannot search {} (mode {:o}): make it searchable by others (chmod o+x), \
                 as /var/lib and /run are",
                at.display(),
                mode & 0o7777
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn searchable_names_the_first_closed_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let open = dir.path().join("open");
        let shut = open.join("shut");
        std::fs::create_dir_all(shut.join("inner")).expect("dirs");
        for (d, m) in [(dir.path(), 0o755), (&open, 0o711), (&shut, 0o700)] {
            std::fs::set_permissions(d, std::fs::Permissions::from_mode(m)).expect("chmod");
        }
        assert_eq!(searchable(&open), Ok(()));
        let e = searchable(&shut.join("inner")).expect_err("closed");
        assert!(
            e.contains(&format!("cannot search {} (mode 700)", shut.display())),
            "{e}"
        );
        // What does not exist yet is husk's to make.
        assert_eq!(searchable(&open.join("not/yet")), Ok(()));
    }
}
