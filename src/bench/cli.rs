//! `husk bench`: the command line side. Connects to each endpoint, runs the
//! requested operations interleaved across them, and prints one table per
//! operation with p50/p90/p99 and the ratios (or the whole report as JSON).

use super::ratio;

/// What `husk bench` was asked to measure.
pub struct BenchArgs {
    pub endpoint: String,
    pub vs: Option<String>,
    pub iterations: usize,
    pub ops: String,
    pub image: String,
    pub pods: String,
    pub json: bool,
    /// Also the stage-by-stage breakdown of a pod's lifecycle.
    pub breakdown: bool,
    /// The runtime handler pods name on `endpoint`, and on `vs`.
    pub handler: String,
    pub vs_handler: Option<String>,
}

/// Runs the requested operations against each endpoint and prints the
/// table (or JSON).
pub async fn run(a: BenchArgs) -> anyhow::Result<()> {
    use super::*;
    let mut targets = vec![named_target(&a.endpoint, &a.handler).await?];
    if let Some(v) = &a.vs {
        let handler = a.vs_handler.as_deref().unwrap_or(&a.handler);
        targets.push(named_target(v, handler).await?);
    }
    let mut report = serde_json::Map::new();
    report.insert("load_before".into(), loadavg().into());
    let mut ops = if a.ops.trim() == "all" {
        "rpc,sandbox,container,exec,stream,pull".to_string()
    } else {
        a.ops.clone()
    };
    if a.breakdown {
        ops.push_str(",breakdown");
    }
    for op in ops.split(',').map(str::trim).filter(|o| !o.is_empty()) {
        match op {
            "pull" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the pull benchmark"
                );
                let results = bench_pull(&mut targets, &a.image, a.iterations).await?;
                if !a.json {
                    print_pull(&a.image, a.iterations, &results);
                }
                report.insert("pull".into(), serde_json::to_value(&results)?);
            }
            "sandbox" => {
                let counts: Vec<usize> = a
                    .pods
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .collect();
                let results = sandbox::bench_sandbox(&mut targets, a.iterations, &counts).await?;
                if !a.json {
                    print_sandbox(a.iterations, &results);
                }
                report.insert("sandbox".into(), serde_json::to_value(&results)?);
            }
            "container" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the container benchmark"
                );
                let parallel = a
                    .pods
                    .split(',')
                    .filter_map(|s| s.trim().parse().ok())
                    .max()
                    .unwrap_or(50);
                let results =
                    container::bench_containers(&mut targets, &a.image, a.iterations, parallel)
                        .await?;
                if !a.json {
                    print_containers(a.iterations, &results);
                }
                report.insert("container".into(), serde_json::to_value(&results)?);
            }
            "exec" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the exec benchmark"
                );
                let results = exec::bench_exec(&mut targets, &a.image, a.iterations).await?;
                if !a.json {
                    print!("{}", exec::report(a.iterations, &results));
                }
                report.insert("exec".into(), serde_json::to_value(&results)?);
            }
            "breakdown" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the breakdown (its pods run a container)"
                );
                let results =
                    super::breakdown::bench_breakdown(&mut targets, &a.image, a.iterations).await?;
                if !a.json {
                    print!("{}", super::breakdown::report(a.iterations, &results));
                }
                report.insert("breakdown".into(), serde_json::to_value(&results)?);
            }
            "userns" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the user namespace benchmark"
                );
                let r = userns::bench_userns(&mut targets[0], &a.image, a.iterations).await?;
                if !a.json {
                    print!("{}", userns::report(a.iterations, &r));
                }
                report.insert("userns".into(), serde_json::to_value(&r)?);
            }
            "rpc" => {
                let results = rpc::bench_rpc(&mut targets, a.iterations).await?;
                if !a.json {
                    print!("{}", rpc::report(a.iterations, &results));
                }
                report.insert("rpc".into(), serde_json::to_value(&results)?);
            }
            "stream" => {
                anyhow::ensure!(
                    !a.image.is_empty(),
                    "--image is required for the stream benchmark"
                );
                let results = stream::bench_stream(&mut targets, &a.image, a.iterations).await?;
                if !a.json {
                    print_stream(a.iterations, &results);
                }
                report.insert("stream".into(), serde_json::to_value(&results)?);
            }
            other => {
                anyhow::bail!(
                    "unknown benchmark operation {other:?} (rpc, pull, sandbox, container, exec, stream, breakdown)"
                )
            }
        }
    }
    report.insert("load_after".into(), loadavg().into());
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "load average: {} -> {}",
            report["load_before"], report["load_after"]
        );
    }
    Ok(())
}

