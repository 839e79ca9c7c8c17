//! Time and ids, pinnable so that two identical sweeps write byte-identical files.
//!
//! - `WT_FIXED_CLOCK=<RFC 3339>` freezes the clock: every timestamp is that instant and every
//!   measured latency is 0 ms.
//! - `--seed N` derives every id (sweep, run, session) from `N` and the id's place in the
//!   sweep (scenario id, run index), so ids do not depend on thread scheduling with `--jobs`.
//!   Without a seed, a random one is drawn per sweep.
//!
//! This module only tells time and mints ids; it never touches files.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use sha2::{Digest, Sha256};

/// The environment variable that pins the clock.
pub const FIXED_CLOCK_ENV: &str = "WT_FIXED_CLOCK";

/// A wall clock that can be pinned.
#[derive(Clone, Copy, Debug)]
pub enum Clock {
    System,
    Fixed(Timestamp),
}

#[derive(Debug, thiserror::Error)]
#[error(
    "invalid {FIXED_CLOCK_ENV} value {value:?}: expected an RFC 3339 time such as 2026-11-30T05:15:00Z ({source})"
)]
pub struct ClockError {
    value: String,
    source: jiff::Error,
}

impl Clock {
    /// The system clock, or the one pinned by `WT_FIXED_CLOCK`.
    pub fn from_env() -> Result<Clock, ClockError> {
        match std::env::var(FIXED_CLOCK_ENV) {
            Ok(v) if !v.trim().is_empty() => Clock::fixed(v.trim()),
            _ => Ok(Clock::System),
        }
    }

    pub fn fixed(rfc3339: &str) -> Result<Clock, ClockError> {
        rfc3339
            .parse::<Timestamp>()
            .map(Clock::Fixed)
            .map_err(|source| ClockError {
                value: rfc3339.to_owned(),
                source,
            })
    }

    pub fn is_fixed(&self) -> bool {
        matches!(self, Clock::Fixed(_))
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::Fixed(t) => *t,
        }
    }

    /// Now, as RFC 3339 in UTC with millisecond precision (`2026-11-30T05:15:00.123Z`).
    pub fn now_rfc3339(&self) -> String {
        rfc3339(self.now())
    }

    /// [`Clock::now_rfc3339`], appended to `out`.
    pub(crate) fn push_rfc3339(&self, out: &mut String) {
        use std::fmt::Write as _;
        let _ = write!(out, "{}", self.now().strftime(RFC3339_MS));
    }

    /// Starts a stopwatch; it always reads 0 on a pinned clock.
    pub fn stopwatch(&self) -> Stopwatch {
        Stopwatch {
            start: (!self.is_fixed()).then(Instant::now),
        }
    }
}

/// RFC 3339 in UTC, milliseconds always written (cut, not rounded), `Z` for the zone.
const RFC3339_MS: &str = "%Y-%m-%dT%H:%M:%S%.3fZ";

/// RFC 3339, UTC, milliseconds.
pub(crate) fn rfc3339(t: Timestamp) -> String {
    t.strftime(RFC3339_MS).to_string()
}

/// The compact form used in file names: `20261130T051500Z` (no dots, no colons).
pub(crate) fn compact(t: Timestamp) -> String {
    t.strftime("%Y%m%dT%H%M%SZ").to_string()
}

/// Measures elapsed time, or reads 0 when the clock is pinned.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch {
    start: Option<Instant>,
}

impl Stopwatch {
    pub fn elapsed(&self) -> Duration {
        self.start.map_or(Duration::ZERO, |s| s.elapsed())
    }

    pub fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Mints ids from a seed: the same seed and place give the same id.
#[derive(Clone, Copy, Debug)]
pub struct Ids {
    seed: u64,
    /// Seeded by the user (`--seed`), not at random.
    pinned: bool,
}

impl Ids {
    pub fn seeded(seed: u64) -> Ids {
        Ids { seed, pinned: true }
    }

    /// The user's seed (`--seed`), when the ids are pinned.
    pub fn seed(&self) -> Option<u64> {
        self.pinned.then_some(self.seed)
    }

    /// A number derived from the seed, a kind and a place, when the ids are pinned
    /// (`--seed`): the sampling seed `wt` sends its own models (a simulated user, a judge)
    /// where the provider takes one, so a pinned sweep asks them the same way each time.
    pub fn number(&self, kind: &str, place: &[&str]) -> Option<u64> {
        if !self.pinned {
            return None;
        }
        let d = self.digest(kind, place);
        // Within i64, as JSON readers of `seed` expect a signed 64-bit integer.
        Some(u64::from_le_bytes(d[..8].try_into().expect("8 bytes")) >> 1)
    }

