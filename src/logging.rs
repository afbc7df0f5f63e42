//! Logging setup: `tracing` to stderr, text or JSON, filtered by level or
//! an env-filter directive (`RUST_LOG` overrides the configured level).
//! Both the filter and the format can be changed while the process runs
//! ([`reload`], for `husk serve`'s SIGHUP).

use std::sync::OnceLock;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{reload, EnvFilter, Layer, Registry};

type Output = Box<dyn Layer<Registry> + Send + Sync>;

/// The handles that change the installed subscriber's filter and format.
struct Handles {
    filter: reload::Handle<
        EnvFilter,
        tracing_subscriber::layer::Layered<reload::Layer<Output, Registry>, Registry>,
    >,
    output: reload::Handle<Output, Registry>,
}

static HANDLES: OnceLock<Handles> = OnceLock::new();

/// `level` with the HTTP client library's per-request error lines turned
/// off unless asked for: the kubelet's API tasks log each cause once.
pub fn quiet_client(level: &str) -> String {
    if level.contains("kube_client") {
        level.to_string()
    } else {
        format!("{level},kube_client=off")
    }
}

fn filter(level: &str) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

fn output(format: &str) -> Output {
    let base = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    if format == "json" {
        Box::new(base.json().flatten_event(true))
    } else {
        Box::new(base)
    }
}

/// Installs the global subscriber; `format` is "text" or "json".
pub fn init(level: &str, format: &str) {
    let (output, output_handle) = reload::Layer::new(output(format));
    let (filter, filter_handle) = reload::Layer::new(filter(level));
    let installed = Registry::default().with(output).with(filter).try_init();
    if installed.is_ok() {
        let _ = HANDLES.set(Handles {
            filter: filter_handle,
            output: output_handle,
        });
    }
}

/// Changes the level and format of the subscriber [`init`] installed.
pub fn reload(level: &str, format: &str) -> Result<(), String> {
    let h = HANDLES.get().ok_or("logging was not set up by husk")?;
    h.output
        .reload(output(format))
        .map_err(|e| format!("log format: {e}"))?;
    h.filter
        .reload(filter(level))
        .map_err(|e| format!("log level: {e}"))
}