fn print_pull(image: &str, iterations: usize, results: &[super::PullResult]) {
    println!(
        "cold pull of {image} ({} bytes), {iterations} interleaved iterations",
        results[0].image_bytes
    );
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>10} {:>12} {:>14} {:>14}",
        "runtime",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "MB/s p50",
        "CPU ms/pull",
        "idle RSS MB",
        "RSS after MB"
    );
    for r in results {
        println!(
            "{:<28} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>12.0} {:>14.1} {:>14.1}",
            r.runtime,
            r.pull.p50_ms,
            r.pull.p90_ms,
            r.pull.p99_ms,
            r.mb_per_s_p50,
            r.cpu_ms_per_pull,
            r.rss_idle_before_mb,
            r.rss_idle_after_mb
        );
    }
    if let [a, b] = results {
        println!(
            "ratio {} / {}: throughput {:.2}x, pull time {:.2}x, idle RSS {:.2}x",
            a.runtime,
            b.runtime,
            ratio(a.mb_per_s_p50, b.mb_per_s_p50),
            ratio(a.pull.p50_ms, b.pull.p50_ms),
            ratio(a.rss_idle_after_mb, b.rss_idle_after_mb)
        );
    }
}

fn print_sandbox(iterations: usize, results: &[super::sandbox::SandboxResult]) {
    println!("pod sandboxes, {iterations} interleaved iterations");
    let mut rows = Vec::new();
    for r in results {
        rows.push(("RunPodSandbox", r.runtime.as_str(), &r.run));
    }
    for r in results {
        rows.push(("stop+remove", r.runtime.as_str(), &r.stop_remove));
    }
    print_latency(&rows);
    println!(
        "{:<28} {:>6} {:>14} {:>14} {:>14} {:>14}",
        "memory", "pods", "shim RSS MB", "shim PSS MB", "total RSS MB", "per pod MB"
    );
    for r in results {
        for m in &r.memory {
            println!(
                "{:<28} {:>6} {:>14.2} {:>14.2} {:>14.1} {:>14.2}",
                r.runtime, m.pods, m.shim_rss_mb, m.shim_pss_mb, m.total_rss_mb, m.per_pod_mb
            );
        }
    }
    if let [a, b] = results {
        println!(
            "ratio {} / {}: RunPodSandbox p50 {:.2}x, stop+remove p50 {:.2}x",
            a.runtime,
            b.runtime,
            ratio(a.run.p50_ms, b.run.p50_ms),
            ratio(a.stop_remove.p50_ms, b.stop_remove.p50_ms)
        );
        for (ma, mb) in a.memory.iter().zip(&b.memory) {
            println!(
                "  {} pods: shim RSS {:.2}x, shim PSS {:.2}x, memory per pod {:.2}x",
                ma.pods,
                ratio(ma.shim_rss_mb, mb.shim_rss_mb),
                ratio(ma.shim_pss_mb, mb.shim_pss_mb),
                ratio(ma.per_pod_mb, mb.per_pod_mb)
            );
        }
    }
}

/// One row per operation and runtime: p50, p90 and p99.
fn print_latency(rows: &[(&str, &str, &super::Summary)]) {
    println!(
        "{:<16} {:<28} {:>10} {:>10} {:>10}",
        "operation", "runtime", "p50 ms", "p90 ms", "p99 ms"
    );
    for (op, runtime, s) in rows {
        println!(
            "{op:<16} {runtime:<28} {:>10.1} {:>10.1} {:>10.1}",
            s.p50_ms, s.p90_ms, s.p99_ms
        );
    }
}

