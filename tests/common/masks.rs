//! Hostile pods, round two, shared by the host suite
//! (`security_masks.rs`) and the node VMs: an image with a canary, and a
//! race in which a second container of the pod redirects a nested mount
//! through a shared emptyDir onto `/dev`, `/dev/pts` or `/proc`.

use super::ctr::{
    attack_image, ccfg, create_start, exec_sync, pod_config, shell, stop_remove, stop_remove_pod,
    try_create,
};
use super::images::Entry;
use super::pod::{self, Pod};
use husk::api::cri::*;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// husk's own path, and Debian's runc (as setup installs it).
pub const HANDLERS: [&str; 2] = ["", "runc"];

/// What the container's own image holds at `/canary`.
pub const CANARY: &str = "CANARY-of-the-image";

pub async fn canary_image(p: &Pod) -> String {
    attack_image(
        p,
        "masks",
        vec![
            Entry::File("canary".into(), format!("{CANARY}\n").into_bytes(), 0o644),
            // An image symlink that sends a volume onto /dev.
            Entry::Symlink("volume".into(), "/dev".into()),
            Entry::Symlink("devlink".into(), "dev".into()),
            // Where the races send a volume: there in the image, so a
            // redirected mount lands rather than failing on a dangling link.
            Entry::Dir("dev".into(), 0o755),
            Entry::Dir("dev/pts".into(), 0o755),
            Entry::Dir("proc".into(), 0o555),
            Entry::Dir("proc/sys".into(), 0o555),
            Entry::Dir("proc/sys/kernel".into(), 0o555),
        ],
        serde_json::json!({}),
    )
    .await
}

/// A pod under `handler`.
pub async fn pod_under(p: &Pod, name: &str, handler: &str) -> (String, PodSandboxConfig) {
    let pc = pod_config(p, name);
    let id = pod::run_under(&p.h, pc.clone(), handler).await.unwrap();
    (id, pc)
}

pub fn bind(host: &Path, dest: &str) -> Mount {
    Mount {
        container_path: dest.into(),
        host_path: host.display().to_string(),
        ..Default::default()
    }
}

/// Every entry under `dir`, with its type: what a node's directory holds.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let t = e.file_type().unwrap();
        let kind = if t.is_char_device() {
            "char"
        } else if t.is_block_device() {
            "block"
        } else if t.is_symlink() {
            "link"
        } else if t.is_dir() {
            "dir"
        } else {
            "file"
        };
        out.push(format!("{} {kind}", e.file_name().to_string_lossy()));
    }
    out.sort();
    out
}

/// One class of race: the nested mount's destination `/vol/d` flips
/// between a harmless directory and `target`; `inner` is the node's
/// directory that would land there; `check` is what the container then
/// sees, printed for [`verdict`].
pub struct Race {
    pub name: &'static str,
    target: &'static str,
    /// Where the redirected mount would land, as mountinfo names it.
    lands_at: &'static str,
    tty: bool,
    /// What the racing container does to `inner` between flips.
    swap: &'static str,
    check: &'static str,
}

pub const RACES: [Race; 3] = [
    // CVE-2025-31133: the runtime's /dev is the neighbour's directory,
    // whose `null` it turns into a link to the container's own file.
    Race {
        name: "null",
        target: "../dev",
        lands_at: "/dev",
        tty: false,
        swap: "[ -e n/null ] && ln -sfn ../canary n/null;",
        check: "stat -c '%t:%T' /dev/null /proc/keys /proc/timer_list; cat /proc/keys",
    },
    // CVE-2025-52565: the console's pts is the neighbour's.
    Race {
        name: "pts",
        target: "../dev/pts",
        lands_at: "/dev/pts",
        tty: true,
        swap: "[ -e n/0 ] && ln -sfn ../../canary n/0; [ -e n/ptmx ] && ln -sfn ../../canary n/ptmx;",
        check: "stat -c '%t' /dev/console; stat -f -c '%t' /dev/pts; stat -c '%t:%T' /dev/null",
    },
    // CVE-2025-52881: a mount lands under /proc, over what the runtime
    // and the masks then use.
    Race {
        name: "proc",
        target: "../proc/sys/kernel",
        lands_at: "/proc/sys/kernel",
        tty: false,
        swap: "",
        check: "cat /proc/sys/kernel/domainname; stat -c '%t:%T' /proc/keys; stat -f -c '%t' /proc/sys/kernel",
    },
];

/// What a started container must print for each race: the genuine
/// devices and procfs, never the neighbour's files.
fn verdict(race: &Race, out: &str) -> Result<(), String> {
    let lines: Vec<&str> = out.lines().collect();
    let ok = match race.name {
        "null" => lines == ["1:3", "1:3", "1:3"],
        // 0x88 = 136, the pts major; 1cd1 devpts' magic.
        "pts" => lines == ["88", "1cd1", "1:3"],
        _ => {
            lines.len() == 3
                && lines[0] != "DOMAIN-of-the-node-dir"
                && lines[1] == "1:3"
                && lines[2] == "9fa0"
        }
    };
    if ok {
        Ok(())
    } else {
        Err(out.to_string())
    }
}

