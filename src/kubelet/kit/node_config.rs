//! The node's resource settings as the kubelet's flags spell them, parsed
//! and checked before anything runs: reservations (`--kube-reserved`,
//! `--system-reserved`: `cpu=100m,memory=256Mi,pid=1000`), what node
//! allocatable is enforced on (`--enforce-node-allocatable`), eviction
//! thresholds (`--eviction-hard`, `--eviction-soft`:
//! `memory.available<100Mi,nodefs.available<10%`) with their grace
//! periods, and the image GC thresholds. A value that does not parse is
//! an error naming it; `husk kubelet` refuses to start on it.

use super::quantity;
use std::collections::HashMap;
use std::time::Duration;

/// Resources kept back from pods (`--kube-reserved`, `--system-reserved`).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Reservation {
    pub cpu_milli: i64,
    pub memory: i64,
    pub pids: i64,
    pub ephemeral_storage: i64,
}

impl Reservation {
    pub fn plus(&self, o: &Reservation) -> Reservation {
        Reservation {
            cpu_milli: self.cpu_milli + o.cpu_milli,
            memory: self.memory + o.memory,
            pids: self.pids + o.pids,
            ephemeral_storage: self.ephemeral_storage + o.ephemeral_storage,
        }
    }
}

/// `cpu=100m,memory=256Mi,pid=1000,ephemeral-storage=1Gi` (any subset).
pub fn parse_reservation(s: &str) -> Result<Reservation, String> {
    let mut r = Reservation::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected RESOURCE=QUANTITY"))?;
        let q = |f: fn(&str) -> Result<i64, quantity::QuantityError>| {
            f(v).map_err(|e| format!("{k}: {e}")).and_then(|n| {
                if n < 0 {
                    Err(format!("{k}: {v:?} is negative"))
                } else {
                    Ok(n)
                }
            })
        };
        match k {
            "cpu" => r.cpu_milli = q(quantity::milli_value)?,
            "memory" => r.memory = q(quantity::value)?,
            "pid" => r.pids = q(quantity::value)?,
            "ephemeral-storage" => r.ephemeral_storage = q(quantity::value)?,
            other => {
                return Err(format!(
                    "{other:?} cannot be reserved (cpu, memory, pid, ephemeral-storage)"
                ))
            }
        }
    }
    Ok(r)
}

/// `--enforce-node-allocatable`: `pods`, `system-reserved`,
/// `kube-reserved`, or `none` alone.
pub fn parse_enforce(s: &str) -> Result<Vec<String>, String> {
    let v: Vec<String> = s
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect();
    for e in &v {
        if !["pods", "system-reserved", "kube-reserved", "none"].contains(&e.as_str()) {
            return Err(format!(
                "{e:?} is not one of pods, system-reserved, kube-reserved, none"
            ));
        }
    }
    if v.iter().any(|e| e == "none") {
        if v.len() > 1 {
            return Err("none cannot be combined with other values".into());
        }
        return Ok(Vec::new());
    }
    Ok(v)
}

/// What an eviction threshold watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    MemoryAvailable,
    NodeFsAvailable,
    NodeFsInodesFree,
    ImageFsAvailable,
    ImageFsInodesFree,
    PidAvailable,
}

pub const SIGNALS: [Signal; 6] = [
    Signal::MemoryAvailable,
    Signal::NodeFsAvailable,
    Signal::NodeFsInodesFree,
    Signal::ImageFsAvailable,
    Signal::ImageFsInodesFree,
    Signal::PidAvailable,
];

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    fn parse(s: &str) -> Result<Signal, String> {
        SIGNALS.into_iter().find(|x| x.name() == s).ok_or_else(|| {
            format!(
                "unknown eviction signal {s:?} (one of {})",
                SIGNALS.map(|x| x.name()).join(", ")
            )
        })
    }

    /// The node condition it sets.
    pub fn condition(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "MemoryPressure",
            Signal::PidAvailable => "PIDPressure",
            _ => "DiskPressure",
        }
    }

    /// The resource named in eviction messages.
    pub fn resource(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory",
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => "ephemeral-storage",
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => "inodes",
            Signal::PidAvailable => "pids",
        }
    }
}

