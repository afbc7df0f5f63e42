//! The layers of a config: the main file, then the drop-ins of
//! `<its dir>/conf.d/*.toml` in lexical order, each merged over the ones
//! before (tables key by key, any other value replaced whole), then the
//! command line's flags. Each key's origin is kept, for `husk config dump`.
//!
//! Each file is checked on its own first, so an unknown key or a bad value
//! is reported with its file and line, as for the main file.

use super::{Config, ConfigError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// Where each set key (dotted, `registry.config_dir`) came from: a file's
/// path or a flag. Keys not in it are the built-in defaults.
pub type Origins = BTreeMap<String, String>;

/// A config and the origins of its values.
#[derive(Debug, Clone)]
pub struct Layered {
    pub config: Config,
    pub origins: Origins,
}

/// The drop-in dir of the config file `path`.
pub fn drop_in_dir(path: &Path) -> PathBuf {
    path.parent().unwrap_or(Path::new("/")).join("conf.d")
}

/// The drop-ins of `dir`, in the order they apply.
pub fn drop_ins(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(ConfigError(format!(
                "config drop-ins {}: cannot read: {e}",
                dir.display()
            )))
        }
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Merges `top` over `base`, recording `origin` for each leaf it sets.
fn merge(base: &mut Table, top: Table, prefix: &str, origin: &str, origins: &mut Origins) {
    for (k, v) in top {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match (base.get_mut(&k), v) {
            (Some(Value::Table(b)), Value::Table(t)) => merge(b, t, &key, origin, origins),
            (_, Value::Table(t)) => {
                let mut fresh = Table::new();
                merge(&mut fresh, t, &key, origin, origins);
                base.insert(k, Value::Table(fresh));
            }
            (_, v) => {
                origins.retain(|o, _| o != &key && !o.starts_with(&format!("{key}.")));
                origins.insert(key, origin.to_string());
                base.insert(k, v);
            }
        }
    }
}

/// One file's table, checked as a config of its own.
fn read_layer(path: &Path) -> Result<Option<Table>, ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError(format!(
                "config {}: cannot read: {e}",
                path.display()
            )))
        }
    };
    Config::parse(&text).map_err(|e| ConfigError(format!("config {}: {}", path.display(), e.0)))?;
    let t: Table = toml::from_str(&text)
        .map_err(|e| ConfigError(format!("config {}: {}", path.display(), e.message())))?;
    Ok(Some(t))
}

/// Loads the main file `path` (a missing one is an error when `explicit`,
/// the defaults otherwise) and its drop-ins.
pub fn load(path: &Path, explicit: bool) -> Result<Layered, ConfigError> {
    let mut merged = Table::new();
    let mut origins = Origins::new();
    match read_layer(path)? {
        Some(t) => merge(
            &mut merged,
            t,
            "",
            &path.display().to_string(),
            &mut origins,
        ),
        None if explicit => {
            return Err(ConfigError(format!(
                "config {}: cannot read: no such file",
                path.display()
            )))
        }
        None => {}
    }
    for f in drop_ins(&drop_in_dir(path))? {
        if let Some(t) = read_layer(&f)? {
            merge(&mut merged, t, "", &f.display().to_string(), &mut origins);
        }
    }
    let config: Config = Value::Table(merged)
        .try_into()
        .map_err(|e: toml::de::Error| ConfigError(format!("config: {}", e.message())))?;
    Ok(Layered { config, origins })
}

impl Layered {
    /// Records that `key` was set by `flag`.
    pub fn flag(&mut self, key: &str, flag: &str) {
        self.origins.insert(key.to_string(), flag.to_string());
    }

    /// The effective config as documented TOML, each value followed by
    /// where it came from.
    pub fn dump(&self) -> String {
        let mut section = String::new();
        let mut out = String::new();
        for line in self.config.to_toml().lines() {
            let t = line.trim();
            if let Some(name) = t.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
                section = name.to_string();
                out += line;
                out.push('\n');
                continue;
            }
            let key = match t.split_once(" = ") {
                Some((k, _)) if !t.starts_with('#') => k.trim(),
                _ => {
                    out += line;
                    out.push('\n');
                    continue;
                }
            };
            let dotted = if section.is_empty() {
                key.to_string()
            } else {
                format!("{section}.{key}")
            };
            let origin = self
                .origins
                .get(&dotted)
                .map(String::as_str)
                .unwrap_or("default");
            out += &format!("{line}  # {origin}\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn drop_ins_apply_in_order_and_say_where_values_came_from() {
        let d = tempfile::tempdir().expect("tmp");
        let main = write(
            d.path(),
            "config.toml",
            "log_level = \"debug\"\n[registry]\nmax_concurrent_downloads = 5\n",
        );
        write(d.path(), "conf.d/20-b.toml", "log_level = \"warn\"\n");
        write(
            d.path(),
            "conf.d/10-a.toml",
            "log_level = \"error\"\n[registry]\nstall_timeout_secs = 9\n",
        );
        write(d.path(), "conf.d/ignored.txt", "bogus = 1\n");
        let l = load(&main, true).expect("loads");
        assert_eq!(l.config.log_level, "warn", "20-b.toml comes last");
        assert_eq!(l.config.registry.max_concurrent_downloads, 5);
        assert_eq!(l.config.registry.stall_timeout_secs, 9);
        assert_eq!(l.config.cni, Config::default().cni);
        let dump = l.dump();
        let line = |k: &str| {
            dump.lines()
                .find(|x| x.starts_with(k))
                .unwrap_or_else(|| panic!("{k} in {dump}"))
                .to_string()
        };
        assert!(line("log_level = ").ends_with("conf.d/20-b.toml"), "{dump}");
        assert!(
            line("stall_timeout_secs").ends_with("conf.d/10-a.toml"),
            "{dump}"
        );
        assert!(
            line("max_concurrent_downloads").ends_with("config.toml"),
            "{dump}"
        );
        assert!(line("log_format").ends_with("# default"), "{dump}");
        let back = Config::parse(&dump).expect("a dump parses as a config");
        assert_eq!(back, l.config);
    }

    #[test]
    fn a_bad_drop_in_is_named_with_its_line() {
        let d = tempfile::tempdir().expect("tmp");
        let main = write(d.path(), "config.toml", "");
        write(d.path(), "conf.d/50-x.toml", "\n\nbogus_key = 1\n");
        let e = load(&main, true).expect_err("unknown key");
        assert!(
            e.0.contains("50-x.toml") && e.0.contains("bogus_key") && e.0.contains("line 3"),
            "{}",
            e.0
        );
        // Missing main file, defaults: the drop-ins still apply.
        std::fs::remove_file(&main).expect("rm");
        std::fs::remove_file(d.path().join("conf.d/50-x.toml")).expect("rm");
        write(d.path(), "conf.d/1.toml", "log_format = \"json\"\n");
        assert_eq!(
            load(&main, false).expect("defaults").config.log_format,
            "json"
        );
        assert!(load(&main, true).is_err());
    }

    #[test]
    fn a_drop_in_adds_a_runtime_handler_to_the_built_in_ones() {
        let d = tempfile::tempdir().expect("tmp");
        let main = write(d.path(), "config.toml", "");
        write(
            d.path(),
            "conf.d/crun.toml",
            "[runtimes.crun]\ntype = \"oci\"\npath = \"crun\"\n",
        );
        let l = load(&main, true).expect("loads");
        let names: Vec<&String> = l.config.runtimes.keys().collect();
        assert_eq!(names, ["crun", "husk", "runc"]);
    }
}
