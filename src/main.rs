//! The `husk` binary: `serve`, `images`, `kubelet`, `run`, `bench`, `config`.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use husk::config::{Config, DEFAULT_CONFIG_PATH};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "husk",
    version,
    about = "A CRI v1 container runtime for Kubernetes nodes"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Debug, Default)]
struct ServeFlags {
    /// Config file (a missing default file means built-in defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Persistent state directory.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Volatile state directory.
    #[arg(long)]
    state: Option<PathBuf>,
    /// The CRI unix socket.
    #[arg(long)]
    listen: Option<PathBuf>,
    /// hosts.toml directory (containerd's certs.d layout).
    #[arg(long)]
    registry_config_dir: Option<PathBuf>,
    /// CNI network config directory.
    #[arg(long)]
    cni_conf_dir: Option<PathBuf>,
    /// CNI plugin directories, colon-separated.
    #[arg(long)]
    cni_bin_dir: Option<String>,
    /// The pause image.
    #[arg(long)]
    sandbox_image: Option<String>,
    /// trace|debug|info|warn|error
    #[arg(long)]
    log_level: Option<String>,
    /// text|json
    #[arg(long)]
    log_format: Option<String>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve CRI v1 on a unix socket.
    Serve(ServeFlags),
    /// Manage images on a running runtime.
    Images {
        /// Runtime endpoint.
        #[arg(long, global = true, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = husk::cli::DEFAULT_ENDPOINT)]
        endpoint: String,
        #[command(subcommand)]
        cmd: ImagesCmd,
    },
    /// Measure CRI runtimes side by side (`--vs`), interleaved in one run.
    Bench {
        /// The runtime to measure.
        #[arg(long, default_value = husk::cli::DEFAULT_ENDPOINT)]
        endpoint: String,
        /// A second runtime to compare against.
        #[arg(long)]
        vs: Option<String>,
        /// Iterations per operation.
        #[arg(long, default_value_t = 5)]
        iterations: usize,
        /// Operations: pull, sandbox, container (comma-separated).
        #[arg(long, default_value = "pull")]
        ops: String,
        /// Image for the cold-pull operation.
        #[arg(long, default_value = "")]
        image: String,
        /// Pod counts at which the sandbox benchmark measures memory.
        #[arg(long, default_value = "1,10,50")]
        pods: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// A thin kubelet: runs Pod manifests on any CRI runtime, printing
    /// status changes as a live table.
    Kubelet {
        #[command(flatten)]
        common: husk::cli::kubelet::CommonFlags,
        /// Manifest directory (or file), watched (the kubelet's --pod-manifest-path).
        #[arg(long, alias = "pod-manifest-path")]
        manifests: Option<PathBuf>,
        /// Manifest URL, polled (the kubelet's --manifest-url).
        #[arg(long)]
        manifest_url: Option<String>,
    },
    /// Run one pod until it completes or is Ready, streaming its logs;
    /// exits with the pod's outcome.
    Run(husk::cli::run::RunFlags),
    /// The per-pod monitor (started by `husk serve`, not by hand).
    #[command(hide = true)]
    Shim {
        /// The sandbox's state dir.
        #[arg(long)]
        dir: PathBuf,
    },
    /// Configuration helpers.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
}

#[derive(Subcommand)]
enum ImagesCmd {
    /// Pull an image.
    Pull {
        image: String,
        /// Registry credentials USER:PASSWORD.
        #[arg(long)]
        creds: Option<String>,
    },
    /// List images.
    #[command(alias = "list")]
    Ls {
        /// Only IDs.
        #[arg(short, long)]
        quiet: bool,
    },
    /// Remove images (by ID, tag or digest).
    #[command(alias = "remove")]
    Rm {
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Load an OCI image-layout tar or a docker-archive tar.
    Import {
        file: PathBuf,
        /// Name for an image the archive leaves unnamed.
        #[arg(long)]
        tag: Option<String>,
    },
}

#[derive(Subcommand)]
enum ConfigCmd {
    /// Print the whole default config as documented TOML.
    Default,
}

/// Config file + flags, validated; errors are one line, exit code 2.
fn load_config(f: &ServeFlags) -> Result<Config, husk::config::ConfigError> {
    let (path, explicit) = match &f.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
    };
    let mut c = Config::load(&path, explicit)?;
    if let Some(v) = &f.root {
        c.root = v.clone();
    }
    if let Some(v) = &f.state {
        c.state = v.clone();
    }
    if let Some(v) = &f.listen {
        c.listen = v.clone();
    }
    if let Some(v) = &f.registry_config_dir {
        c.registry.config_dir = v.clone();
    }
    if let Some(v) = &f.cni_conf_dir {
        c.cni.conf_dir = v.clone();
    }
    if let Some(v) = &f.cni_bin_dir {
        c.cni.bin_dirs = v
            .split(':')
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
    }
    if let Some(v) = &f.sandbox_image {
        c.sandbox_image = v.clone();
    }
    if let Some(v) = &f.log_level {
        c.log_level = v.clone();
    }
    if let Some(v) = &f.log_format {
        c.log_format = v.clone();
    }
    c.validate()?;
    Ok(c)
}

fn main() {
    let cli = Cli::parse();
    if let Cmd::Shim { dir } = &cli.cmd {
        // No async runtime here: the shim must stay single-threaded.
        if let Err(e) = husk::shim::process::run(dir) {
            eprintln!("husk shim: {e}");
            std::process::exit(1);
        }
        std::process::exit(0);
    }
    let code = match run(cli) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("husk: {e:#}");
            if e.downcast_ref::<husk::config::ConfigError>().is_some() {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("start async runtime")
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.cmd {
        Cmd::Serve(flags) => {
            let cfg = load_config(&flags)?;
            husk::logging::init(&cfg.log_level, &cfg.log_format);
            husk::sys::limit_malloc_arenas();
            runtime()?.block_on(husk::server::serve(cfg))
        }
        Cmd::Bench {
            endpoint,
            vs,
            iterations,
            ops,
            image,
            pods,
            json,
        } => runtime()?.block_on(bench(BenchArgs {
            endpoint,
            vs,
            iterations,
            ops,
            image,
            pods,
            json,
        })),
        Cmd::Shim { .. } => Ok(()),
        Cmd::Kubelet {
            common,
            manifests,
            manifest_url,
        } => {
            husk::logging::init(&common.log_level, "text");
            runtime()?.block_on(husk::cli::kubelet::run(common, manifests, manifest_url))
        }
        Cmd::Run(flags) => {
            husk::logging::init(&flags.common.log_level, "text");
            let code = runtime()?.block_on(husk::cli::run::run(flags))?;
            std::process::exit(code);
        }
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            print!("{}", Config::default_toml());
            Ok(())
        }
        Cmd::Images { endpoint, cmd } => {
            let rt = runtime()?;
            match cmd {
                ImagesCmd::Pull { image, creds } => {
                    rt.block_on(husk::cli::images::pull(&endpoint, &image, creds.as_deref()))
                }
                ImagesCmd::Ls { quiet } => rt.block_on(husk::cli::images::list(&endpoint, quiet)),
                ImagesCmd::Rm { images } => {
                    rt.block_on(husk::cli::images::remove(&endpoint, &images))
                }
                ImagesCmd::Import { file, tag } => {
                    rt.block_on(husk::cli::images::import(&endpoint, &file, tag.as_deref()))
                }
            }
        }
    }
}

struct BenchArgs {
    endpoint: String,
    vs: Option<String>,
    iterations: usize,
    ops: String,
    image: String,
    pods: String,
    json: bool,
}

async fn bench(a: BenchArgs) -> anyhow::Result<()> {
    use husk::bench::*;
    let mut targets = vec![Target::connect("runtime", &a.endpoint).await?];
    if let Some(v) = &a.vs {
        targets.push(Target::connect("vs", v).await?);
    }
    for t in targets.iter_mut() {
        let v = t
            .runtime
            .version(husk::api::cri::VersionRequest {
                version: "v1".into(),
            })
            .await?
            .into_inner();
        t.name = format!("{} {}", v.runtime_name, v.runtime_version);
    }
    let mut report = serde_json::Map::new();
    report.insert("load_before".into(), loadavg().into());
    for op in a.ops.split(',').map(str::trim).filter(|o| !o.is_empty()) {
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
            other => {
                anyhow::bail!("unknown benchmark operation {other:?} (pull, sandbox, container)")
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

fn ratio(a: f64, b: f64) -> f64 {
    a / b.max(f64::MIN_POSITIVE)
}

fn print_pull(image: &str, iterations: usize, results: &[husk::bench::PullResult]) {
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

fn print_sandbox(iterations: usize, results: &[husk::bench::sandbox::SandboxResult]) {
    println!("pod sandboxes, {iterations} interleaved iterations");
    println!(
        "{:<28} {:>12} {:>12} {:>12} {:>16} {:>16}",
        "runtime", "run p50 ms", "run p90 ms", "run p99 ms", "stop+rm p50 ms", "stop+rm p90 ms"
    );
    for r in results {
        println!(
            "{:<28} {:>12.1} {:>12.1} {:>12.1} {:>16.1} {:>16.1}",
            r.runtime,
            r.run.p50_ms,
            r.run.p90_ms,
            r.run.p99_ms,
            r.stop_remove.p50_ms,
            r.stop_remove.p90_ms
        );
    }
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

fn print_containers(iterations: usize, results: &[husk::bench::container::ContainerResult]) {
    println!("containers, {iterations} interleaved iterations");
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