/// A threshold's amount: an absolute quantity or a share of capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    Quantity(i64),
    Percent(f64),
}

impl Amount {
    /// The amount against a capacity.
    pub fn of(self, capacity: i64) -> i64 {
        match self {
            Amount::Quantity(q) => q,
            Amount::Percent(p) => (capacity as f64 * p / 100.0) as i64,
        }
    }

    pub fn text(self) -> String {
        match self {
            Amount::Quantity(q) => q.to_string(),
            Amount::Percent(p) => format!("{p}%"),
        }
    }
}

/// `SIGNAL<AMOUNT`; a soft one waits out its grace period.
#[derive(Debug, Clone, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub amount: Amount,
    /// Soft thresholds only: how long it must be met before pods go.
    pub grace: Option<Duration>,
}

/// `memory.available<100Mi,nodefs.available<10%`; empty: none.
pub fn parse_thresholds(s: &str) -> Result<Vec<Threshold>, String> {
    let mut out: Vec<Threshold> = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (sig, amt) = part
            .split_once('<')
            .ok_or_else(|| format!("{part:?}: expected SIGNAL<QUANTITY or SIGNAL<PERCENT%"))?;
        let signal = Signal::parse(sig.trim())?;
        let amt = amt.trim();
        let amount = if let Some(p) = amt.strip_suffix('%') {
            let v: f64 = p
                .parse()
                .map_err(|_| format!("{part:?}: {amt:?} is not a percentage"))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(format!("{part:?}: a percentage must be in (0, 100]"));
            }
            Amount::Percent(v)
        } else {
            let v = quantity::value(amt).map_err(|e| format!("{part:?}: {e}"))?;
            if v < 0 {
                return Err(format!("{part:?}: the quantity is negative"));
            }
            Amount::Quantity(v)
        };
        if out.iter().any(|t| t.signal == signal) {
            return Err(format!("{} is given twice", signal.name()));
        }
        out.push(Threshold {
            signal,
            amount,
            grace: None,
        });
    }
    Ok(out)
}

/// `memory.available=1m30s,nodefs.available=2m`.
pub fn parse_grace_periods(s: &str) -> Result<HashMap<Signal, Duration>, String> {
    let mut out = HashMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (sig, d) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected SIGNAL=DURATION"))?;
        let signal = Signal::parse(sig.trim())?;
        let d = parse_duration(d.trim()).map_err(|e| format!("{part:?}: {e}"))?;
        out.insert(signal, d);
    }
    Ok(out)
}

/// Soft thresholds with their grace periods: every soft threshold needs
/// one, and a grace period needs its threshold.
pub fn soft_thresholds(soft: &str, grace: &str) -> Result<Vec<Threshold>, String> {
    let mut t = parse_thresholds(soft)?;
    let g = parse_grace_periods(grace)?;
    for th in &mut t {
        th.grace = Some(*g.get(&th.signal).ok_or_else(|| {
            format!(
                "soft eviction threshold {} has no grace period (--eviction-soft-grace-period)",
                th.signal.name()
            )
        })?);
    }
    if let Some(s) = g.keys().find(|s| !t.iter().any(|th| th.signal == **s)) {
        return Err(format!(
            "grace period for {} without a soft eviction threshold",
            s.name()
        ));
    }
    Ok(t)
}

/// The kubelet's default hard thresholds.
pub const DEFAULT_EVICTION_HARD: &str =
    "memory.available<100Mi,nodefs.available<10%,nodefs.inodesFree<5%,imagefs.available<15%";

/// The eviction manager's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Eviction {
    pub hard: Vec<Threshold>,
    pub soft: Vec<Threshold>,
    /// A pressure condition stays this long after its threshold clears.
    pub transition: Duration,
    /// The longest grace period a pod evicted by a soft threshold gets.
    pub max_pod_grace: i64,
    /// How often signals are observed.
    pub period: Duration,
}

