//! `husk check`: the preflight a node operator runs before pointing the
//! kubelet at husk. One line per check (ok / warn / fail, and the fix), or
//! JSON with `--json`; the exit code is 0 when all is ok, 1 with warnings,
//! 2 with failures.
//!
//! It reads the host as `husk serve` would with the same config and flags:
//! the kernel and overlayfs, the cgroup layout and every controller the
//! kubelet may ask for (and what husk does without it), the cgroup driver
//! the host wants against the configured one, CAP_SYS_RESOURCE,
//! the root directory's filesystem (an overlay mount is tried there), the
//! CNI config and the plugins its first network names, the sandbox image,
//! the socket, seccomp and AppArmor, and each runtime handler's runtime.
//! It changes nothing it does not undo.

mod handlers;
mod node;
mod root_fs;

use crate::cgroup::{Driver, Layout};
use crate::config::Config;
use node::{apparmor, cgroup_driver, cgroups, mount_namespace, seccomp, user_namespaces};
use root_fs::root_fs;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub check: String,
    pub status: Level,
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub fix: String,
}

fn check(name: &str, status: Level, message: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        check: name.into(),
        status,
        message: message.into(),
        fix: fix.into(),
    }
}

/// Runs every check against `cfg`.
pub async fn run_all(cfg: &Config) -> Vec<Check> {
    let mut out = vec![kernel(), overlay_support()];
    out.extend(cgroups(Layout::host()));
    out.push(cgroup_driver(
        &cfg.cgroup.driver,
        Driver::host_wants(Layout::host(), crate::cgroup::driver::systemd_booted()),
        |d| Driver::resolve(d, Layout::host()),
    ));
    out.push(sys_resource());
    out.push(root_fs(&cfg.root));
    out.push(mount_namespace(
        &cfg.mount_namespace,
        &[&cfg.root, &cfg.state],
    ));
    out.extend(cni(&cfg.cni.conf_dir, &cfg.cni.bin_dirs));
    out.push(sandbox_image(cfg).await);
    out.push(socket(&cfg.listen).await);
    out.push(nri(cfg).await);
    out.push(seccomp());
    out.push(apparmor());
    let reach =
        crate::idmap::searchable(&cfg.root).and_then(|()| crate::idmap::searchable(&cfg.state));
    out.push(user_namespaces(
        &crate::idmap::Support::probe(&cfg.root),
        reach,
    ));
    out.extend(handlers::handlers(cfg));
    out.push(metrics(&cfg.metrics.address));
    out.push(tracing_export(&cfg.tracing).await);
    out
}

/// Where husk's spans go, and whether that collector takes connections.
async fn tracing_export(t: &crate::config::TracingConfig) -> Check {
    let uri = match t.uri() {
        Ok(Some(u)) => u,
        Ok(None) => {
            return check(
                "tracing",
                Level::Ok,
                "off ([tracing] endpoint is empty)",
                "set [tracing] endpoint to export OpenTelemetry spans over OTLP/gRPC",
            )
        }
        Err(e) => return check("tracing", Level::Fail, e.0, "fix [tracing] endpoint"),
    };
    let at = format!(
        "{}:{}",
        uri.host().unwrap_or_default(),
        uri.port_u16().unwrap_or_default()
    );
    let what = format!(
        "spans to the OTLP/gRPC collector at {at}, {} of the traces that start here",
        t.sampling_ratio
    );
    let connect = tokio::net::TcpStream::connect(&at);
    match tokio::time::timeout(std::time::Duration::from_secs(2), connect).await {
        Ok(Ok(_)) => check("tracing", Level::Ok, what, ""),
        Ok(Err(e)) => check(
            "tracing",
            Level::Warn,
            format!("{what}; it refuses connections: {e}"),
            "start the collector; until then spans are dropped (husk_trace_spans_failed_total)",
        ),
        Err(_) => check(
            "tracing",
            Level::Warn,
            format!("{what}; it did not answer a connection in 2 s"),
            "check the collector; until then spans are dropped (husk_trace_spans_failed_total)",
        ),
    }
}

/// Where Prometheus scrapes husk, if anywhere.
fn metrics(address: &str) -> Check {
    if address.is_empty() {
        return check(
            "metrics",
            Level::Ok,
            "off ([metrics] address is empty)",
            "set [metrics] address to serve /metrics",
        );
    }
    check(
        "metrics",
        Level::Ok,
        format!("husk serve serves Prometheus metrics at {address} (GET /metrics)"),
        "",
    )
}

