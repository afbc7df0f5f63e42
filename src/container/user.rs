//! Resolving a container's user and groups against the image's
//! /etc/passwd and /etc/group, as containerd does, with what an image
//! must never be able to do refused:
//!
//! - An id outside 0..=2^31-1 is refused, wherever it comes from (the
//!   image's `User`, its passwd or group file, the security context):
//!   the kernel's setresuid takes -1 (4294967295) as "unchanged", so such
//!   an id would run the container as the server's root. A string of
//!   digits is always an id, never a name to look up.
//! - The files are read by [`read_user_db`]: inside the rootfs, as
//!   regular files only, without blocking, at most [`MAX_USER_DB`] bytes.
//! - The primary gid is always in the supplementary list, so that the
//!   process's groups are set (an empty list would leave the server's).

use super::SpecError;
use crate::security::ids::MAX_ID;
use crate::security::ids::{in_range, parse_id};
use std::path::Path;

/// The most of an image's /etc/passwd or /etc/group that is read.
pub const MAX_USER_DB: u64 = 4 << 20;

/// uid, primary gid and supplemental gids of a container process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// The primary gid first, then the others, sorted.
    pub additional_gids: Vec<u32>,
    /// The user's home directory from passwd, else `/` (HOME, when the
    /// container's environment has none).
    pub home: String,
}

impl Identity {
    /// As ContainerStatus.user reports it: the primary gid is among the
    /// supplemental groups, sorted.
    pub fn record(&self) -> RecordUser {
        let mut groups: Vec<u32> = self.additional_gids.clone();
        groups.push(self.gid);
        groups.sort_unstable();
        groups.dedup();
        RecordUser {
            uid: self.uid,
            gid: self.gid,
            supplemental_groups: groups,
        }
    }
}

/// The identity a container's first process started with (recorded for
/// ContainerStatus.user).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecordUser {
    pub uid: u32,
    pub gid: u32,
    pub supplemental_groups: Vec<u32>,
}

/// Reads `rel` (an image's `etc/passwd` or `etc/group`) inside `rootfs`:
/// resolved with `RESOLVE_IN_ROOT` (a symlink cannot leave it), opened
/// non-blocking (a FIFO cannot hang the caller), and only if it is a
/// regular file of at most [`MAX_USER_DB`] bytes. Absent is `Ok(None)`;
/// anything else that is not such a file is an error naming it.
pub fn read_user_db(rootfs: &Path, rel: &str) -> Result<Option<String>, SpecError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use std::io::Read;
    let name = format!("the image's /{rel}");
    let dir = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| SpecError(format!("open the container's rootfs: {e}")))?;
    // O_PATH first: a device node is never opened, only looked at.
    let path_fd = match crate::sys::openat2(
        &dir,
        rel,
        OFlags::PATH | OFlags::CLOEXEC,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(SpecError(format!("{name}: {e}"))),
    };
    let st = rustix::fs::fstat(&path_fd).map_err(|e| SpecError(format!("{name}: {e}")))?;
    let kind = rustix::fs::FileType::from_raw_mode(st.st_mode);
    if kind != rustix::fs::FileType::RegularFile {
        return Err(SpecError(format!(
            "{name} is a {}, not a regular file",
            kind_name(kind)
        )));
    }
    if st.st_size as u64 > MAX_USER_DB {
        return Err(SpecError(format!(
            "{name} is {} bytes, more than the {MAX_USER_DB} read",
            st.st_size
        )));
    }
    // The same inode, reopened for reading through its descriptor.
    let fd = rustix::fs::open(
        format!(
            "/proc/self/fd/{}",
            std::os::fd::AsRawFd::as_raw_fd(&path_fd)
        ),
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY,
        Mode::empty(),
    )
    .map_err(|e| SpecError(format!("{name}: {e}")))?;
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_USER_DB)
        .read_to_end(&mut bytes)
        .map_err(|e| SpecError(format!("{name}: {e}")))?;
    Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
}

fn kind_name(k: rustix::fs::FileType) -> &'static str {
    use rustix::fs::FileType as T;
    match k {
        T::Directory => "directory",
        T::CharacterDevice => "character device",
        T::BlockDevice => "block device",
        T::Fifo => "FIFO",
        T::Socket => "socket",
        T::Symlink => "symlink",
        _ => "special file",
    }
}