impl Default for Eviction {
    fn default() -> Eviction {
        Eviction {
            hard: parse_thresholds(DEFAULT_EVICTION_HARD).unwrap_or_default(),
            soft: Vec::new(),
            transition: Duration::from_secs(300),
            max_pod_grace: 0,
            period: Duration::from_secs(10),
        }
    }
}

/// The image garbage collector's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageGc {
    /// Disk usage (percent) at which images are removed…
    pub high: u8,
    /// …down to this.
    pub low: u8,
    /// Images seen for less than this are kept.
    pub min_age: Duration,
    pub period: Duration,
    /// The runtime's sandbox image (`--pod-infra-container-image`): always
    /// in use, as the kubelet counts it.
    pub sandbox_image: Option<String>,
}

impl Default for ImageGc {
    fn default() -> ImageGc {
        ImageGc {
            high: 85,
            low: 80,
            min_age: Duration::from_secs(120),
            period: Duration::from_secs(300),
            sandbox_image: None,
        }
    }
}

impl ImageGc {
    pub fn check(&self) -> Result<(), String> {
        if self.high > 100 || self.low > 100 {
            return Err("image GC thresholds are percentages (0-100)".into());
        }
        if self.low > self.high {
            return Err(format!(
                "--image-gc-low-threshold ({}) is above --image-gc-high-threshold ({})",
                self.low, self.high
            ));
        }
        Ok(())
    }
}

/// The node's capacity, as the node status reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Capacity {
    pub cpu_milli: i64,
    pub memory: i64,
    pub pids: i64,
    pub ephemeral_storage: i64,
}

impl Capacity {
    /// Read off the host; ephemeral storage is the file system of `root`.
    pub fn read(root: &std::path::Path) -> Capacity {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        Capacity {
            cpu_milli: std::thread::available_parallelism()
                .map(|n| n.get() as i64)
                .unwrap_or(1)
                * 1000,
            memory: meminfo_bytes(&meminfo, "MemTotal:"),
            pids: pid_max(),
            ephemeral_storage: rustix::fs::statvfs(root)
                .map(|s| (s.f_blocks * s.f_frsize) as i64)
                .unwrap_or(0),
        }
    }

    /// Node allocatable: capacity less the reservations and the hard
    /// eviction thresholds of memory and the node file system.
    pub fn allocatable(&self, reserved: &Reservation, hard: &[Threshold]) -> Capacity {
        let hard_of = |sig: Signal, cap: i64| {
            hard.iter()
                .find(|t| t.signal == sig)
                .map(|t| t.amount.of(cap))
                .unwrap_or(0)
        };
        Capacity {
            cpu_milli: (self.cpu_milli - reserved.cpu_milli).max(0),
            memory: (self.memory - reserved.memory - hard_of(Signal::MemoryAvailable, self.memory))
                .max(0),
            pids: (self.pids - reserved.pids).max(0),
            ephemeral_storage: (self.ephemeral_storage
                - reserved.ephemeral_storage
                - hard_of(Signal::NodeFsAvailable, self.ephemeral_storage))
            .max(0),
        }
    }
}

/// `kernel.pid_max`: the node's PID capacity.
pub fn pid_max() -> i64 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(32768)
}

