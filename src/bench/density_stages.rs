//! Where a pod's start goes as the node fills, for a runtime that times
//! its own stages (husk's admin API, `Timings`): the density fill clears
//! the runtime's table where each checkpoint's window of starts begins and
//! reads it at the checkpoint, so each stage's mean is of the same pods as
//! the start's. The table ([`table`]) has a row per stage of the starting
//! RPCs (and the CNI ADD's plugins), a column per checkpoint, and last the
//! runtime's own share: the stages' sum less those that waited on
//! something not the runtime (the CNI plugins, the runtime library making
//! the payload's processes), marked `*`.

// The operations whose stages add up to a start, as `breakdown` has them
// (the CNI ADD runs inside RunPodSandbox, which waits for it in its `cni
// wait`).
use super::breakdown::START;
use crate::api::admin::StageTimings;
use serde::Serialize;
use std::collections::BTreeMap;

/// The operations of a pod's start, in order, and its network's ADD.
const OPS: [&str; 4] = [
    "RunPodSandbox",
    "CNI ADD",
    "CreateContainer",
    "StartContainer",
];

/// Where `op` comes in a start ([`OPS`]); others last.
fn rank(op: &str) -> usize {
    OPS.iter().position(|o| *o == op).unwrap_or(OPS.len())
}

/// One stage's mean over a checkpoint's window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageMean {
    pub op: String,
    pub stage: String,
    pub external: bool,
    pub mean_ms: f64,
    pub n: usize,
}

/// The means of the stages of a start, in the order of [`OPS`]; the
/// wholes (`total`, `rpc`) are left out.
pub fn means(timed: &[StageTimings]) -> Vec<StageMean> {
    let mut out: Vec<StageMean> = timed
        .iter()
        .filter(|s| OPS.contains(&s.op.as_str()) && !s.micros.is_empty())
        .filter(|s| s.stage != crate::timing::TOTAL && s.stage != crate::timing::RPC)
        .map(|s| StageMean {
            op: s.op.clone(),
            stage: s.stage.clone(),
            external: s.external,
            mean_ms: s.micros.iter().sum::<u64>() as f64 / s.micros.len() as f64 / 1e3,
            n: s.micros.len(),
        })
        .collect();
    out.sort_by_key(|s| rank(&s.op));
    out
}

/// The start's own share: the means of the starting RPCs' stages, less
/// the external ones. None without stages.
pub fn own_ms(stages: &[StageMean]) -> Option<f64> {
    let of_start = || stages.iter().filter(|s| START.contains(&s.op.as_str()));
    of_start().next()?;
    Some(of_start().filter(|s| !s.external).map(|s| s.mean_ms).sum())
}

/// The stages of one checkpoint: its pods, and the means.
pub struct Point<'a> {
    pub pods: usize,
    pub stages: &'a [StageMean],
}

/// The table of a runtime that timed its stages: a row per stage, a
/// column per checkpoint, the own share last; empty when it did not.
pub fn table(runtime: &str, points: &[Point]) -> String {
    let points: Vec<_> = points.iter().filter(|c| !c.stages.is_empty()).collect();
    let mut out = String::new();
    if points.is_empty() {
        return out;
    }
    // Every stage any checkpoint has, in the order of a start.
    let mut rows: Vec<(&str, &str, bool)> = Vec::new();
    for s in points.iter().flat_map(|c| c.stages.iter()) {
        let key = (s.op.as_str(), s.stage.as_str(), s.external);
        if !rows.contains(&key) {
            rows.push(key);
        }
    }
    rows.sort_by_key(|(op, _, _)| rank(op));
    let by: Vec<BTreeMap<(&str, &str), f64>> = points
        .iter()
        .map(|c| {
            c.stages
                .iter()
                .map(|s| ((s.op.as_str(), s.stage.as_str()), s.mean_ms))
                .collect()
        })
        .collect();
    let cell = |v: Option<f64>| v.map_or(format!(" {:>8}", "-"), |v| format!(" {v:>8.2}"));
    out.push_str(&format!(
        "{runtime}: where a start goes (mean ms of the same pods; * not the runtime's own)\n{:<40}",
        "stage"
    ));
    for c in &points {
        out.push_str(&format!(" {:>8}", c.pods));
    }
    out.push('\n');
    for (op, stage, external) in &rows {
        let name = format!("{op} {stage}{}", if *external { " *" } else { "" });
        out.push_str(&format!("{name:<40}"));
        for m in &by {
            out.push_str(&cell(m.get(&(*op, *stage)).copied()));
        }
        out.push('\n');
    }
    out.push_str(&format!("{:<40}", "own (less *)"));
    for c in &points {
        out.push_str(&cell(own_ms(c.stages)));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(op: &str, stage: &str, external: bool, micros: &[u64]) -> StageTimings {
        StageTimings {
            op: op.into(),
            stage: stage.into(),
            external,
            micros: micros.to_vec(),
        }
    }

    #[test]
    fn a_starts_own_share_is_its_stages_less_the_waits_on_others() {
        let stages = means(&[
            timed("StartContainer", "runtime start", true, &[4000, 6000]),
            timed("RunPodSandbox", "namespaces", false, &[2000, 4000]),
            timed("RunPodSandbox", "cni wait", true, &[30000]),
            timed("RunPodSandbox", "total", false, &[99000]),
            timed("CNI ADD", "bridge", true, &[25000]),
            timed("StopContainer", "stop signal", false, &[1000]),
            timed("CreateContainer", "spec", false, &[1500]),
        ]);
        let names: Vec<_> = stages
            .iter()
            .map(|s| format!("{} {}", s.op, s.stage))
            .collect();
        assert_eq!(
            names,
            [
                "RunPodSandbox namespaces",
                "RunPodSandbox cni wait",
                "CNI ADD bridge",
                "CreateContainer spec",
                "StartContainer runtime start"
            ]
        );
        assert_eq!(stages[0].mean_ms, 3.0);
        // 3 ms of namespaces and 1.5 of spec: the CNI plugins and the
        // runtime's start are not the runtime's own, nor is the ADD (it is
        // inside the sandbox's cni wait).
        assert_eq!(own_ms(&stages), Some(4.5));
        assert_eq!(own_ms(&means(&[])), None);
    }

    #[test]
    fn the_table_has_a_row_per_stage_a_column_per_checkpoint_and_the_share_last() {
        let at50 = means(&[
            timed("RunPodSandbox", "namespaces", false, &[4000]),
            timed("CNI ADD", "bridge", true, &[30000]),
        ]);
        let at100 = means(&[
            timed("RunPodSandbox", "namespaces", false, &[5000]),
            timed("CNI ADD", "bridge", true, &[60000]),
            timed("CreateContainer", "spec", false, &[1000]),
        ]);
        let points = [
            Point {
                pods: 50,
                stages: &at50,
            },
            Point {
                pods: 100,
                stages: &at100,
            },
        ];
        let text = table("husk", &points);
        let row = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .map(|l| l[40..].split_whitespace().collect::<Vec<_>>())
                .unwrap_or_default()
        };
        assert_eq!(row("stage"), ["50", "100"], "{text}");
        assert_eq!(row("RunPodSandbox namespaces"), ["4.00", "5.00"]);
        assert_eq!(row("CNI ADD bridge *"), ["30.00", "60.00"]);
        assert_eq!(row("CreateContainer spec"), ["-", "1.00"]);
        assert_eq!(row("own (less *)"), ["4.00", "6.00"]);
        // A runtime without stages has no table.
        assert_eq!(
            table(
                "peer",
                &[Point {
                    pods: 50,
                    stages: &[]
                }]
            ),
            ""
        );
    }
}
