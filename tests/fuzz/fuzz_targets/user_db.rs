//! An image's `User` and its /etc/passwd and /etc/group, as CreateContainer
//! resolves them: never a panic, and never an id beyond 2^31-1.
#![no_main]
use husk::container::user::{resolve, Asked};
use husk::security::ids::MAX_ID;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    // user \0 passwd \0 group (missing parts empty).
    let mut parts = s.splitn(3, '\0');
    let user = parts.next().unwrap_or("");
    let passwd = parts.next().unwrap_or("");
    let group = parts.next().unwrap_or("");
    for strict in [false, true] {
        let asked = Asked {
            strict,
            ..Asked::default()
        };
        if let Ok(id) = resolve(&asked, user, Some(passwd), Some(group)) {
            assert!(id.uid <= MAX_ID && id.gid <= MAX_ID, "{id:?}");
            assert!(id.additional_gids.iter().all(|g| *g <= MAX_ID), "{id:?}");
            assert_eq!(id.additional_gids.first(), Some(&id.gid), "{id:?}");
            assert!(id.home.starts_with('/'), "{id:?}");
        }
    }
});
