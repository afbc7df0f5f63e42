//! Per-interface traffic counters of a network namespace.
//!
//! The kernel's `/proc/<task>/net/dev` shows the namespace of that task, so
//! the counters of a pod are read on a short-lived thread that has joined
//! the pod's pinned namespace (`netns::in_netns`), never on a runtime worker
//! thread.

use std::io;
use std::path::{Path, PathBuf};

/// One interface's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub rx_errors: u64,
    pub rx_dropped: u64,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub tx_errors: u64,
    pub tx_dropped: u64,
}

/// Parses `/proc/net/dev` text (two header lines, then `name: rx… tx…`).
pub fn parse(text: &str) -> Vec<Counters> {
    text.lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            if f.len() < 16 {
                return None;
            }
            Some(Counters {
                name: name.trim().to_string(),
                rx_bytes: f[0],
                rx_packets: f[1],
                rx_errors: f[2],
                rx_dropped: f[3],
                tx_bytes: f[8],
                tx_packets: f[9],
                tx_errors: f[10],
                tx_dropped: f[11],
            })
        })
        .collect()
}

fn read_here() -> io::Result<Vec<Counters>> {
    std::fs::read_to_string("/proc/thread-self/net/dev").map(|t| parse(&t))
}

/// The counters of every interface in the namespace pinned at `netns`.
pub fn read(netns: &Path) -> io::Result<Vec<Counters>> {
    super::netns::in_netns(netns, read_here)
}

/// The counters of each namespace of `pinned`, in order, all read on one
/// thread.
pub fn read_each(pinned: Vec<PathBuf>) -> Vec<io::Result<Vec<Counters>>> {
    super::netns::in_each_netns(pinned, read_here)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_net_dev() {
        let t = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:     140       2    0    0    0     0          0         0      140       2    0    0    0     0       0          0
  eth0: 1234567    890    1    2    0     0          0         0   765432     321    3    4    0     0       0          0
";
        let v = parse(t);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].name, "eth0");
        assert_eq!(
            (
                v[1].rx_bytes,
                v[1].rx_packets,
                v[1].rx_errors,
                v[1].rx_dropped
            ),
            (1234567, 890, 1, 2)
        );
        assert_eq!(
            (
                v[1].tx_bytes,
                v[1].tx_packets,
                v[1].tx_errors,
                v[1].tx_dropped
            ),
            (765432, 321, 3, 4)
        );
    }
}
