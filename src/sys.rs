//! Thin helpers over Linux interfaces that several modules use: the mount
//! table, overlay mounts, and disk usage.

use std::ffi::CString;
use std::io;
use std::path::{Path, PathBuf};

/// Decodes the octal escapes (`\040` for space) of /proc/self/mountinfo.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Mount points at or below `dir`, deepest first.
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(unescape(m)))
        .filter(|m| m.starts_with(dir))
        .collect();
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out.dedup();
    out
}

/// Mounts an overlay at `target` with the given option string.
pub fn mount_overlay(target: &Path, opts: &str) -> io::Result<()> {
    let data = CString::new(opts).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    rustix::mount::mount(
        "overlay",
        target,
        "overlay",
        rustix::mount::MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(io::Error::from)
}

/// Bytes and inodes used under `dir` (each inode counted once).
pub fn disk_usage(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for ent in rd.flatten() {
            let Ok(md) = ent.metadata() else { continue };
            if !seen.insert((md.dev(), md.ino())) {
                continue;
            }
            bytes += md.blocks() * 512;
            if md.is_dir() {
                stack.push(ent.path());
            }
        }
    }
    (bytes, seen.len() as u64)
}

/// Limits glibc malloc arenas: a server with many short-lived blocking
/// threads otherwise keeps one arena (and its freed memory) per thread.
pub fn limit_malloc_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only tunes allocator parameters; called at start-up
    // before the runtime spawns threads.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Returns freed heap memory to the kernel after a burst of work (a pull),
/// so the idle server's RSS stays small.
pub fn release_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim has no preconditions; it only releases free pages.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
