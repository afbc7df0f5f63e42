//! The `husk` binary: `serve`, `check`, `images`, `kubelet`, `run`, `bench`, `config`.

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use husk::config::Config;
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

#[derive(Subcommand)]
enum Cmd {
    /// Serve CRI v1 on a unix socket.
    Serve(husk::cli::serve_flags::ServeFlags),
    /// Preflight: what this host gives husk, one line per check with the
    /// fix (exit 0 ok, 1 warnings, 2 failures).
    Check {
        #[command(flatten)]
        flags: husk::cli::serve_flags::ServeFlags,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Manage images on a running runtime.
    Images {
        /// Runtime endpoint.
        #[arg(long, global = true, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = husk::cli::DEFAULT_ENDPOINT)]
        endpoint: String,
        #[command(subcommand)]
        cmd: ImagesCmd,
    },
    /// Run a command in a running container (streaming, over CRI Exec).
    Exec {
        #[command(flatten)]
        s: StreamFlags,
        container: String,
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Attach to a running container's stdio (CRI Attach).
    Attach {
        #[command(flatten)]
        s: StreamFlags,
        container: String,
    },
    /// Forward a local port to a port in a pod (CRI PortForward).
    PortForward {
        #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = husk::cli::DEFAULT_ENDPOINT)]
        endpoint: String,
        /// spdy or websocket.
        #[arg(long, default_value = "spdy")]
        transport: String,
        /// CA certificate for an https streaming server.
        #[arg(long)]
        tls_ca: Option<PathBuf>,
        pod: String,
        /// LOCAL:REMOTE ports.
        ports: String,
    },
    /// Measure CRI runtimes side by side (`--vs`), interleaved in one run.
    Bench {
        /// The runtime to measure.
        #[arg(long, default_value = husk::cli::DEFAULT_ENDPOINT)]
        endpoint: String,
        /// A runtime to compare against (more than one: --density only).
        #[arg(long)]
        vs: Vec<String>,
        /// Iterations per operation.
        #[arg(long, default_value_t = 5)]
        iterations: usize,
        /// Operations: rpc, pull, sandbox, container, exec, stream, breakdown, userns
        /// (hostUsers: false pods against plain ones, on --endpoint only) (comma-separated),
        /// or all; or pod-startup alone (a cluster's nodes, with --kubeconfig,
        /// --nodes; --iterations rounds).
        #[arg(long, default_value = "pull")]
        ops: String,
        /// Image for the pull, container, exec and stream operations (they
        /// refuse to run without one; rpc and sandbox need none).
        #[arg(long, default_value = "", hide_default_value = true)]
        image: String,
        /// Pod counts at which the sandbox benchmark measures memory.
        #[arg(long, default_value = "1,10,50")]
        pods: String,
        /// The runtime handler the pods name (a RuntimeClass's handler;
        /// "": each runtime's default).
        #[arg(long, default_value = "", hide_default_value = true)]
        runtime_handler: String,
        /// The handler on --vs, when not the same name.
        #[arg(long)]
        vs_runtime_handler: Option<String>,
        /// `--ops pod-startup`: the cluster to measure (a Deployment per node).
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// `--ops pod-startup`: the nodes to compare (comma-separated).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// `--ops pod-startup`: pods per Deployment.
        #[arg(long, default_value_t = 30)]
        replicas: usize,
        /// `--ops pod-startup`: the namespace to create the Deployments in.
        #[arg(long, default_value = "default")]
        namespace: String,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Also a pod's lifecycle stage by stage (p50/p90 per stage, husk's
        /// own share against the plugins' and the payload's); needs --image.
        #[arg(long)]
        breakdown: bool,
        /// Fill each runtime in turn to N running pods (a pause and one
        /// `sleep` container of --image each), measuring at --checkpoints,
        /// then stop and remove them all.
        #[arg(long, value_name = "N")]
        density: Option<usize>,
        /// `--density`: the pod counts at which to measure.
        #[arg(long, value_delimiter = ',', default_value = "50,100,250,500")]
        checkpoints: Vec<usize>,
        /// `--density`: a shell command that kills the first runtime's
        /// server and starts it again, run at N pods; the time until every
        /// pod is back is reported.
        #[arg(long)]
        restart_cmd: Option<String>,
        /// `--density`: the longest a pod's start may take before that
        /// runtime's fill stops (seconds).
        #[arg(long, default_value_t = 60)]
        pod_timeout: u64,
        /// `--density`: pods stopped and removed at once at the end.
        #[arg(long, default_value_t = 8)]
        remove_parallel: usize,
        /// `--density`: the first runtime's Prometheus endpoint
        /// (host:port), scraped at each checkpoint.
        #[arg(long)]
        metrics_address: Option<String>,
    },
    /// A thin kubelet: runs Pod manifests on any CRI runtime, printing
    /// status changes as a live table.
    Kubelet {
        #[command(flatten)]
        common: Box<husk::cli::kubelet::CommonFlags>,
        #[command(flatten)]
        cluster: husk::cli::kubelet::ClusterFlags,
        /// Manifest directory (or file), watched (the kubelet's --pod-manifest-path).
        #[arg(long, alias = "pod-manifest-path")]
        manifests: Option<PathBuf>,
        /// Manifest URL, polled (the kubelet's --manifest-url).
        #[arg(long)]
        manifest_url: Option<String>,
    },
    /// Run one pod until it completes or is Ready, streaming its logs;
    /// exits with the pod's outcome.
    Run(Box<husk::cli::run::RunFlags>),
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

#[derive(clap::Args)]
struct StreamFlags {
    #[arg(long, env = "CONTAINER_RUNTIME_ENDPOINT", default_value = husk::cli::DEFAULT_ENDPOINT)]
    endpoint: String,
    /// Keep stdin open.
    #[arg(short, long)]
    interactive: bool,
    /// Allocate a terminal.
    #[arg(short, long)]
    tty: bool,
    /// spdy or websocket.
    #[arg(long, default_value = "spdy")]
    transport: String,
    /// CA certificate for an https streaming server.
    #[arg(long)]
    tls_ca: Option<PathBuf>,
}

impl StreamFlags {
    fn opts(&self) -> anyhow::Result<husk::cli::stream::Opts> {
        Ok(husk::cli::stream::Opts {
            stdin: self.interactive,
            tty: self.tty,
            transport: self
                .transport
                .parse()
                .map_err(|e: String| anyhow::anyhow!(e))?,
            tls: husk::streaming::client::Tls {
                ca: self.tls_ca.clone(),
                client: None,
            },
        })
    }
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
    /// Print the effective config (the file, its conf.d drop-ins and the
    /// flags given here, as `husk serve` would take them), each value
    /// followed by where it came from.
    Dump {
        #[command(flatten)]
        flags: Box<husk::cli::serve_flags::ServeFlags>,
    },
    /// Print a husk config carrying over what maps from a containerd
    /// config.toml, listing what cannot be carried and why.
    ImportContainerd {
        /// containerd's config file.
        #[arg(default_value = husk::cli::config_import::DEFAULT_CONTAINERD_CONFIG)]
        file: PathBuf,
    },
}

/// `husk shim --dir DIR`, as the server spawns it, is recognised before
/// the full command line is parsed: the monitor lives as long as its pod,
/// and what it touches at start stays resident.
fn shim_dir() -> Option<PathBuf> {
    let mut args = std::env::args_os().skip(1);
    match (args.next(), args.next(), args.next(), args.next()) {
        (Some(cmd), Some(flag), Some(dir), None) if cmd == "shim" && flag == "--dir" => {
            Some(PathBuf::from(dir))
        }
        _ => None,
    }
}

fn run_shim(dir: &std::path::Path) -> ! {
    // Started from the sealed binary's descriptor, the shim would be
    // named after its number ("15") in ps and top.
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"husk".as_ptr());
    }
    // No async runtime here: the shim must stay single-threaded.
    if let Err(e) = husk::shim::process::run(dir) {
        eprintln!("husk shim: {e}");
        std::process::exit(1);
    }
    std::process::exit(0);
}

fn main() {
    if let Some(dir) = shim_dir() {
        run_shim(&dir);
    }
    let cli = Cli::parse();
    if let Cmd::Shim { dir } = &cli.cmd {
        run_shim(dir);
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
            let cfg = husk::cli::serve_flags::load_config(&flags)?;
            husk::logging::init(&cfg.log_level, &cfg.log_format);
            husk::sys::limit_malloc_arenas();
            husk::sys::keep_inherited_to_self();
            // Blocking threads a burst of RPCs started (a pod's steps run on
            // them) exit after a second idle, before the server trims itself.
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_keep_alive(std::time::Duration::from_secs(1))
                .build()
                .context("start async runtime")?
                .block_on(husk::server::serve(
                    cfg,
                    Some(Box::new(move || {
                        husk::cli::serve_flags::load_config(&flags)
                    })),
                ))
        }
        Cmd::Check { flags, json } => {
            let cfg = husk::cli::serve_flags::load_config(&flags)?;
            let checks = runtime()?.block_on(husk::cli::check::run_all(&cfg));
            std::process::exit(husk::cli::check::report(&checks, json));
        }
        Cmd::Bench {
            iterations,
            ops,
            image,
            json,
            kubeconfig,
            nodes,
            replicas,
            namespace,
            ..
        } if ops.trim() == "pod-startup" => runtime()?.block_on(husk::bench::pod_startup::run(
            husk::bench::pod_startup::Args {
                kubeconfig: kubeconfig.ok_or_else(|| {
                    anyhow::anyhow!("--ops pod-startup needs --kubeconfig (and --nodes)")
                })?,
                nodes,
                replicas,
                rounds: iterations,
                image,
                namespace,
                json,
            },
        )),
        Cmd::Bench {
            endpoint,
            vs,
            runtime_handler,
            vs_runtime_handler,
            image,
            json,
            density: Some(pods),
            checkpoints,
            restart_cmd,
            pod_timeout,
            remove_parallel,
            metrics_address,
            ..
        } => {
            let vs_handler = vs_runtime_handler.unwrap_or_else(|| runtime_handler.clone());
            let mut targets = vec![(endpoint, runtime_handler)];
            targets.extend(vs.into_iter().map(|v| (v, vs_handler.clone())));
            runtime()?.block_on(husk::bench::density::run(
                husk::bench::density::DensityArgs {
                    targets,
                    pods,
                    checkpoints,
                    image,
                    restart_cmd,
                    pod_timeout: std::time::Duration::from_secs(pod_timeout),
                    remove_parallel,
                    metrics: metrics_address,
                    json,
                },
            ))
        }
        Cmd::Bench {
            endpoint,
            vs,
            iterations,
            ops,
            image,
            pods,
            json,
            breakdown,
            runtime_handler,
            vs_runtime_handler,
            ..
        } => runtime()?.block_on(husk::bench::cli::run(husk::bench::cli::BenchArgs {
            endpoint,
            vs: match vs.len() {
                0 | 1 => vs.into_iter().next(),
                _ => anyhow::bail!("more than one --vs is for --density only"),
            },
            iterations,
            ops,
            image,
            pods,
            json,
            breakdown,
            handler: runtime_handler,
            vs_handler: vs_runtime_handler,
        })),
        Cmd::Shim { .. } => Ok(()),
        Cmd::Exec { s, container, cmd } => {
            let code = runtime()?.block_on(husk::cli::stream::exec(
                &s.endpoint,
                &container,
                cmd,
                s.opts()?,
            ))?;
            std::process::exit(code);
        }
        Cmd::Attach { s, container } => {
            let code = runtime()?.block_on(husk::cli::stream::attach(
                &s.endpoint,
                &container,
                s.opts()?,
            ))?;
            std::process::exit(code);
        }
        Cmd::PortForward {
            endpoint,
            transport,
            tls_ca,
            pod,
            ports,
        } => {
            let (l, r) = ports
                .split_once(':')
                .and_then(|(l, r)| Some((l.parse::<u16>().ok()?, r.parse::<u16>().ok()?)))
                .ok_or_else(|| anyhow::anyhow!("ports {ports:?}: use LOCAL:REMOTE"))?;
            runtime()?.block_on(husk::cli::stream::port_forward(
                &endpoint,
                &pod,
                l,
                r,
                transport.parse().map_err(|e: String| anyhow::anyhow!(e))?,
                husk::streaming::client::Tls {
                    ca: tls_ca,
                    client: None,
                },
            ))
        }
        Cmd::Kubelet {
            common,
            cluster,
            manifests,
            manifest_url,
        } => {
            husk::logging::init(&husk::logging::quiet_client(&common.log_level), "text");
            runtime()?.block_on(husk::cli::kubelet::run(
                *common,
                cluster,
                manifests,
                manifest_url,
            ))
        }
        Cmd::Run(flags) => {
            husk::logging::init(&flags.common.log_level, "text");
            let code = runtime()?.block_on(husk::cli::run::run(*flags))?;
            std::process::exit(code);
        }
        Cmd::Config {
            cmd: ConfigCmd::Default,
        } => {
            print!("{}", Config::default_toml());
            Ok(())
        }
        Cmd::Config {
            cmd: ConfigCmd::Dump { flags },
        } => {
            print!("{}", husk::cli::serve_flags::load_layered(&flags)?.dump());
            Ok(())
        }
        Cmd::Config {
            cmd: ConfigCmd::ImportContainerd { file },
        } => {
            let imported = husk::cli::config_import::import(&file)?;
            print!("{}", imported.render(&file));
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
