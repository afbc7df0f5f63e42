//! The node operator's drop-in: the Debian package (built by
//! `packaging/build-deb.sh` from this build's binary, unpacked with
//! `dpkg-deb -x`, every file checked), `husk check` run from the unpacked
//! package, and `husk config import-containerd` on Debian's containerd
//! config and a containerd 1.7-style one.
#![allow(clippy::unwrap_used)]

#[path = "common/deb.rs"]
mod deb;

use deb::build_package;
use std::process::Command;

fn husk() -> Command {
    Command::new(env!("CARGO_BIN_EXE_husk"))
}

const ET_EXEC: u16 = 2;
const PT_INTERP: u32 = 3;

/// A 64-bit little-endian ELF file's type (ET_EXEC, or ET_DYN for a
/// position-independent one) and whether it names a program interpreter
/// (the dynamic loader).
fn elf_kind(elf: &[u8]) -> (u16, bool) {
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "a 64-bit little-endian ELF");
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]);
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64_at(32) as usize, u16_at(54) as usize, u16_at(56));
    let interp = (0..phnum as usize).any(|i| {
        let o = phoff + i * phentsize;
        u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) == PT_INTERP
    });
    (u16_at(16), interp)
}

#[test]
fn the_package_holds_what_a_node_needs() {
    let dir = tempfile::tempdir().unwrap();
    let deb = build_package(dir.path());
    assert!(deb
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .starts_with("husk_"));
    let tree = dir.path().join("tree");
    let ctl = dir.path().join("control");
    for (flag, to) in [("-x", &tree), ("-e", &ctl)] {
        assert!(Command::new("dpkg-deb")
            .arg(flag)
            .arg(&deb)
            .arg(to)
            .status()
            .unwrap()
            .success());
    }
    for f in [
        "usr/bin/husk",
        "lib/systemd/system/husk.service",
        "etc/husk/config.toml",
        "usr/share/husk/10-husk.conflist",
        "usr/share/husk/crictl.yaml",
        "usr/share/doc/husk/copyright",
        "usr/share/doc/husk/changelog.Debian.gz",
        "usr/share/man/man8/husk.8.gz",
        "usr/share/lintian/overrides/husk",
    ] {
        assert!(tree.join(f).is_file(), "{f} is in the package");
    }
    // Nothing lands in /etc/cni or /etc/crictl.yaml from the archive:
    // postinst puts them there only where the node has none.
    assert!(!tree.join("etc/cni").exists() && !tree.join("etc/crictl.yaml").exists());
    let postinst = std::fs::read_to_string(ctl.join("postinst")).unwrap();
    assert!(postinst.contains("if ! ls /etc/cni/net.d/*.conf"));
    assert!(postinst.contains("[ ! -e /etc/crictl.yaml ]"));

    // The conffile, and the config it holds is the documented default.
    assert_eq!(
        std::fs::read_to_string(ctl.join("conffiles"))
            .unwrap()
            .trim(),
        "/etc/husk/config.toml"
    );
    let cfg = std::fs::read_to_string(tree.join("etc/husk/config.toml")).unwrap();
    assert_eq!(
        husk::config::Config::parse(&cfg).unwrap(),
        husk::config::Config::default()
    );

    // The unit runs the packaged binary with the packaged config.
    let unit = std::fs::read_to_string(tree.join("lib/systemd/system/husk.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    let mut words = exec.split_whitespace();
    let bin = words.next().unwrap();
    assert_eq!(bin, "/usr/bin/husk");
    assert!(tree.join(bin.trim_start_matches('/')).is_file());
    assert!(exec.contains("--config /etc/husk/config.toml"), "{exec}");
    assert!(
        unit.contains("KillMode=process"),
        "stopping husk leaves pods running"
    );

    // Run-time dependencies: what the binary links, and what it runs.
    let control = std::fs::read_to_string(ctl.join("control")).unwrap();
    let field = |k: &str| {
        control
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_default()
            .to_string()
    };
    // A static build: libseccomp is linked in; glibc's NSS modules are
    // the one thing loaded from the node.
    assert!(field("Depends").contains("libc6"), "{control}");
    assert!(!field("Depends").contains("libseccomp2"), "{control}");
    assert!(
        field("Recommends").contains("containernetworking-plugins"),
        "{control}"
    );
    assert_eq!(field("Package"), "husk");

    // The unpacked binary is static and not position-independent, and runs.
    let unpacked = tree.join("usr/bin/husk");
    assert_eq!(
        elf_kind(&std::fs::read(&unpacked).unwrap()),
        (ET_EXEC, false),
        "a static executable with no program interpreter"
    );
    let v = Command::new(&unpacked).arg("--version").output().unwrap();
    assert!(v.status.success());
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("husk "));

    // husk check from the package, on a scratch root and socket.
    let net = dir.path().join("net.d");
    std::fs::create_dir_all(&net).unwrap();
    std::fs::copy(
        tree.join("usr/share/husk/10-husk.conflist"),
        net.join("10-husk.conflist"),
    )
    .unwrap();
    let out = Command::new(&unpacked)
        .args(["check", "--json", "--cni-bin-dir", "/usr/lib/cni"])
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--listen")
        .arg(dir.path().join("run/husk.sock"))
        .arg("--cni-conf-dir")
        .arg(&net)
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let status = |name: &str| -> String {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == name)
            .map(|c| c["status"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("no {name} check in {report}"))
    };
    for ok in [
        "kernel",
        "overlayfs",
        "root filesystem",
        "CNI config",
        "CNI plugin bridge",
        "socket",
    ] {
        assert_eq!(status(ok), "ok", "{ok}: {report}");
    }
    if !husk::cgroup::Layout::host().has("hugetlb") {
        assert_eq!(
            status("cgroup hugetlb"),
            "warn",
            "a missing hugetlb is a warning"
        );
    }
    let want_code = match report["status"].as_str().unwrap() {
        "ok" => 0,
        "warn" => 1,
        _ => 2,
    };
    assert_eq!(out.status.code(), Some(want_code), "{report}");
    // Nothing was left under the root by the overlay probe.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        !left
            .iter()
            .any(|n| n.to_string_lossy().starts_with(".husk-check")),
        "{left:?}"
    );
}