    /// SHA-256 of the seed, a kind and a place: what ids and numbers are derived from.
    fn digest(&self, kind: &str, place: &[&str]) -> [u8; 32] {
        let mut hasher = Sha256::new();
        hasher.update(self.seed.to_le_bytes());
        hasher.update(kind.as_bytes());
        for p in place {
            hasher.update([0]);
            hasher.update(p.as_bytes());
        }
        hasher.finalize().into()
    }

    /// A fresh random seed (from the standard library's per-process random hasher keys and
    /// the time), for unpinned sweeps.
    pub fn random() -> Ids {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        Ids {
            seed: h.finish(),
            pinned: false,
        }
    }

    /// A UUID-shaped id (version 4 layout), derived from the seed, a kind and a place.
    pub fn mint(&self, kind: &str, place: &[&str]) -> String {
        let d = self.digest(kind, place);
        let mut b = [0u8; 16];
        b.copy_from_slice(&d[..16]);
        b[6] = (b[6] & 0x0f) | 0x40;
        b[8] = (b[8] & 0x3f) | 0x80;
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = String::with_capacity(36);
        for (i, x) in b.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                out.push('-');
            }
            out.push(char::from(HEX[usize::from(x >> 4)]));
            out.push(char::from(HEX[usize::from(x & 0x0f)]));
        }
        out
    }
}

/// A model call's durations as a pinned clock writes them: 0 ms (latency, time to first
/// token, each retry's wait).
pub(crate) fn pin_model_call(call: &mut windtunnel_model::ModelCall) {
    call.latency_ms = 0;
    call.ttft_ms = call.ttft_ms.map(|_| 0);
    for r in &mut call.retries {
        r.wait_ms = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_clock_is_constant_and_compact_has_no_dots() {
        let c = Clock::fixed("2026-11-30T05:15:00Z").unwrap();
        assert_eq!(c.now_rfc3339(), "2026-11-30T05:15:00.000Z");
        assert_eq!(compact(c.now()), "20261130T051500Z");
        assert_eq!(c.stopwatch().elapsed_ms(), 0);
        assert!(Clock::fixed("yesterday").is_err());
    }

    #[test]
    fn stamps_have_milliseconds_cut_not_rounded_and_a_z() {
        for (at, rfc, short) in [
            (
                "2026-11-30T05:15:00.1239Z",
                "2026-11-30T05:15:00.123Z",
                "20261130T051500Z",
            ),
            (
                "2000-02-29T23:59:59.9999+00:00",
                "2000-02-29T23:59:59.999Z",
                "20000229T235959Z",
            ),
            (
                "2026-12-01T01:00:00.5+01:00",
                "2026-12-01T00:00:00.500Z",
                "20261201T000000Z",
            ),
            (
                "1969-12-31T23:59:59.5Z",
                "1969-12-31T23:59:59.500Z",
                "19691231T235959Z",
            ),
        ] {
            let t: Timestamp = at.parse().unwrap();
            assert_eq!(rfc3339(t), rfc, "{at}");
            assert_eq!(compact(t), short, "{at}");
            assert_eq!(Clock::Fixed(t).now_rfc3339(), rfc, "{at}");
        }
    }

    #[test]
    fn the_system_clock_stamps_the_time_it_was_read_at() {
        for _ in 0..1_000 {
            let before = Timestamp::now();
            let mut stamp = "kept ".to_owned();
            Clock::System.push_rfc3339(&mut stamp);
            let after = Timestamp::now();
            let read: Timestamp = stamp["kept ".len()..].parse().unwrap();
            // Milliseconds are cut, not rounded: the stamp is at most 1 ms before `before`.
            assert!(
                read.as_millisecond() >= before.as_millisecond(),
                "{stamp} {before}"
            );
            assert!(read <= after, "{stamp} {after}");
            assert_eq!(
                stamp.len(),
                "kept ".len() + "2026-12-02T00:00:00.000Z".len()
            );
        }
    }

    #[test]
    fn ids_are_deterministic_per_place() {
        let a = Ids::seeded(7);
        assert_eq!(a.mint("run", &["x", "0"]), a.mint("run", &["x", "0"]));
        assert_ne!(a.mint("run", &["x", "0"]), a.mint("run", &["x", "1"]));
        assert_ne!(
            a.mint("run", &["x", "0"]),
            Ids::seeded(8).mint("run", &["x", "0"])
        );
        assert_eq!(a.mint("run", &["x"]).len(), 36);
    }
}
