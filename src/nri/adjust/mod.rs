//! Plugins' container adjustments: who owns which field, and the change
//! to the OCI spec.
//!
//! Plugins are taken in index order. Each field a plugin sets is claimed
//! for it (per key for maps and lists: an env variable, an annotation, a
//! mount's destination, a device's path, an rlimit's type); a second
//! plugin setting a claimed field is a conflict, and the container is
//! refused with both plugins and the field named, in NRI's words
//! (`plugins "20-b" and "10-a" both tried to set Env FOO`). A key written
//! `-key` removes it. All adjustments are applied to a copy of the spec,
//! which replaces the original only when every one applied: nothing is
//! half-applied.
//!
//! A field husk cannot apply yet refuses the container, naming the field
//! and the plugin, rather than starting it without what was asked.

mod linux;
mod resources;

pub use linux::for_libcontainer;

use crate::api::nri as api;
use serde_json::{json, Value};
use std::collections::HashMap;

/// Who set what: `(field, key)` to the plugin.
#[derive(Default)]
pub struct Owners(HashMap<(&'static str, String), String>);

impl Owners {
    /// As NRI's `OwningPlugins` of container `id`.
    pub fn to_proto(&self, id: &str) -> api::OwningPlugins {
        let mut f = api::FieldOwners::default();
        for ((field, key), plugin) in &self.0 {
            let Some(n) = api::Field::from_str_name(field) else {
                continue;
            };
            if key.is_empty() {
                f.simple.insert(n as i32, plugin.clone());
            } else {
                f.compound
                    .entry(n as i32)
                    .or_default()
                    .owners
                    .insert(key.clone(), plugin.clone());
            }
        }
        api::OwningPlugins {
            owners: [(id.to_string(), f)].into(),
        }
    }

    fn claim(&mut self, field: &'static str, key: &str, plugin: &str) -> Result<(), String> {
        match self.0.get(&(field, key.to_string())) {
            Some(other) if other != plugin => Err(format!(
                "plugins {plugin:?} and {other:?} both tried to set {field}{}",
                if key.is_empty() {
                    String::new()
                } else {
                    format!(" {key}")
                }
            )),
            _ => {
                self.0.insert((field, key.to_string()), plugin.to_string());
                Ok(())
            }
        }
    }
}

/// Resolves CDI device names and injects them into a spec.
pub type CdiInject<'a> = &'a dyn Fn(&[String], &mut Value) -> Result<(), String>;

/// What the node resolves for an adjustment.
pub struct Node<'a> {
    /// CDI devices.
    pub cdi: CdiInject<'a>,
    /// A block I/O class, as the spec's `linux.resources.blockIO`.
    pub blockio: &'a dyn Fn(&str) -> Result<Value, String>,
}

/// `key` without NRI's removal mark, and whether it had one.
fn unmarked(key: &str) -> (&str, bool) {
    match key.strip_prefix('-') {
        Some(k) => (k, true),
        None => (key, false),
    }
}

fn obj<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut serde_json::Map<String, Value> {
    let mut cur = v;
    for p in path {
        if !cur[*p].is_object() {
            cur[*p] = json!({});
        }
        cur = &mut cur[*p];
    }
    cur.as_object_mut().expect("made an object")
}

fn list<'a>(v: &'a mut Value, path: &[&str]) -> &'a mut Vec<Value> {
    let (last, head) = path.split_last().expect("a path");
    let parent = obj(v, head);
    let slot = parent.entry(last.to_string()).or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    slot.as_array_mut().expect("made an array")
}

