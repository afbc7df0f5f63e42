//! The runtime handlers of `husk check`: each configured handler's runtime
//! runs (`<binary> --version`), and what its `features` claims. A handler
//! whose runtime is missing or fails is a failure when it is the default
//! (every pod that names none would be refused), a warning otherwise (only
//! the pods that name it are).

use super::{check, Check, Level};
use crate::config::Config;
use crate::sandbox::handlers::{find_binary, parse_features};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

fn run(bin: &std::path::Path, arg: &str) -> Result<std::process::Output, String> {
    let child = Command::new(bin)
        .arg(arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    crate::network::bounded::run(child, Vec::new(), Duration::from_secs(5)).map_err(|e| match e {
        crate::network::bounded::Bounded::TimedOut => {
            format!("{} {arg} did not answer in 5 s", bin.display())
        }
        crate::network::bounded::Bounded::Io(e) => format!("{} {arg}: {e}", bin.display()),
    })
}

/// A shim handler: its binary's `-info` (name, version, what its runtime
/// can do); a shim that predates the flag is only found.
fn shim(
    cfg: &Config,
    name: &str,
    h: &crate::config::RuntimeConfig,
    title: &str,
    bad: Level,
    whose: &str,
) -> Check {
    let fix = format!("install it, or fix [runtimes.{name}] path or runtime_type");
    // The binary and options as the server resolves them.
    let handlers = crate::sandbox::handlers::Handlers::new(cfg, cfg.cgroup.driver == "systemd");
    let handler = match handlers.get(name) {
        Ok(x) => x,
        Err(e) => return check(title, bad, e.to_string(), fix),
    };
    let bin = match handler.shim_binary() {
        Ok(b) => b,
        Err(e) => return check(title, bad, format!("{e}; {whose}"), fix),
    };
    let options = match handler.shim_options() {
        Ok(o) => o,
        Err(e) => {
            return check(
                title,
                bad,
                format!("options: {e}"),
                format!("fix [runtimes.{name}.options]"),
            )
        }
    };
    match crate::shim::v2::start::info(&bin, options.as_ref(), Duration::from_secs(5)) {
        Ok(i) => {
            let f = crate::shim::v2::start::features_json(&i)
                .map(parse_features)
                .unwrap_or_default();
            let v = i.version.unwrap_or_default();
            check(
                title,
                Level::Ok,
                format!(
                    "{} ({}, {} {}); recursive read-only mounts: {}, user namespaces \
                     (idmapped mounts): {}",
                    bin.display(),
                    h.runtime_type,
                    i.name,
                    v.version,
                    if f.rro { "yes" } else { "no" },
                    if f.idmap { "yes" } else { "no" }
                ),
                "",
            )
        }
        // A shim built on containerd's 1.x library has no -info.
        Err(e) if e.contains("flag provided but not defined") => check(
            title,
            Level::Ok,
            format!(
                "{} ({}): found; it predates -info, so what it can do is not asked",
                bin.display(),
                h.runtime_type
            ),
            "",
        ),
        Err(e) => check(title, bad, format!("{e}; {whose}"), fix),
    }
}

/// One line per configured handler.
pub(super) fn handlers(cfg: &Config) -> Vec<Check> {
    cfg.runtimes
        .iter()
        .map(|(name, h)| {
            let title = format!("runtime handler {name}");
            let default = *name == cfg.default_runtime;
            let bad = if default { Level::Fail } else { Level::Warn };
            let whose = if default {
                "the default handler: every pod that names none is refused".to_string()
            } else {
                format!("pods whose RuntimeClass handler is {name:?} are refused")
            };
            if h.is_shim() {
                return shim(cfg, name, h, &title, bad, &whose);
            }
            if !h.is_oci() {
                return check(
                    &title,
                    Level::Ok,
                    "husk's own path (libcontainer in husk's shim)",
                    "",
                );
            }
            let fix = format!("install it, or fix [runtimes.{name}] path");
            let bin = match find_binary(&h.path) {
                Ok(b) => b,
                Err(e) => return check(&title, bad, format!("{e}; {whose}"), fix),
            };
            match run(&bin, "--version") {
                Ok(o) if o.status.success() => {
                    let version = String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_string();
                    let f = run(&bin, "features")
                        .ok()
                        .filter(|o| o.status.success())
                        .map(|o| parse_features(&o.stdout))
                        .unwrap_or_default();
                    check(
                        &title,
                        Level::Ok,
                        format!(
                            "{}: {version}; recursive read-only mounts: {}, user namespaces \
                             (idmapped mounts): {}",
                            bin.display(),
                            if f.rro { "yes" } else { "no" },
                            if f.idmap { "yes" } else { "no" }
                        ),
                        "",
                    )
                }
                Ok(o) => check(
                    &title,
                    bad,
                    format!(
                        "{} --version {}: {}; {whose}",
                        bin.display(),
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    ),
                    fix,
                ),
                Err(e) => check(&title, bad, format!("{e}; {whose}"), fix),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_runtime_fails_only_as_the_default() {
        let mut cfg = Config::default();
        cfg.runtimes.get_mut("runc").expect("runc").path = "/nonexistent/runc".into();
        let c = handlers(&cfg);
        let runc = c
            .iter()
            .find(|c| c.check == "runtime handler runc")
            .expect("runc");
        assert_eq!(runc.status, Level::Warn, "{runc:?}");
        assert!(runc.message.contains("/nonexistent/runc"), "{runc:?}");
        let husk = c
            .iter()
            .find(|c| c.check == "runtime handler husk")
            .expect("husk");
        assert_eq!(husk.status, Level::Ok);
        cfg.default_runtime = "runc".into();
        let c = handlers(&cfg);
        let runc = c
            .iter()
            .find(|c| c.check == "runtime handler runc")
            .expect("runc");
        assert_eq!(runc.status, Level::Fail);
    }
}
