//! Applies one layer tarball onto a directory, confined to it.
//!
//! Invariants:
//! - Nothing outside `root` is ever touched. Every parent directory is opened
//!   with `openat2(RESOLVE_IN_ROOT)`, so absolute paths, `..` and symlinks
//!   (from this layer or a lower one visible in `root`) resolve as if `root`
//!   were `/`; the entry itself is then created relative to that confined
//!   directory fd and never followed.
//! - Hardlinks may only name files that exist inside `root`; anything else
//!   fails the layer with an `UnsafeEntry` error naming the entry.
//! - Whiteouts: `.wh.NAME` removes NAME from the view (overlayfs records the
//!   whiteout in the upper dir); `.wh..wh..opq` is returned as an opaque dir
//!   for the caller to mark on the upper dir. On a base layer they are no-ops.
//! - Ownership, modes (set after chown so setuid bits survive), xattrs
//!   (except `trusted.overlay.*`, which a layer must not forge), mtimes
//!   (directories last), devices, fifos, symlinks and hardlinks are kept.
//! - The uncompressed stream is hashed; the caller compares it to the diff ID.

use super::confined::{clean, ensure_dir, open_confined, remove_all_at};
use super::content::Hasher;
use super::error::ImageError;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Timespec, Timestamps};
use rustix::io::Errno;
use std::ffi::{OsStr, OsString};
use std::io::{self, BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What applying a layer produced.
#[derive(Debug, Default)]
pub struct Applied {
    /// `sha256:` of the uncompressed tar stream.
    pub diff_id: String,
    /// Directories (relative to root, as resolved) marked opaque by the layer.
    pub opaque_dirs: Vec<PathBuf>,
    /// Bytes of the uncompressed stream.
    pub uncompressed_size: u64,
}

/// Wraps `r` in the decompressor its magic bytes call for.
pub fn decompress<'a, R: Read + 'a>(r: R) -> io::Result<Box<dyn Read + 'a>> {
    let mut br = BufReader::with_capacity(256 << 10, r);
    let head = br.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::bufread::MultiGzDecoder::new(br)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Ok(Box::new(zstd::stream::read::Decoder::with_buffer(br)?))
    } else {
        Ok(Box::new(br))
    }
}

fn unsafe_entry(entry: &Path, reason: impl Into<String>) -> ImageError {
    ImageError::UnsafeEntry {
        entry: entry.display().to_string(),
        reason: reason.into(),
    }
}

fn io_err(what: impl Into<String>, e: impl Into<io::Error>) -> ImageError {
    ImageError::io(what, e.into())
}

/// `io::copy` with a 1 MiB buffer: far fewer writes for large files.
fn copy_large(r: &mut impl Read, w: &mut impl io::Write) -> io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0;
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        w.write_all(&buf[..n])?;
        total += n as u64;
    }
}

fn proc_path(dir: &OwnedFd, name: &OsStr) -> PathBuf {
    let mut p = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    p.push(name);
    p
}

/// Applies the (possibly compressed) layer `reader` onto `root`.
/// `lower_visible` is false for a base layer (whiteouts are then no-ops).
pub fn apply_layer<R: Read + Send>(
    root: &Path,
    reader: R,
    lower_visible: bool,
) -> Result<Applied, ImageError> {
    let root_fd = rustix::fs::open(
        root,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| io_err(format!("open {}", root.display()), e))?;
    // Two stages on two threads: decompress + hash, then tar + write.
    let (tx, rx) = std::sync::mpsc::sync_channel::<io::Result<Vec<u8>>>(8);
    std::thread::scope(|scope| {
        let producer = scope.spawn(move || -> io::Result<(String, u64)> {
            let mut plain = decompress(reader)?;
            let mut hasher = Hasher::sha256();
            let mut count = 0u64;
            loop {
                let mut buf = vec![0u8; CHUNK];
                let mut filled = 0;
                while filled < buf.len() {
                    match plain.read(&mut buf[filled..]) {
                        Ok(0) => break,
                        Ok(n) => filled += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            let _ = tx.send(Err(io::Error::new(e.kind(), e.to_string())));
                            return Err(e);
                        }
                    }
                }
                if filled == 0 {
                    return Ok((hasher.finish(), count));
                }
                buf.truncate(filled);
                hasher.update(&buf);
                count += filled as u64;
                if tx.send(Ok(buf)).is_err() {
                    // The extractor stopped (it has an error of its own).
                    return Ok((hasher.finish(), count));
                }
            }
        });
        let mut stream = ChannelReader {
            rx,
            cur: Vec::new(),
            pos: 0,
        };
        let extracted = extract(&root_fd, root, &mut stream, lower_visible);
        // Drain trailing padding so the digest covers the whole stream.
        let drained = extracted
            .as_ref()
            .ok()
            .map(|_| io::copy(&mut stream, &mut io::sink()));
        drop(stream);
        let produced = producer
            .join()
            .map_err(|_| ImageError::Internal("decompression thread panicked".into()))?;
        let mut applied = extracted?;
        if let Some(Err(e)) = drained {
            return Err(io_err("read layer", e));
        }
        let (diff_id, size) = produced.map_err(|e| io_err("read layer", e))?;
        applied.diff_id = diff_id;
        applied.uncompressed_size = size;
        Ok(applied)
    })
}

