//! Thin helpers over Linux interfaces that several modules use: the clock,
//! a full disk, the mount table, overlay mounts, and disk usage.

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

/// Nanoseconds since the Unix epoch, now (0 before it).
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Whether an I/O error means the disk (or the quota) is full.
pub fn is_out_of_space(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || e.kind() == std::io::ErrorKind::StorageFull
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

/// Whether the topmost mount at `point` (an absolute, canonical path) takes
/// part in propagation (shared, or a slave of another); None when nothing
/// is mounted at `point` itself.
pub fn propagates(point: &Path) -> Option<bool> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    propagates_in(point, &text)
}

fn propagates_in(point: &Path, mountinfo: &str) -> Option<bool> {
    mountinfo.lines().rev().find_map(|l| {
        let (left, _) = l.split_once(" - ")?;
        let fields: Vec<&str> = left.split(' ').collect();
        (Path::new(&unescape(fields.get(4)?)) == point).then(|| {
            fields
                .iter()
                .skip(6)
                .any(|o| o.starts_with("shared:") || o.starts_with("master:"))
        })
    })
}

/// Whether the topmost mount at `dir` (absolute, canonical) is a bind of
/// `dir` onto itself: of the same file system as the mount beneath it, and
/// of the same directory of it (as `podns::keep_private` binds the
/// server's root and state), not a file system of its own mounted there.
pub fn bound_onto_itself(dir: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map(|t| bound_onto_itself_in(dir, &t))
        .unwrap_or(false)
}

fn bound_onto_itself_in(dir: &Path, mountinfo: &str) -> bool {
    // (id, parent, device, root, point)
    let mounts: Vec<(&str, &str, &str, PathBuf, PathBuf)> = mountinfo
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.splitn(6, ' ').collect();
            Some((
                *f.first()?,
                *f.get(1)?,
                *f.get(2)?,
                PathBuf::from(unescape(f.get(3)?)),
                PathBuf::from(unescape(f.get(4)?)),
            ))
        })
        .collect();
    let Some(top) = mounts.iter().rev().find(|m| m.4 == dir) else {
        return false;
    };
    let Some(under) = mounts.iter().find(|m| m.0 == top.1) else {
        return false;
    };
    let Ok(rel) = dir.strip_prefix(&under.4) else {
        return false;
    };
    let same_dir = if rel.as_os_str().is_empty() {
        under.3.clone()
    } else {
        under.3.join(rel)
    };
    top.2 == under.2 && top.3 == same_dir
}