/// Prints the report; returns the exit code.
pub fn report(checks: &[Check], json: bool) -> i32 {
    if json {
        let v = serde_json::json!({ "checks": checks, "status": worst(checks) });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        for c in checks {
            let tag = match c.status {
                Level::Ok => "ok  ",
                Level::Warn => "warn",
                Level::Fail => "FAIL",
            };
            let fix = if c.fix.is_empty() {
                String::new()
            } else {
                format!(" (fix: {})", c.fix)
            };
            println!("{tag}  {:<22} {}{fix}", c.check, c.message);
        }
    }
    match worst(checks) {
        Level::Ok => 0,
        Level::Warn => 1,
        Level::Fail => 2,
    }
}

fn worst(checks: &[Check]) -> Level {
    checks.iter().map(|c| c.status).max().unwrap_or(Level::Ok)
}

fn kernel() -> Check {
    let u = rustix::system::uname();
    let release = u.release().to_string_lossy().into_owned();
    let mut parts = release
        .split(['.', '-'])
        .filter_map(|p| p.parse::<u32>().ok());
    let v = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if v >= (5, 4) {
        check("kernel", Level::Ok, format!("Linux {release}"), "")
    } else if v >= (4, 15) {
        check(
            "kernel",
            Level::Warn,
            format!("Linux {release}: older than 5.4, some features are missing"),
            "run a 5.4 or newer kernel",
        )
    } else {
        check(
            "kernel",
            Level::Fail,
            format!("Linux {release} is too old for overlayfs and cgroup features husk uses"),
            "run a 5.4 or newer kernel",
        )
    }
}

fn overlay_support() -> Check {
    let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    if fs
        .lines()
        .any(|l| l.split_whitespace().last() == Some("overlay"))
    {
        check("overlayfs", Level::Ok, "overlay is available", "")
    } else {
        check(
            "overlayfs",
            Level::Fail,
            "the kernel has no overlay file system",
            "modprobe overlay (and add it to /etc/modules-load.d)",
        )
    }
}

/// Whether bit `cap` is set in this process's effective capabilities.
fn has_capability(cap: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << cap) != 0)
}

fn sys_resource() -> Check {
    if has_capability(24) {
        check(
            "CAP_SYS_RESOURCE",
            Level::Ok,
            "held: oom_score_adj can be set as asked",
            "",
        )
    } else {
        check(
            "CAP_SYS_RESOURCE",
            Level::Warn,
            "not held: oom_score_adj cannot go below its current value; husk clamps it",
            "run husk with CAP_SYS_RESOURCE (outside a restricted container)",
        )
    }
}

/// The nearest existing ancestor of `p`.
/// The CNI config dir and the plugins its first network names.
fn cni(conf_dir: &Path, bin_dirs: &[PathBuf]) -> Vec<Check> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(conf_dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    matches!(
                        p.extension().and_then(|x| x.to_str()),
                        Some("conf" | "conflist" | "json")
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    let Some(first) = files.first() else {
        return vec![check(
            "CNI config",
            Level::Fail,
            format!("no network config in {}: pods cannot start (NetworkReady=false)", conf_dir.display()),
            "install a conflist there (husk's default: /usr/share/husk/10-husk.conflist) or your cluster's network add-on",
        )];
    };
    let v: serde_json::Value = match std::fs::read(first)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
    {
        Some(v) => v,
        None => {
            return vec![check(
                "CNI config",
                Level::Fail,
                format!("{} is not valid JSON", first.display()),
                "fix or remove it",
            )]
        }
    };
    let plugins: Vec<String> = match v.get("plugins").and_then(|p| p.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|p| p.get("type").and_then(|t| t.as_str()).map(str::to_string))
            .collect(),
        None => v
            .get("type")
            .and_then(|t| t.as_str())
            .map(|t| vec![t.to_string()])
            .unwrap_or_default(),
    };
    let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("?");
    let mut out = vec![check(
        "CNI config",
        Level::Ok,
        format!("{} (network {name:?})", first.display()),
        "",
    )];
    for p in plugins {
        let found = bin_dirs.iter().map(|d| d.join(&p)).find(|f| f.is_file());
        out.push(match found {
            Some(f) => check(
                &format!("CNI plugin {p}"),
                Level::Ok,
                f.display().to_string(),
                "",
            ),
            None => check(
                &format!("CNI plugin {p}"),
                Level::Fail,
                format!(
                    "not in {}",
                    bin_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(":")
                ),
                "apt-get install containernetworking-plugins, or set cni.bin_dirs",
            ),
        });
    }
    out
}

