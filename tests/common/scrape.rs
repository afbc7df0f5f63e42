//! Scraping husk's Prometheus endpoint over 127.0.0.1.

use std::io::{Read, Write};

/// The text of `/metrics` on `port`, checked to be the exposition format.
pub fn scrape(port: u16) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    assert!(out.contains("text/plain; version=0.0.4"), "{out}");
    out
}

/// The value of the sample `name{labels}` (labels as written), 0 if absent.
pub fn value(text: &str, sample: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0.0)
}
