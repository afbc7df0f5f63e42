//! The kubelet's AtomicWriter: a volume's files are written into a fresh
//! timestamped `..<time>` directory, `..data` is pointed at it by a
//! rename (so readers see the old set or the new one, never a mix), each
//! top-level name is a symlink through `..data`, and the old directory
//! goes. Nothing is written when the content is unchanged; paths must stay
//! inside the volume.

use crate::kubelet::kit::defaults;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Relative path → (content, mode).
pub type Files = BTreeMap<String, (Vec<u8>, u32)>;

/// A relative path that stays inside its volume.
fn safe(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && !rel.starts_with("..")
        && Path::new(rel)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// The files under `..data` now, or None.
fn current(dir: &Path) -> Option<Files> {
    let data = dir.join("..data");
    let mut out = Files::new();
    fn walk(base: &Path, d: &Path, out: &mut Files) -> Option<()> {
        for e in std::fs::read_dir(d).ok()?.flatten() {
            let p = e.path();
            let ft = e.file_type().ok()?;
            if ft.is_dir() {
                walk(base, &p, out)?;
            } else {
                let rel = p.strip_prefix(base).ok()?.to_string_lossy().into_owned();
                let m = e.metadata().ok()?.permissions().mode() & 0o777;
                out.insert(rel, (std::fs::read(&p).ok()?, m));
            }
        }
        Some(())
    }
    walk(&data, &data, &mut out)?;
    Some(out)
}

/// Writes `files` into `dir` atomically (the kubelet's AtomicWriter);
/// nothing is written when the content is unchanged.
pub fn write(dir: &Path, files: &Files) -> std::io::Result<()> {
    for rel in files.keys() {
        if !safe(rel) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid path {rel:?}: must be relative and may not contain '..'"),
            ));
        }
    }
    if current(dir).as_ref() == Some(files) {
        return Ok(());
    }
    std::fs::create_dir_all(dir)?;
    let stamp = format!("..{}", defaults::now().0.strftime("%Y_%m_%d_%H_%M_%S.%f"));
    let ts = dir.join(&stamp);
    std::fs::create_dir_all(&ts)?;
    for (rel, (bytes, m)) in files {
        let p = ts.join(rel);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, bytes)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*m))?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&stamp, &tmp)?;
    std::fs::rename(&tmp, dir.join("..data"))?;
    let tops: std::collections::BTreeSet<String> = files
        .keys()
        .filter_map(|k| k.split('/').next().map(String::from))
        .collect();
    for t in &tops {
        let link = dir.join(t);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(PathBuf::from("..data").join(t), &link)?;
        }
    }
    for e in std::fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("..") && !tops.contains(&name) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    if let Some(o) = old.filter(|o| *o != Path::new(&stamp)) {
        let _ = std::fs::remove_dir_all(dir.join(o));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str, u32)]) -> Files {
        entries
            .iter()
            .map(|(k, v, m)| (k.to_string(), (v.as_bytes().to_vec(), *m)))
            .collect()
    }

    #[test]
    fn atomic_writes_swap_data_and_keep_links() {
        let d = tempfile::tempdir().unwrap();
        let v = d.path().join("vol");
        write(&v, &files(&[("a", "1", 0o644), ("dir/b", "2", 0o600)])).unwrap();
        assert_eq!(std::fs::read_to_string(v.join("a")).unwrap(), "1");
        assert_eq!(std::fs::read_to_string(v.join("dir/b")).unwrap(), "2");
        assert_eq!(
            std::fs::read_link(v.join("a")).unwrap(),
            PathBuf::from("..data/a")
        );
        let meta = std::fs::metadata(v.join("dir/b")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let first = std::fs::read_link(v.join("..data")).unwrap();
        // Unchanged content: nothing rewritten.
        write(&v, &files(&[("a", "1", 0o644), ("dir/b", "2", 0o600)])).unwrap();
        assert_eq!(std::fs::read_link(v.join("..data")).unwrap(), first);
        // Changed: a new data dir, the old one gone, dropped keys unlinked.
        write(&v, &files(&[("a", "3", 0o644)])).unwrap();
        assert_eq!(std::fs::read_to_string(v.join("a")).unwrap(), "3");
        assert_ne!(std::fs::read_link(v.join("..data")).unwrap(), first);
        assert!(!v.join(&first).exists());
        assert!(std::fs::symlink_metadata(v.join("dir")).is_err());
        let entries = std::fs::read_dir(&v).unwrap().count();
        assert_eq!(entries, 3, "a, ..data and one timestamped dir");
        assert!(write(&v, &files(&[("../x", "no", 0o644)])).is_err());
        assert!(write(&v, &files(&[("/etc/x", "no", 0o644)])).is_err());
    }
}
