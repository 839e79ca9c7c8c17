//! Secrets never reach a file or a terminal.
//!
//! A [`Redactor`] knows the secret values of one invocation — the agent's API key, passwords
//! in endpoint URLs, secret-named hook settings — and replaces each occurrence in text with
//! [`REDACTED`]. It also blanks the password of any `scheme://user:password@host` URL in the
//! text, known or not, since servers and proxies echo URLs back in error bodies.
//!
//! Text is redacted before it is cut, wherever `wt` cuts it; and since a cut made elsewhere
//! could still split a secret, a fragment of a known secret (at least [`MIN_FRAGMENT_LEN`]
//! bytes) at a cut edge — the start or end of a text, or just before a `…` cut marker — is
//! redacted too.
//!
//! The values of secret environment variables (the agent's API key, secret-named
//! `env_passthrough` variables) are read once and removed from `wt`'s own environment before
//! any plugin loads ([`seal_env`]); `wt` reads them back with [`env_secret`].
//!
//! The runtimes' output passes through one redactor before the runner sees it (see
//! [`crate::runtime::for_agent`]), so a new runtime cannot forget it. Secrets shorter than
//! [`MIN_SECRET_LEN`] bytes are not searched for: blanking every `x` of a trace because a
//! local server's dummy key is `x` would destroy evidence and protect nothing.

use std::borrow::Cow;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// What a secret is replaced with.
pub(crate) const REDACTED: &str = "[redacted]";

/// Secrets shorter than this are not searched for.
pub(crate) const MIN_SECRET_LEN: usize = 4;

/// A piece of a known secret this long or longer, at a cut edge, is redacted as the secret.
pub(crate) const MIN_FRAGMENT_LEN: usize = 4;

/// The values of the secret variables [`seal_env`] took out of the environment.
static SEALED: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Reads each variable of `names` that is set, keeps its value for [`env_secret`], and
/// removes it from `wt`'s environment, so that no plugin loaded later (nor any process it
/// starts) can read it there.
///
/// # Safety
///
/// Must be called before `wt` starts any thread that may read the environment (it calls
/// `std::env::remove_var`): at the start of a subcommand, before runtimes, plugins or
/// signal handlers exist.
pub(crate) unsafe fn seal_env<'a>(names: impl IntoIterator<Item = &'a str>) {
    let mut sealed = SEALED.lock().unwrap_or_else(|e| e.into_inner());
    for name in names {
        if name.is_empty() || name.contains(['=', '\0']) {
            continue;
        }
        if let Ok(value) = std::env::var(name) {
            sealed.retain(|(n, _)| n != name);
            sealed.push((name.to_owned(), value));
            // SAFETY: the caller promises no other thread reads or writes the environment.
            unsafe { std::env::remove_var(name) };
        }
    }
}

/// The value of secret variable `name`: the one [`seal_env`] kept, else the environment's.
pub(crate) fn env_secret(name: &str) -> Result<String, std::env::VarError> {
    let sealed = SEALED.lock().unwrap_or_else(|e| e.into_inner());
    match sealed.iter().find(|(n, _)| n == name) {
        Some((_, v)) => Ok(v.clone()),
        None => std::env::var(name),
    }
}