/// Mount points at `dir` or below it, at most `depth` levels down, deepest
/// first, found without reading the mount table: on a node of a thousand
/// pods `/proc/self/mountinfo` has thousands of lines, and reading it per
/// pod's teardown grows with the node. Each entry is asked whether it is
/// the root of a mount (`statx`'s `STATX_ATTR_MOUNT_ROOT`, Linux 5.8); the
/// walk follows no symlink and does not go into a mount (detaching it
/// takes what is mounted below). Husk mounts at most two levels below a
/// container's or a pod's dir. A kernel that cannot tell: the mount table
/// is read (`mounts_under`).
pub fn mounts_within(dir: &Path, depth: usize) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![(dir.to_path_buf(), 0usize)];
    while let Some((path, level)) = todo.pop() {
        match is_mount_root(&path) {
            Some(true) => {
                out.push(path);
                continue;
            }
            Some(false) => {}
            None => return mounts_under(dir),
        }
        if level >= depth {
            continue;
        }
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !is_dir {
            continue;
        }
        for e in std::fs::read_dir(&path).into_iter().flatten().flatten() {
            todo.push((e.path(), level + 1));
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// Unmounts (lazily) each mount [`mounts_within`] finds, in the mount
/// namespace of the calling thread. One that went meanwhile (a mount
/// beneath one unmounted before it, or one a runtime took down) is not an
/// error.
pub fn unmount_within(dir: &Path, depth: usize) -> io::Result<()> {
    for m in mounts_within(dir, depth) {
        match rustix::mount::unmount(&m, rustix::mount::UnmountFlags::DETACH) {
            Ok(()) | Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Whether `path` (not followed if a symlink) is the root of a mount;
/// Some(false) if it does not exist; None if the kernel cannot tell.
fn is_mount_root(path: &Path) -> Option<bool> {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, CWD};
    match rustix::fs::statx(
        CWD,
        path,
        AtFlags::NO_AUTOMOUNT | AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::empty(),
    ) {
        Ok(r) => r
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
            .then(|| r.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)),
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => Some(false),
        Err(_) => None,
    }
}

/// The overlay options of `lowers` (top first) over `upper` and `work`.
pub fn overlay_options(lowers: &[PathBuf], upper: &Path, work: &Path) -> String {
    let lower: Vec<String> = lowers.iter().map(|p| p.display().to_string()).collect();
    format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.join(":"),
        upper.display(),
        work.display()
    )
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

/// Bytes and inodes used under `dir` (each inode counted once). The walk
/// goes by descriptor, each dir opened `O_NOFOLLOW` relative to its
/// parent: `dir` may be a container's writable layer, whose owner can
/// swap a directory for a symlink to the node's `/` mid-walk.
pub fn disk_usage(dir: &Path) -> (u64, u64) {
    use rustix::fs::{AtFlags, FileType, Mode, OFlags};
    let open = |at: &dyn std::os::fd::AsFd, name: &std::ffi::CStr| {
        rustix::fs::openat(
            at,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
    };
    let Ok(top) = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return (0, 0);
    };
    let mut seen = std::collections::HashSet::new();
    let mut bytes = 0u64;
    // Dirs still to walk, as (parent, name): opened only when walked, so
    // the descriptors held are those of the path being walked, however
    // wide the tree.
    type Pending = (std::rc::Rc<std::os::fd::OwnedFd>, std::ffi::CString);
    let mut stack: Vec<Pending> = Vec::new();
    let mut next = Some(top);
    loop {
        let d = match next.take() {
            Some(d) => std::rc::Rc::new(d),
            None => match stack.pop() {
                Some((parent, name)) => match open(&*parent, &name) {
                    Ok(d) => std::rc::Rc::new(d),
                    Err(_) => continue,
                },
                None => break,
            },
        };
        let Ok(mut rd) = rustix::fs::Dir::read_from(&*d) else {
            continue;
        };
        while let Some(Ok(ent)) = rd.read() {
            let name = ent.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let Ok(st) = rustix::fs::statat(&*d, name, AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            if !seen.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            bytes += st.st_blocks as u64 * 512;
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                stack.push((d.clone(), name.to_owned()));
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

/// Keeps what the server inherited to itself, and drops what it must not
/// hand down: every descriptor above
/// stderr is marked close-on-exec (a unit's socket-activation
/// descriptors, a parent's pipes: husk uses none, and no shim or
/// container may inherit them), and the socket-activation variables
/// that would describe them are dropped. Called at start-up, before the
/// runtime spawns threads.
pub fn keep_inherited_to_self() {
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on
    // this process's descriptors.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3u32,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if r != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "could not mark inherited descriptors close-on-exec");
    }
    for v in ["LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"] {
        std::env::remove_var(v);
    }
    // Nor does it keep what its parent's shell had: no supplementary
    // groups, no inheritable or ambient capabilities (its shims, started
    // from it, would inherit them; every spec pins them empty as well).
    // SAFETY: setgroups with an empty list, before any thread is started.
    if unsafe { libc::setgroups(0, std::ptr::null()) } != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "could not drop supplementary groups");
    }
    let cleared = caps::clear(None, caps::CapSet::Ambient)
        .and_then(|()| caps::clear(None, caps::CapSet::Inheritable));
    if let Err(e) = cleared {
        tracing::warn!(error = %e, "could not clear inheritable and ambient capabilities");
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

/// Drops what this process holds resident without using it: freed heap
/// (`release_memory`) and the page-table entries of its binary's read-only
/// mappings (code, constants). Those pages stay in the page cache, shared
/// with every husk process, and are mapped back (a minor fault per few
/// pages) when next used. Only mappings that were never written are
/// dropped (no anonymous pages: the relocated read-only data is left
/// alone), so nothing is lost.
pub fn trim_resident() {
    if let (Ok(exe), Ok(smaps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::File::open("/proc/self/smaps"),
    ) {
        // Read a line at a time: the whole text (tens of kB) would grow
        // the heap by as much again.
        let lines = std::io::BufRead::lines(std::io::BufReader::new(smaps));
        for (lo, hi) in clean_ranges(lines.map_while(Result::ok), &exe.to_string_lossy()) {
            // SAFETY: [lo, hi) is a private, read-only mapping of the binary
            // with no anonymous (written) page; MADV_DONTNEED only drops its
            // page-table entries and the pages are read back from the file on
            // the next access.
            unsafe {
                libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_DONTNEED);
            }
        }
    }
    // Last, so that what the trim itself allocated is released too.
    release_memory();
}

/// The mappings of `exe` in a /proc/<pid>/smaps text that are not
/// writable and hold no anonymous page.
fn clean_ranges<S: AsRef<str>>(
    smaps: impl IntoIterator<Item = S>,
    exe: &str,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, usize)> = None;
    for l in smaps {
        let l = l.as_ref();
        let mut f = l.split_whitespace();
        let Some(first) = f.next() else { continue };
        if let Some((lo, hi)) = first.split_once('-') {
            // A mapping's header: range perms offset dev inode [path].
            let perms = f.next().unwrap_or("");
            let path = f.nth(3);
            current = None;
            if perms.starts_with('r')
                && !perms.contains('w')
                && perms.ends_with('p')
                && path == Some(exe)
                && f.next().is_none()
            {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    current = Some((lo, hi));
                }
            }
        } else if first == "Anonymous:" {
            if let Some(r) = current.take() {
                if f.next() == Some("0") {
                    out.push(r);
                }
            }
        }
    }
    out
}

/// `openat2(2)`, asked again while the kernel answers EAGAIN: with
/// `RESOLVE_BENEATH` or `RESOLVE_IN_ROOT` it does when a rename or a mount
/// anywhere on the node raced the resolution of a `..` (openat2(2) says
/// to retry). A bounded number of times: then EAGAIN is the answer.
pub fn openat2<Fd: std::os::fd::AsFd, P: rustix::path::Arg + Copy>(
    dir: Fd,
    path: P,
    oflags: rustix::fs::OFlags,
    mode: rustix::fs::Mode,
    resolve: rustix::fs::ResolveFlags,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    let mut tries = 0;
    loop {
        match rustix::fs::openat2(dir.as_fd(), path, oflags, mode, resolve) {
            Err(rustix::io::Errno::AGAIN) if tries < 64 => tries += 1,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dir_bound_onto_itself_is_told_from_a_file_system_mounted_there() {
        let table = "\
21 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw
30 21 8:1 /var/lib/husk /var/lib/husk rw - ext4 /dev/sda1 rw
31 21 0:40 / /run rw shared:5 - tmpfs tmpfs rw
32 31 0:40 /husk /run/husk rw - tmpfs tmpfs rw
40 21 8:17 / /srv/disk rw - ext4 /dev/sdb1 rw
41 40 8:17 / /srv/disk rw - ext4 /dev/sdb1 rw
42 21 8:1 /elsewhere /srv/other rw - ext4 /dev/sda1 rw
43 21 8:1 /with\\040space /with\\040space rw - ext4 /dev/sda1 rw
";
        let b = |d: &str| super::bound_onto_itself_in(std::path::Path::new(d), table);
        assert!(b("/var/lib/husk"));
        assert!(b("/run/husk"));
        // A disk at a dir, and that disk's dir bound onto itself.
        assert!(b("/srv/disk"));
        assert!(!super::bound_onto_itself_in(
            std::path::Path::new("/srv/disk"),
            "21 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 21 8:17 / /srv/disk rw - ext4 /dev/sdb1 rw\n"
        ));
        // Another dir of the same file system bound there; no mount at all.
        assert!(!b("/srv/other"));
        assert!(!b("/var/lib/none"));
        assert!(b("/with space"));
    }

    use super::*;

    #[test]
    fn only_the_binarys_unwritten_read_only_mappings_are_trimmed() {
        let smaps = "\
00200000-00783000 r--p 00000000 fd:01 42 /usr/bin/husk
Rss:                 512 kB
Anonymous:             0 kB
00783000-02016000 r-xp 00583000 fd:01 42 /usr/bin/husk
Rss:                1088 kB
Anonymous:             0 kB
02016000-0201a000 r--p 01e16000 fd:01 42 /usr/bin/husk
Rss:                  16 kB
Anonymous:            16 kB
0201a000-0201c000 rw-p 01e1a000 fd:01 42 /usr/bin/husk
Anonymous:             8 kB
7f00-7f10 r-xp 00026000 fd:01 7 /usr/lib/x86_64-linux-gnu/libc.so.6
Anonymous:             0 kB
7f20-7f30 r-xp 00000000 fd:01 43 /usr/bin/husk (deleted)
Anonymous:             0 kB
7ffd-7ffe rw-p 00000000 00:00 0 [stack]
Anonymous:             4 kB
";
        assert_eq!(
            clean_ranges(smaps.lines(), "/usr/bin/husk"),
            vec![(0x200000, 0x783000), (0x783000, 0x2016000)]
        );
        // After a real trim this process still runs its code and reads its
        // constants.
        trim_resident();
        assert_eq!(clean_ranges("".lines(), "/x"), vec![]);
        assert_eq!(unescape("/a\\040b"), "/a b");
    }

    #[test]
    fn the_topmost_mount_at_a_point_tells_its_propagation() {
        let info = "\
22 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 22 0:40 / /var/lib/husk rw shared:1 - ext4 /dev/vda rw
31 30 0:40 / /var/lib/husk rw - ext4 /dev/vda rw
32 22 0:41 / /run/a\\040b rw master:7 - tmpfs t rw
";
        assert_eq!(propagates_in(Path::new("/"), info), Some(true));
        // The bind on top, private, is what counts.
        assert_eq!(propagates_in(Path::new("/var/lib/husk"), info), Some(false));
        assert_eq!(propagates_in(Path::new("/run/a b"), info), Some(true));
        assert_eq!(propagates_in(Path::new("/run"), info), None);
    }

    #[test]
    fn finds_the_mounts_of_a_dir_without_the_mount_table() {
        use rustix::mount::{mount, unmount, MountFlags, UnmountFlags};
        let d = tempfile::tempdir().expect("tempdir");
        let (top, deep) = (d.path().join("rootfs"), d.path().join("vols/1"));
        for p in [&top, &deep, &d.path().join("plain/a/b/c")] {
            std::fs::create_dir_all(p).expect("mkdir");
        }
        std::os::unix::fs::symlink("/", d.path().join("escape")).expect("symlink");
        for p in [&top, &deep] {
            mount("tmpfs", p, "tmpfs", MountFlags::empty(), None).expect("mount tmpfs");
        }
        // A mount below a mount is left to the detach of the one above.
        std::fs::create_dir(top.join("inner")).expect("mkdir");
        mount(
            "tmpfs",
            top.join("inner"),
            "tmpfs",
            MountFlags::empty(),
            None,
        )
        .expect("mount");
        let found = mounts_within(d.path(), 3);
        assert_eq!(found, vec![deep.clone(), top.clone()], "deepest first");
        let table: Vec<PathBuf> = mounts_under(d.path());
        assert!(table.contains(&top.join("inner")) && table.contains(&deep));
        for m in &found {
            unmount(m, UnmountFlags::DETACH).expect("unmount");
        }
        assert!(mounts_under(d.path()).is_empty());
        assert!(mounts_within(d.path(), 3).is_empty());
        assert!(mounts_within(&d.path().join("gone"), 3).is_empty());
    }

    #[test]
    fn unescapes_mountinfo() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
    }
}
