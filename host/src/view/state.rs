//! What the server's workers share: the runs read (each side), and the reply they build.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use crate::term;

use super::index::{self, Index};

/// How often the directories are looked at for new runs.
pub(crate) const WATCH_EVERY: Duration = Duration::from_secs(1);

/// The runs read, replaced whole when the directories change.
pub(crate) struct Side {
    pub(crate) dirs: Vec<PathBuf>,
    current: RwLock<Arc<Index>>,
    /// Bumped each time the directories are read again.
    generation: AtomicU64,
}

impl Side {
    pub(crate) fn read(dirs: Vec<PathBuf>) -> anyhow::Result<Side> {
        let index = Index::read(&dirs)?;
        Ok(Side {
            dirs,
            current: RwLock::new(Arc::new(index)),
            generation: AtomicU64::new(1),
        })
    }

    pub(crate) fn now(&self) -> Arc<Index> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(crate) fn journals(&self) -> Vec<PathBuf> {
        self.now()
            .report
            .sweeps
            .iter()
            .flat_map(|s| s.journals.iter().map(PathBuf::from))
            .collect()
    }

    /// Reads the directories again if they changed since `seen`; returns what it saw.
    pub(crate) fn refresh(&self, seen: &mut Vec<(u64, Option<std::time::SystemTime>)>) {
        let now = index::fingerprint(&self.dirs, &self.journals());
        if now == *seen {
            return;
        }
        match Index::read(&self.dirs) {
            Ok(index) => {
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(index);
                self.generation.fetch_add(1, Ordering::SeqCst);
                // Journals found by this reading are watched from now on.
                *seen = index::fingerprint(&self.dirs, &self.journals());
            }
            Err(e) => {
                term::err_line(&format!(
                    "warning: reading the runs again failed, still showing the last reading: {}",
                    term::sanitize(&format!("{e:#}"))
                ));
                *seen = now;
            }
        }
    }
}

/// What the workers share.
pub(crate) struct State {
    pub runs: Side,
    pub baseline: Option<Side>,
    /// The host names (lower case, no port) a request may be addressed to, besides any IP
    /// address: `localhost` and those `--allow-host` gave.
    pub names: Vec<String>,
}

impl State {
    /// Whether a request whose `Host` (or absolute URI) names `authority` may be answered.
    /// A page that rebinds a DNS name to this machine sends that name, so a name must be
    /// one the user allowed; an IP address cannot be rebound (a page whose origin is this
    /// address is this server's own), so any passes. The port is not asked: a tunnel or a
    /// forwarded port changes it, never the name.
    pub(crate) fn addressed_to_us(&self, authority: &str) -> bool {
        let name = host_name(authority);
        let literal = name.strip_prefix('[').and_then(|n| n.strip_suffix(']'));
        literal.unwrap_or(&name).parse::<std::net::IpAddr>().is_ok() || self.names.contains(&name)
    }
}

/// The host of a `Host` value, lower case, without its port or a trailing dot.
pub(crate) fn host_name(authority: &str) -> String {
    let a = authority.trim();
    let host = match a.find(']') {
        Some(end) if a.starts_with('[') => &a[..=end],
        _ => a.rsplit_once(':').map_or(a, |(h, _)| h),
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// A response: status, content type, body.
pub(crate) struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

impl Reply {
    pub(crate) fn html(status: u16, page: String) -> Reply {
        Reply {
            status,
            content_type: "text/html; charset=utf-8",
            body: term::escape_bidi(&page).into_owned().into_bytes(),
        }
    }

    pub(crate) fn json(status: u16, value: &serde_json::Value) -> Reply {
        let text = serde_json::to_string_pretty(value).unwrap_or_default();
        Reply {
            status,
            content_type: "application/json",
            body: escape_bidi_json(&text).into_bytes(),
        }
    }

    pub(crate) fn text(status: u16, body: &str) -> Reply {
        Reply {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }
}

/// JSON text with each bidirectional control written as a `\uXXXX` escape: the same data
/// for a program, and text that cannot read backwards for a person looking at it.
pub(crate) fn escape_bidi_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if term::is_bidi_control(c) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(names: &[&str]) -> State {
        State {
            runs: Side::read(Vec::new()).unwrap(),
            baseline: None,
            names: names.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn a_request_must_name_an_address_or_an_allowed_name() {
        let s = state(&["localhost", "box.lan"]);
        for ok in [
            "127.0.0.1:8700",
            "localhost:8700",
            "LOCALHOST.",
            "[::1]:8700",
            "10.1.2.3",
            "box.lan:9000",
        ] {
            assert!(s.addressed_to_us(ok), "{ok}");
        }
        for refused in [
            "evil.example",
            "evil.example:8700",
            "box.lan.evil",
            "",
            "[::1",
        ] {
            assert!(!s.addressed_to_us(refused), "{refused}");
        }
    }
}
