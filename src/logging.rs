//! Logging setup: `tracing` to stderr, text or JSON, filtered by level or
//! an env-filter directive (`RUST_LOG` overrides the configured level).

use tracing_subscriber::EnvFilter;

/// `level` with the HTTP client library's per-request error lines turned
/// off unless asked for: the kubelet's API tasks log each cause once.
pub fn quiet_client(level: &str) -> String {
    if level.contains("kube_client") {
        level.to_string()
    } else {
        format!("{level},kube_client=off")
    }
}

/// Installs the global subscriber; `format` is "text" or "json".
pub fn init(level: &str, format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