/// Applies `adj` of `plugin` to `spec`, claiming what it sets.
pub fn apply(
    spec: &mut Value,
    adj: &api::ContainerAdjustment,
    plugin: &str,
    owners: &mut Owners,
    node: &Node<'_>,
) -> Result<(), String> {
    for (k, v) in &adj.annotations {
        let (key, remove) = unmarked(k);
        owners.claim("Annotations", key, plugin)?;
        let a = obj(spec, &["annotations"]);
        if remove {
            a.remove(key);
        } else {
            a.insert(key.into(), json!(v));
        }
    }
    for m in &adj.mounts {
        let (dest, remove) = unmarked(&m.destination);
        owners.claim("Mounts", dest, plugin)?;
        let mounts = list(spec, &["mounts"]);
        mounts.retain(|x| x["destination"] != dest);
        if !remove {
            mounts.push(json!({
                "destination": dest,
                "type": m.r#type,
                "source": m.source,
                "options": m.options,
            }));
        }
    }
    for e in &adj.env {
        let (key, remove) = unmarked(&e.key);
        owners.claim("Env", key, plugin)?;
        let env = list(spec, &["process", "env"]);
        let prefix = format!("{key}=");
        env.retain(|x| !x.as_str().is_some_and(|s| s.starts_with(&prefix)));
        if !remove {
            env.push(json!(format!("{key}={}", e.value)));
        }
    }
    if let Some(h) = &adj.hooks {
        for (name, hooks) in [
            ("prestart", &h.prestart),
            ("createRuntime", &h.create_runtime),
            ("createContainer", &h.create_container),
            ("startContainer", &h.start_container),
            ("poststart", &h.poststart),
            ("poststop", &h.poststop),
        ] {
            for hook in hooks {
                let mut j = json!({"path": hook.path});
                if !hook.args.is_empty() {
                    j["args"] = json!(hook.args);
                }
                if !hook.env.is_empty() {
                    j["env"] = json!(hook.env);
                }
                if let Some(t) = &hook.timeout {
                    j["timeout"] = json!(t.value);
                }
                list(spec, &["hooks", name]).push(j);
            }
        }
    }
    for r in &adj.rlimits {
        owners.claim("Rlimits", &r.r#type, plugin)?;
        let rl = list(spec, &["process", "rlimits"]);
        rl.retain(|x| x["type"] != r.r#type.as_str());
        rl.push(json!({"type": r.r#type, "hard": r.hard, "soft": r.soft}));
    }
    if !adj.cdi_devices.is_empty() {
        let names: Vec<String> = adj.cdi_devices.iter().map(|d| d.name.clone()).collect();
        for n in &names {
            owners.claim("CdiDevices", n, plugin)?;
        }
        (node.cdi)(&names, spec).map_err(|e| format!("plugin {plugin:?}: CDI devices: {e}"))?;
    }
    if !adj.args.is_empty() {
        owners.claim("Args", "", plugin)?;
        // NRI marks "replace, do not append" with an empty first arg.
        let args: Vec<&String> = match adj.args.first() {
            Some(a) if a.is_empty() => adj.args.iter().skip(1).collect(),
            _ => adj.args.iter().collect(),
        };
        obj(spec, &["process"]).insert("args".into(), json!(args));
    }
    if let Some(l) = &adj.linux {
        linux::linux(spec, l, plugin, owners, node)?;
    }
    Ok(())
}

fn unsupported(what: &str, plugin: &str) -> String {
    format!("plugin {plugin:?} adjusted {what}, which husk does not apply yet")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_cdi(_: &[String], _: &mut Value) -> Result<(), String> {
        Err("no CDI here".into())
    }

    fn no_blockio(class: &str) -> Result<Value, String> {
        Err(format!("no OCI BlockIO parameters for class {class:?}"))
    }

    /// A node that resolves nothing.
    pub(super) fn bare() -> Node<'static> {
        Node {
            cdi: &no_cdi,
            blockio: &no_blockio,
        }
    }

    fn env(k: &str, v: &str) -> api::KeyValue {
        api::KeyValue {
            key: k.into(),
            value: v.into(),
        }
    }

    #[test]
    fn env_annotations_mounts_and_rlimits_reach_the_spec() {
        let mut spec = json!({
            "process": {"env": ["PATH=/bin", "DROP=1", "KEEP=1"], "args": ["sh"]},
            "mounts": [{"destination": "/old"}],
        });
        let adj = api::ContainerAdjustment {
            env: vec![env("NEW", "x"), env("-DROP", ""), env("KEEP", "2")],
            annotations: [("a".to_string(), "b".to_string())].into(),
            mounts: vec![
                api::Mount {
                    destination: "/data".into(),
                    r#type: "bind".into(),
                    source: "/src".into(),
                    options: vec!["rbind".into()],
                },
                api::Mount {
                    destination: "-/old".into(),
                    ..Default::default()
                },
            ],
            rlimits: vec![api::PosixRlimit {
                r#type: "RLIMIT_NOFILE".into(),
                hard: 10,
                soft: 5,
            }],
            ..Default::default()
        };
        let mut owners = Owners::default();
        apply(&mut spec, &adj, "10-a", &mut owners, &bare()).expect("applies");
        assert_eq!(
            spec["process"]["env"],
            json!(["PATH=/bin", "NEW=x", "KEEP=2"])
        );
        assert_eq!(spec["annotations"]["a"], "b");
        assert_eq!(spec["mounts"].as_array().expect("test").len(), 1);
        assert_eq!(spec["mounts"][0]["source"], "/src");
        assert_eq!(spec["process"]["rlimits"][0]["soft"], 5);
    }

    #[test]
    fn two_plugins_setting_one_field_conflict_with_both_named() {
        let mut spec = json!({"process": {"env": []}});
        let mut owners = Owners::default();
        let adj = api::ContainerAdjustment {
            env: vec![env("FOO", "1")],
            ..Default::default()
        };
        apply(&mut spec, &adj, "10-a", &mut owners, &bare()).expect("first");
        let e = apply(&mut spec, &adj, "20-b", &mut owners, &bare()).expect_err("conflict");
        assert_eq!(e, "plugins \"20-b\" and \"10-a\" both tried to set Env FOO");
        // Another key is no conflict.
        let other = api::ContainerAdjustment {
            env: vec![env("BAR", "1")],
            ..Default::default()
        };
        apply(&mut spec, &other, "20-b", &mut owners, &bare()).expect("other key");
    }

    #[test]
    fn owners_read_as_nri_s_field_numbers() {
        let mut spec = json!({});
        let mut owners = Owners::default();
        let adj = api::ContainerAdjustment {
            env: vec![env("FOO", "1")],
            linux: Some(api::LinuxContainerAdjustment {
                oom_score_adj: Some(api::OptionalInt { value: 1 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply(&mut spec, &adj, "10-a", &mut owners, &bare()).expect("applies");
        let p = owners.to_proto("c1");
        let f = &p.owners["c1"];
        assert_eq!(f.simple[&(api::Field::OomScoreAdj as i32)], "10-a");
        assert_eq!(f.compound[&(api::Field::Env as i32)].owners["FOO"], "10-a");
    }

    #[test]
    fn what_husk_cannot_apply_is_refused_by_name() {
        let mut spec = json!({});
        let adj = api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                cgroups_path: "/elsewhere".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e =
            apply(&mut spec, &adj, "10-a", &mut Owners::default(), &bare()).expect_err("refused");
        assert!(e.contains("10-a") && e.contains("cgroups path"), "{e}");
    }

    #[test]
    fn devices_and_resources_reach_the_spec() {
        let mut spec = json!({});
        let adj = api::ContainerAdjustment {
            linux: Some(api::LinuxContainerAdjustment {
                devices: vec![api::LinuxDevice {
                    path: "/dev/xnull".into(),
                    r#type: "c".into(),
                    major: 1,
                    minor: 3,
                    ..Default::default()
                }],
                resources: Some(api::LinuxResources {
                    memory: Some(api::LinuxMemory {
                        limit: Some(api::OptionalInt64 { value: 1 << 30 }),
                        ..Default::default()
                    }),
                    pids: Some(api::LinuxPids { limit: 64 }),
                    ..Default::default()
                }),
                oom_score_adj: Some(api::OptionalInt { value: 500 }),
                ..Default::default()
            }),
            ..Default::default()
        };
        apply(&mut spec, &adj, "10-a", &mut Owners::default(), &bare()).expect("applies");
        assert_eq!(spec["linux"]["devices"][0]["path"], "/dev/xnull");
        assert_eq!(spec["linux"]["resources"]["devices"][0]["allow"], true);
        // NRI's access string: no mknod for a character device.
        assert_eq!(spec["linux"]["resources"]["devices"][0]["access"], "rw");
        assert_eq!(spec["linux"]["resources"]["memory"]["limit"], 1 << 30);
        assert_eq!(spec["linux"]["resources"]["pids"]["limit"], 64);
        assert_eq!(spec["process"]["oomScoreAdj"], 500);
    }
}
