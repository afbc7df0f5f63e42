//! Single-use tokens for streaming URLs, as the kubelet's request cache
//! keeps them: random (16 bytes, URL-safe base64), valid for a TTL (one
//! minute by default), consumed by the first request that presents them,
//! and at most `MAX_IN_FLIGHT` outstanding.

use base64::Engine as _;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Outstanding tokens beyond which new requests are refused.
pub const MAX_IN_FLIGHT: usize = 1000;

/// What a token stands for.
#[derive(Debug, Clone, PartialEq)]
pub enum Pending {
    Exec {
        container: String,
        cmd: Vec<String>,
        opts: StdioOpts,
    },
    Attach {
        container: String,
        opts: StdioOpts,
    },
    PortForward {
        sandbox: String,
        ports: Vec<u16>,
    },
}

/// Which streams a session carries.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StdioOpts {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

pub struct Tokens {
    ttl: Duration,
    map: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl Tokens {
    pub fn new(ttl: Duration) -> Tokens {
        Tokens {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// A new token for `p`, or None when too many are outstanding.
    pub fn insert(&self, p: Pending) -> Option<String> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        m.retain(|_, (at, _)| *at > now);
        if m.len() >= MAX_IN_FLIGHT {
            return None;
        }
        let token =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>());
        m.insert(token.clone(), (now + self.ttl, p));
        Some(token)
    }

    /// Takes the token's request if it exists and has not expired.
    pub fn consume(&self, token: &str) -> Option<Pending> {
        let mut m = self.map.lock().unwrap_or_else(|e| e.into_inner());
        let (at, p) = m.remove(token)?;
        (at > Instant::now()).then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_use_and_expiry() {
        let t = Tokens::new(Duration::from_millis(50));
        let p = Pending::PortForward {
            sandbox: "s".into(),
            ports: vec![80],
        };
        let a = t.insert(p.clone()).expect("token");
        assert!(a.len() >= 8);
        assert_eq!(t.consume(&a), Some(p.clone()));
        assert_eq!(t.consume(&a), None, "a token is used once");
        let b = t.insert(p).expect("token");
        std::thread::sleep(Duration::from_millis(80));
        assert_eq!(t.consume(&b), None, "an expired token is refused");
        assert_eq!(t.consume("nope"), None);
    }
}
