//! A shim's command line after it has moved: a shim started ahead of its
//! pod names, on its command line, the dir it was started in; once it has
//! adopted the pod's dir, that argument is rewritten in place in the
//! process's own argument area (what `/proc/<pid>/cmdline` shows), so that
//! `ps` and every search by command line (the server's sweep of stray
//! shims) name the pod's dir. The new value must fit in the old one's
//! bytes; what it leaves over is filled with NULs.

use std::io;

/// Rewrites the argument `old` as `new` in this process's argument area.
pub fn rename_argument(old: &[u8], new: &[u8]) -> io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    // Fields 48 and 49 (arg_start, arg_end), counted from the state, the
    // third field, which follows the command name's closing parenthesis.
    let (start, end) = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| {
            let mut f = rest.split_whitespace().skip(48 - 3);
            Some((
                f.next()?.parse::<usize>().ok()?,
                f.next()?.parse::<usize>().ok()?,
            ))
        })
        .filter(|(s, e)| *s != 0 && e > s)
        .ok_or_else(|| io::Error::other("no argument area in /proc/self/stat"))?;
    // SAFETY: [arg_start, arg_end) is this process's own argument area, on
    // its initial stack, mapped writable for its whole life; nothing else
    // writes it, and the parsed command line was copied out at start.
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, end - start) };
    if replace_argument(area, old, new) {
        Ok(())
    } else {
        Err(io::Error::other(
            "the argument is not there, or the new one is longer",
        ))
    }
}

/// Replaces the NUL-separated argument `old` in `area` with `new`, padded
/// with NULs; false when `old` is not an argument or `new` is longer.
fn replace_argument(area: &mut [u8], old: &[u8], new: &[u8]) -> bool {
    if new.len() > old.len() || new.contains(&0) {
        return false;
    }
    let mut at = 0;
    for arg in area.split(|b| *b == 0) {
        if arg == old {
            let slot = &mut area[at..at + old.len()];
            slot[..new.len()].copy_from_slice(new);
            slot[new.len()..].fill(0);
            return true;
        }
        at += arg.len() + 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::replace_argument;

    #[test]
    fn an_argument_is_replaced_in_place_and_padded() {
        let mut area = b"husk\0shim\0--dir\0/run/h/spare-shim/0123456789\0".to_vec();
        let len = area.len();
        assert!(replace_argument(
            &mut area,
            b"/run/h/spare-shim/0123456789",
            b"/run/h/s/ab"
        ));
        assert_eq!(area.len(), len);
        let args: Vec<&[u8]> = area.split(|b| *b == 0).filter(|a| !a.is_empty()).collect();
        assert_eq!(args, vec![&b"husk"[..], b"shim", b"--dir", b"/run/h/s/ab"]);
        // Longer, absent, or a part of an argument: left as it is.
        let before = area.clone();
        assert!(!replace_argument(
            &mut area,
            b"/run/h/s/ab",
            b"/run/h/s/abcdefghijklmnop"
        ));
        assert!(!replace_argument(&mut area, b"/elsewhere", b"/x"));
        assert!(!replace_argument(&mut area, b"shi", b"x"));
        assert_eq!(area, before);
    }
}