fn print_containers(iterations: usize, results: &[super::container::ContainerResult]) {
    println!("containers, {iterations} interleaved iterations");
    let mut rows = Vec::new();
    for r in results {
        rows.push(("create+start", r.runtime.as_str(), &r.create_start));
        rows.push(("stop+remove", r.runtime.as_str(), &r.stop_remove));
        rows.push(("full pod", r.runtime.as_str(), &r.full_pod));
    }
    rows.sort_by_key(|(op, _, _)| match *op {
        "create+start" => 0,
        "stop+remove" => 1,
        _ => 2,
    });
    print_latency(&rows);
    println!(
        "{:<28} {:>16} {:>16} {:>14} {:>18} {:>14} {:>12}",
        "runtime",
        "create+start p50",
        "stop+remove p50",
        "full pod p50",
        "parallel pods wall",
        "total RSS MB",
        "per pod MB"
    );
    for r in results {
        println!(
            "{:<28} {:>13.1} ms {:>13.1} ms {:>11.1} ms {:>9} in {:>5.0} ms {:>14.1} {:>12.2}",
            r.runtime,
            r.create_start.p50_ms,
            r.stop_remove.p50_ms,
            r.full_pod.p50_ms,
            r.parallel_pods,
            r.parallel_wall_ms,
            r.total_rss_mb,
            r.per_pod_mb
        );
    }
    println!(
        "{:<28} {:>14} {:>14} {:>16} {:>16}",
        "memory", "idle RSS MB", "idle PSS MB", "total PSS MB", "per pod PSS MB"
    );
    for r in results {
        println!(
            "{:<28} {:>14.1} {:>14.1} {:>16.1} {:>16.2}",
            r.runtime, r.idle_rss_mb, r.idle_pss_mb, r.total_pss_mb, r.per_pod_pss_mb
        );
    }
    if let [a, b] = results {
        println!(
            "ratio {} / {}: create+start {:.2}x, stop+remove {:.2}x, full pod {:.2}x, {} parallel pods {:.2}x, memory per pod {:.2}x",
            a.runtime,
            b.runtime,
            ratio(a.create_start.p50_ms, b.create_start.p50_ms),
            ratio(a.stop_remove.p50_ms, b.stop_remove.p50_ms),
            ratio(a.full_pod.p50_ms, b.full_pod.p50_ms),
            a.parallel_pods,
            ratio(a.parallel_wall_ms, b.parallel_wall_ms),
            ratio(a.per_pod_mb, b.per_pod_mb)
        );
    }
}

fn print_stream(iterations: usize, results: &[super::stream::StreamResult]) {
    println!("streaming, {iterations} interleaved iterations");
    println!(
        "{:<28} {:>14} {:>14} {:>18} {:>18} {:>16}",
        "runtime",
        "ExecSync p50",
        "ExecSync p90",
        "stream exec p50",
        "stream exec p90",
        "port-fwd MB/s"
    );
    for r in results {
        println!(
            "{:<28} {:>11.1} ms {:>11.1} ms {:>15.1} ms {:>15.1} ms {:>16.1}",
            r.runtime,
            r.exec_sync.p50_ms,
            r.exec_sync.p90_ms,
            r.exec_stream.p50_ms,
            r.exec_stream.p90_ms,
            r.port_forward_mb_per_s
        );
    }
    if let [a, b] = results {
        println!(
            "ratio {} / {}: ExecSync p50 {:.2}x, streaming exec p50 {:.2}x, port-forward throughput {:.2}x",
            a.runtime,
            b.runtime,
            ratio(a.exec_sync.p50_ms, b.exec_sync.p50_ms),
            ratio(a.exec_stream.p50_ms, b.exec_stream.p50_ms),
            ratio(a.port_forward_mb_per_s, b.port_forward_mb_per_s)
        );
    }
}