/// Reservations larger than the capacity: the kubelet refuses to start.
pub fn check_reserved(cap: &Capacity, reserved: &Reservation) -> Result<(), String> {
    let over = |what: &str, r: i64, c: i64| {
        (c > 0 && r > c).then(|| {
            format!("kube-reserved + system-reserved {what} ({r}) is larger than the node's capacity ({c})")
        })
    };
    match over("cpu (millicores)", reserved.cpu_milli, cap.cpu_milli)
        .or_else(|| over("memory (bytes)", reserved.memory, cap.memory))
        .or_else(|| over("pid", reserved.pids, cap.pids))
        .or_else(|| {
            over(
                "ephemeral-storage (bytes)",
                reserved.ephemeral_storage,
                cap.ephemeral_storage,
            )
        }) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A `/proc/meminfo` field (`key` with its colon) in bytes; 0 if absent.
pub fn meminfo_bytes(meminfo: &str, key: &str) -> i64 {
    meminfo
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<i64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// "10s", "500ms", "5m", "1h", "1m30s".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let mut total = Duration::ZERO;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err("empty duration".into());
    }
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..n_end]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..u_end] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => {
                return Err(format!(
                    "invalid duration {s:?}: unit {u:?} (use ms, s, m, h)"
                ))
            }
        };
        rest = &rest[u_end..];
        total += Duration::from_secs_f64(n * unit);
    }
    Ok(total)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn reservations_parse_and_refuse() {
        let r = parse_reservation("cpu=250m,memory=1Gi,pid=100").unwrap();
        assert_eq!((r.cpu_milli, r.memory, r.pids), (250, 1 << 30, 100));
        assert!(parse_reservation("gpu=1").unwrap_err().contains("gpu"));
        assert!(parse_reservation("memory=lots")
            .unwrap_err()
            .contains("memory"));
        assert!(parse_reservation("memory").is_err());
        assert!(parse_reservation("cpu=-1")
            .unwrap_err()
            .contains("negative"));
    }

    #[test]
    fn thresholds_parse_and_refuse() {
        let t = parse_thresholds(DEFAULT_EVICTION_HARD).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t[0].amount, Amount::Quantity(100 << 20));
        assert_eq!(t[1].amount, Amount::Percent(10.0));
        assert_eq!(t[1].amount.of(1000), 100);
        assert!(parse_thresholds("memory.free<1Gi")
            .unwrap_err()
            .contains("unknown eviction signal"));
        assert!(parse_thresholds("memory.available>1Gi").is_err());
        assert!(parse_thresholds("nodefs.available<150%").is_err());
        assert!(parse_thresholds("nodefs.available<x%").is_err());
        assert!(
            parse_thresholds("memory.available<1Gi,memory.available<2Gi")
                .unwrap_err()
                .contains("twice")
        );
        assert!(parse_thresholds("").unwrap().is_empty());
    }

    #[test]
    fn soft_thresholds_need_grace_periods() {
        let t = soft_thresholds("memory.available<1Gi", "memory.available=1m30s").unwrap();
        assert_eq!(t[0].grace, Some(Duration::from_secs(90)));
        assert!(soft_thresholds("memory.available<1Gi", "")
            .unwrap_err()
            .contains("no grace period"));
        assert!(soft_thresholds("", "memory.available=1m")
            .unwrap_err()
            .contains("without"));
    }

    #[test]
    fn enforce_and_image_gc_checks() {
        assert_eq!(parse_enforce("pods").unwrap(), vec!["pods"]);
        assert!(parse_enforce("none").unwrap().is_empty());
        assert!(parse_enforce("none,pods").is_err());
        assert!(parse_enforce("nodes").is_err());
        let mut g = ImageGc::default();
        assert!(g.check().is_ok());
        g.low = 90;
        assert!(g.check().unwrap_err().contains("above"));
    }

    #[test]
    fn allocatable_keeps_reservations_and_hard_thresholds_back() {
        let cap = Capacity {
            cpu_milli: 2000,
            memory: 4 << 30,
            pids: 1000,
            ephemeral_storage: 1000,
        };
        let r = parse_reservation("cpu=500m,memory=1Gi").unwrap();
        let hard = parse_thresholds(DEFAULT_EVICTION_HARD).unwrap();
        let a = cap.allocatable(&r, &hard);
        assert_eq!(a.cpu_milli, 1500);
        assert_eq!(a.memory, (3 << 30) - (100 << 20));
        assert_eq!(a.ephemeral_storage, 900);
        assert!(check_reserved(&cap, &r).is_ok());
        let too_much = parse_reservation("memory=5Gi").unwrap();
        assert!(check_reserved(&cap, &too_much)
            .unwrap_err()
            .contains("memory"));
    }
}