struct PasswdEntry {
    name: String,
    uid: u64,
    gid: u64,
    home: String,
}

/// Entries of a passwd file; lines that do not parse are skipped, ids
/// are kept wide so that an out-of-range one is refused when used, not
/// skipped for another entry of the same name.
fn passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some(PasswdEntry {
                name: f.first()?.to_string(),
                uid: f.get(2)?.parse().ok()?,
                gid: f.get(3)?.parse().ok()?,
                home: f.get(5).map(|h| h.to_string()).unwrap_or_default(),
            })
        })
        .collect()
}

/// (name, gid, members) of each group.
fn groups(text: &str) -> Vec<(String, u64, Vec<String>)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((
                f.first()?.to_string(),
                f.get(2)?.parse().ok()?,
                f.get(3)
                    .map(|m| {
                        m.split(',')
                            .filter(|s| !s.is_empty())
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ))
        })
        .collect()
}

fn db_id(n: u64, what: &dyn Fn() -> String) -> Result<u32, SpecError> {
    match u32::try_from(n) {
        Ok(v) if v <= MAX_ID => Ok(v),
        _ => Err(SpecError(format!(
            "{}: id {n} is out of range (0 to {MAX_ID})",
            what()
        ))),
    }
}

/// What the security context asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    pub run_as_user: Option<i64>,
    pub run_as_username: &'a str,
    pub run_as_group: Option<i64>,
    pub supplemental: &'a [i64],
    /// SupplementalGroupsPolicy Strict.
    pub strict: bool,
}

