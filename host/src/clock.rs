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
        let mut out = String::with_capacity(24);
        self.push_rfc3339(&mut out);
        out
    }

    /// [`Clock::now_rfc3339`], appended to `out`.
    pub(crate) fn push_rfc3339(&self, out: &mut String) {
        // The system clock read as the standard library has it: a `Timestamp` would cost a
        // 128-bit division to split into seconds and milliseconds again.
        if let Clock::System = self
            && let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)
            && let Some(mut stamp) = second_stamp(d.as_secs())
        {
            put_digits(&mut stamp[20..23], d.subsec_millis());
            // ASCII digits and separators only.
            out.push_str(std::str::from_utf8(&stamp).unwrap_or_default());
            return;
        }
        push_rfc3339(out, self.now());
    }

    /// Starts a stopwatch; it always reads 0 on a pinned clock.
    pub fn stopwatch(&self) -> Stopwatch {
        Stopwatch {
            start: (!self.is_fixed()).then(Instant::now),
        }
    }
}

/// RFC 3339, UTC, milliseconds.
pub(crate) fn rfc3339(t: Timestamp) -> String {
    let mut out = String::with_capacity(24);
    push_rfc3339(&mut out, t);
    out
}

/// [`rfc3339`], appended to `out`.
fn push_rfc3339(out: &mut String, t: Timestamp) {
    // A sweep stamps every event, run and turn: the common case is formatted by hand
    // (jiff's general formatter costs about 20 times as much).
    match civil(t) {
        Some(c) => push_civil(out, &c),
        None => {
            use std::fmt::Write as _;
            let _ = write!(out, "{}", t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ"));
        }
    }
}

/// The RFC 3339 stamp of second `secs` (milliseconds 000): a sweep stamps many events a
/// second, so each thread keeps the last second's and formats only the milliseconds anew.
fn second_stamp(secs: u64) -> Option<[u8; 24]> {
    use std::cell::Cell;
    thread_local! {
        static LAST: Cell<(u64, [u8; 24])> = const { Cell::new((u64::MAX, [0; 24])) };
    }
    let (last, stamp) = LAST.get();
    if last == secs {
        return Some(stamp);
    }
    let stamp = civil_stamp(&civil_of(secs, 0)?);
    LAST.set((secs, stamp));
    Some(stamp)
}

/// `c` as RFC 3339 with milliseconds.
fn civil_stamp(c: &Civil) -> [u8; 24] {
    let mut buf = *b"0000-00-00T00:00:00.000Z";
    put_digits(&mut buf[0..4], c.year);
    put_digits(&mut buf[5..7], c.month);
    put_digits(&mut buf[8..10], c.day);
    put_digits(&mut buf[11..13], c.hour);
    put_digits(&mut buf[14..16], c.minute);
    put_digits(&mut buf[17..19], c.second);
    put_digits(&mut buf[20..23], c.milli);
    buf
}

/// `c` as RFC 3339 with milliseconds, appended to `out`.
fn push_civil(out: &mut String, c: &Civil) {
    let buf = civil_stamp(c);
    // ASCII digits and separators only.
    out.push_str(std::str::from_utf8(&buf).unwrap_or_default());
}

/// Writes `n` in decimal into `into`, zero-padded to its length (the low digits only).
fn put_digits(into: &mut [u8], mut n: u32) {
    for b in into.iter_mut().rev() {
        *b = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The compact form used in file names: `20261130T051500Z` (no dots, no colons).
pub(crate) fn compact(t: Timestamp) -> String {
    match civil(t) {
        Some(c) => {
            // The RFC 3339 stamp without its separators and milliseconds.
            let s = civil_stamp(&c);
            let parts = [
                &s[0..4],
                &s[5..7],
                &s[8..10],
                b"T",
                &s[11..13],
                &s[14..16],
                &s[17..19],
            ];
            let mut out: String = parts.concat().into_iter().map(char::from).collect();
            out.push('Z');
            out
        }
        None => t.strftime("%Y%m%dT%H%M%SZ").to_string(),
    }
}

/// A UTC time's calendar fields.
struct Civil {
    year: u32,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
    milli: u32,
}

/// The calendar fields of `t` in UTC, for times from 1970 to 9999 (`None` otherwise: the
/// general formatter handles those).
fn civil(t: Timestamp) -> Option<Civil> {
    let secs = u64::try_from(t.as_second()).ok()?;
    let milli = u32::try_from(t.subsec_millisecond()).ok()?;
    civil_of(secs, milli)
}

/// [`civil`] of a time given as seconds since 1970 and milliseconds.
fn civil_of(secs: u64, milli: u32) -> Option<Civil> {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    if year > 9999 {
        return None;
    }
    Some(Civil {
        year: year as u32,
        month: month as u32,
        day: day as u32,
        hour: (rem / 3_600) as u32,
        minute: (rem % 3_600 / 60) as u32,
        second: (rem % 60) as u32,
        milli,
    })
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
}

impl Ids {
    pub fn seeded(seed: u64) -> Ids {
        Ids { seed }
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
        Ids { seed: h.finish() }
    }

    /// A UUID-shaped id (version 4 layout), derived from the seed, a kind and a place.
    pub fn mint(&self, kind: &str, place: &[&str]) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.seed.to_le_bytes());
        hasher.update(kind.as_bytes());
        for p in place {
            hasher.update([0]);
            hasher.update(p.as_bytes());
        }
        let d = hasher.finalize();
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
    fn the_hand_formatter_agrees_with_jiff_everywhere_it_formats() {
        let jiff_rfc = |t: Timestamp| t.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        let jiff_compact = |t: Timestamp| t.strftime("%Y%m%dT%H%M%SZ").to_string();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let last = 253_402_207_200_000i64; // the latest instant jiff takes in milliseconds
        let check = |ms: i64| {
            let t = Timestamp::from_millisecond(ms).unwrap();
            assert_eq!(rfc3339(t), jiff_rfc(t), "{ms}");
            assert_eq!(compact(t), jiff_compact(t), "{ms}");
        };
        for ms in [
            0,
            1,
            999,
            1_000,
            86_399_999,
            86_400_000,
            951_782_400_000,
            last,
        ] {
            check(ms);
        }
        // Leap days, century and 400-year boundaries, and ten thousand random instants.
        for day in [
            "2000-02-29",
            "1900-03-01",
            "2100-02-28",
            "2400-02-29",
            "2026-12-31",
        ] {
            let t: Timestamp = format!("{day}T23:59:59.999Z").parse().unwrap();
            check(t.as_millisecond());
        }
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            check((x % (last as u64 + 1)) as i64);
        }
        // Before 1970 the general formatter takes over.
        let t: Timestamp = "1969-12-31T23:59:59.5Z".parse().unwrap();
        assert_eq!(rfc3339(t), "1969-12-31T23:59:59.500Z");
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
    fn the_kept_second_is_the_second_asked_for() {
        // Repeats, steps forward and back, and a day and a year boundary.
        for secs in [
            1_764_633_600u64,
            1_764_633_600,
            1_764_633_601,
            1_764_633_599,
            1_767_225_599,
            1_767_225_600,
            1_767_225_600,
            0,
        ] {
            let want = rfc3339(Timestamp::from_second(secs as i64).unwrap());
            let got = second_stamp(secs).unwrap();
            assert_eq!(std::str::from_utf8(&got).unwrap(), want, "{secs}");
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
