//! The CRI container log format, written by the shim for each container.
//!
//! Each record is one line: `<RFC3339Nano UTC> <stdout|stderr> <P|F> <text>\n`,
//! cut as containerd's CRI logger cuts them, so that the kubelet reads back
//! exactly what the container wrote:
//! - `F` ends a line the container ended with a newline;
//! - `P` (partial) is text whose line goes on in the stream's next record:
//!   the first maximum bytes (default 16 KiB) of a longer line, and the
//!   unfinished last line of a stream that ended (`DONE` written with no
//!   newline is `P DONE`, never a line the container did not end);
//! - a line of exactly the maximum is one `F` record.
//!
//! Output arrives in arbitrary chunks, so each stream keeps its unfinished
//! line until the newline, a byte past the maximum, or the stream's end.
//! `reopen` (the kubelet renamed the file away) ends the old file as
//! containerd does: each stream's unfinished text goes there as `P`, and
//! the line's rest starts the fresh file at the same path.

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
    /// Records dropped for want of space, not yet reported in the file.
    dropped: u64,
}

fn open_append(path: &Path) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    // The last component is never followed: a pod with a hostPath mount
    // of the log dir could leave a symlink to a node file there, and the
    // container's output would be appended to it.
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        OpenOptions::new().create(true).append(true),
        libc::O_NOFOLLOW | libc::O_NONBLOCK,
    )
    .open(path)
}

impl CriLogWriter {
    pub fn open(path: &Path, max_line: usize) -> io::Result<CriLogWriter> {
        Ok(CriLogWriter {
            path: path.to_path_buf(),
            file: open_append(path)?,
            max_line: max_line.max(1),
            pending: [Vec::new(), Vec::new()],
            dropped: 0,
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
        // A full disk drops records, counted; the first record that fits
        // again is preceded by a marker saying how many were lost. The
        // container is never blocked or failed by its log.
        if self.dropped > 0 {
            let mut marker = Vec::with_capacity(96);
            marker.extend_from_slice(rfc3339_nano(SystemTime::now()).as_bytes());
            marker.extend_from_slice(
                format!(
                    " {} F [husk: {} log records dropped: no space left on device]\n",
                    stream.name(),
                    self.dropped
                )
                .as_bytes(),
            );
            match self.append(&marker) {
                Ok(()) => self.dropped = 0,
                Err(e) if crate::sys::is_out_of_space(&e) => {
                    self.dropped += 1;
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        match self.append(&rec) {
            Err(e) if crate::sys::is_out_of_space(&e) => {
                self.dropped += 1;
                Ok(())
            }
            r => r,
        }
    }

    /// Records dropped for want of space since the last that was written.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Appends one record with as few writes as the kernel allows (so a
    /// concurrent reader never sees half); a record cut short by an error
    /// is cut off the file again, so no torn line stays.
    fn append(&mut self, rec: &[u8]) -> io::Result<()> {
        let mut done = 0;
        while done < rec.len() {
            match self.file.write(&rec[done..]) {
                Ok(0) => return self.unwrite(done, io::ErrorKind::WriteZero.into()),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.unwrite(done, e),
            }
        }
        Ok(())
    }

    fn unwrite(&mut self, written: usize, e: io::Error) -> io::Result<()> {
        if written > 0 {
            if let Ok(m) = self.file.metadata() {
                let _ = self.file.set_len(m.len().saturating_sub(written as u64));
            }
        }
        Err(e)
    }

    /// Appends output of `stream`, writing every finished line, and a `P`
    /// record of the maximum for a line that goes on past it.
    pub fn write(&mut self, stream: Stream, mut data: &[u8]) -> io::Result<()> {
        let i = stream as usize;
        while !data.is_empty() {
            let room = self.max_line - self.pending[i].len();
            // A newline right after the maximum still ends the line whole.
            match data.iter().take(room + 1).position(|b| *b == b'\n') {
                Some(nl) => {
                    let mut line = std::mem::take(&mut self.pending[i]);
                    line.extend_from_slice(&data[..nl]);
                    self.record(stream, 'F', &line)?;
                    data = &data[nl + 1..];
                }
                None if data.len() > room => {
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

    /// Writes the stream's unfinished line as a `P` record, if it has one.
    fn flush_partial(&mut self, stream: Stream) -> io::Result<()> {
        let line = std::mem::take(&mut self.pending[stream as usize]);
        if line.is_empty() {
            return Ok(());
        }
        self.record(stream, 'P', &line)
    }

    /// The stream ended: its unfinished line is written as a partial
    /// record (the container never ended it), as containerd does.
    pub fn close_stream(&mut self, stream: Stream) -> io::Result<()> {
        self.flush_partial(stream)
    }

    /// Opens the path afresh (the old file was renamed away by the
    /// kubelet), after ending the old file with each stream's unfinished
    /// text as `P`.
    pub fn reopen(&mut self) -> io::Result<()> {
        self.flush_partial(Stream::Stdout)?;
        self.flush_partial(Stream::Stderr)?;
        self.file.flush()?;
        self.file = open_append(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
