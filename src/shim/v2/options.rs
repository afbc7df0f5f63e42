//! A shim handler's `options` table as the typed Any containerd gives the
//! shim: `containerd.runc.v1.Options` for the runc shim
//! (`io.containerd.runc.v2`, `.v1`), `runtimeoptions.v1.Options` for any
//! other (its `TypeUrl` and `ConfigPath`, or else the whole table as TOML
//! in `ConfigBody`), as containerd's CRI packs them.

use crate::api::containerd::{RuncOptions, RuntimeOptions};
use prost::Message;

/// Whether `runtime_type` is run by containerd's runc shim.
pub fn is_runc(runtime_type: &str) -> bool {
    matches!(
        runtime_type,
        "io.containerd.runc.v2" | "io.containerd.runc.v1"
    )
}

const RUNC_KEYS: &[&str] = &[
    "NoPivotRoot",
    "NoNewKeyring",
    "ShimCgroup",
    "IoUid",
    "IoGid",
    "BinaryName",
    "Root",
    "SystemdCgroup",
    "CriuImagePath",
    "CriuWorkPath",
];

/// The Any for `table` (none for a shim other than runc's when the table
/// is empty: containerd then gives no options either). The runc shim's `SystemdCgroup` is husk's cgroup
/// driver (`systemd`: a spec's cgroups path is then a slice's), and its
/// `Root`, unless set, the handler's state root `root`.
pub fn encode(
    runtime_type: &str,
    table: &toml::Table,
    systemd: bool,
    root: &str,
) -> Result<Option<prost_types::Any>, String> {
    if !is_runc(runtime_type) {
        if table.is_empty() {
            return Ok(None);
        }
        let s = |k: &str| {
            table
                .get(k)
                .and_then(|v| v.as_str())
                .unwrap_or("")
                .to_string()
        };
        let config_path = s("ConfigPath");
        let o = RuntimeOptions {
            type_url: s("TypeUrl"),
            config_body: if config_path.is_empty() && !table.is_empty() {
                toml::to_string(table).map_err(|e| e.to_string())?
            } else {
                String::new()
            },
            config_path,
        };
        return Ok(Some(prost_types::Any {
            type_url: "runtimeoptions.v1.Options".into(),
            value: o.encode_to_vec(),
        }));
    }
    if let Some(k) = table.keys().find(|k| !RUNC_KEYS.contains(&k.as_str())) {
        return Err(format!(
            "{k} is not an option of {runtime_type} (its options: {})",
            RUNC_KEYS.join(", ")
        ));
    }
    let text = |k: &str| -> Result<String, String> {
        match table.get(k) {
            None => Ok(String::new()),
            Some(v) => v
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| format!("{k} must be a string")),
        }
    };
    let flag = |k: &str| -> Result<bool, String> {
        match table.get(k) {
            None => Ok(false),
            Some(v) => v
                .as_bool()
                .ok_or_else(|| format!("{k} must be true or false")),
        }
    };
    let id = |k: &str| -> Result<u32, String> {
        match table.get(k) {
            None => Ok(0),
            Some(v) => v
                .as_integer()
                .and_then(|i| u32::try_from(i).ok())
                .ok_or_else(|| format!("{k} must be a uid or gid")),
        }
    };
    let mut o = RuncOptions {
        no_pivot_root: flag("NoPivotRoot")?,
        no_new_keyring: flag("NoNewKeyring")?,
        shim_cgroup: text("ShimCgroup")?,
        io_uid: id("IoUid")?,
        io_gid: id("IoGid")?,
        binary_name: text("BinaryName")?,
        root: text("Root")?,
        systemd_cgroup: systemd,
        criu_image_path: text("CriuImagePath")?,
        criu_work_path: text("CriuWorkPath")?,
    };
    flag("SystemdCgroup")?;
    if o.root.is_empty() {
        o.root = root.to_string();
    }
    Ok(Some(prost_types::Any {
        type_url: "containerd.runc.v1.Options".into(),
        value: o.encode_to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(s: &str) -> toml::Table {
        toml::from_str(s).expect("toml")
    }

    #[test]
    fn the_runc_shim_gets_its_typed_options() {
        let a = encode(
            "io.containerd.runc.v2",
            &table("BinaryName = \"/usr/sbin/runc\"\nSystemdCgroup = false"),
            true,
            "/run/husk/runtimes/shim",
        )
        .expect("encodes")
        .expect("options");
        assert_eq!(a.type_url, "containerd.runc.v1.Options");
        let o = RuncOptions::decode(a.value.as_slice()).expect("decodes");
        assert_eq!(o.binary_name, "/usr/sbin/runc");
        assert!(o.systemd_cgroup, "husk's driver wins");
        assert_eq!(o.root, "/run/husk/runtimes/shim");
        let e = encode(
            "io.containerd.runc.v2",
            &table("CriuPath = \"x\""),
            false,
            "/r",
        )
        .expect_err("unknown");
        assert!(e.starts_with("CriuPath is not an option"), "{e}");
        assert!(encode("io.containerd.runc.v2", &table("IoUid = -1"), false, "/r").is_err());
    }

    #[test]
    fn other_shims_get_runtime_options() {
        let a = encode(
            "io.containerd.kata.v2",
            &table("ConfigPath = \"/opt/kata/configuration.toml\""),
            false,
            "/r",
        )
        .expect("encodes")
        .expect("options");
        assert_eq!(a.type_url, "runtimeoptions.v1.Options");
        let o = RuntimeOptions::decode(a.value.as_slice()).expect("decodes");
        assert_eq!(o.config_path, "/opt/kata/configuration.toml");
        assert!(o.config_body.is_empty());
        let a = encode(
            "io.containerd.runsc.v1",
            &table("TypeUrl = \"io.containerd.runsc.v1.options\"\nDebug = true"),
            false,
            "/r",
        )
        .expect("encodes")
        .expect("options");
        let o = RuntimeOptions::decode(a.value.as_slice()).expect("decodes");
        assert_eq!(o.type_url, "io.containerd.runsc.v1.options");
        assert!(o.config_body.contains("Debug = true"), "{}", o.config_body);
        // No table, no options: runwasi's shims refuse an empty body.
        let none = encode("io.containerd.wasmtime.v1", &table(""), false, "/r");
        assert_eq!(none, Ok(None));
        let runc = encode("io.containerd.runc.v2", &table(""), false, "/r");
        assert!(matches!(runc, Ok(Some(_))), "runc's Root is always given");
    }
}
