//! Path resolution confined to a directory, as if it were `/`: every
//! lookup goes through `openat2(RESOLVE_IN_ROOT)`, so `..`, absolute paths
//! and symlinks never leave it. Used to unpack layers and to make mount
//! points inside container root filesystems.

use super::error::ImageError;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

fn unsafe_entry(entry: &Path, reason: impl Into<String>) -> ImageError {
    ImageError::UnsafeEntry {
        entry: entry.display().to_string(),
        reason: reason.into(),
    }
}

fn io_err(what: impl Into<String>, e: impl Into<io::Error>) -> ImageError {
    ImageError::io(what, e.into())
}

/// Lexically cleans an entry path as if rooted at `/`: `..` cannot climb
/// above the root, `.` and empty components vanish.
pub(crate) fn clean(p: &Path) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(n) => out.push(n.to_os_string()),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

pub(crate) fn join(comps: &[OsString]) -> PathBuf {
    let mut p = PathBuf::new();
    for c in comps {
        p.push(c);
    }
    p
}

pub(crate) fn open_confined(root: &OwnedFd, comps: &[OsString]) -> Result<OwnedFd, Errno> {
    let p = if comps.is_empty() {
        PathBuf::from(".")
    } else {
        join(comps)
    };
    crate::sys::openat2(
        root,
        &p,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    )
}

/// Opens (creating as needed, mode 0755) the directory `comps` inside root.
pub(crate) fn ensure_dir(
    root: &OwnedFd,
    comps: &[OsString],
    entry: &Path,
) -> Result<OwnedFd, ImageError> {
    match open_confined(root, comps) {
        Ok(fd) => return Ok(fd),
        Err(Errno::NOENT) => {}
        Err(Errno::NOTDIR) => return Err(unsafe_entry(entry, "a parent is not a directory")),
        Err(e) => return Err(io_err(format!("open parent of {}", entry.display()), e)),
    }
    let mut fd = open_confined(root, &[]).map_err(|e| io_err("open layer root", e))?;
    for i in 0..comps.len() {
        match open_confined(root, &comps[..=i]) {
            Ok(f) => fd = f,
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&fd, comps[i].as_os_str(), Mode::from_raw_mode(0o755)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(e) => {
                        return Err(io_err(format!("mkdir parent of {}", entry.display()), e))
                    }
                }
                fd = open_confined(root, &comps[..=i]).map_err(|e| {
                    if e == Errno::NOENT || e == Errno::NOTDIR {
                        unsafe_entry(entry, "a parent is a dangling symlink or not a directory")
                    } else {
                        io_err(format!("open parent of {}", entry.display()), e)
                    }
                })?;
            }
            Err(Errno::NOTDIR) => return Err(unsafe_entry(entry, "a parent is not a directory")),
            Err(e) => return Err(io_err(format!("open parent of {}", entry.display()), e)),
        }
    }
    Ok(fd)
}

/// Creates directory `rel` (and its parents, mode 0755) inside `root`,
/// resolving every component as if `root` were `/`.
pub fn mkdir_all_in_root(root: &Path, rel: &Path) -> Result<(), ImageError> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(format!("open {}", root.display()), e))?;
    ensure_dir(&root_fd, &clean(rel), rel).map(|_| ())
}

/// Where `rel` lands inside `root` once the image's symlinks along it are
/// followed as the container will follow them (confined to `root`, as for
/// [`mkdir_all_in_root`]): an absolute target restarts from the root,
/// `..` never climbs above it, a missing part is kept as written (a
/// symlink to `/proc` resolves to `/proc` whether or not the image has
/// that directory). `None` when the root cannot be opened or the links
/// loop.
pub fn resolve_in_root(root: &Path, rel: &Path) -> Option<PathBuf> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let parts = |p: &Path| -> Vec<OsString> {
        p.components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n.to_os_string()),
                Component::ParentDir => Some(OsString::from("..")),
                _ => None,
            })
            .rev()
            .collect()
    };
    let mut todo = parts(rel);
    let mut out: Vec<OsString> = Vec::new();
    let mut links = 0;
    while let Some(c) = todo.pop() {
        if c == ".." {
            out.pop();
            continue;
        }
        out.push(c);
        // Not a symlink, or not there: kept as written.
        if let Ok(target) = rustix::fs::readlinkat(&root_fd, join(&out), Vec::new()) {
            links += 1;
            if links > 40 {
                return None;
            }
            out.pop();
            let target = PathBuf::from(OsStr::from_bytes(target.as_bytes()));
            if target.is_absolute() {
                out.clear();
            }
            todo.extend(parts(&target));
        }
    }
    Some(Path::new("/").join(join(&out)))
}

/// Removes `name` in `dir` recursively, never following symlinks.
pub fn remove_all_at(dir: &impl AsFd, name: &OsStr) -> io::Result<()> {
    let st = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::NOENT) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
        let fd = rustix::fs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let mut names = Vec::new();
        {
            let mut d = rustix::fs::Dir::read_from(&fd)?;
            while let Some(ent) = d.read() {
                let ent = ent?;
                let n = ent.file_name().to_bytes();
                if n != b"." && n != b".." {
                    names.push(OsStr::from_bytes(n).to_os_string());
                }
            }
        }
        for n in names {
            remove_all_at(&fd, &n)?;
        }
        rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
    } else {
        rustix::fs::unlinkat(dir, name, AtFlags::empty())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_confines_lexically() {
        let c = |s: &str| join(&clean(Path::new(s)));
        assert_eq!(c("../../etc/passwd"), PathBuf::from("etc/passwd"));
        assert_eq!(c("/abs/x"), PathBuf::from("abs/x"));
        assert_eq!(c("./a/./b/../c"), PathBuf::from("a/c"));
        assert!(clean(Path::new("./")).is_empty());
    }

    #[test]
    fn mount_destinations_resolve_through_the_images_symlinks() {
        let t = tempfile::tempdir().expect("tmp");
        let r = t.path();
        std::fs::create_dir_all(r.join("etc")).expect("etc");
        std::os::unix::fs::symlink("/proc", r.join("p")).expect("p");
        std::os::unix::fs::symlink("../../../proc/self", r.join("etc/me")).expect("me");
        std::os::unix::fs::symlink("loop", r.join("loop")).expect("loop");
        let at = |p: &str| resolve_in_root(r, Path::new(p));
        assert_eq!(at("/p/sys"), Some(PathBuf::from("/proc/sys")));
        assert_eq!(at("/etc/me/attr"), Some(PathBuf::from("/proc/self/attr")));
        assert_eq!(at("/etc/../p"), Some(PathBuf::from("/proc")));
        assert_eq!(at("/new/dir"), Some(PathBuf::from("/new/dir")));
        assert_eq!(at("/loop/x"), None);
    }
}
