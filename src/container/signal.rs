//! Stop signals: the image's StopSignal (a name or number), the CRI's
//! `Signal` enum (ContainerConfig.stop_signal, ContainerStatus.stop_signal)
//! and the kernel's numbers, as Linux with glibc numbers them (SIGRTMIN is
//! 34: glibc keeps 32 and 33; SIGRTMAX is 64), as runc and containerd do.

use crate::api::cri::Signal;

/// The classic signals by name (without "SIG"), aliases included; the
/// first name of a number is its canonical one.
const NAMED: &[(&str, i32)] = &[
    ("HUP", 1),
    ("INT", 2),
    ("QUIT", 3),
    ("ILL", 4),
    ("TRAP", 5),
    ("ABRT", 6),
    ("IOT", 6),
    ("BUS", 7),
    ("FPE", 8),
    ("KILL", 9),
    ("USR1", 10),
    ("SEGV", 11),
    ("USR2", 12),
    ("PIPE", 13),
    ("ALRM", 14),
    ("TERM", 15),
    ("STKFLT", 16),
    ("CHLD", 17),
    ("CLD", 17),
    ("CONT", 18),
    ("STOP", 19),
    ("TSTP", 20),
    ("TTIN", 21),
    ("TTOU", 22),
    ("URG", 23),
    ("XCPU", 24),
    ("XFSZ", 25),
    ("VTALRM", 26),
    ("PROF", 27),
    ("WINCH", 28),
    ("IO", 29),
    ("POLL", 29),
    ("PWR", 30),
    ("SYS", 31),
];

const RTMIN: i32 = 34;
const RTMAX: i32 = 64;

/// A signal's number from a name (`SIGTERM`, `TERM`, `RTMIN+3`,
/// `SIGRTMAX-1`) or a number (1 to 64); None for anything else.
pub fn parse_signal(s: &str) -> Option<i32> {
    if let Ok(n) = s.parse::<i32>() {
        return (1..=RTMAX).contains(&n).then_some(n);
    }
    let name = s.strip_prefix("SIG").unwrap_or(s);
    if let Some(&(_, n)) = NAMED.iter().find(|(k, _)| *k == name) {
        return Some(n);
    }
    let rt = |base: i32, rest: &str, sign: i32| {
        let k: i32 = if rest.is_empty() {
            0
        } else {
            rest.parse().ok()?
        };
        let n = base + sign * k;
        (RTMIN..=RTMAX).contains(&n).then_some(n)
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt(RTMIN, rest.strip_prefix('+').unwrap_or(rest), 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt(RTMAX, rest.strip_prefix('-').unwrap_or(rest), -1);
    }
    None
}

/// The number of a CRI stop signal: None for RUNTIME_DEFAULT, Err with
/// the value for one the enum does not have.
pub fn from_cri(value: i32) -> Result<Option<i32>, String> {
    let s = Signal::try_from(value).map_err(|_| format!("unknown stop signal {value}"))?;
    if s == Signal::RuntimeDefault {
        return Ok(None);
    }
    let name = s
        .as_str_name()
        .replacen("PLUS", "+", 1)
        .replacen("MINUS", "-", 1);
    parse_signal(&name)
        .map(Some)
        .ok_or_else(|| format!("unknown stop signal {name}"))
}

/// The CRI form of a signal number (its canonical name); RUNTIME_DEFAULT
/// for a number the enum cannot name.
pub fn to_cri(n: i32) -> Signal {
    let name = if let Some((k, _)) = NAMED.iter().find(|(_, v)| *v == n) {
        format!("SIG{k}")
    } else if n == RTMIN {
        "SIGRTMIN".into()
    } else if n == RTMAX {
        "SIGRTMAX".into()
    } else if (RTMIN..RTMIN + 16).contains(&n) {
        format!("SIGRTMINPLUS{}", n - RTMIN)
    } else if (RTMIN + 16..RTMAX).contains(&n) {
        format!("SIGRTMAXMINUS{}", RTMAX - n)
    } else {
        return Signal::RuntimeDefault;
    };
    Signal::from_str_name(&name).unwrap_or(Signal::RuntimeDefault)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_numbers() {
        assert_eq!(parse_signal("SIGTERM"), Some(15));
        assert_eq!(parse_signal("USR1"), Some(10));
        assert_eq!(parse_signal("9"), Some(9));
        assert_eq!(parse_signal("SIGRTMIN"), Some(34));
        assert_eq!(parse_signal("SIGRTMIN+3"), Some(37));
        assert_eq!(parse_signal("RTMAX-1"), Some(63));
        assert_eq!(parse_signal("SIGPOLL"), Some(29));
        for bad in ["0", "65", "-1", "SIGFOO", "RTMIN+31", "RTMAX-40", ""] {
            assert_eq!(parse_signal(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_cri_signal_has_a_number_and_back() {
        assert_eq!(from_cri(0), Ok(None));
        for v in 1..=65 {
            let n = from_cri(v).expect("known").expect("a signal");
            let back = to_cri(n);
            // Aliases come back as their canonical name, with the same number.
            assert_eq!(from_cri(back as i32), Ok(Some(n)), "{v}");
        }
        assert_eq!(from_cri(Signal::Sigusr1 as i32), Ok(Some(10)));
        assert_eq!(from_cri(Signal::Sigrtminplus15 as i32), Ok(Some(49)));
        assert_eq!(from_cri(Signal::Sigrtmaxminus14 as i32), Ok(Some(50)));
        assert_eq!(from_cri(Signal::Sigrtmax as i32), Ok(Some(64)));
        assert!(from_cri(99).is_err());
        assert!(from_cri(-1).is_err());
        assert_eq!(to_cri(15), Signal::Sigterm);
        assert_eq!(to_cri(6), Signal::Sigabrt);
        assert_eq!(to_cri(0), Signal::RuntimeDefault);
    }
}
