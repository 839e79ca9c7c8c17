//! Secrets never reach a file or a terminal.
//!
//! A [`Redactor`] knows the secret values of one invocation — the agent's API key, passwords
//! in endpoint URLs, secret-named hook settings — and replaces each occurrence in text with
//! [`REDACTED`]. It also blanks the password of any `scheme://user:password@host` URL in the
//! text, known or not, since servers and proxies echo URLs back in error bodies.
//!
//! The runtimes' output passes through one redactor before the runner sees it (see
//! [`crate::runtime::for_agent`]), so a new runtime cannot forget it. Secrets shorter than
//! [`MIN_SECRET_LEN`] bytes are not searched for: blanking every `x` of a trace because a
//! local server's dummy key is `x` would destroy evidence and protect nothing.

use std::borrow::Cow;

use serde_json::Value;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not searched for.
pub const MIN_SECRET_LEN: usize = 4;

/// Words that make a setting's value secret when they appear in its name.
pub const SECRET_NAME_WORDS: [&str; 5] = ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Is a setting named `name` (e.g. `WT_MYHOOK_API_KEY`) secret by its name?
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_WORDS.iter().any(|w| upper.contains(w))
}

/// The secret values of one invocation.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<String>,
}

impl Redactor {
    pub fn new() -> Self {
        Redactor::default()
    }

    /// Adds a secret value (and, for a URL, the password inside it, as written, decoded,
    /// and as the `Basic` credentials an HTTP client derives from it).
    pub fn add(&mut self, secret: &str) {
        if let Some((user, pw)) = url_credentials(secret) {
            let (user, pw) = (user.to_owned(), pw.to_owned());
            self.push(&pw);
            let user = percent_decode(&user).unwrap_or(user);
            let pw = percent_decode(&pw).unwrap_or(pw);
            self.push(&pw);
            use base64::Engine as _;
            let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
            self.push(&basic);
        }
        if !looks_like_url(secret) {
            self.push(secret);
        }
    }

    fn push(&mut self, secret: &str) {
        if secret.len() < MIN_SECRET_LEN || self.secrets.iter().any(|s| s == secret) {
            return;
        }
        self.secrets.push(secret.to_owned());
        self.secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    }

    /// Adds every secret of `other`.
    pub fn extend(&mut self, other: &Redactor) {
        for s in &other.secrets {
            self.push(s);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
    }

    /// `text` with every known secret and every URL password replaced by [`REDACTED`].
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = scrub_url_passwords(text);
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), REDACTED));
            }
        }
        out
    }

    /// Scrubs `text` in place.
    pub fn scrub_string(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.scrub(text) {
            *text = clean;
        }
    }

    /// Scrubs every string (and object key) inside a JSON value, in place.
    pub fn scrub_value(&self, value: &mut Value) {
        match value {
            Value::String(s) => self.scrub_string(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.scrub_value(v)),
            Value::Object(map) => {
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| matches!(self.scrub(k), Cow::Owned(_)))
                    .cloned()
                    .collect();
                for k in dirty {
                    if let Some(v) = map.remove(&k) {
                        map.insert(self.scrub(&k).into_owned(), v);
                    }
                }
                map.values_mut().for_each(|v| self.scrub_value(v));
            }
            _ => {}
        }
    }
}

fn looks_like_url(s: &str) -> bool {
    s.contains("://")
}

/// The user and password of a `scheme://user:password@host…` URL, as written.
fn url_credentials(url: &str) -> Option<(&str, &str)> {
    let (_, rest) = url.split_once("://")?;
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let (userinfo, _) = authority.rsplit_once('@')?;
    let (user, pw) = userinfo.split_once(':')?;
    (!pw.is_empty()).then_some((user, pw))
}

fn percent_decode(s: &str) -> Result<String, ()> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or(())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| ())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| ())
}

/// Characters that end a URL's authority part when a URL sits inside other text.
fn ends_authority(c: char) -> bool {
    matches!(
        c,
        '/' | '?' | '#' | '"' | '\'' | '<' | '>' | '`' | ')' | ']' | '}' | ','
    ) || c.is_whitespace()
        || c.is_control()
}

/// Blanks the password of every `scheme://user:password@host` in `text`.
pub fn scrub_url_passwords(text: &str) -> Cow<'_, str> {
    if !text.contains("://") {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut changed = false;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail.find(ends_authority).unwrap_or(tail.len());
        let authority = &tail[..end];
        match authority.rsplit_once('@') {
            Some((userinfo, host)) if userinfo.contains(':') => {
                let (user, _) = userinfo.split_once(':').unwrap_or((userinfo, ""));
                out.push_str(user);
                out.push(':');
                out.push_str(REDACTED);
                out.push('@');
                out.push_str(host);
                changed = true;
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    if !changed {
        return Cow::Borrowed(text);
    }
    out.push_str(rest);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_secrets_and_url_passwords_are_blanked() {
        let mut r = Redactor::new();
        r.add("sk-live-0123456789");
        r.add("https://alice:p%40ss-word@api.example.com/v1");
        let text = "401 from https://bob:hunter22@proxy:8080/x: echo Authorization: Bearer sk-live-0123456789; pw p@ss-word; Basic YWxpY2U6cEBzcy13b3Jk";
        assert_eq!(
            r.scrub(text),
            "401 from https://bob:[redacted]@proxy:8080/x: echo Authorization: Bearer [redacted]; pw [redacted]; Basic [redacted]"
        );
        assert!(matches!(r.scrub("nothing here"), Cow::Borrowed(_)));
        // URLs without a password are left alone.
        assert_eq!(
            scrub_url_passwords("see http://user@host/ and https://h/p?a=b"),
            "see http://user@host/ and https://h/p?a=b"
        );
    }

    #[test]
    fn short_secrets_are_not_searched_for() {
        let mut r = Redactor::new();
        r.add("x");
        assert!(r.is_empty());
        assert_eq!(r.scrub("xxx"), "xxx");
    }

    #[test]
    fn json_values_are_scrubbed_deeply() {
        let mut r = Redactor::new();
        r.add("tok-abcdef");
        let mut v = json!({"a": ["tok-abcdef", {"tok-abcdef": 1, "b": "x tok-abcdef y"}]});
        r.scrub_value(&mut v);
        assert_eq!(
            v,
            json!({"a": ["[redacted]", {"[redacted]": 1, "b": "x [redacted] y"}]})
        );
    }

    #[test]
    fn secret_names() {
        for n in [
            "WT_X_API_KEY",
            "WT_X_token",
            "WT_X_DB_PASSWORD",
            "WT_X_CREDENTIALS",
        ] {
            assert!(is_secret_name(n), "{n}");
        }
        assert!(!is_secret_name("WT_X_BASELINE"));
    }
}
