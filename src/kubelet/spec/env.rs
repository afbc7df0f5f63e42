//! A container's environment, as the kubelet builds it: service link
//! variables, then `envFrom` (secrets and config maps, prefixed), then
//! `env` in order (plain values with `$(VAR)` references to earlier
//! entries, fieldRef, resourceFieldRef, secretKeyRef, configMapKeyRef);
//! and the downward-API fields and resources that env and downwardAPI
//! volumes share.

use super::api_volumes::Kind;
use super::downward::{pod_field, resource_value};
use super::inputs::{EnvObjects, Inputs};
use crate::api::cri::KeyValue;
use crate::kubelet::kit::defaults;
use crate::kubelet::kit::settings::Settings;
use k8s_openapi::api::core::v1::{Container, Pod};
use std::collections::HashMap;

fn field_value(pod: &Pod, path: &str, inp: &Inputs) -> String {
    pod_field(pod, path, inp.pod_ips, inp.host_ip)
}

/// `$(VAR)` expanded from `env`; `$$` is a literal `$`; unknown names stay.
pub fn expand(s: &str, env: &HashMap<String, String>) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some(r) = after.strip_prefix('(') {
            match r.find(')') {
                Some(end) => {
                    let name = &r[..end];
                    match env.get(name) {
                        Some(v) => out.push_str(v),
                        None => out.push_str(&rest[i..i + 2 + end + 1]),
                    }
                    rest = &r[end + 1..];
                }
                None => {
                    out.push_str(&rest[i..]);
                    rest = "";
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// A C identifier-like env name, as envFrom keys must be (else skipped).
pub fn env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// Env in order, references resolved against earlier entries.
pub fn env(s: &Settings, pod: &Pod, c: &Container, inp: &Inputs) -> Vec<KeyValue> {
    use super::api_volumes::Kind;
    let mut seen: HashMap<String, String> = HashMap::new();
    let mut out: Vec<KeyValue> = Vec::new();
    let lookup = |kind: Kind, name: &str, key: &str| {
        inp.env_objects
            .get(&(kind, name.to_string()))
            .and_then(|d| d.as_ref())
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    for (k, v) in inp.service_env {
        seen.insert(k.clone(), v.clone());
        out.push(KeyValue {
            key: k.clone(),
            value: v.clone().into_bytes(),
        });
    }
    // envFrom next; env entries override.
    for f in c.env_from.iter().flatten() {
        let (kind, name) = match (&f.secret_ref, &f.config_map_ref) {
            (Some(s), _) => (Kind::Secret, s.name.clone()),
            (None, Some(m)) => (Kind::ConfigMap, m.name.clone()),
            _ => continue,
        };
        let prefix = f.prefix.clone().unwrap_or_default();
        let data = inp.env_objects.get(&(kind, name)).and_then(|d| d.as_ref());
        for (k, v) in data.into_iter().flatten() {
            let key = format!("{prefix}{k}");
            if !env_name(&key) {
                continue;
            }
            let v = String::from_utf8_lossy(v).into_owned();
            seen.insert(key.clone(), v.clone());
            out.retain(|kv| kv.key != key);
            out.push(KeyValue {
                key,
                value: v.into_bytes(),
            });
        }
    }
    for e in c.env.iter().flatten() {
        let v = if let Some(src) = &e.value_from {
            if let Some(r) = &src.secret_key_ref {
                lookup(Kind::Secret, &r.name, &r.key).unwrap_or_default()
            } else if let Some(r) = &src.config_map_key_ref {
                lookup(Kind::ConfigMap, &r.name, &r.key).unwrap_or_default()
            } else if let Some(f) = &src.field_ref {
                field_value(pod, &f.field_path, inp)
            } else if let Some(r) = &src.resource_field_ref {
                resource_value(s, c, &r.resource, r.divisor.as_ref().map(|d| d.0.as_str()))
            } else {
                String::new()
            }
        } else {
            expand(e.value.as_deref().unwrap_or(""), &seen)
        };
        seen.insert(e.name.clone(), v.clone());
        out.retain(|kv| kv.key != e.name);
        out.push(KeyValue {
            key: e.name.clone(),
            value: v.into_bytes(),
        });
    }
    out
}

/// Fetches what a container's env refers to; Err is a
/// CreateContainerConfigError message.
pub async fn env_objects(
    objects: &super::api_volumes::Objects,
    pod: &Pod,
    c: &Container,
) -> Result<EnvObjects, String> {
    let ns = defaults::namespace(pod);
    let mut want: Vec<(Kind, String, bool)> = Vec::new();
    for e in c.env.iter().flatten() {
        let Some(src) = &e.value_from else { continue };
        if let Some(r) = &src.secret_key_ref {
            want.push((Kind::Secret, r.name.clone(), r.optional.unwrap_or(false)));
        }
        if let Some(r) = &src.config_map_key_ref {
            want.push((Kind::ConfigMap, r.name.clone(), r.optional.unwrap_or(false)));
        }
    }
    for f in c.env_from.iter().flatten() {
        if let Some(r) = &f.secret_ref {
            want.push((Kind::Secret, r.name.clone(), r.optional.unwrap_or(false)));
        }
        if let Some(r) = &f.config_map_ref {
            want.push((Kind::ConfigMap, r.name.clone(), r.optional.unwrap_or(false)));
        }
    }
    let mut out = EnvObjects::new();
    for (kind, name, optional) in want {
        if out.contains_key(&(kind, name.clone())) {
            continue;
        }
        let d = objects.data(kind, ns, &name).await?;
        if d.is_none() && !optional {
            return Err(format!("{} {name:?} not found", kind.word()));
        }
        out.insert((kind, name), d);
    }
    for e in c.env.iter().flatten() {
        let Some(src) = &e.value_from else { continue };
        let refs = [
            src.secret_key_ref
                .as_ref()
                .map(|r| (Kind::Secret, &r.name, &r.key, r.optional)),
            src.config_map_key_ref
                .as_ref()
                .map(|r| (Kind::ConfigMap, &r.name, &r.key, r.optional)),
        ];
        for (kind, name, key, optional) in refs.into_iter().flatten() {
            let has = out
                .get(&(kind, name.clone()))
                .and_then(|d| d.as_ref())
                .is_some_and(|d| d.contains_key(key));
            if !has && !optional.unwrap_or(false) {
                let what = if kind == Kind::Secret {
                    "Secret"
                } else {
                    "ConfigMap"
                };
                return Err(format!("couldn't find key {key} in {what} {ns}/{name}"));
            }
        }
    }
    Ok(out)
}
