//! What a scrape reads as it is: pods and containers by state (from the
//! managers' records, as ListPodSandbox and ListContainers answer), and the
//! server's process metrics under their standard names (`process_…`, as
//! every Prometheus client library exports them), from `/proc/self`.

use crate::container::record::ContainerState;
use crate::sandbox::manager::SandboxState;
use crate::server::instrument::State;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::sync::Weak;

/// Pods and containers by state.
#[derive(Debug)]
pub struct Objects(pub Weak<State>);

fn by_state(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    counts: &[(&str, i64)],
) -> Result<(), std::fmt::Error> {
    let mut e = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (state, n) in counts {
        let labels = [("state", *state)];
        ConstGauge::new(*n).encode(e.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for Objects {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(state) = self.0.upgrade() else {
            return Ok(());
        };
        if let Ok(s) = state.sandboxes() {
            let pods = s.list();
            let n = |want: SandboxState| pods.iter().filter(|p| p.state == want).count() as i64;
            by_state(
                &mut encoder,
                "pods",
                "Pod sandboxes, by state",
                &[
                    ("ready", n(SandboxState::Ready)),
                    ("notready", n(SandboxState::NotReady)),
                ],
            )?;
        }
        if let Ok(c) = state.containers() {
            let all = c.list();
            let n = |want: ContainerState| all.iter().filter(|x| x.state == want).count() as i64;
            by_state(
                &mut encoder,
                "containers",
                "Containers, by state",
                &[
                    ("created", n(ContainerState::Created)),
                    ("running", n(ContainerState::Running)),
                    ("exited", n(ContainerState::Exited)),
                    ("unknown", n(ContainerState::Unknown)),
                ],
            )?;
        }
        Ok(())
    }
}

/// The server process's resources.
#[derive(Debug)]
pub struct Process;

/// (CPU seconds, start time in seconds since the epoch) from `stat`.
fn cpu_and_start() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // SAFETY: sysconf(3) has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    let started = f.get(19)?.parse::<f64>().ok()? / hz;
    let btime = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<f64>().ok())?;
    Some((ticks / hz, btime + started))
}

fn status_kib(key: &str) -> Option<i64> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse::<i64>().ok())
}

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let gauge = |e: &mut DescriptorEncoder, name: &str, help: &str, v: i64| {
            let m = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
            ConstGauge::new(v).encode(m)
        };
        if let Some(kib) = status_kib("VmRSS:") {
            gauge(
                &mut encoder,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                kib * 1024,
            )?;
        }
        if let Some(kib) = status_kib("VmSize:") {
            gauge(
                &mut encoder,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                kib * 1024,
            )?;
        }
        let fds = std::fs::read_dir("/proc/self/fd")
            .map(|d| d.count())
            .unwrap_or(0);
        gauge(
            &mut encoder,
            "process_open_fds",
            "Number of open file descriptors",
            fds as i64,
        )?;
        if let Some((cpu, start)) = cpu_and_start() {
            let m = encoder.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(cpu).encode(m)?;
            let m = encoder.encode_descriptor(
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(start).encode(m)?;
        }
        Ok(())
    }
}