/// Present in husk's store, or pullable through the configured hosts.
async fn sandbox_image(cfg: &Config) -> Check {
    use crate::reference::Reference;
    let name = &cfg.sandbox_image;
    let r = match Reference::parse(name) {
        Ok(r) => r,
        Err(e) => {
            return check(
                "sandbox image",
                Level::Fail,
                format!("{name}: {e}"),
                "set sandbox_image to a valid reference",
            )
        }
    };
    let want = r.to_string();
    let present = std::fs::read_dir(cfg.root.join("images"))
        .map(|rd| {
            rd.flatten().any(|e| {
                std::fs::read(e.path())
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|v| v.get("repo_tags").cloned())
                    .and_then(|t| t.as_array().cloned())
                    .is_some_and(|tags| tags.iter().any(|t| t.as_str() == Some(want.as_str())))
            })
        })
        .unwrap_or(false);
    if present {
        return check(
            "sandbox image",
            Level::Ok,
            format!("{want} is in the image store"),
            "",
        );
    }
    let client = crate::image::registry::RegistryClient::new(cfg.registry.config_dir.clone());
    let creds = crate::image::auth::Credentials::default();
    let fetched = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        client.fetch_manifest(&r, r.object(), &creds),
    )
    .await;
    match fetched {
        Ok(Ok(_)) => check(
            "sandbox image",
            Level::Ok,
            format!("{want} is not pulled yet, and its registry answers"),
            "",
        ),
        Ok(Err(e)) => check(
            "sandbox image",
            Level::Fail,
            format!("{want} is not pulled and cannot be: {e}"),
            format!(
                "add a mirror in {}/<registry>/hosts.toml, or `husk images import` it",
                cfg.registry.config_dir.display()
            ),
        ),
        Err(_) => check(
            "sandbox image",
            Level::Fail,
            format!("{want} is not pulled and its registry did not answer in 15 s"),
            format!(
                "add a reachable mirror in {}/<registry>/hosts.toml, or `husk images import` it",
                cfg.registry.config_dir.display()
            ),
        ),
    }
}

/// NRI: off, or the plugins the serving husk has in its chain (its
/// Status's verbose `nri` info).
async fn nri(cfg: &Config) -> Check {
    if !cfg.nri.enable {
        return check("nri", Level::Ok, "off ([nri] enable = false)", "");
    }
    let ep = format!("unix://{}", cfg.listen.display());
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let ch = crate::api::connect(&ep).await?;
        let st = crate::api::cri::runtime_service_client::RuntimeServiceClient::new(ch)
            .status(crate::api::cri::StatusRequest { verbose: true })
            .await?
            .into_inner();
        anyhow::Ok(st.info.get("nri").cloned().unwrap_or_default())
    })
    .await;
    let plugins: Vec<String> = match answer {
        Ok(Ok(text)) => serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["plugins"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p["id"].as_str().map(String::from))
            .collect(),
        _ => {
            return check(
                "nri",
                Level::Ok,
                format!(
                    "on; plugins dial {} (husk is not serving: none connected)",
                    cfg.nri.socket_path.display()
                ),
                "",
            )
        }
    };
    let listed = if plugins.is_empty() {
        "none connected".to_string()
    } else {
        format!("connected: {}", plugins.join(", "))
    };
    check(
        "nri",
        Level::Ok,
        format!(
            "on; plugins dial {}; {listed}",
            cfg.nri.socket_path.display()
        ),
        "",
    )
}

/// Free, a stale file, a live husk, or another runtime.
async fn socket(path: &Path) -> Check {
    if !path.exists() {
        return check(
            "socket",
            Level::Ok,
            format!("{} is free", path.display()),
            "",
        );
    }
    let ep = format!("unix://{}", path.display());
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let ch = crate::api::connect(&ep).await?;
        let v = crate::api::cri::runtime_service_client::RuntimeServiceClient::new(ch)
            .version(crate::api::cri::VersionRequest::default())
            .await?
            .into_inner();
        anyhow::Ok((v.runtime_name, v.runtime_version))
    })
    .await;
    match answer {
        Ok(Ok((name, version))) if name == "husk" => check(
            "socket",
            Level::Ok,
            format!("{}: husk {version} is serving", path.display()),
            "",
        ),
        Ok(Ok((name, version))) => check(
            "socket",
            Level::Fail,
            format!("{}: {name} {version} is serving there", path.display()),
            "stop the other runtime, or give husk another listen path",
        ),
        _ => check(
            "socket",
            Level::Ok,
            format!("{}: a stale socket; husk serve replaces it", path.display()),
            "",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cni_names_missing_plugins() {
        let d = tempfile::tempdir().expect("tempdir");
        let bins = tempfile::tempdir().expect("tempdir");
        assert_eq!(cni(d.path(), &[bins.path().into()])[0].status, Level::Fail);
        std::fs::write(
            d.path().join("10-x.conflist"),
            r#"{"name":"x","plugins":[{"type":"bridge"},{"type":"portmap"}]}"#,
        )
        .expect("write");
        std::fs::write(bins.path().join("bridge"), "").expect("write");
        let c = cni(d.path(), &[bins.path().into()]);
        assert_eq!(c[1].status, Level::Ok);
        assert_eq!(
            (c[2].check.as_str(), c[2].status),
            ("CNI plugin portmap", Level::Fail)
        );
    }
}
