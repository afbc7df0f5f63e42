//! `[tracing]`: where husk's OpenTelemetry spans go (`crate::otel`).

use super::ConfigError;
use serde::{Deserialize, Serialize};

/// Spans waiting for export at most, by default.
pub const DEFAULT_QUEUE: usize = 2048;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TracingConfig {
    /// The OTLP/gRPC collector: `http://host:port` (or `host:port`);
    /// empty: no tracing.
    pub endpoint: String,
    /// The share of the traces that start here (no sampled parent) that
    /// are kept, 0.0 to 1.0. A caller's `traceparent` decides for its own.
    pub sampling_ratio: f64,
    /// Finished spans waiting for export; past this, spans are dropped
    /// and counted (`husk_trace_spans_dropped_total`).
    pub queue_size: usize,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            endpoint: String::new(),
            sampling_ratio: 1.0,
            queue_size: DEFAULT_QUEUE,
        }
    }
}

impl TracingConfig {
    /// The collector's URI, `None` when tracing is off.
    pub fn uri(&self) -> Result<Option<http::Uri>, ConfigError> {
        let e = self.endpoint.trim();
        if e.is_empty() {
            return Ok(None);
        }
        let full = if e.contains("://") {
            e.to_string()
        } else {
            format!("http://{e}")
        };
        let bad = |why: &str| ConfigError(format!("tracing.endpoint: {:?} {why}", self.endpoint));
        let uri: http::Uri = full.parse().map_err(|_| bad("is not a URI"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(bad(
                    "asks for TLS, which husk's exporter does not speak: use a node-local collector's http:// address",
                ))
            }
            _ => return Err(bad("must be http://host:port")),
        }
        if uri.host().is_none_or(str::is_empty) || uri.port_u16().is_none() {
            return Err(bad("must name a host and a port"));
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(bad("must not have a path (OTLP/gRPC has one service path)"));
        }
        Ok(Some(uri))
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        self.uri()?;
        if !(0.0..=1.0).contains(&self.sampling_ratio) {
            return Err(ConfigError(format!(
                "tracing.sampling_ratio: {} is not between 0.0 and 1.0",
                self.sampling_ratio
            )));
        }
        if !(1..=1 << 20).contains(&self.queue_size) {
            return Err(ConfigError(format!(
                "tracing.queue_size: {} is not between 1 and 1048576",
                self.queue_size
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(endpoint: &str) -> TracingConfig {
        TracingConfig {
            endpoint: endpoint.into(),
            ..TracingConfig::default()
        }
    }

    #[test]
    fn endpoints_are_checked() {
        assert_eq!(with("").uri().expect("off"), None);
        let u = with("127.0.0.1:4317").uri().expect("bare").expect("on");
        assert_eq!(u.to_string(), "http://127.0.0.1:4317/");
        assert!(with("http://collector.local:4317").uri().is_ok());
        for bad in [
            "https://c:4317",
            "http://c",
            "ftp://c:1",
            "http://c:4317/v1/traces",
            "not a uri",
        ] {
            let e = with(bad).validate().expect_err(bad);
            assert!(e.0.starts_with("tracing.endpoint:"), "{}", e.0);
        }
    }

    #[test]
    fn ratio_and_queue_are_bounded() {
        let c = TracingConfig {
            sampling_ratio: 1.5,
            ..TracingConfig::default()
        };
        assert!(c
            .validate()
            .expect_err("ratio")
            .0
            .starts_with("tracing.sampling_ratio:"));
        let c = TracingConfig {
            queue_size: 0,
            ..TracingConfig::default()
        };
        assert!(c
            .validate()
            .expect_err("queue")
            .0
            .starts_with("tracing.queue_size:"));
        TracingConfig::default().validate().expect("defaults");
    }
}
