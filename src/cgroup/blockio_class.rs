//! Block I/O classes: the node's table of named block I/O parameters
//! (`[cgroup] blockio_config_file`, in the format of containerd's
//! `blockio_config_file`), resolved to the OCI spec's
//! `linux.resources.blockIO` when a class is asked for (an NRI plugin's
//! `blockio_class`).
//!
//! ```yaml
//! Classes:
//!   slowreader:
//!     - Devices: [/dev/vd*]
//!       ThrottleReadBps: 10M
//!       Weight: "80"
//! ```
//!
//! A class is a list of parameters, each for the block devices its globs
//! match (symlinks followed; partitions and other files skipped, as
//! containerd skips them) or, without `Devices`, a weight for all. Sizes
//! are Kubernetes quantities (`10M`, `64Ki`, `1000`). The file is read at
//! each resolve, so an edit is seen by the next container.

use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::ffi::{CStr, CString};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Table {
    #[serde(default, alias = "Classes", alias = "classes")]
    classes: BTreeMap<String, Vec<Params>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct Params {
    #[serde(rename = "Devices", alias = "devices")]
    devices: Option<Vec<String>>,
    #[serde(rename = "ThrottleReadBps")]
    read_bps: Option<serde_yaml::Value>,
    #[serde(rename = "ThrottleWriteBps")]
    write_bps: Option<serde_yaml::Value>,
    #[serde(rename = "ThrottleReadIOPS")]
    read_iops: Option<serde_yaml::Value>,
    #[serde(rename = "ThrottleWriteIOPS")]
    write_iops: Option<serde_yaml::Value>,
    #[serde(rename = "Weight")]
    weight: Option<serde_yaml::Value>,
}

/// `class` of the table in `file`, as the OCI spec's `blockIO`.
pub fn oci(file: &Path, class: &str) -> Result<Value, String> {
    if file.as_os_str().is_empty() {
        return Err(format!(
            "no OCI BlockIO parameters for class {class:?} (no [cgroup] blockio_config_file)"
        ));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("block I/O classes {}: {e}", file.display()))?;
    let table: Table = serde_yaml::from_str(&text)
        .map_err(|e| format!("block I/O classes {}: {e}", file.display()))?;
    let params = table
        .classes
        .get(class)
        .ok_or_else(|| format!("no OCI BlockIO parameters for class {class:?}"))?;
    resolve(params, &|globs: &[String]| block_devices(globs))
}

/// A block device's (major, minor).
type Dev = (u64, u64);

/// Per device, a parameter's value.
type PerDevice = BTreeMap<Dev, i64>;

fn resolve(params: &[Params], devices: &dyn Fn(&[String]) -> Vec<Dev>) -> Result<Value, String> {
    let mut out = serde_json::Map::new();
    // Per device, the last parameter wins, as goresctrl updates them.
    let mut per: [(&str, PerDevice); 5] = [
        ("weightDevice", PerDevice::new()),
        ("throttleReadBpsDevice", PerDevice::new()),
        ("throttleWriteBpsDevice", PerDevice::new()),
        ("throttleReadIOPSDevice", PerDevice::new()),
        ("throttleWriteIOPSDevice", PerDevice::new()),
    ];
    for p in params {
        let weight = quantity("Weight", &p.weight, 10, Some(1000))?;
        let values = [
            weight,
            quantity("ThrottleReadBps", &p.read_bps, 0, None)?,
            quantity("ThrottleWriteBps", &p.write_bps, 0, None)?,
            quantity("ThrottleReadIOPS", &p.read_iops, 0, None)?,
            quantity("ThrottleWriteIOPS", &p.write_iops, 0, None)?,
        ];
        let Some(globs) = &p.devices else {
            if values[1..].iter().any(Option::is_some) {
                return Err("block I/O class: throttling without Devices".into());
            }
            if let Some(w) = weight {
                out.insert("weight".into(), json!(w));
            }
            continue;
        };
        let found = devices(globs);
        if found.is_empty() {
            tracing::warn!(devices = ?globs, "block I/O class: no block device matches; parameters ignored");
        }
        for dev in found {
            for (i, v) in values.iter().enumerate() {
                if let Some(v) = v {
                    per[i].1.insert(dev, *v);
                }
            }
        }
    }
    for (key, devs) in per {
        if devs.is_empty() {
            continue;
        }
        let field = if key == "weightDevice" {
            "weight"
        } else {
            "rate"
        };
        let list: Vec<Value> = devs
            .into_iter()
            .map(|((major, minor), v)| json!({"major": major, "minor": minor, field: v}))
            .collect();
        out.insert(key.into(), json!(list));
    }
    Ok(Value::Object(out))
}

/// A Kubernetes quantity (`10M`, `64Ki`, `1.5G`, `1000`) in `[min, max]`.
fn quantity(
    field: &str,
    v: &Option<serde_yaml::Value>,
    min: i64,
    max: Option<i64>,
) -> Result<Option<i64>, String> {
    let text = match v {
        None => return Ok(None),
        Some(serde_yaml::Value::String(s)) => s.trim().to_string(),
        Some(serde_yaml::Value::Number(n)) => n.to_string(),
        Some(other) => {
            return Err(format!(
                "block I/O class: {field}: {other:?} is no quantity"
            ))
        }
    };
    if text.is_empty() {
        return Ok(None);
    }
    let bad = || format!("block I/O class: syntax error in {field:?} ({text:?})");
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (num, suffix) = text.split_at(split);
    let num: f64 = num.parse().map_err(|_| bad())?;
    let mult: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        _ => return Err(bad()),
    };
    let value = (num * mult).ceil() as i64;
    if value < min || max.is_some_and(|m| value > m) {
        return Err(format!(
            "block I/O class: {field} {value} out of range ({min}..{})",
            max.map_or("".into(), |m| m.to_string())
        ));
    }
    Ok(Some(value))
}

