//! containerd's `[plugins."io.containerd.nri.v1.nri"]` table as husk's
//! `[nri]` (config versions 2 and up; version 1 had no NRI).

use crate::config::NriConfig;
use std::path::PathBuf;
use toml::Value;

/// A Go duration (`5s`, `2500ms`, `1m`, `1m30s`) in milliseconds.
pub fn go_duration_ms(s: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut rest = s.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u] {
            "ns" => 1e-6,
            "us" | "µs" => 1e-3,
            "ms" => 1.0,
            "s" => 1e3,
            "m" => 60e3,
            "h" => 3600e3,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[u..];
    }
    Some(total.round() as u64)
}

/// Carries `t` into `c`: what was carried and what was left, one line each.
pub fn convert(t: &Value, c: &mut NriConfig, base: &str) -> (Vec<String>, Vec<String>) {
    let (mut carried, mut left) = (Vec::new(), Vec::new());
    let Some(t) = t.as_table() else {
        return (carried, vec![format!("{base}: not a table")]);
    };
    for (k, v) in t {
        let to = match (k.as_str(), v) {
            ("disable", Value::Boolean(b)) => {
                c.enable = !b;
                "nri.enable (negated)"
            }
            ("socket_path", Value::String(s)) => {
                c.socket_path = PathBuf::from(s);
                "nri.socket_path"
            }
            ("plugin_path", Value::String(s)) => {
                c.plugin_path = PathBuf::from(s);
                "nri.plugin_path"
            }
            ("plugin_config_path", Value::String(s)) => {
                c.plugin_config_path = PathBuf::from(s);
                "nri.plugin_config_path"
            }
            ("disable_connections", Value::Boolean(b)) => {
                c.disable_connections = *b;
                "nri.disable_connections"
            }
            ("plugin_registration_timeout", Value::String(s)) => match go_duration_ms(s) {
                Some(ms) => {
                    c.plugin_registration_timeout_ms = ms;
                    "nri.plugin_registration_timeout_ms"
                }
                None => {
                    left.push(format!("{base}.{k} = {s:?}: not a duration"));
                    continue;
                }
            },
            ("plugin_request_timeout", Value::String(s)) => match go_duration_ms(s) {
                Some(ms) => {
                    c.plugin_request_timeout_ms = ms;
                    "nri.plugin_request_timeout_ms"
                }
                None => {
                    left.push(format!("{base}.{k} = {s:?}: not a duration"));
                    continue;
                }
            },
            _ => {
                left.push(format!("{base}.{k}: husk's [nri] has no such setting"));
                continue;
            }
        };
        carried.push(format!("{base}.{k} -> {to}"));
    }
    (carried, left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_durations_read_as_milliseconds() {
        assert_eq!(go_duration_ms("5s"), Some(5000));
        assert_eq!(go_duration_ms("2500ms"), Some(2500));
        assert_eq!(go_duration_ms("1m30s"), Some(90_000));
        assert_eq!(go_duration_ms("0.5s"), Some(500));
        assert_eq!(go_duration_ms("soon"), None);
        assert_eq!(go_duration_ms(""), None);
    }

    #[test]
    fn containerd_s_nri_table_is_carried() {
        let t: Value = toml::from_str(
            "disable = false\nsocket_path = \"/run/nri/x.sock\"\nplugin_path = \"/p\"\n\
             plugin_config_path = \"/c\"\nplugin_registration_timeout = \"7s\"\n\
             plugin_request_timeout = \"1500ms\"\ndisable_connections = true\nwhat = 1\n",
        )
        .expect("toml");
        let mut c = NriConfig::default();
        let (carried, left) = convert(&t, &mut c, "nri");
        assert_eq!(carried.len(), 7, "{carried:?}");
        assert_eq!(left, ["nri.what: husk's [nri] has no such setting"]);
        assert_eq!(
            c,
            NriConfig {
                enable: true,
                socket_path: "/run/nri/x.sock".into(),
                plugin_path: "/p".into(),
                plugin_config_path: "/c".into(),
                plugin_registration_timeout_ms: 7000,
                plugin_request_timeout_ms: 1500,
                disable_connections: true,
            }
        );
    }
}
