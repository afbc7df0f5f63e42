//! Logging setup: `tracing` to stderr, text or JSON, filtered by level or
//! an env-filter directive (`RUST_LOG` overrides the configured level).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; `format` is "text" or "json".
pub fn init(level: &str, format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = if format == "json" {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