/// The whole block devices (not partitions) the globs match, as
/// (major, minor).
fn block_devices(globs: &[String]) -> Vec<Dev> {
    let mut out = Vec::new();
    for g in globs {
        for path in glob(g) {
            let Ok(real) = std::fs::canonicalize(&path) else {
                continue;
            };
            let Ok(md) = std::fs::metadata(&real) else {
                continue;
            };
            if !md.file_type().is_block_device() {
                continue;
            }
            let rdev = md.rdev();
            let dev = (libc::major(rdev) as u64, libc::minor(rdev) as u64);
            let partition =
                Path::new(&format!("/sys/dev/block/{}:{}/partition", dev.0, dev.1)).exists();
            if !partition && !out.contains(&dev) {
                out.push(dev);
            }
        }
    }
    out
}

/// The paths `pattern` matches (glob(3)).
fn glob(pattern: &str) -> Vec<String> {
    let Ok(c) = CString::new(pattern) else {
        return Vec::new();
    };
    // SAFETY: glob(3) fills `g`, read only up to gl_pathc and freed once.
    unsafe {
        let mut g: libc::glob_t = std::mem::zeroed();
        if libc::glob(c.as_ptr(), 0, None, &mut g) != 0 {
            libc::globfree(&mut g);
            return Vec::new();
        }
        let paths = (0..g.gl_pathc)
            .map(|i| {
                CStr::from_ptr(*g.gl_pathv.add(i))
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        libc::globfree(&mut g);
        paths
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(yaml: &str) -> Table {
        serde_yaml::from_str(yaml).expect("a table")
    }

    #[test]
    fn a_class_is_its_devices_throttles_and_weights() {
        let t = table(
            "Classes:\n  slow:\n  - Weight: \"80\"\n  - Devices: [/dev/a, /dev/b]\n    ThrottleReadBps: 10M\n    ThrottleWriteIOPS: 200\n    Weight: 300\n  - Devices: [/dev/b]\n    ThrottleReadBps: 1Ki\n",
        );
        let devices = |g: &[String]| {
            g.iter()
                .map(|d| if d == "/dev/a" { (8, 0) } else { (8, 16) })
                .collect()
        };
        let v = resolve(&t.classes["slow"], &devices).expect("resolves");
        assert_eq!(v["weight"], 80);
        assert_eq!(
            v["throttleReadBpsDevice"],
            json!([{"major": 8, "minor": 0, "rate": 10_000_000}, {"major": 8, "minor": 16, "rate": 1024}])
        );
        assert_eq!(
            v["throttleWriteIOPSDevice"],
            json!([{"major": 8, "minor": 0, "rate": 200}, {"major": 8, "minor": 16, "rate": 200}])
        );
        assert_eq!(
            v["weightDevice"][1],
            json!({"major": 8, "minor": 16, "weight": 300})
        );
    }

    #[test]
    fn bad_classes_are_clear_errors() {
        let none = |_: &[String]| Vec::new();
        for (yaml, says) in [
            ("Classes:\n  c:\n  - Weight: \"5\"\n", "out of range"),
            ("Classes:\n  c:\n  - Weight: \"2000\"\n", "out of range"),
            (
                "Classes:\n  c:\n  - ThrottleReadBps: 1M\n",
                "without Devices",
            ),
            (
                "Classes:\n  c:\n  - Devices: [/x]\n    ThrottleReadBps: 1Q\n",
                "syntax error",
            ),
        ] {
            let e = resolve(&table(yaml).classes["c"], &none).expect_err(yaml);
            assert!(e.contains(says), "{yaml}: {e}");
        }
        assert!(serde_yaml::from_str::<Table>("Classes:\n  c:\n  - Wieght: 1\n").is_err());
        let e = oci(Path::new(""), "gold").expect_err("no table");
        assert!(
            e.contains("no OCI BlockIO parameters for class \"gold\""),
            "{e}"
        );
    }

    #[test]
    fn globs_find_whole_block_devices_only() {
        // Character devices and plain files never match.
        assert!(block_devices(&["/dev/null".into(), "/etc/hostname".into()]).is_empty());
        assert!(glob("/dev/nul?").contains(&"/dev/null".to_string()));
        for (major, minor) in block_devices(&["/dev/*".into()]) {
            assert!(!Path::new(&format!("/sys/dev/block/{major}:{minor}/partition")).exists());
        }
    }
}
