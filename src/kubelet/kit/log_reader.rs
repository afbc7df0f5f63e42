//! A container's CRI log file read back as lines, as the kubelet's log
//! reader does: records (`<time> <stream> <P|F> <text>`) are joined into
//! lines (a partial record continues in the next record of its stream),
//! dated by their first record, filtered by `since` and, with
//! `timestamps`, prefixed with their time. The kubelet API's
//! `/containerLogs` and the status's termination message both read logs
//! through it.

use crate::logs::{parse_line, Stream};
use k8s_openapi::jiff::Timestamp;

#[derive(Debug, Default, Clone)]
pub struct Options {
    pub tail: Option<usize>,
    pub timestamps: bool,
    pub since: Option<Timestamp>,
    pub limit_bytes: Option<usize>,
}

/// Turns records into lines; keeps partial lines across reads.
#[derive(Default)]
pub struct Reader {
    pending: [Vec<u8>; 2],
    first_time: [Option<Vec<u8>>; 2],
    /// Bytes of an unfinished record (no newline yet).
    carry: Vec<u8>,
}

impl Reader {
    /// The complete lines in `data` (after what was carried over).
    pub fn lines(&mut self, data: &[u8], opts: &Options) -> Vec<Vec<u8>> {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(data);
        let end = buf
            .iter()
            .rposition(|b| *b == b'\n')
            .map(|i| i + 1)
            .unwrap_or(0);
        self.carry = buf[end..].to_vec();
        let mut out = Vec::new();
        for raw in buf[..end].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let Some(r) = parse_line(raw) else { continue };
            let i = match r.stream {
                Stream::Stdout => 0,
                Stream::Stderr => 1,
            };
            if self.first_time[i].is_none() {
                self.first_time[i] = Some(r.time.to_vec());
            }
            self.pending[i].extend_from_slice(r.body);
            if r.partial {
                continue;
            }
            out.extend(self.take_line(i, true, opts));
        }
        out
    }

    /// The text of partial records no full one ended: a stream's last
    /// line, which its container never finished (shown without a newline,
    /// as the kubelet shows it).
    pub fn finish(&mut self, opts: &Options) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        for i in 0..2 {
            if !self.pending[i].is_empty() {
                out.extend(self.take_line(i, false, opts));
            }
        }
        out
    }

    /// Stream `i`'s joined line, dated by its first record; None when
    /// `since` leaves it out.
    fn take_line(&mut self, i: usize, ended: bool, opts: &Options) -> Option<Vec<u8>> {
        let time = self.first_time[i].take().unwrap_or_default();
        let mut line = std::mem::take(&mut self.pending[i]);
        let when = std::str::from_utf8(&time)
            .ok()
            .and_then(|t| t.parse::<Timestamp>().ok());
        if let (Some(since), Some(w)) = (opts.since, when) {
            if w < since {
                return None;
            }
        }
        if ended {
            line.push(b'\n');
        }
        if opts.timestamps {
            let mut t = time;
            t.push(b' ');
            t.extend_from_slice(&line);
            line = t;
        }
        Some(line)
    }
}
