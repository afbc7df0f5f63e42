//! Resolving a container's user and groups against the image's
//! /etc/passwd and /etc/group, as containerd does.

use super::SpecError;

/// uid, primary gid and supplemental gids of a container process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
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

struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
}

fn passwd(text: &str) -> Vec<PasswdEntry> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some(PasswdEntry {
                name: f.first()?.to_string(),
                uid: f.get(2)?.parse().ok()?,
                gid: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

/// (name, gid, members) of each group.
fn groups(text: &str) -> Vec<(String, u32, Vec<String>)> {
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
    let (user_part, group_part) = if let Some(u) = run_as_user {
        (u.to_string(), None)
    } else if !run_as_username.is_empty() {
        (run_as_username.to_string(), None)
    } else {
        match image_user.split_once(':') {
            Some((u, g)) => (u.to_string(), Some(g.to_string())),
            None => (image_user.to_string(), None),
        }
    };
    let (uid, mut gid, name) = if user_part.is_empty() {
        (0, 0, Some("root".to_string()))
    } else if let Ok(uid) = user_part.parse::<u32>() {
        let e = users.iter().find(|e| e.uid == uid);
        (
            uid,
            e.map(|e| e.gid).unwrap_or(0),
            e.map(|e| e.name.clone()),
        )
    } else {
        let e = users.iter().find(|e| e.name == user_part).ok_or_else(|| {
            SpecError(format!(
                "user {user_part:?} is not in the image's /etc/passwd"
            ))
        })?;
        (e.uid, e.gid, Some(e.name.clone()))
    };
    if let Some(g) = group_part.filter(|g| !g.is_empty()) {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => grps
                .iter()
                .find(|(n, _, _)| *n == g)
                .map(|(_, id, _)| *id)
                .ok_or_else(|| {
                    SpecError(format!("group {g:?} is not in the image's /etc/group"))
                })?,
        };
    }
    if let Some(g) = run_as_group {
        gid =
            u32::try_from(g).map_err(|_| SpecError(format!("run_as_group {g} is out of range")))?;
    }
    let mut additional: Vec<u32> = Vec::new();
    for g in supplemental {
        additional.push(
            u32::try_from(*g)
                .map_err(|_| SpecError(format!("supplemental group {g} is out of range")))?,
        );
    }
    // Merge (the default) adds the groups the image lists the user in;
    // Strict keeps only what was asked for.
    if let Some(n) = name.filter(|_| !strict) {
        for (_, id, members) in &grps {
            if members.contains(&n) && !additional.contains(id) {
                additional.push(*id);
            }
        }
    }
    additional.retain(|g| *g != gid);
    additional.sort_unstable();
    additional.dedup();
    Ok(Identity {
        uid,
        gid,
        additional_gids: additional,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\nwww:x:33:33::/var/www:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n";
    const GROUP: &str =
        "root:x:0:\nwww:x:33:\nalice:x:1000:\nwheel:x:10:alice,bob\naudio:x:29:alice\n";

    #[test]
    fn resolves_like_containerd() {
        let r = |u: Option<i64>, n: &str, g: Option<i64>, s: &[i64], img: &str| {
            let asked = Asked {
                run_as_user: u,
                run_as_username: n,
                run_as_group: g,
                supplemental: s,
                strict: false,
            };
            resolve(&asked, img, Some(PASSWD), Some(GROUP))
        };
        assert_eq!(
            r(None, "", None, &[], "").expect("root"),
            Identity {
                uid: 0,
                gid: 0,
                additional_gids: vec![]
            }
        );
        assert_eq!(
            r(None, "", None, &[], "alice").expect("name"),
            Identity {
                uid: 1000,
                gid: 1000,
                additional_gids: vec![10, 29]
            }
        );
        assert_eq!(r(None, "", None, &[], "33:10").expect("uid:gid").gid, 10);
        assert_eq!(
            r(None, "", None, &[], "www:wheel").expect("name:group"),
            Identity {
                uid: 33,
                gid: 10,
                additional_gids: vec![]
            }
        );
        assert_eq!(
            r(Some(4242), "", None, &[], "alice").expect("uid not in passwd"),
            Identity {
                uid: 4242,
                gid: 0,
                additional_gids: vec![]
            }
        );
        assert_eq!(
            r(None, "www", Some(5), &[7, 5], "").expect("username + group"),
            Identity {
                uid: 33,
                gid: 5,
                additional_gids: vec![7]
            }
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
        assert_eq!(strict.additional_gids, vec![7], "no groups from the image");
        let e = r(None, "", Some(5), &[], "alice").expect_err("group without user");
        assert!(e.0.contains("run_as_group"), "{}", e.0);
        assert!(r(None, "", None, &[], "alice:nogroup").is_err());
    }
}
