//! What `husk bench --density` reports: the figures at each checkpoint
//! of a runtime's fill ([`Checkpoint`]), its end ([`DensityResult`]), and
//! the table of them all ([`report`]).

use super::Summary;
use serde::Serialize;

/// The figures at one checkpoint.
#[derive(Debug, Clone, Serialize)]
pub struct Checkpoint {
    pub pods: usize,
    /// RunPodSandbox + CreateContainer + StartContainer of the last pods
    /// before this checkpoint (at most 50).
    pub start: Summary,
    pub list_sandboxes: Summary,
    pub list_containers: Summary,
    /// None: the runtime does not answer the call.
    pub container_stats: Option<Summary>,
    pub sandbox_stats: Option<Summary>,
    /// A `GET /metrics` of the runtime's Prometheus endpoint, if given.
    pub metrics_scrape: Option<Summary>,
    /// The mean of the same starts less their mean CNI ADD, when the
    /// runtime's metrics say it (`cni_share`): the runtime's own share.
    pub own_share_ms: Option<f64>,
    /// The means of the same starts' stages, when the runtime times them
    /// (`density_stages`).
    pub stages: Vec<super::density_stages::StageMean>,
    /// Server and monitors, proportional set size.
    pub pss_mb: f64,
    /// (PSS − PSS before the first pod) / pods.
    pub per_pod_mb: f64,
    pub server_rss_mb: f64,
    pub servers: usize,
    pub monitors: usize,
    pub threads: u64,
}

/// One runtime's density run.
#[derive(Debug, Serialize)]
pub struct DensityResult {
    pub runtime: String,
    pub idle_pss_mb: f64,
    pub checkpoints: Vec<Checkpoint>,
    /// Pods running when the fill ended.
    pub reached: usize,
    /// Why the fill stopped before N, if it did.
    pub stopped: Option<String>,
    /// Seconds from the restart command's exit until every pod was listed
    /// ready, with its IP, and its container running.
    pub recovery_s: Option<f64>,
    pub recovery_error: Option<String>,
    pub remove_all_s: f64,
    pub remove_failures: usize,
}

fn opt_ms(s: &Option<Summary>) -> String {
    s.as_ref()
        .map(|s| format!("{:.1}", s.p50_ms))
        .unwrap_or_else(|| "-".into())
}

/// The table: one row per runtime and checkpoint, then each runtime's
/// end (where it stopped, recovery, removal).
pub fn report(results: &[DensityResult]) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "{:<30} {:>5} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>9} {:>6} {:>7}\n",
        "runtime",
        "pods",
        "start p50",
        "vs first",
        "-CNI",
        "vs first",
        "lsPods",
        "lsCtrs",
        "ctrStats",
        "podStats",
        "metrics",
        "PSS MB",
        "MB/pod",
        "srv RSS",
        "procs",
        "threads"
    ));
    for r in results {
        let first = r.checkpoints.first().map(|c| c.start.p50_ms);
        // The first checkpoint that has a share.
        let first_own = r.checkpoints.iter().find_map(|c| c.own_share_ms);
        for c in &r.checkpoints {
            let (own, own_vs) = match (c.own_share_ms, first_own) {
                (Some(o), Some(f)) => (format!("{o:.1}"), format!("{:.2}x", super::ratio(o, f))),
                _ => ("-".into(), "-".into()),
            };
            out.push_str(&format!(
                "{:<30} {:>5} {:>9.1} {:>8.2}x {:>8} {:>9} {:>9.1} {:>9.1} {:>9} {:>9} {:>8} {:>8.1} {:>8.2} {:>9.1} {:>6} {:>7}\n",
                r.runtime,
                c.pods,
                c.start.p50_ms,
                super::ratio(c.start.p50_ms, first.unwrap_or(c.start.p50_ms)),
                own,
                own_vs,
                c.list_sandboxes.p50_ms,
                c.list_containers.p50_ms,
                opt_ms(&c.container_stats),
                opt_ms(&c.sandbox_stats),
                opt_ms(&c.metrics_scrape),
                c.pss_mb,
                c.per_pod_mb,
                c.server_rss_mb,
                c.servers + c.monitors,
                c.threads
            ));
        }
    }
    out.push_str(
        "(times in ms, p50; -CNI: the mean start less the mean CNI ADD of the same pods, \
         from the runtime's metrics; procs: the server and its monitors)\n",
    );
    for r in results {
        out.push_str(&format!("{}: reached {} pods", r.runtime, r.reached));
        if let Some(s) = &r.stopped {
            out.push_str(&format!(", stopped: {s}"));
        }
        if let Some(s) = r.recovery_s {
            out.push_str(&format!(", recovered after kill -9 in {s:.1} s"));
        }
        if let Some(e) = &r.recovery_error {
            out.push_str(&format!(", recovery failed: {e}"));
        }
        out.push_str(&format!(
            ", stop+remove of all in {:.1} s ({} failed)\n",
            r.remove_all_s, r.remove_failures
        ));
    }
    for r in results {
        let points: Vec<_> = r
            .checkpoints
            .iter()
            .map(|c| super::density_stages::Point {
                pods: c.pods,
                stages: &c.stages,
            })
            .collect();
        out.push_str(&super::density_stages::table(&r.runtime, &points));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(pods: usize, start: f64) -> Checkpoint {
        let s = |ms: f64| Summary {
            n: 1,
            p50_ms: ms,
            p90_ms: ms,
            p99_ms: ms,
        };
        Checkpoint {
            pods,
            start: s(start),
            list_sandboxes: s(1.0),
            list_containers: s(2.0),
            container_stats: Some(s(3.0)),
            sandbox_stats: None,
            metrics_scrape: None,
            own_share_ms: None,
            stages: Vec::new(),
            pss_mb: 10.0,
            per_pod_mb: 0.2,
            server_rss_mb: 8.0,
            servers: 1,
            monitors: pods,
            threads: 3,
        }
    }

    #[test]
    fn the_report_compares_each_start_with_the_first_and_says_where_a_runtime_stopped() {
        let r = DensityResult {
            runtime: "peer 1".into(),
            idle_pss_mb: 5.0,
            checkpoints: vec![point(50, 100.0), point(100, 150.0)],
            reached: 120,
            stopped: Some("pod 121: exchange full".into()),
            recovery_s: None,
            recovery_error: None,
            remove_all_s: 3.0,
            remove_failures: 0,
        };
        let text = report(&[r]);
        assert!(text.contains("1.50x"), "{text}");
        assert!(text.contains("reached 120 pods, stopped: pod 121: exchange full"));
        assert!(text
            .lines()
            .any(|l| l.contains(" 100 ") && l.contains(" - ")));
    }

    #[test]
    fn the_runtimes_share_is_compared_with_the_first_checkpoint_that_has_one() {
        let with = |pods, own| Checkpoint {
            own_share_ms: own,
            ..point(pods, 100.0)
        };
        let r = DensityResult {
            runtime: "husk".into(),
            idle_pss_mb: 5.0,
            checkpoints: vec![with(50, None), with(100, Some(40.0)), with(250, Some(50.0))],
            reached: 250,
            stopped: None,
            recovery_s: None,
            recovery_error: None,
            remove_all_s: 3.0,
            remove_failures: 0,
        };
        let text = report(&[r]);
        let row = |pods: &str| {
            text.lines()
                .find(|l| l.split_whitespace().nth(1) == Some(pods))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            row("100").contains("40.0") && row("100").contains("1.00x"),
            "{text}"
        );
        assert!(
            row("250").contains("50.0") && row("250").contains("1.25x"),
            "{text}"
        );
    }
}
