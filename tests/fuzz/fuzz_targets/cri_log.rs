//! CRI log records: container output in arbitrary chunks is written as
//! records that read back to exactly that output (an unfinished last line
//! stays unfinished); and any bytes in a log
//! file (torn, foreign) are read without a panic. The kubelet API's log
//! reader gives back the same lines whether it reads the file whole or in
//! two parts.
#![no_main]
use husk::logs::{parse_line, CriLogWriter, Stream};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = husk::kubelet::managers::status::log_tail_text(data, 5, 100);
    let Some((&max, rest)) = data.split_first() else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("0.log");
    let mut w = CriLogWriter::open(&path, 1 + max as usize).expect("open");
    // Chunks cut at every 0xff byte, the streams alternating.
    let mut want = [Vec::new(), Vec::new()];
    for (i, chunk) in rest.split(|b| *b == 0xff).enumerate() {
        let s = if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr };
        want[i % 2].extend_from_slice(chunk);
        w.write(s, chunk).expect("write");
    }
    w.close_stream(Stream::Stdout).expect("close");
    w.close_stream(Stream::Stderr).expect("close");
    drop(w);
    let text = std::fs::read(&path).expect("read");
    let mut got = [Vec::new(), Vec::new()];
    let lines: Vec<&[u8]> = text.split(|b| *b == b'\n').collect();
    assert_eq!(lines.last(), Some(&&b""[..]), "every record ends with a newline");
    for l in &lines[..lines.len() - 1] {
        let r = parse_line(l).expect("every record parses");
        let g = &mut got[r.stream as usize];
        g.extend_from_slice(r.body);
        if !r.partial {
            g.push(b'\n');
        }
    }
    let opts = husk::kubelet::kit::log_reader::Options::default();
    let mut r = husk::kubelet::kit::log_reader::Reader::default();
    let mut whole = r.lines(&text, &opts);
    let ended = whole.len();
    whole.extend(r.finish(&opts));
    let cut = (max as usize * 7) % (text.len() + 1);
    let mut r = husk::kubelet::kit::log_reader::Reader::default();
    let mut parts = r.lines(&text[..cut], &opts);
    parts.extend(r.lines(&text[cut..], &opts));
    parts.extend(r.finish(&opts));
    assert_eq!(whole, parts);
    assert!(whole[..ended].iter().all(|l| l.ends_with(b"\n")));
    let total: usize = whole.iter().map(|l| l.len()).sum();
    assert_eq!(total, want.iter().map(|w| w.len()).sum::<usize>());
    // Exactly what each stream wrote: no newline added to a line the
    // container did not end.
    assert_eq!(got, want);
});
