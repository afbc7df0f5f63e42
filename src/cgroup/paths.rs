//! Where an OCI cgroups path is in the hierarchy, either form: a cgroupfs
//! path as it is, a systemd one (`slice:prefix:name`) at the scope
//! systemd makes for it; and the slice names the kubelet's systemd driver
//! gives cgroupfs-style paths.

use std::borrow::Cow;

/// `a-b.slice` as the path systemd gives it: `/a.slice/a-b.slice`.
pub fn expand_slice(slice: &str) -> String {
    let stem = slice.strip_suffix(".slice").unwrap_or(slice);
    if stem == "-" || stem.is_empty() {
        return String::new();
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        prefix.push_str(part);
        path.push('/');
        path.push_str(&prefix);
        path.push_str(".slice");
        prefix.push('-');
    }
    path
}

/// The slice name of a cgroupfs-style path, as the kubelet's systemd
/// driver names it: `/kubepods/burstable/pod<uid>` →
/// `kubepods-burstable-pod<uid>.slice`, dashes within a part turned into
/// underscores; a path already ending in a slice (`/system.slice`) is
/// that slice; `/` is the root slice `-.slice`.
pub fn slice_name(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    match parts.last() {
        None => "-.slice".into(),
        Some(last) if last.ends_with(".slice") => last.to_string(),
        Some(_) => {
            let escaped: Vec<String> = parts.iter().map(|p| p.replace('-', "_")).collect();
            format!("{}.slice", escaped.join("-"))
        }
    }
}

/// The slice a slice lives in: `a-b.slice` → `a.slice`, `a.slice` → `-.slice`.
pub fn parent_slice(name: &str) -> String {
    let stem = name.strip_suffix(".slice").unwrap_or(name);
    match stem.rsplit_once('-') {
        Some((p, _)) if !p.is_empty() => format!("{p}.slice"),
        _ => "-.slice".into(),
    }
}

/// The directory (from the hierarchy's root) of an OCI cgroups path:
/// itself for a cgroupfs path, the scope's place for `slice:prefix:name`.
pub fn fs_path(cgroups_path: &str) -> Cow<'_, str> {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    match parts.as_slice() {
        [slice, prefix, name] => {
            Cow::Owned(format!("{}/{prefix}-{name}.scope", expand_slice(slice)))
        }
        _ => Cow::Borrowed(cgroups_path),
    }
}

/// The directory of the parent of an OCI cgroups path (the pod's cgroup
/// or slice), from the hierarchy's root.
pub fn parent_fs_path(cgroups_path: &str) -> String {
    let own = fs_path(cgroups_path);
    own.rsplit_once('/')
        .map(|(p, _)| p.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_as_systemd_lays_them_out() {
        assert_eq!(
            expand_slice("kubepods-burstable-pod1.slice"),
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"
        );
        assert_eq!(expand_slice("-.slice"), "");
        assert_eq!(fs_path("test.slice:husk:abc"), "/test.slice/husk-abc.scope");
        assert_eq!(fs_path("/kubepods/pod1/abc"), "/kubepods/pod1/abc");
        assert_eq!(parent_fs_path("a-b.slice:husk:c"), "/a.slice/a-b.slice");
        assert_eq!(parent_fs_path("/p/c"), "/p");
    }

    #[test]
    fn slices_are_named_as_the_kubelet_names_them() {
        assert_eq!(slice_name("/kubepods"), "kubepods.slice");
        assert_eq!(
            slice_name("/kubepods/burstable/pod1a-2b"),
            "kubepods-burstable-pod1a_2b.slice"
        );
        assert_eq!(slice_name("/"), "-.slice");
        assert_eq!(slice_name("/system.slice"), "system.slice");
        assert_eq!(parent_slice("kubepods-burstable.slice"), "kubepods.slice");
        assert_eq!(parent_slice("kubepods.slice"), "-.slice");
    }
}
