//! The network's share of a pod's start, for a runtime that exports it
//! (husk's `husk_cni_duration_seconds{op="add"}`): the density fill reads
//! the histogram's sum and count before and after each checkpoint's window
//! of starts, and reports the mean start less the mean CNI ADD (all the
//! plugins of the pod's network) of the same pods, the runtime's own share.
//! A peer that exports no such figure gets none.

use std::time::Duration;

/// A CNI ADD histogram's running totals: seconds, and ADDs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AddTotals {
    pub seconds: f64,
    pub count: f64,
}

/// The totals in the text of a Prometheus scrape; None when it has none.
pub fn parse(text: &str) -> Option<AddTotals> {
    let value = |suffix: &str| {
        text.lines().find_map(|l| {
            let (name, rest) = l.split_once('{')?;
            let (labels, v) = rest.split_once('}')?;
            (name.ends_with(suffix) && labels.split(',').any(|x| x.trim() == r#"op="add""#))
                .then(|| v.trim().parse::<f64>().ok())
                .flatten()
        })
    };
    Some(AddTotals {
        seconds: value("cni_duration_seconds_sum")?,
        count: value("cni_duration_seconds_count")?,
    })
}

/// A plain `GET /metrics` of `addr`: the response, when it is a 200.
pub async fn get_metrics(addr: &str) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .ok()?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.ok()?;
    out.starts_with(b"HTTP/1.1 200").then_some(out)
}

/// The totals a `GET /metrics` of `addr` reports now (zero before the
/// first ADD, when the histogram has no series yet); None if it does not
/// answer.
pub async fn read(addr: &str) -> Option<AddTotals> {
    let out = get_metrics(addr).await?;
    Some(parse(&String::from_utf8_lossy(&out)).unwrap_or(AddTotals {
        seconds: 0.0,
        count: 0.0,
    }))
}

/// The mean of `starts` less the mean CNI ADD between `before` and
/// `after`, in ms: None without both, or without an ADD between them.
pub fn own_share_ms(
    starts: &[Duration],
    before: Option<AddTotals>,
    after: Option<AddTotals>,
) -> Option<f64> {
    let (b, a) = (before?, after?);
    let adds = a.count - b.count;
    if starts.is_empty() || adds < 1.0 {
        return None;
    }
    let mean_start = starts.iter().map(Duration::as_secs_f64).sum::<f64>() / starts.len() as f64;
    Some((mean_start - (a.seconds - b.seconds) / adds) * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = "HTTP/1.1 200 OK\r\n\r\n\
        # TYPE husk_cni_duration_seconds histogram\n\
        husk_cni_duration_seconds_sum{op=\"del\"} 9.0\n\
        husk_cni_duration_seconds_count{op=\"del\"} 3\n\
        husk_cni_duration_seconds_bucket{le=\"0.001\",op=\"add\"} 0\n\
        husk_cni_duration_seconds_sum{op=\"add\"} 1.5\n\
        husk_cni_duration_seconds_count{op=\"add\"} 30\n";

    #[test]
    fn the_adds_totals_are_read_and_not_the_dels() {
        assert_eq!(
            parse(SCRAPE),
            Some(AddTotals {
                seconds: 1.5,
                count: 30.0
            })
        );
        assert_eq!(parse("husk_grpc_requests_total{method=\"x\"} 1\n"), None);
    }

    #[test]
    fn the_share_is_the_mean_start_less_the_mean_add_of_the_window() {
        let starts = [Duration::from_millis(80), Duration::from_millis(120)];
        let before = AddTotals {
            seconds: 1.0,
            count: 10.0,
        };
        // Two ADDs of 30 ms on average: 100 - 30 ms.
        let after = AddTotals {
            seconds: 1.06,
            count: 12.0,
        };
        let s = own_share_ms(&starts, Some(before), Some(after)).expect("a share");
        assert!((s - 70.0).abs() < 1e-6, "{s}");
        assert_eq!(own_share_ms(&starts, Some(before), Some(before)), None);
        assert_eq!(own_share_ms(&starts, None, Some(after)), None);
        assert_eq!(own_share_ms(&[], Some(before), Some(after)), None);
    }
}
