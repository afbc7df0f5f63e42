//! The content store: blobs addressed by digest.
//!
//! On disk: `<root>/content/blobs/<alg>/<hex>` for committed blobs and
//! `<root>/content/ingest/<random>` for blobs being written. A writer hashes
//! while writing and commits by rename only when size and digest match the
//! descriptor, so a blob is visible only once verified. Ingest files left by
//! a crash are removed when the store opens.

use super::error::ImageError;
use sha2::{Digest as _, Sha256, Sha512};
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// A running digest of one of the supported algorithms.
#[derive(Clone)]
pub enum Hasher {
    Sha256(Sha256),
    Sha512(Sha512),
}

impl Hasher {
    /// A hasher for the algorithm of `digest` (`sha256:` or `sha512:`).
    pub fn for_digest(digest: &str) -> Result<Hasher, ImageError> {
        match digest.split_once(':').map(|(a, _)| a) {
            Some("sha256") => Ok(Hasher::Sha256(Sha256::new())),
            Some("sha512") => Ok(Hasher::Sha512(Sha512::new())),
            _ => Err(ImageError::Invalid(format!(
                "unsupported digest {digest:?}"
            ))),
        }
    }

    pub fn sha256() -> Hasher {
        Hasher::Sha256(Sha256::new())
    }

    pub fn update(&mut self, data: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(data),
            Hasher::Sha512(h) => h.update(data),
        }
    }

    /// `alg:hex` of everything fed so far.
    pub fn finish(self) -> String {
        match self {
            Hasher::Sha256(h) => format!("sha256:{}", hex::encode(h.finalize())),
            Hasher::Sha512(h) => format!("sha512:{}", hex::encode(h.finalize())),
        }
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256_digest(data: &[u8]) -> String {
    let mut h = Hasher::sha256();
    h.update(data);
    h.finish()
}

/// The store of verified blobs.
#[derive(Debug, Clone)]
pub struct ContentStore {
    blobs: PathBuf,
    ingest: PathBuf,
}

impl ContentStore {
    /// Opens (creating) the store under `root/content` and clears ingests
    /// left by a crash.
    pub fn open(root: &Path) -> io::Result<ContentStore> {
        let base = root.join("content");
        let store = ContentStore {
            blobs: base.join("blobs"),
            ingest: base.join("ingest"),
        };
        fs::create_dir_all(&store.blobs)?;
        let _ = fs::remove_dir_all(&store.ingest);
        fs::create_dir_all(&store.ingest)?;
        Ok(store)
    }

    /// Where the blob lives (whether or not it exists). `digest` must have
    /// been validated by the reference grammar or a descriptor check.
    pub fn path(&self, digest: &str) -> PathBuf {
        let (alg, hex) = digest.split_once(':').unwrap_or(("sha256", digest));
        self.blobs.join(alg).join(hex)
    }

    pub fn has(&self, digest: &str) -> bool {
        self.path(digest).is_file()
    }

    pub fn read(&self, digest: &str) -> Result<Vec<u8>, ImageError> {
        fs::read(self.path(digest)).map_err(|e| ImageError::io(format!("read blob {digest}"), e))
    }

    /// Starts writing a blob expected to have `digest` and `size`.
    pub fn writer(&self, digest: &str, size: Option<u64>) -> Result<BlobWriter, ImageError> {
        crate::reference::validate_digest(digest).map_err(ImageError::Invalid)?;
        let path = self.ingest.join(format!("{:016x}", rand::random::<u64>()));
        let file = fs::File::create(&path)
            .map_err(|e| ImageError::io(format!("create ingest {}", path.display()), e))?;
        Ok(BlobWriter {
            file: io::BufWriter::with_capacity(1 << 20, file),
            path,
            hasher: Hasher::for_digest(digest)?,
            written: 0,
            digest: digest.to_string(),
            size,
            dest: self.path(digest),
        })
    }

    /// Writes a whole in-memory blob, verifying its digest.
    pub fn put(&self, digest: &str, data: &[u8]) -> Result<(), ImageError> {
        if self.has(digest) {
            return Ok(());
        }
        let mut w = self.writer(digest, Some(data.len() as u64))?;
        w.write_all(data)
            .map_err(|e| ImageError::io(format!("write blob {digest}"), e))?;
        w.commit()
    }

    pub fn delete(&self, digest: &str) -> io::Result<()> {
        match fs::remove_file(self.path(digest)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    /// Every committed blob's digest.
    pub fn list(&self) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for alg in fs::read_dir(&self.blobs)? {
            let alg = alg?;
            let a = alg.file_name().to_string_lossy().to_string();
            for blob in fs::read_dir(alg.path())? {
                out.push(format!("{a}:{}", blob?.file_name().to_string_lossy()));
            }
        }
        Ok(out)
    }

    /// Bytes used by committed blobs.
    pub fn ingest_dir(&self) -> &Path {
        &self.ingest
    }
}

/// A blob being written; dropped without `commit` it leaves nothing.
pub struct BlobWriter {
    file: io::BufWriter<fs::File>,
    path: PathBuf,
    hasher: Hasher,
    written: u64,
    digest: String,
    size: Option<u64>,
    dest: PathBuf,
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some(size) = self.size {
            if self.written + buf.len() as u64 > size {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "blob {} is larger than its declared {size} bytes",
                        self.digest
                    ),
                ));
            }
        }
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl BlobWriter {
    /// The ingest file being written.
    pub fn ingest_path(&self) -> &Path {
        &self.path
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Verifies size and digest and moves the blob into place.
    pub fn commit(mut self) -> Result<(), ImageError> {
        self.file
            .flush()
            .map_err(|e| ImageError::io(format!("flush blob {}", self.digest), e))?;
        if let Some(size) = self.size {
            if self.written != size {
                return Err(ImageError::SizeMismatch {
                    digest: self.digest.clone(),
                    expected: size,
                    actual: self.written,
                });
            }
        }
        let actual = self.hasher.clone().finish();
        if actual != self.digest {
            return Err(ImageError::DigestMismatch {
                expected: self.digest.clone(),
                actual,
            });
        }
        if let Some(dir) = self.dest.parent() {
            fs::create_dir_all(dir)
                .map_err(|e| ImageError::io(format!("create {}", dir.display()), e))?;
        }
        fs::rename(&self.path, &self.dest)
            .map_err(|e| ImageError::io(format!("commit blob {}", self.digest), e))?;
        Ok(())
    }
}

impl Drop for BlobWriter {
    fn drop(&mut self) {
        // After a successful commit the ingest path no longer exists.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_commit_and_refusals() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let d = sha256_digest(b"hello");
        cs.put(&d, b"hello").expect("put");
        assert_eq!(cs.read(&d).expect("read"), b"hello");
        assert_eq!(cs.list().expect("list"), vec![d.clone()]);

        let other = sha256_digest(b"other");
        let e = cs
            .put(&other, b"hellx")
            .expect_err("wrong size is caught first");
        assert!(matches!(e, ImageError::DigestMismatch { .. }), "{e}");
        assert!(!cs.has(&other));
        let mut w = cs.writer(&other, Some(3)).expect("writer");
        assert!(w.write_all(b"toolong").is_err());
        drop(w);
        assert_eq!(fs::read_dir(cs.ingest_dir()).expect("ingest").count(), 0);
    }
}