/// Size of the chunks passed from the decompressor to the extractor.
const CHUNK: usize = 1 << 20;

/// Reads the chunks a producer thread sends.
struct ChannelReader {
    rx: std::sync::mpsc::Receiver<io::Result<Vec<u8>>>,
    cur: Vec<u8>,
    pos: usize,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.cur.len() {
            match self.rx.recv() {
                Ok(Ok(chunk)) => {
                    self.cur = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => return Err(e),
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len() - self.pos);
        buf[..n].copy_from_slice(&self.cur[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Extracts every entry of the (uncompressed) tar `stream` into `root`.
fn extract<R: Read>(
    root_fd: &OwnedFd,
    root: &Path,
    stream: &mut R,
    lower_visible: bool,
) -> Result<Applied, ImageError> {
    let mut applied = Applied::default();
    let mut dir_times: Vec<(Vec<OsString>, i64)> = Vec::new();
    let mut archive = tar::Archive::new(stream);
    let entries = archive
        .entries()
        .map_err(|e| ImageError::Invalid(format!("layer is not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| ImageError::Invalid(format!("corrupt layer tar: {e}")))?;
        apply_entry(
            root_fd,
            root,
            &mut entry,
            lower_visible,
            &mut applied,
            &mut dir_times,
        )?;
    }
    for (comps, mtime) in dir_times.iter().rev() {
        if let Ok(fd) = open_confined(root_fd, comps) {
            let ts = Timestamps {
                last_access: Timespec {
                    tv_sec: *mtime,
                    tv_nsec: 0,
                },
                last_modification: Timespec {
                    tv_sec: *mtime,
                    tv_nsec: 0,
                },
            };
            let _ = rustix::fs::utimensat(&fd, "", &ts, AtFlags::EMPTY_PATH);
        }
    }
    Ok(applied)
}

fn apply_entry<R: Read>(
    root_fd: &OwnedFd,
    root: &Path,
    entry: &mut tar::Entry<'_, R>,
    lower_visible: bool,
    applied: &mut Applied,
    dir_times: &mut Vec<(Vec<OsString>, i64)>,
) -> Result<(), ImageError> {
    let raw_path = entry
        .path()
        .map_err(|e| ImageError::Invalid(format!("bad entry name: {e}")))?
        .into_owned();
    let kind = entry.header().entry_type();
    let comps = clean(&raw_path);
    let mtime = entry.header().mtime().unwrap_or(0) as i64;
    let mode = entry.header().mode().unwrap_or(0o644) & 0o7777;
    let uid = entry.header().uid().unwrap_or(0) as u32;
    let gid = entry.header().gid().unwrap_or(0) as u32;

    let Some((name, parent)) = comps.split_last() else {
        // The root itself: only a directory entry makes sense.
        if kind.is_dir() {
            let _ = std::os::unix::fs::chown(root, Some(uid), Some(gid));
            let _ =
                std::fs::set_permissions(root, std::os::unix::fs::PermissionsExt::from_mode(mode));
            dir_times.push((Vec::new(), mtime));
        }
        return Ok(());
    };
    let name = name.clone();
    let name_bytes = name.as_bytes();

    if let Some(target) = name_bytes.strip_prefix(b".wh.") {
        if !lower_visible {
            return Ok(());
        }
        let dir = match open_confined(root_fd, parent) {
            Ok(fd) => fd,
            Err(Errno::NOENT) | Err(Errno::NOTDIR) => return Ok(()),
            Err(e) => return Err(io_err(format!("open parent of {}", raw_path.display()), e)),
        };
        if target == b".wh..opq" {
            let real = std::fs::read_link(format!("/proc/self/fd/{}", dir.as_raw_fd()))
                .map_err(|e| io_err("resolve opaque dir", e))?;
            let rel = real
                .strip_prefix(root)
                .map_err(|_| unsafe_entry(&raw_path, "opaque dir resolves outside the layer"))?;
            applied.opaque_dirs.push(rel.to_path_buf());
        } else if target.is_empty() || target == b"." || target == b".." {
            return Err(unsafe_entry(&raw_path, "whiteout names no file"));
        } else {
            remove_all_at(&dir, OsStr::from_bytes(target))
                .map_err(|e| io_err(format!("apply whiteout {}", raw_path.display()), e))?;
        }
        return Ok(());
    }

    use tar::EntryType as T;
    let supported = matches!(
        kind,
        T::Regular
            | T::Continuous
            | T::GNUSparse
            | T::Directory
            | T::Symlink
            | T::Link
            | T::Char
            | T::Block
            | T::Fifo
    );
    if !supported {
        tracing::debug!(entry = %raw_path.display(), ?kind, "skipping unsupported tar entry type");
        return Ok(());
    }

    let dir = ensure_dir(root_fd, parent, &raw_path)?;

    // Replace whatever is there, unless both are directories.
    match rustix::fs::statat(&dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let existing_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if !(existing_dir && kind.is_dir()) {
                remove_all_at(&dir, &name)
                    .map_err(|e| io_err(format!("replace {}", raw_path.display()), e))?;
            }
        }
        Err(Errno::NOENT) => {}
        Err(e) => return Err(io_err(format!("stat {}", raw_path.display()), e)),
    }

    let create_err = |e: Errno| io_err(format!("create {}", raw_path.display()), e);
    match kind {
        T::Regular | T::Continuous | T::GNUSparse => {
            let fd = rustix::fs::openat(
                &dir,
                name.as_os_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(0o600),
            )
            .map_err(create_err)?;
            let mut f = std::fs::File::from(fd);
            copy_large(entry, &mut f)
                .map_err(|e| io_err(format!("write {}", raw_path.display()), e))?;
        }
        T::Directory => {
            match rustix::fs::mkdirat(&dir, name.as_os_str(), Mode::from_raw_mode(0o700)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(create_err(e)),
            }
        }
        T::Symlink => {
            let target = entry
                .link_name()
                .map_err(|e| {
                    ImageError::Invalid(format!("bad symlink {}: {e}", raw_path.display()))
                })?
                .ok_or_else(|| unsafe_entry(&raw_path, "symlink without a target"))?;
            rustix::fs::symlinkat(target.as_ref(), &dir, name.as_os_str()).map_err(create_err)?;
        }
        T::Link => {
            let target = entry
                .link_name()
                .map_err(|e| {
                    ImageError::Invalid(format!("bad hardlink {}: {e}", raw_path.display()))
                })?
                .ok_or_else(|| unsafe_entry(&raw_path, "hardlink without a target"))?;
            let tcomps = clean(&target);
            let Some((tname, tparent)) = tcomps.split_last() else {
                return Err(unsafe_entry(&raw_path, "hardlink to the root directory"));
            };
            let tdir = open_confined(root_fd, tparent).map_err(|_| {
                unsafe_entry(
                    &raw_path,
                    format!(
                        "hardlink target {:?} does not exist in the image",
                        target.display().to_string()
                    ),
                )
            })?;
            rustix::fs::linkat(
                &tdir,
                tname.as_os_str(),
                &dir,
                name.as_os_str(),
                AtFlags::empty(),
            )
            .map_err(|e| match e {
                Errno::NOENT | Errno::PERM | Errno::XDEV => unsafe_entry(
                    &raw_path,
                    format!(
                        "hardlink target {:?} is not a file inside the image",
                        target.display().to_string()
                    ),
                ),
                e => create_err(e),
            })?;
            // A hardlink shares its target's inode and metadata.
            return Ok(());
        }
        T::Char | T::Block | T::Fifo => {
            let ft = match kind {
                T::Char => FileType::CharacterDevice,
                T::Block => FileType::BlockDevice,
                _ => FileType::Fifo,
            };
            let major = entry.header().device_major().ok().flatten().unwrap_or(0);
            let minor = entry.header().device_minor().ok().flatten().unwrap_or(0);
            rustix::fs::mknodat(
                &dir,
                name.as_os_str(),
                ft,
                Mode::from_raw_mode(0o600),
                rustix::fs::makedev(major, minor),
            )
            .map_err(create_err)?;
        }
        _ => return Ok(()),
    }

    // Ownership, then xattrs, then mode (chown clears setuid bits), then times.
    rustix::fs::chownat(
        &dir,
        name.as_os_str(),
        Some(rustix::fs::Uid::from_raw(uid)),
        Some(rustix::fs::Gid::from_raw(gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| io_err(format!("chown {}", raw_path.display()), e))?;
    if let Ok(Some(exts)) = entry.pax_extensions() {
        for ext in exts.flatten() {
            let Ok(key) = ext.key() else { continue };
            let Some(xname) = key.strip_prefix("SCHILY.xattr.") else {
                continue;
            };
            if xname.starts_with("trusted.overlay.") {
                continue;
            }
            let r = rustix::fs::lsetxattr(
                proc_path(&dir, &name),
                xname,
                ext.value_bytes(),
                rustix::fs::XattrFlags::empty(),
            );
            if let Err(e) = r {
                if kind != T::Symlink {
                    return Err(io_err(
                        format!("set xattr {xname} on {}", raw_path.display()),
                        e,
                    ));
                }
            }
        }
    }
    if kind != T::Symlink {
        rustix::fs::chmodat(
            &dir,
            name.as_os_str(),
            Mode::from_raw_mode(mode),
            AtFlags::empty(),
        )
        .map_err(|e| io_err(format!("chmod {}", raw_path.display()), e))?;
    }
    if kind.is_dir() {
        let mut full = parent.to_vec();
        full.push(name);
        dir_times.push((full, mtime));
    } else {
        let ts = Timestamps {
            last_access: Timespec {
                tv_sec: mtime,
                tv_nsec: 0,
            },
            last_modification: Timespec {
                tv_sec: mtime,
                tv_nsec: 0,
            },
        };
        rustix::fs::utimensat(&dir, name.as_os_str(), &ts, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(|e| io_err(format!("set times on {}", raw_path.display()), e))?;
    }
    Ok(())
}
