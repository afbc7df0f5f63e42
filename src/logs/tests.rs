//! The writer's records at each edge, read back by the kubelet's rules.

use super::*;

#[test]
fn timestamps_are_rfc3339_nano_utc() {
    let t = UNIX_EPOCH + std::time::Duration::new(1_475_713_029, 669_794_202);
    assert_eq!(rfc3339_nano(t), "2016-10-06T00:17:09.669794202Z");
    assert_eq!(rfc3339_nano(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
    let leap = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
    assert!(rfc3339_nano(leap).starts_with("2000-02-29T00:00:00"));
}

/// (stream, tag, text) of each record of a file.
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

fn rec(stream: &str, tag: &str, text: &str) -> (String, String, String) {
    (stream.into(), tag.into(), text.into())
}

/// What `kubectl logs` shows of a file, by the kubelet's rules
/// (`parseCRILog`): each record's text with its newline, which is cut
/// off again when the record is partial.
fn kubelet_reads(files: &[&Path]) -> String {
    let mut out = String::new();
    for f in files {
        for (_, tag, text) in records(f) {
            out.push_str(&text);
            if tag != "P" {
                out.push('\n');
            }
        }
    }
    out
}

fn writer(max: usize) -> (tempfile::TempDir, PathBuf, CriLogWriter) {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = dir.path().join("c/0.log");
    let w = CriLogWriter::open(&p, max).expect("open");
    (dir, p, w)
}

#[test]
fn a_line_the_stream_ends_unfinished_is_partial() {
    let (_d, p, mut w) = writer(DEFAULT_MAX_LINE);
    w.write(Stream::Stdout, b"one\nDONE").expect("w");
    w.close_stream(Stream::Stdout).expect("close");
    w.close_stream(Stream::Stderr).expect("close");
    assert_eq!(
        records(&p),
        vec![rec("stdout", "F", "one"), rec("stdout", "P", "DONE")]
    );
    assert_eq!(kubelet_reads(&[&p]), "one\nDONE", "no newline added");
}

/// Chunks written, the (tag, text) records they must make, and what.
type Case = (
    &'static [&'static [u8]],
    &'static [(&'static str, &'static str)],
    &'static str,
);

#[test]
fn the_line_length_limit_cuts_only_past_the_maximum() {
    let cases: [Case; 6] = [
        (
            &[b"abcd\n"],
            &[("F", "abcd")],
            "exactly the maximum: one record",
        ),
        (
            &[b"ab", b"cd", b"\n"],
            &[("F", "abcd")],
            "the same, in chunks",
        ),
        (&[b"abcde\n"], &[("P", "abcd"), ("F", "e")], "one byte past"),
        (
            &[b"abcdefgh\n"],
            &[("P", "abcd"), ("F", "efgh")],
            "twice the maximum",
        ),
        (&[b"abcd"], &[("P", "abcd")], "the maximum, then the end"),
        (
            &[b"abcdefgh"],
            &[("P", "abcd"), ("P", "efgh")],
            "twice, then the end",
        ),
    ];
    for (chunks, want, what) in cases {
        let (_d, p, mut w) = writer(4);
        let mut sent = Vec::new();
        for c in chunks {
            w.write(Stream::Stdout, c).expect("w");
            sent.extend_from_slice(c);
        }
        w.close_stream(Stream::Stdout).expect("close");
        let want: Vec<_> = want.iter().map(|(t, b)| rec("stdout", t, b)).collect();
        assert_eq!(records(&p), want, "{what}");
        assert_eq!(kubelet_reads(&[&p]).as_bytes(), sent, "{what}");
    }
}

#[test]
fn streams_interleaved_keep_their_own_lines() {
    let (_d, p, mut w) = writer(8);
    w.write(Stream::Stdout, b"hel").expect("w");
    w.write(Stream::Stderr, b"oops\nwar").expect("w");
    w.write(Stream::Stdout, b"lo\nabcdefghij").expect("w");
    w.write(Stream::Stderr, b"ning\n").expect("w");
    w.write(Stream::Stdout, b"k\n\n").expect("w");
    w.close_stream(Stream::Stdout).expect("close");
    w.close_stream(Stream::Stderr).expect("close");
    assert_eq!(
        records(&p),
        vec![
            rec("stderr", "F", "oops"),
            rec("stdout", "F", "hello"),
            rec("stdout", "P", "abcdefgh"),
            rec("stderr", "F", "warning"),
            rec("stdout", "F", "ijk"),
            rec("stdout", "F", ""),
        ]
    );
}

#[test]
fn a_reopen_ends_the_old_file_with_the_unfinished_text() {
    let (d, p, mut w) = writer(DEFAULT_MAX_LINE);
    w.write(Stream::Stdout, b"first\nhal").expect("w");
    w.write(Stream::Stderr, b"e").expect("w");
    let old = d.path().join("c/0.log.1");
    std::fs::rename(&p, &old).expect("rotate");
    w.reopen().expect("reopen");
    w.write(Stream::Stdout, b"f line\n").expect("w");
    w.write(Stream::Stderr, b"rr\n").expect("w");
    w.reopen().expect("a reopen with nothing pending");
    w.close_stream(Stream::Stdout).expect("close");
    w.close_stream(Stream::Stderr).expect("close");
    assert_eq!(
        records(&old),
        vec![
            rec("stdout", "F", "first"),
            rec("stdout", "P", "hal"),
            rec("stderr", "P", "e"),
        ]
    );
    assert_eq!(
        records(&p),
        vec![rec("stdout", "F", "f line"), rec("stderr", "F", "rr")]
    );
    assert_eq!(
        kubelet_reads(&[&old, &p]),
        "first\nhalef line\nrr\n",
        "nothing lost or added across the reopen"
    );
}

#[test]
fn a_full_disk_drops_records_and_counts_them() {
    // /dev/full answers every write with ENOSPC.
    let mut w = CriLogWriter::open(Path::new("/dev/full"), 8).expect("open");
    w.write(Stream::Stdout, b"one\ntwo\nthree")
        .expect("not an error");
    assert_eq!(w.dropped(), 2);
    w.close_stream(Stream::Stdout).expect("not an error");
    assert_eq!(w.dropped(), 3);
}

#[test]
fn records_parse_back() {
    let r = parse_line(b"2026-01-01T00:00:00.000000001Z stderr P:x some text").expect("parses");
    assert_eq!(
        (r.stream, r.partial, r.body),
        (Stream::Stderr, true, &b"some text"[..])
    );
    let r = parse_line(b"t stdout F").expect("an empty line");
    assert_eq!(r.body, b"");
    for bad in [
        &b""[..],
        b"t",
        b"t stdin F x",
        b"t stdout X x",
        b" stdout F x",
    ] {
        assert_eq!(parse_line(bad), None, "{bad:?}");
    }
}