/// Resolves the process identity.
/// - `run_as_user` / `run_as_username` win over the image's `User`
///   (`uid`, `name`, `uid:gid`, `name:group`);
/// - a name must exist in the image's passwd; a bare uid need not;
/// - the primary gid comes from `run_as_group`, the `:group` part, or passwd;
/// - supplemental gids: `supplemental`, plus (unless `strict`, the CRI's
///   SupplementalGroupsPolicy Strict) the groups that list the user.
pub fn resolve(
    asked: &Asked<'_>,
    image_user: &str,
    passwd_text: Option<&str>,
    group_text: Option<&str>,
) -> Result<Identity, SpecError> {
    let Asked {
        run_as_user,
        run_as_username,
        run_as_group,
        supplemental,
        strict,
    } = *asked;
    if run_as_group.is_some() && run_as_user.is_none() && run_as_username.is_empty() {
        return Err(SpecError(
            "security_context.run_as_group is set without run_as_user or run_as_username".into(),
        ));
    }
    let users = passwd(passwd_text.unwrap_or(""));
    let grps = groups(group_text.unwrap_or(""));
    let from_image = format!("the image's User {image_user:?}");
    let (user_part, group_part, source) = if let Some(u) = run_as_user {
        let uid = in_range(u, "security_context.run_as_user")?;
        (
            uid.to_string(),
            None,
            "security_context.run_as_user".to_string(),
        )
    } else if !run_as_username.is_empty() {
        (
            run_as_username.to_string(),
            None,
            format!("security_context.run_as_username {run_as_username:?}"),
        )
    } else {
        match image_user.split_once(':') {
            Some((u, g)) => (u.to_string(), Some(g.to_string()), from_image.clone()),
            None => (image_user.to_string(), None, from_image.clone()),
        }
    };
    let named = || source.clone();
    let in_passwd = |n: &str| format!("{source}: the image's /etc/passwd entry {n:?}");
    let (uid, mut gid, name, home) = if user_part.is_empty() {
        (0, 0, Some("root".to_string()), None)
    } else if let Some(uid) = parse_id(&user_part, "uid", &named)? {
        let e = users.iter().find(|e| e.uid == u64::from(uid));
        let gid = match e {
            Some(e) => db_id(e.gid, &|| in_passwd(&e.name))?,
            None => 0,
        };
        (
            uid,
            gid,
            e.map(|e| e.name.clone()),
            e.map(|e| e.home.clone()),
        )
    } else {
        let e = users.iter().find(|e| e.name == user_part).ok_or_else(|| {
            SpecError(format!(
                "user {user_part:?} is not in the image's /etc/passwd"
            ))
        })?;
        let what = || in_passwd(&e.name);
        (
            db_id(e.uid, &what)?,
            db_id(e.gid, &what)?,
            Some(e.name.clone()),
            Some(e.home.clone()),
        )
    };
    if let Some(g) = group_part.filter(|g| !g.is_empty()) {
        gid = match parse_id(&g, "gid", &named)? {
            Some(n) => n,
            None => {
                let (_, id, _) = grps.iter().find(|(n, _, _)| *n == g).ok_or_else(|| {
                    SpecError(format!("group {g:?} is not in the image's /etc/group"))
                })?;
                db_id(*id, &|| {
                    format!("{source}: the image's /etc/group entry {g:?}")
                })?
            }
        };
    }
    if let Some(g) = run_as_group {
        gid = in_range(g, "security_context.run_as_group")?;
    }
    let mut additional: Vec<u32> = Vec::new();
    for g in supplemental {
        additional.push(in_range(*g, "security_context.supplemental_groups entry")?);
    }
    // Merge (the default) adds the groups the image lists the user in;
    // Strict keeps only what was asked for. An out-of-range gid of a
    // group the user is listed in is refused, not skipped.
    if let Some(n) = name.filter(|_| !strict) {
        for (g, id, members) in &grps {
            if members.contains(&n) {
                additional.push(db_id(*id, &|| {
                    format!("{source}: the image's /etc/group entry {g:?}")
                })?);
            }
        }
    }
    additional.retain(|g| *g != gid);
    additional.sort_unstable();
    additional.dedup();
    additional.insert(0, gid);
    Ok(Identity {
        uid,
        gid,
        additional_gids: additional,
        home: home
            .filter(|h| h.starts_with('/'))
            .unwrap_or_else(|| "/".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nwww:x:33:33::/var/www:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n4294967296:x:0:0::/:/bin/sh\nbig:x:4294967295:1::/:/bin/sh\nbiggid:x:7:4294967295::/:/bin/sh\n";
    const GROUP: &str =
        "root:x:0:\nwww:x:33:\nalice:x:1000:\nwheel:x:10:alice,bob\naudio:x:29:alice\nhuge:x:2147483648:bob\n";

    fn id(uid: u32, gid: u32, groups: &[u32], home: &str) -> Identity {
        Identity {
            uid,
            gid,
            additional_gids: groups.to_vec(),
            home: home.into(),
        }
    }

    fn r(
        u: Option<i64>,
        n: &str,
        g: Option<i64>,
        s: &[i64],
        img: &str,
    ) -> Result<Identity, SpecError> {
        let asked = Asked {
            run_as_user: u,
            run_as_username: n,
            run_as_group: g,
            supplemental: s,
            strict: false,
        };
        resolve(&asked, img, Some(PASSWD), Some(GROUP))
    }

    #[test]
    fn resolves_like_containerd() {
        assert_eq!(
            r(None, "", None, &[], "").expect("root"),
            id(0, 0, &[0], "/")
        );
        assert_eq!(
            r(None, "", None, &[], "alice").expect("name"),
            id(1000, 1000, &[1000, 10, 29], "/home/alice")
        );
        assert_eq!(r(None, "", None, &[], "33:10").expect("uid:gid").gid, 10);
        assert_eq!(
            r(None, "", None, &[], "www:wheel").expect("name:group"),
            id(33, 10, &[10], "/var/www")
        );
        assert_eq!(
            r(Some(4242), "", None, &[], "alice").expect("uid not in passwd"),
            id(4242, 0, &[0], "/")
        );
        assert_eq!(
            r(None, "www", Some(5), &[7, 5], "").expect("username + group"),
            id(33, 5, &[5, 7], "/var/www")
        );
        assert!(r(None, "nobody-here", None, &[], "").is_err());
        let strict = resolve(
            &Asked {
                run_as_username: "alice",
                supplemental: &[7],
                strict: true,
                ..Asked::default()
            },
            "",
            Some(PASSWD),
            Some(GROUP),
        )
        .expect("strict");
        assert_eq!(
            strict.additional_gids,
            vec![1000, 7],
            "no groups from the image"
        );
        let e = r(None, "", Some(5), &[], "alice").expect_err("group without user");
        assert!(e.0.contains("run_as_group"), "{}", e.0);
        assert!(r(None, "", None, &[], "alice:nogroup").is_err());
    }

    #[test]
    fn ids_beyond_31_bits_are_refused_wherever_they_come_from() {
        let refused =
            |u: Option<i64>, n: &str, g: Option<i64>, s: &[i64], img: &str, what: &str| {
                let e = r(u, n, g, s, img).expect_err(img);
                assert!(
                    e.0.contains("out of range") && e.0.contains(what),
                    "{img}: {}",
                    e.0
                );
            };
        for img in [
            "4294967295",
            "2147483648",
            "4294967296",
            "99999999999999999999999",
        ] {
            refused(None, "", None, &[], img, &format!("User {img:?}"));
        }
        refused(
            None,
            "",
            None,
            &[],
            "65534:4294967295",
            "User \"65534:4294967295\": gid",
        );
        refused(None, "", None, &[], "big", "/etc/passwd entry \"big\"");
        refused(
            None,
            "",
            None,
            &[],
            "biggid",
            "/etc/passwd entry \"biggid\"",
        );
        refused(
            Some(4294967295),
            "",
            None,
            &[],
            "",
            "run_as_user 4294967295",
        );
        refused(Some(-1), "", None, &[], "", "run_as_user -1");
        refused(Some(1), "", Some(-1), &[], "", "run_as_group -1");
        refused(Some(1), "", None, &[2147483648], "", "supplemental_groups");
        // A group the user is listed in, out of range: refused, not skipped.
        let e = resolve(
            &Asked {
                run_as_username: "bob",
                ..Asked::default()
            },
            "",
            Some("bob:x:5:5::/:/bin/sh\n"),
            Some(GROUP),
        )
        .expect_err("huge group");
        assert!(e.0.contains("\"huge\""), "{}", e.0);
        // The edge is allowed.
        assert_eq!(
            r(None, "", None, &[], "2147483647").expect("max").uid,
            MAX_ID
        );
    }

    #[test]
    fn user_databases_are_read_only_as_small_regular_files() {
        let root = tempfile::tempdir().expect("tmp");
        let etc = root.path().join("etc");
        std::fs::create_dir(&etc).expect("etc");
        assert_eq!(
            read_user_db(root.path(), "etc/passwd").expect("absent"),
            None
        );
        std::fs::write(etc.join("passwd"), PASSWD).expect("write");
        assert_eq!(
            read_user_db(root.path(), "etc/passwd")
                .expect("regular")
                .as_deref(),
            Some(PASSWD)
        );
        // A symlink is resolved inside the root, never on the node.
        std::fs::write(etc.join("real"), "x:x:1:1::/:/bin/sh\n").expect("write");
        std::os::unix::fs::symlink("/etc/real", etc.join("group")).expect("symlink");
        assert_eq!(
            read_user_db(root.path(), "etc/group")
                .expect("in root")
                .as_deref(),
            Some("x:x:1:1::/:/bin/sh\n")
        );
        std::fs::remove_file(etc.join("group")).expect("rm");
        std::os::unix::fs::symlink("../../../../../../etc/hostname", etc.join("group"))
            .expect("symlink");
        assert_eq!(
            read_user_db(root.path(), "etc/group").expect("climbs to nothing"),
            None
        );
        // A FIFO is refused at once, without a writer.
        std::fs::remove_file(etc.join("passwd")).expect("rm");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            etc.join("passwd"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o644),
            0,
        )
        .expect("mkfifo");
        let e = read_user_db(root.path(), "etc/passwd").expect_err("fifo");
        assert!(e.0.contains("FIFO"), "{}", e.0);
        // A directory, and a file over the bound.
        std::fs::remove_file(etc.join("passwd")).expect("rm");
        std::fs::create_dir(etc.join("passwd")).expect("dir");
        assert!(read_user_db(root.path(), "etc/passwd")
            .expect_err("dir")
            .0
            .contains("directory"));
        let f = std::fs::File::create(etc.join("real")).expect("file");
        f.set_len(MAX_USER_DB + 1).expect("sparse");
        std::fs::remove_file(etc.join("group")).expect("rm");
        std::os::unix::fs::symlink("real", etc.join("group")).expect("symlink");
        assert!(read_user_db(root.path(), "etc/group")
            .expect_err("large")
            .0
            .contains("more than"));
    }
}
