//! Reading a blob while it downloads, so a layer unpacks as it streams in.
//!
//! The downloader publishes a [`Feed`] on a watch channel: the ingest file's
//! path, how many bytes are flushed to it, and whether the blob was
//! committed (size and digest verified) or failed. A [`FollowReader`] reads
//! the ingest file up to the flushed length and waits for more, like
//! `tail -f`. Unpacking thus overlaps the download; the snapshot is still
//! committed only after the download task reports the blob verified.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use tokio::sync::watch;

/// What a downloader has done so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Feed {
    /// The ingest file, once the download has started.
    pub path: Option<PathBuf>,
    /// Bytes flushed to the ingest file.
    pub written: u64,
    pub state: FeedState,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub enum FeedState {
    #[default]
    Running,
    /// Verified and in the content store.
    Committed,
    Failed,
}

/// Reads a blob that may still be downloading (blocking; use off the runtime).
pub struct FollowReader {
    rx: watch::Receiver<Feed>,
    committed: PathBuf,
    file: Option<File>,
    pos: u64,
}

impl FollowReader {
    /// `committed` is where the blob lives once committed.
    pub fn new(rx: watch::Receiver<Feed>, committed: PathBuf) -> FollowReader {
        FollowReader {
            rx,
            committed,
            file: None,
            pos: 0,
        }
    }

    fn open(&mut self, feed: &Feed) -> io::Result<()> {
        if self.file.is_some() {
            return Ok(());
        }
        let path = match (feed.state, &feed.path) {
            (FeedState::Committed, _) => self.committed.clone(),
            (_, Some(p)) => p.clone(),
            (_, None) => return Ok(()),
        };
        self.file = match File::open(&path) {
            Ok(f) => Some(f),
            // Renamed into the store between the publish and the open.
            Err(e) if e.kind() == io::ErrorKind::NotFound => Some(File::open(&self.committed)?),
            Err(e) => return Err(e),
        };
        Ok(())
    }
}

impl Read for FollowReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let feed = self.rx.borrow_and_update().clone();
            if feed.state == FeedState::Failed {
                return Err(io::Error::other("the layer download failed"));
            }
            self.open(&feed)?;
            if let Some(f) = &self.file {
                let done = feed.state == FeedState::Committed;
                let avail = if done {
                    buf.len() as u64
                } else {
                    feed.written.saturating_sub(self.pos)
                };
                if avail > 0 {
                    let want = (buf.len() as u64).min(avail) as usize;
                    let n = f.read_at(&mut buf[..want], self.pos)?;
                    if n > 0 || done {
                        self.pos += n as u64;
                        return Ok(n);
                    }
                }
            }
            futures::executor::block_on(self.rx.changed())
                .map_err(|_| io::Error::other("the layer download ended without a result"))?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn follows_a_growing_file_then_the_committed_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ingest = dir.path().join("ingest");
        let committed = dir.path().join("blob");
        let (tx, rx) = watch::channel(Feed::default());
        let mut f = File::create(&ingest).expect("create");
        let reader = std::thread::spawn({
            let committed = committed.clone();
            move || {
                let mut out = Vec::new();
                FollowReader::new(rx, committed)
                    .read_to_end(&mut out)
                    .map(|_| out)
            }
        });
        tx.send_modify(|s| s.path = Some(ingest.clone()));
        for i in 0..50u8 {
            f.write_all(&[i; 1000]).expect("write");
            tx.send_modify(|s| s.written += 1000);
        }
        std::fs::rename(&ingest, &committed).expect("rename");
        tx.send_modify(|s| s.state = FeedState::Committed);
        let out = reader.join().expect("join").expect("read");
        assert_eq!(out.len(), 50_000);
        assert!(out
            .chunks(1000)
            .enumerate()
            .all(|(i, c)| c.iter().all(|b| *b == i as u8)));
    }

    #[test]
    fn a_failed_download_is_an_error() {
        let (tx, rx) = watch::channel(Feed::default());
        let reader = std::thread::spawn(move || {
            FollowReader::new(rx, "/nonexistent".into()).read(&mut [0u8; 8])
        });
        tx.send_modify(|s| s.state = FeedState::Failed);
        assert!(reader.join().expect("join").is_err());
    }
}