/// Whether the container's mountinfo shows the node's directory mounted
/// where the race sends it (covered or not): the redirect happened.
fn redirected(race: &Race, mountinfo: &str, inner: &Path) -> bool {
    // Mountinfo names a bind's root within its file system (the whole
    // path on the host's root, less the mount point on a tmpfs such as
    // the node VM's): the shared dir's unique name and `n` tell it.
    let shared = inner
        .parent()
        .and_then(|s| s.file_name())
        .unwrap()
        .to_string_lossy();
    let root = format!("/{shared}/n");
    mountinfo.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 4 && f[3].ends_with(&root) && f[4] == race.lands_at
    })
}

/// CreateContainer and StartContainer; a refused start removes the
/// container (its id then), as the kubelet would.
async fn create_and_start(
    p: &Pod,
    pod: &str,
    pc: &PodSandboxConfig,
    c: ContainerConfig,
) -> Result<String, tonic::Status> {
    let id = try_create(&p.h, pod, pc, c).await?;
    let started =
        p.h.runtime()
            .await
            .start_container(StartContainerRequest {
                container_id: id.clone(),
            })
            .await;
    if let Err(e) = started {
        p.h.runtime()
            .await
            .remove_container(RemoveContainerRequest { container_id: id })
            .await
            .unwrap();
        return Err(e);
    }
    Ok(id)
}

/// The end of the pod's shim log (what the runtime said).
fn shim_log(p: &Pod, pod: &str) -> String {
    let log = std::fs::read_to_string(p.h.dir.path().join("run/s").join(pod).join("shim.log"))
        .unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// One race on `handler`: rounds until `enough` redirected rounds were
/// all contained (the redirected mount covered, or refused by runc's own
/// check for a mount inside /proc), or `rounds` are done; panics at the
/// first escape or write into the node's directory, and when no round
/// was redirected.
pub async fn race(p: &Pod, img: &str, handler: &str, race: &Race, rounds: usize, enough: usize) {
    let shared = tempfile::tempdir().unwrap();
    let s = shared.path();
    std::fs::create_dir(s.join("x")).unwrap();
    let inner = s.join("n");
    std::fs::create_dir(&inner).unwrap();
    std::fs::write(inner.join("domainname"), "DOMAIN-of-the-node-dir\n").unwrap();
    let before = listing(&inner);
    let (pod, pc) = pod_under(p, &format!("race-{}{}", race.name, handler.len()), handler).await;
    let flip = format!(
        "cd /shared; while :; do [ -L d ] || rm -rf d; ln -sfn {} d; {} ln -sfn x d; done",
        race.target, race.swap
    );
    let mut a = shell(img, "attacker", &flip, &[]);
    a.mounts = vec![bind(s, "/shared")];
    create_start(&p.h, &pod, &pc, a).await;

    let (mut seen, mut refused, mut round) = (0, 0, 0);
    while round < rounds && seen < enough {
        round += 1;
        let mut v = ccfg(img, &format!("victim{round}"), &[], &[]);
        v.tty = race.tty;
        v.stdin = race.tty;
        v.mounts = vec![bind(s, "/vol"), bind(&inner, "/vol/d")];
        match create_and_start(p, &pod, &pc, v).await {
            // A neighbour that removes a mount point while the
            // runtime mounts on it fails the start: refused, whole.
            Err(e) => {
                refused += 1;
                // runc's own check caught the redirect (its words).
                if e.message().contains("because it is inside /proc") {
                    seen += 1;
                }
            }
            Ok(id) => {
                let r = exec_sync(&p.h, &id, &["/bin/sh", "-c", race.check])
                    .await
                    .unwrap();
                let out = String::from_utf8_lossy(&r.stdout).into_owned();
                let mi = exec_sync(&p.h, &id, &["cat", "/proc/self/mountinfo"])
                    .await
                    .unwrap();
                let mi = String::from_utf8_lossy(&mi.stdout).into_owned();
                if let Err(saw) = verdict(race, &out) {
                    panic!(
                        "{handler:?} {} round {round}: escaped: the container saw {saw:?}\n{mi}",
                        race.name
                    );
                }
                if redirected(race, &mi, &inner) {
                    seen += 1;
                }
                stop_remove(&p.h, &id).await;
            }
        }
        let now: Vec<String> = listing(&inner)
            .into_iter()
            .filter(|e| !e.ends_with(" link"))
            .collect();
        assert_eq!(
            now,
            before,
            "{handler:?} {} round {round}: the runtime wrote into the node's dir\n{}",
            race.name,
            shim_log(p, &pod)
        );
    }
    eprintln!(
        "{handler:?} {}: {round} rounds, {seen} redirected and contained, {refused} refused",
        race.name
    );
    assert!(
        seen > 0,
        "{handler:?} {}: the race never redirected the mount in {round} rounds",
        race.name
    );
    stop_remove_pod(&p.h, &pod).await;
}
