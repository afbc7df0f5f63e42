//! The `husk` binary: `serve`, `images`, `config`.

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
            runtime()?.block_on(husk::server::serve(cfg))
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