#[test]
fn containerd_configs_are_imported() {
    // Debian's own containerd config (the package the set-up installs).
    let out = husk()
        .args(["config", "import-containerd", "/etc/containerd/config.toml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let c = husk::config::Config::parse(&text).unwrap();
    assert_eq!(
        c.cni.bin_dirs,
        vec![std::path::PathBuf::from("/usr/lib/cni")]
    );
    assert!(text.contains("# carried: plugins.io.containerd.grpc.v1.cri.cni.bin_dir"));

    // A containerd 1.7-style config with config_path and old-style mirrors.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("config.toml");
    std::fs::write(
        &f,
        r#"version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
    [plugins."io.containerd.grpc.v1.cri".registry.mirrors."docker.io"]
      endpoint = ["https://mirror.gcr.io"]
"#,
    )
    .unwrap();
    let out = husk()
        .args(["config", "import-containerd"])
        .arg(&f)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let c = husk::config::Config::parse(&text).unwrap();
    assert_eq!(c.sandbox_image, "registry.k8s.io/pause:3.9");
    assert_eq!(
        c.registry.config_dir,
        std::path::PathBuf::from("/etc/containerd/certs.d")
    );
    assert!(
        text.contains("# not carried:") && text.contains("mirror.gcr.io"),
        "{text}"
    );
    assert!(text.contains("restrict_oom_score_adj"), "{text}");

    // Missing and malformed: one line, exit 2.
    std::fs::write(dir.path().join("bad.toml"), "version = 2\n[plugins\n").unwrap();
    for p in [dir.path().join("missing.toml"), dir.path().join("bad.toml")] {
        let out = husk()
            .args(["config", "import-containerd"])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", p.display());
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(&p.display().to_string()), "{err}");
    }
}
