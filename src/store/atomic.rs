//! Atomic file replacement: a temp file renamed over the target.
//!
//! Two kinds of files are written this way. What must outlive the node's
//! next boot (images, their records, the node's own settings) is synced
//! before and after the rename: [`write_file`], [`write_json`]. The state
//! of pods and containers (records, bundles, the pod's hosts and
//! resolv.conf, exit records, the CNI result cache) lives only as long as
//! the node runs: every pod dies with it, and recovery discards a record it
//! cannot read together with what it stood for. Its files are replaced
//! atomically against a crash of husk, which is what they need, without
//! waiting for the disk: [`write_state_file`], [`write_state_json`],
//! [`replace_state_json`].

use serde::{de::DeserializeOwned, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

/// Writes `data` to `path` atomically and durably.
pub fn write_file(path: &Path, data: &[u8]) -> io::Result<()> {
    write_file_in(path, data, true, true)
}

/// Writes runtime state `data` to `path` atomically (not synced).
pub fn write_state_file(path: &Path, data: &[u8]) -> io::Result<()> {
    write_file_in(path, data, true, false)
}

/// Replaces runtime state at `path` atomically (not synced), failing
/// (NotFound) if its directory is gone rather than creating it again: for
/// records a concurrent removal may have deleted.
pub fn replace_state_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_file_in(path, &data, false, false)
}

fn write_file_in(path: &Path, data: &[u8], create_dir: bool, sync: bool) -> io::Result<()> {
    let dir = path.parent().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "path has no parent directory")
    })?;
    if create_dir {
        fs::create_dir_all(dir)?;
    }
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{:x}",
        name.to_string_lossy(),
        std::process::id(),
        rand::random::<u64>()
    ));
    let result = (|| {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(data)?;
        if sync {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if sync {
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Serializes `value` as JSON and writes it atomically and durably.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    write_file(path, &data)
}

/// Serializes runtime state `value` as JSON and writes it atomically (not
/// synced).
pub fn write_state_json<T: Serialize>(path: &Path, value: &T) -> io::Result<()> {
    let data = serde_json::to_vec(value).map_err(io::Error::other)?;
    write_state_file(path, &data)
}

/// Reads a JSON record; `Ok(None)` when the file does not exist.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> io::Result<Option<T>> {
    match fs::read(path) {
        Ok(data) => serde_json::from_slice(&data)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes temp files left by writes interrupted by a crash.
pub fn remove_stale_temps(dir: &Path) -> io::Result<usize> {
    let mut n = 0;
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') && name.contains(".tmp-") {
            fs::remove_file(entry.path())?;
            n += 1;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_replace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("sub/rec.json");
        write_json(&p, &vec![1, 2, 3]).expect("write");
        write_json(&p, &vec![4]).expect("replace");
        let v: Option<Vec<i32>> = read_json(&p).expect("read");
        assert_eq!(v, Some(vec![4]));
        let none: Option<Vec<i32>> = read_json(&dir.path().join("nope")).expect("missing");
        assert_eq!(none, None);
        fs::write(dir.path().join("sub/.rec.json.tmp-1-2"), b"torn").expect("stale");
        assert_eq!(
            remove_stale_temps(&dir.path().join("sub")).expect("clean"),
            1
        );
        let left: Vec<_> = fs::read_dir(dir.path().join("sub")).expect("ls").collect();
        assert_eq!(left.len(), 1);
    }
}
