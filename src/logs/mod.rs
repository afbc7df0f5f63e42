//! The CRI container log format, written by the shim for each container.
//!
//! Each record is one line: `<RFC3339Nano UTC> <stdout|stderr> <P|F> <text>\n`.
//! `F` ends a line the container wrote; a line longer than the maximum
//! (default 16 KiB) is cut into `P` (partial) records followed by a final
//! `F`, as the kubelet and containerd expect. Output arrives in arbitrary
//! chunks, so each stream keeps its unfinished line until the newline, the
//! maximum, or the stream's end (written as `F`). `reopen` switches to a
//! fresh file at the same path after the kubelet has renamed the old one,
//! without losing buffered text.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The default longest line before it is split into partial records.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    fn name(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// One CRI log record, borrowed from its line (without the newline).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: &'a [u8],
    pub stream: Stream,
    /// `P`: the line goes on in the next record of the stream.
    pub partial: bool,
    pub body: &'a [u8],
}

/// Parses `<time> <stdout|stderr> <tags> <body>`; tags are `:`-separated
/// and the first is `P` or `F`, as the kubelet reads them. The time is
/// taken as written. None for anything else (a foreign or torn line).
pub fn parse_line(line: &[u8]) -> Option<Record<'_>> {
    let mut f = line.splitn(4, |b| *b == b' ');
    let time = f.next().filter(|t| !t.is_empty())?;
    let stream = match f.next()? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match f.next()?.split(|b| *b == b':').next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    Some(Record {
        time,
        stream,
        partial,
        body: f.next().unwrap_or_default(),
    })
}

/// `YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ` for a time since the epoch.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        d.subsec_nanos()
    )
}

/// A container's CRI log file.
pub struct CriLogWriter {
    path: PathBuf,
    file: File,
    max_line: usize,
    pending: [Vec<u8>; 2],
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    OpenOptions::new().create(true).append(true).open(path)
}

impl CriLogWriter {
    pub fn open(path: &Path, max_line: usize) -> io::Result<CriLogWriter> {
        Ok(CriLogWriter {
            path: path.to_path_buf(),
            file: open_append(path)?,
            max_line: max_line.max(1),
            pending: [Vec::new(), Vec::new()],
        })
    }

    fn record(&mut self, stream: Stream, tag: char, text: &[u8]) -> io::Result<()> {
        let mut rec = Vec::with_capacity(text.len() + 48);
        rec.extend_from_slice(rfc3339_nano(SystemTime::now()).as_bytes());
        rec.push(b' ');
        rec.extend_from_slice(stream.name().as_bytes());
        rec.push(b' ');
        rec.push(tag as u8);
        rec.push(b' ');
        rec.extend_from_slice(text);
        rec.push(b'\n');
        // One write per record, so a concurrent reader never sees half.
        self.file.write_all(&rec)
    }

    /// Appends output of `stream`, writing every finished line.
    pub fn write(&mut self, stream: Stream, mut data: &[u8]) -> io::Result<()> {
        let i = stream as usize;
        while !data.is_empty() {
            let room = self.max_line - self.pending[i].len();
            match data.iter().take(room).position(|b| *b == b'\n') {
                Some(nl) => {
                    let mut line = std::mem::take(&mut self.pending[i]);
                    line.extend_from_slice(&data[..nl]);
                    self.record(stream, 'F', &line)?;
                    data = &data[nl + 1..];
                }
                None if data.len() >= room => {
                    let mut line = std::mem::take(&mut self.pending[i]);
                    line.extend_from_slice(&data[..room]);
                    self.record(stream, 'P', &line)?;
                    data = &data[room..];
                }
                None => {
                    self.pending[i].extend_from_slice(data);
                    data = &[];
                }
            }
        }
        Ok(())
    }

    /// The stream ended: its unfinished line is written as a full record.
    pub fn close_stream(&mut self, stream: Stream) -> io::Result<()> {
        let line = std::mem::take(&mut self.pending[stream as usize]);
        if line.is_empty() {
            return Ok(());
        }
        self.record(stream, 'F', &line)
    }

    /// Opens the path afresh (the old file was renamed away by the kubelet).
    pub fn reopen(&mut self) -> io::Result<()> {
        self.file.flush()?;
        self.file = open_append(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_nano_utc() {
        let t = UNIX_EPOCH + std::time::Duration::new(1_475_713_029, 669_794_202);
        assert_eq!(rfc3339_nano(t), "2016-10-06T00:17:09.669794202Z");
        assert_eq!(rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert!(rfc3339_nano(leap).starts_with("2000-02-29T00:00:00"));
    }

    fn records(path: &Path) -> Vec<(String, String, String)> {
        std::fs::read_to_string(path)
            .expect("read")
            .lines()
            .map(|l| {
                let mut p = l.splitn(4, ' ');
                let ts = p.next().expect("ts");
                assert!(ts.ends_with('Z') && ts.len() == 30, "{ts}");
                (
                    p.next().expect("stream").to_string(),
                    p.next().expect("tag").to_string(),
                    p.next().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn lines_partials_streams_and_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("c/0.log");
        let mut w = CriLogWriter::open(&p, 8).expect("open");
        w.write(Stream::Stdout, b"hel").expect("w");
        w.write(Stream::Stderr, b"oops\n").expect("w");
        w.write(Stream::Stdout, b"lo\nabcdefghij").expect("w");
        w.write(Stream::Stdout, b"k\n\n").expect("w");
        w.write(Stream::Stdout, b"tail").expect("w");
        std::fs::rename(&p, dir.path().join("c/0.log.1")).expect("rotate");
        w.reopen().expect("reopen");
        w.close_stream(Stream::Stdout).expect("close");
        let old = records(&dir.path().join("c/0.log.1"));
        let s = |a: &str, b: &str, c: &str| (a.to_string(), b.to_string(), c.to_string());
        assert_eq!(
            old,
            vec![
                s("stderr", "F", "oops"),
                s("stdout", "F", "hello"),
                s("stdout", "P", "abcdefgh"),
                s("stdout", "F", "ijk"),
                s("stdout", "F", ""),
            ]
        );
        assert_eq!(
            records(&p),
            vec![s("stdout", "F", "tail")],
            "nothing lost across the reopen"
        );
    }
}