/// Words that make a setting's value secret when they appear in its name.
pub(crate) const SECRET_NAME_WORDS: [&str; 5] =
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Is a setting named `name` (e.g. `WT_MYHOOK_API_KEY`) secret by its name?
pub(crate) fn is_secret_name(name: &str) -> bool {
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

    /// `text` with every known secret and every URL password replaced by [`REDACTED`], and
    /// every fragment of a known secret at a cut edge (see the module docs).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = scrub_url_passwords(text);
        for s in &self.secrets {
            if out.contains(s.as_str()) {
                out = Cow::Owned(out.replace(s.as_str(), REDACTED));
            }
        }
        match self.redact_edges(&out) {
            Some(clean) => Cow::Owned(clean),
            None => out,
        }
    }

    /// `text` redacted, then cut to at most `max` characters (with `…` where it was cut).
    pub fn excerpt(&self, text: &str, max: usize) -> String {
        let clean = self.scrub(text);
        match clean.char_indices().nth(max) {
            Some((at, _)) => format!("{}…", &clean[..at]),
            None => clean.into_owned(),
        }
    }

    /// The longest proper piece of a known secret that `text` ends with (`prefix`) or starts
    /// with (`!prefix`), if one is at least [`MIN_FRAGMENT_LEN`] bytes long.
    fn fragment_at(&self, text: &str, prefix: bool) -> Option<usize> {
        self.secrets
            .iter()
            .filter_map(|s| {
                (MIN_FRAGMENT_LEN..s.len()).rev().find(|&k| {
                    if prefix {
                        s.is_char_boundary(k) && text.ends_with(&s[..k])
                    } else {
                        s.is_char_boundary(s.len() - k) && text.starts_with(&s[s.len() - k..])
                    }
                })
            })
            .max()
    }

    /// `text` with secret fragments at its edges and on either side of each `…` redacted;
    /// `None` when there are none.
    fn redact_edges(&self, text: &str) -> Option<String> {
        if self.secrets.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(text.len());
        let mut changed = false;
        let mut rest = text;
        if let Some(k) = self.fragment_at(rest, false) {
            out.push_str(REDACTED);
            rest = &rest[k..];
            changed = true;
        }
        // Each piece ends at a cut marker or at the end of the text: an edge.
        loop {
            let (piece, marker) = match rest.find('…') {
                Some(at) => (&rest[..at], Some(at)),
                None => (rest, None),
            };
            match self.fragment_at(piece, true) {
                Some(k) => {
                    out.push_str(&piece[..piece.len() - k]);
                    out.push_str(REDACTED);
                    changed = true;
                }
                None => out.push_str(piece),
            }
            match marker {
                Some(at) => {
                    out.push('…');
                    rest = &rest[at + '…'.len_utf8()..];
                    // What follows a cut marker starts at an edge too.
                    if let Some(k) = self.fragment_at(rest, false) {
                        out.push_str(REDACTED);
                        rest = &rest[k..];
                        changed = true;
                    }
                }
                None => break,
            }
        }
        changed.then_some(out)
    }

    /// Scrubs `text` in place.
    pub fn scrub_string(&self, text: &mut String) {
        if let Cow::Owned(clean) = self.scrub(text) {
            *text = clean;
        }
    }

    /// Scrubs every string (and object key) inside a JSON value, in place.
    pub fn scrub_value(&self, value: &mut Value) {
        self.scrub_value_changed(value);
    }

    /// [`Redactor::scrub_value`], saying whether anything changed.
    fn scrub_value_changed(&self, value: &mut Value) -> bool {
        match value {
            Value::String(s) => match self.scrub(s) {
                Cow::Owned(clean) => {
                    *s = clean;
                    true
                }
                Cow::Borrowed(_) => false,
            },
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| self.scrub_value_changed(v) | changed),
            Value::Object(map) => {
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| matches!(self.scrub(k), Cow::Owned(_)))
                    .cloned()
                    .collect();
                let mut changed = !dirty.is_empty();
                for k in dirty {
                    if let Some(v) = map.remove(&k) {
                        map.insert(self.scrub(&k).into_owned(), v);
                    }
                }
                for v in map.values_mut() {
                    changed |= self.scrub_value_changed(v);
                }
                changed
            }
            _ => false,
        }
    }

    /// Scrubs every string inside a record (a trace, a score, a model call), whatever its
    /// fields: the record goes through its JSON form, so a field added later cannot be
    /// forgotten. A record with nothing to redact is left as it is.
    pub fn scrub_record<T: Serialize + DeserializeOwned>(&self, record: &mut T) {
        let Ok(mut value) = serde_json::to_value(&*record) else {
            return;
        };
        if self.scrub_value_changed(&mut value) {
            match serde_json::from_value(value) {
                Ok(clean) => *record = clean,
                // Only strings changed, so the record reads back; were it ever not to, the
                // files are still clean: what is written is scrubbed again on the way out.
                Err(e) => tracing::error!("a redacted record did not read back: {e}"),
            }
        }
    }
}

fn looks_like_url(s: &str) -> bool {
    s.contains("://")
}

/// Whether `url` carries a password (`scheme://user:password@host…`).
pub(crate) fn has_password(url: &str) -> bool {
    url_credentials(url).is_some()
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
pub(crate) fn scrub_url_passwords(text: &str) -> Cow<'_, str> {
    // Most text has no URL: a colon found fast (memchr), then the two slashes.
    let bytes = text.as_bytes();
    if !memchr::memchr_iter(b':', bytes).any(|at| bytes[at + 1..].starts_with(b"//")) {
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

    /// No piece of `secret` of [`MIN_FRAGMENT_LEN`] bytes or more in `text`, but for its
    /// first piece (a key's well-known prefix).
    fn no_piece(text: &str, secret: &str) {
        for piece in secret.as_bytes().windows(MIN_FRAGMENT_LEN).skip(1) {
            let piece = std::str::from_utf8(piece).unwrap();
            assert!(!text.contains(piece), "{piece:?} of the secret in {text:?}");
        }
    }

    #[test]
    fn an_excerpt_is_redacted_before_it_is_cut_at_every_offset() {
        let secret = "sk-QxYzMnoPqRsTuvWxKLMN";
        let mut r = Redactor::new();
        r.add(secret);
        for at in 150..=210 {
            let text = format!("{}Authorization: Bearer {secret} trailing", "A".repeat(at));
            no_piece(&r.excerpt(&text, 200), secret);
        }
    }

    #[test]
    fn a_fragment_at_a_cut_edge_is_redacted_whoever_cut() {
        let secret = "sk-QxYzMnoPqRsTuvWxKLMN";
        let mut r = Redactor::new();
        r.add(secret);
        let text = format!("{}Bearer {secret} and more after", "A".repeat(40));
        for cut in 0..text.len() {
            // Cut first, redact after: at the end of a text, before and after a `…` marker,
            // at the start of a tail.
            let head = &text[..cut];
            let tail = &text[cut..];
            no_piece(&r.scrub(head), secret);
            no_piece(
                &r.scrub(&format!("{head}…[cut by wt: 99 bytes in all]")),
                secret,
            );
            no_piece(&r.scrub(tail), secret);
            no_piece(&r.scrub(&format!("stderr (last bytes): …{tail}")), secret);
        }
        // What is no piece of a secret is left alone.
        assert_eq!(r.scrub("plain text… and more"), "plain text… and more");
        assert_eq!(r.scrub("ends with sk-"), "ends with sk-");
        assert_eq!(r.scrub("ends with sk-Q"), "ends with [redacted]");
    }
}
