//! Registry authentication: credentials from CRI's `AuthConfig`, the
//! `WWW-Authenticate` challenge, and the bearer-token exchange.
//!
//! Flow (distribution's token spec): a request answered 401 carries a
//! challenge. `Basic` → retry with username/password. `Bearer realm=…,
//! service=…,scope=…` → ask the realm for a token (GET with basic auth, or
//! POST with an identity/refresh token, OAuth2 style) and retry with it.
//! A `registry_token` is sent as the bearer token directly.

use base64::Engine as _;

/// Credentials for one pull, from CRI's `AuthConfig`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
    pub identity_token: String,
    pub registry_token: String,
}

impl Credentials {
    /// From CRI fields; `auth` is base64 `user:password` and wins when set.
    pub fn from_cri(
        username: &str,
        password: &str,
        auth: &str,
        identity_token: &str,
        registry_token: &str,
    ) -> Result<Credentials, String> {
        let (mut user, mut pass) = (username.to_string(), password.to_string());
        if !auth.is_empty() {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(auth.trim())
                .map_err(|e| format!("auth is not base64: {e}"))?;
            let text = String::from_utf8(raw).map_err(|_| "auth is not UTF-8".to_string())?;
            let (u, p) = text
                .split_once(':')
                .ok_or_else(|| "auth must encode \"username:password\"".to_string())?;
            user = u.to_string();
            pass = p.to_string();
        }
        Ok(Credentials {
            username: user,
            password: pass,
            identity_token: identity_token.to_string(),
            registry_token: registry_token.to_string(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.username.is_empty() && self.identity_token.is_empty() && self.registry_token.is_empty()
    }

    /// `Basic <base64(user:pass)>`, if there is a username.
    pub fn basic_header(&self) -> Option<String> {
        if self.username.is_empty() {
            return None;
        }
        let raw = format!("{}:{}", self.username, self.password);
        Some(format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        ))
    }
}

/// A parsed `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq)]
pub struct Challenge {
    /// Lowercased scheme: `basic` or `bearer`.
    pub scheme: String,
    pub params: Vec<(String, String)>,
}

impl Challenge {
    pub fn param(&self, key: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }
}

/// Parses `Scheme k="v", k2=v2` (quoted strings may contain commas and `\"`).
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.split_once(char::is_whitespace) {
        Some((s, r)) => (s, r),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(c) if c.is_whitespace() || *c == ',') {
            chars.next();
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() || c == ',' {
                break;
            }
            key.push(c);
            chars.next();
        }
        if key.is_empty() {
            break;
        }
        while matches!(chars.peek(), Some(c) if c.is_whitespace()) {
            chars.next();
        }
        if chars.peek() != Some(&'=') {
            break;
        }
        chars.next();
        while matches!(chars.peek(), Some(c) if c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n)
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        params.push((key, value));
    }
    Some(Challenge {
        scheme: scheme.to_ascii_lowercase(),
        params,
    })
}

/// The token endpoint's answer (`token` or OAuth2's `access_token`).
#[derive(Debug, serde::Deserialize)]
pub struct TokenResponse {
    #[serde(default)]
    pub token: String,
    #[serde(default)]
    pub access_token: String,
    #[serde(default)]
    pub expires_in: Option<u64>,
}

impl TokenResponse {
    pub fn bearer(&self) -> Option<&str> {
        [self.token.as_str(), self.access_token.as_str()]
            .into_iter()
            .find(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_bearer_challenge() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:library/busybox:pull,push""#,
        )
        .expect("challenge");
        assert_eq!(c.scheme, "bearer");
        assert_eq!(c.param("realm"), Some("https://auth.example.com/token"));
        assert_eq!(c.param("service"), Some("registry.example.com"));
        assert_eq!(
            c.param("scope"),
            Some("repository:library/busybox:pull,push")
        );
    }

    #[test]
    fn parses_basic_challenge() {
        let c = parse_challenge(r#"Basic realm="Registry Realm""#).expect("basic");
        assert_eq!(c.scheme, "basic");
        assert_eq!(c.param("realm"), Some("Registry Realm"));
        let c = parse_challenge("Basic").expect("bare");
        assert!(c.params.is_empty());
    }

    #[test]
    fn credentials_from_auth_field() {
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3:cret");
        let c = Credentials::from_cri("", "", &auth, "", "").expect("auth");
        assert_eq!(c.username, "alice");
        assert_eq!(c.password, "s3:cret");
        assert!(Credentials::from_cri("", "", "!!", "", "").is_err());
        let c = Credentials::from_cri("bob", "pw", "", "", "").expect("plain");
        assert_eq!(c.basic_header().as_deref(), Some("Basic Ym9iOnB3"));
    }
}
