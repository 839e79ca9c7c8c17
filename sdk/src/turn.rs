//! Turn hooks and guards: an observation around every injected turn, and an explicit policy
//! channel that may deny a turn before it starts.
//!
//! A hook that defines [`Hook::turn_begin`] and [`Hook::turn_finish`] is a turn observer;
//! one that defines [`Hook::guard_check`] is a guard. For each turn, in activation order,
//! every guard checks and every observer begins — all before `TurnStarted` is published; a
//! denial stops the sequence. After the turn's terminal event is durable in the journal,
//! observers finish in reverse order; every begin that returned `Ok` gets exactly one
//! finish, also when a guard denied the turn. [`TurnCall`] and [`TurnResult`] are
//! snapshots: a hook cannot change the turn through them, nor extend its deadline.
//!
//! `#[hook]` refuses an impl that defines `turn_finish` without `turn_begin`: `wt` calls a
//! finish only for a begin that ran, so such a finish would never be called.
//!
//! # A turn observer
//!
//! `wt` writes no artifacts emitted at turn points: an observer keeps what it sees and
//! emits it once the run is over.
//!
//! ```
//! use std::time::Instant;
//! use windtunnel_sdk::{Context, Hook, Result, TurnCall, TurnResult, hook};
//!
//! /// Times every turn; one artifact per run with every turn's time.
//! #[derive(Default)]
//! pub struct TurnTimer {
//!     started: Option<Instant>,
//!     turns: Vec<serde_json::Value>,
//! }
//!
//! #[hook]
//! impl Hook for TurnTimer {
//!     const NAME: &'static str = "turn_timer";
//!
//!     fn turn_begin(&mut self, _call: &TurnCall, _ctx: &Context<'_>) -> Result {
//!         self.started = Some(Instant::now());
//!         Ok(())
//!     }
//!
//!     fn turn_finish(&mut self, result: &TurnResult, _ctx: &Context<'_>) -> Result {
//!         let ms = self.started.take().map(|t| t.elapsed().as_millis());
//!         let turn = result.call.turn;
//!         self.turns.push(serde_json::json!({"turn": turn, "outcome": result.outcome, "ms": ms}));
//!         Ok(())
//!     }
//!
//!     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
//!         let turns = std::mem::take(&mut self.turns);
//!         ctx.emit_artifact(&serde_json::json!({"turns": turns}), Some("turns"))
//!     }
//! }
//!
//! # use windtunnel_sdk::testing::{HookTester, Sweep};
//! let log = HookTester::<TurnTimer>::new().run_sweep(&Sweep::demo());
//! assert_eq!(log.points(), ["turn_begin", "turn_finish", "on_run_end"]);
//! assert_eq!(log.artifacts()[0].payload["turns"][0]["outcome"], "Done");
//! ```
//!
//! # A guard
//!
//! ```
//! use windtunnel_sdk::{Context, GuardDecision, Hook, Result, TurnCall, hook};
//!
//! /// Denies any turn that pastes what looks like a card number.
//! #[derive(Default)]
//! pub struct NoCardNumbers;
//!
//! #[hook]
//! impl Hook for NoCardNumbers {
//!     const NAME: &'static str = "no_card_numbers";
//!
//!     fn guard_check(&mut self, call: &TurnCall, _ctx: &Context<'_>) -> Result<GuardDecision> {
//!         let digits = call.input.chars().filter(char::is_ascii_digit).count();
//!         Ok(if digits >= 13 {
//!             GuardDecision::deny("card_number", "the turn contains a card number")
//!         } else {
//!             GuardDecision::Allow
//!         })
//!     }
//! }
//!
//! # use windtunnel_sdk::testing::{HookTester, TestContext};
//! let mut tester = HookTester::<NoCardNumbers>::new();
//! let ctx = TestContext::new();
//! let card = TurnCall::new("run-1", 0, "my card is 4111 1111 1111 1111");
//! assert_eq!(
//!     tester.guard_check(&card, &ctx).unwrap(),
//!     GuardDecision::deny("card_number", "the turn contains a card number")
//! );
//! let fine = TurnCall::new("run-1", 1, "thanks");
//! assert_eq!(tester.guard_check(&fine, &ctx).unwrap(), GuardDecision::Allow);
//! ```
//!
//! A guard makes `wt run` require `--policy-revision`, which is stamped into every trace.
//!
//! [`Hook::turn_begin`]: crate::Hook::turn_begin
//! [`Hook::turn_finish`]: crate::Hook::turn_finish
//! [`Hook::guard_check`]: crate::Hook::guard_check

use serde::{Deserialize, Serialize};

/// What set a turn off.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// One of the scenario's turns.
    #[default]
    Scenario,
    /// A hook's `ctx.converse()`.
    Converse {
        /// The hook that conversed.
        hook: String,
    },
    /// A cause this SDK does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

/// A turn about to start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnCall {
    /// The sweep (`wt run` invocation).
    pub sweep_id: String,
    /// The scenario.
    pub scenario_id: String,
    /// The run.
    pub run_id: String,
    /// The agent session.
    pub session_id: String,
    /// The agent's label.
    pub agent: String,
    /// 0-based index of the turn within its run.
    pub turn: u32,
    /// The text to be injected.
    pub input: String,
    /// RFC 3339 time the turn was called.
    pub started_at: String,
    /// What set it off.
    pub cause: Cause,
}

impl TurnCall {
    /// Turn `turn` of run `run_id` with this input, caused by the scenario; the other ids
    /// are empty.
    pub fn new(run_id: impl Into<String>, turn: u32, input: impl Into<String>) -> Self {
        TurnCall {
            run_id: run_id.into(),
            turn,
            input: input.into(),
            ..TurnCall::default()
        }
    }
}

/// How a turn ended, as hook telemetry. The event journal keeps its own exact terminal set
/// (`TurnDone`, `TurnFailed`, `TurnInterrupted`); a denied turn has none, as it never
/// started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Outcome {
    /// The agent replied.
    Done,
    /// The turn ended with an error.
    Failed,
    /// The turn was cut short (deadline, Ctrl-C).
    Interrupted,
    /// A guard denied it; it never started.
    Denied,
    /// An outcome this SDK does not know (from a newer `wt`).
    #[serde(other)]
    Unknown,
}

/// A turn that ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TurnResult {
    /// The call it answers.
    pub call: TurnCall,
    /// RFC 3339 end time.
    pub ended_at: String,
    /// How it ended.
    pub outcome: Outcome,
    /// The error, for failed, interrupted and denied turns.
    pub error: Option<String>,
    /// What kind of error `error` is (timeout, transport, protocol, agent, interrupted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<crate::model::TurnErrorKind>,
    /// The guard's denial, when the outcome is `Denied`: which guard, its code and message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<crate::model::Denial>,
}

impl TurnResult {
    /// The result of `call` with this outcome, no error and no end time.
    pub fn new(call: TurnCall, outcome: Outcome) -> Self {
        TurnResult {
            call,
            ended_at: String::new(),
            outcome,
            error: None,
            error_kind: None,
            denial: None,
        }
    }
}

/// A guard's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum GuardDecision {
    /// The turn may start.
    Allow,
    /// The turn must not start.
    Deny {
        /// Machine-readable reason (`no_refunds`).
        code: String,
        /// Why, for people.
        message: String,
    },
}

impl GuardDecision {
    /// A denial with a machine-readable code and a message for people.
    pub fn deny(code: impl Into<String>, message: impl Into<String>) -> Self {
        GuardDecision::Deny {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// Turn snapshot ids (since 1.5): at turn points, `wt` may pass a plugin built against SDK
/// 1.5 or later its point number with a turn snapshot id in the bits above the low 8
/// (`point | id << 8`, `id` nonzero). Calls with the same id are about the same turn, byte
/// for byte: a library's hooks called about one turn read it from the host once. Plugins
/// built against older SDKs never get the bits.
#[doc(hidden)]
pub mod ids {
    /// The bits of the point value below the id.
    pub const SHIFT: u32 = 8;
    /// The largest id (ids wrap to "none" past it, never to a used one).
    pub const MAX: u32 = u32::MAX >> SHIFT;

    /// `point` with turn snapshot `id`.
    pub const fn with(point: u32, id: u32) -> u32 {
        point | (id << SHIFT)
    }

    /// The point and the turn snapshot id (0: none) of a value `on_event` got.
    pub const fn split(value: u32) -> (u32, u32) {
        (value & ((1 << SHIFT) - 1), value >> SHIFT)
    }
}

/// The compact form in which `wt` hands turn snapshots to plugins (since 1.5): a hook's
/// `turn_begin`, `turn_finish` or `guard_check` reads its [`TurnCall`] or [`TurnResult`]
/// with a copy per field instead of a JSON parse per hook, so a turn observer's cost is the
/// call, not reading its argument. The JSON members
/// ([`member::TURN_CALL`](crate::member::TURN_CALL), …) are still served, for plugins built
/// against older SDKs and for hooks that read them raw.
///
/// The form: `1` (its version), the number of fields as 2 hex digits, each field's byte
/// length as 8 hex digits, then the fields' bytes one after another. An optional field is
/// `-` (absent) or `+` followed by the value. Fields a newer `wt` appends are ignored.
///
/// A result's *tail* (since 1.5, [`member::TURN_RESULT_TAIL`](crate::member::TURN_RESULT_TAIL))
/// is the same form with the id of the begin's call snapshot (8 hex digits) and the result's
/// own fields: a plugin that still holds that call reads five fields at a finish, not fifteen.
#[doc(hidden)]
pub mod fields {
    use super::{Cause, Outcome, TurnCall, TurnResult};
    use crate::model::TurnErrorKind;

    const CALL_FIELDS: usize = 10;
    const RESULT_FIELDS: usize = CALL_FIELDS + 5;
    const HEX: &[u8; 16] = b"0123456789abcdef";

    /// Fields being written: their lengths go into the header, their bytes after it.
    struct Writer<'a> {
        fields: [&'a str; RESULT_FIELDS],
        n: usize,
    }

    impl<'a> Writer<'a> {
        fn new() -> Self {
            Writer {
                fields: [""; RESULT_FIELDS],
                n: 0,
            }
        }

        fn put(&mut self, field: &'a str) {
            self.fields[self.n] = field;
            self.n += 1;
        }

        fn finish(&self) -> String {
            let fields = &self.fields[..self.n];
            let body: usize = fields.iter().map(|f| f.len()).sum();
            let mut head = [b'0'; 3 + 8 * RESULT_FIELDS];
            head[0] = b'1';
            put_hex(&mut head[1..3], self.n as u32);
            for (i, f) in fields.iter().enumerate() {
                // A field longer than 4 GiB is not a turn `wt` hands over.
                let len = u32::try_from(f.len()).unwrap_or(u32::MAX);
                head[3 + 8 * i..11 + 8 * i].copy_from_slice(&hex8(len));
            }
            let head = &head[..3 + 8 * fields.len()];
            let mut out = String::with_capacity(head.len() + body);
            // The header is ASCII hex digits.
            out.push_str(std::str::from_utf8(head).unwrap_or_default());
            for f in fields {
                out.push_str(f);
            }
            out
        }
    }

    /// `n` as 8 lowercase hex digits, all at once: each nibble spread into a byte of its own,
    /// then `'0'` added, and `'a' - '0' - 10` more where the nibble is 10 or above.
    fn hex8(n: u32) -> [u8; 8] {
        let mut x = u64::from(n);
        x = ((x & 0xffff_0000) << 16) | (x & 0xffff);
        x = ((x & 0x0000_ff00_0000_ff00) << 8) | (x & 0x0000_00ff_0000_00ff);
        x = ((x & 0x00f0_00f0_00f0_00f0) << 4) | (x & 0x000f_000f_000f_000f);
        let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        (x + 0x3030_3030_3030_3030 + letters * 39).to_be_bytes()
    }

    /// The value of 8 lowercase hex digits, or `None` when they are not: each byte's digit
    /// value taken at once, the nibbles packed, and the result checked by writing it back.
    fn unhex8(bytes: &[u8]) -> Option<u32> {
        let digits: [u8; 8] = bytes.try_into().ok()?;
        let x = u64::from_be_bytes(digits);
        // '0'..'9' keep their low nibble; 'a'..'f' (0x61..0x66) add 9 to theirs.
        let mut v = (x & 0x0f0f_0f0f_0f0f_0f0f) + 9 * ((x >> 6) & 0x0101_0101_0101_0101);
        v = ((v >> 4) | v) & 0x00ff_00ff_00ff_00ff;
        v = ((v >> 8) | v) & 0x0000_ffff_0000_ffff;
        v = ((v >> 16) | v) & 0x0000_0000_ffff_ffff;
        let n = v as u32;
        (hex8(n) == digits).then_some(n)
    }

    /// Writes `n` as lowercase hex digits filling `into`.
    fn put_hex(into: &mut [u8], mut n: u32) {
        for b in into.iter_mut().rev() {
            *b = HEX[(n & 0xf) as usize];
            n >>= 4;
        }
    }

    fn put_call<'a>(w: &mut Writer<'a>, c: &'a TurnCall, turn: &'a str) {
        w.put(&c.sweep_id);
        w.put(&c.scenario_id);
        w.put(&c.run_id);
        w.put(&c.session_id);
        w.put(&c.agent);
        w.put(turn);
        w.put(&c.input);
        w.put(&c.started_at);
        match &c.cause {
            Cause::Scenario => {
                w.put("scenario");
                w.put("");
            }
            Cause::Converse { hook } => {
                w.put("converse");
                w.put(hook);
            }
            Cause::Unknown => {
                w.put("unknown");
                w.put("");
            }
        }
    }

    /// `n` in decimal, in `buf`.
    fn decimal(n: u32, buf: &mut [u8; 10]) -> &str {
        let mut at = buf.len();
        let mut n = n;
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        std::str::from_utf8(&buf[at..]).unwrap_or_default()
    }

    /// `call`, encoded.
    pub fn call(call: &TurnCall) -> String {
        let mut buf = [0u8; 10];
        let turn = decimal(call.turn, &mut buf);
        let mut w = Writer::new();
        put_call(&mut w, call, turn);
        w.finish()
    }

    /// A result's own optional fields, written as the form writes them (`-` or `+value`).
    struct Own {
        error: Option<String>,
        kind: Option<String>,
        denial: Option<String>,
    }

    impl Own {
        fn of(result: &TurnResult) -> Own {
            Own {
                error: result.error.as_deref().map(|e| format!("+{e}")),
                kind: result.error_kind.map(|k| format!("+{}", k.as_str())),
                denial: result
                    .denial
                    .as_ref()
                    .and_then(|d| serde_json::to_string(d).ok())
                    .map(|d| format!("+{d}")),
            }
        }

        fn put<'a>(&'a self, w: &mut Writer<'a>, result: &'a TurnResult) {
            w.put(&result.ended_at);
            w.put(outcome_name(result.outcome));
            w.put(self.error.as_deref().unwrap_or("-"));
            w.put(self.kind.as_deref().unwrap_or("-"));
            w.put(self.denial.as_deref().unwrap_or("-"));
        }
    }

    /// `result`, encoded: its call's fields, then its own.
    pub fn result(result: &TurnResult) -> String {
        let mut buf = [0u8; 10];
        let turn = decimal(result.call.turn, &mut buf);
        let own = Own::of(result);
        let mut w = Writer::new();
        put_call(&mut w, &result.call, turn);
        own.put(&mut w, result);
        w.finish()
    }

    /// `result`'s tail: the id its call was served under (`call_id`), then its own fields.
    pub fn tail(result: &TurnResult, call_id: u32) -> String {
        let id = hex8(call_id);
        let own = Own::of(result);
        let mut w = Writer::new();
        w.put(std::str::from_utf8(&id).unwrap_or_default());
        own.put(&mut w, result);
        w.finish()
    }

    fn outcome_name(o: Outcome) -> &'static str {
        match o {
            Outcome::Done => "Done",
            Outcome::Failed => "Failed",
            Outcome::Interrupted => "Interrupted",
            Outcome::Denied => "Denied",
            Outcome::Unknown => "Unknown",
        }
    }

    fn outcome_of(name: &str) -> Outcome {
        match name {
            "Done" => Outcome::Done,
            "Failed" => Outcome::Failed,
            "Interrupted" => Outcome::Interrupted,
            "Denied" => Outcome::Denied,
            _ => Outcome::Unknown,
        }
    }

    fn kind_of(name: &str) -> TurnErrorKind {
        match name {
            "timeout" => TurnErrorKind::Timeout,
            "transport" => TurnErrorKind::Transport,
            "protocol" => TurnErrorKind::Protocol,
            "agent" => TurnErrorKind::Agent,
            "interrupted" => TurnErrorKind::Interrupted,
            _ => TurnErrorKind::Unknown,
        }
    }

    /// The value of each byte as a hex digit, or 0xff.
    const DIGIT: [u8; 256] = {
        let mut t = [0xffu8; 256];
        let mut i = 0;
        while i < 16 {
            t[HEX[i] as usize] = i as u8;
            i += 1;
        }
        t
    };

    fn hex(bytes: &[u8]) -> Option<usize> {
        let mut n = 0usize;
        let mut bad = 0u8;
        for &b in bytes {
            let d = DIGIT[usize::from(b)];
            bad |= d;
            n = n << 4 | usize::from(d & 0xf);
        }
        (bad & 0xf0 == 0).then_some(n)
    }

    /// The first `want` fields of `text`, or `None` when it is not this form or has fewer.
    fn split<const N: usize>(text: &str) -> Option<[&str; N]> {
        let b = text.as_bytes();
        if b.first() != Some(&b'1') {
            return None;
        }
        let count = hex(b.get(1..3)?)?;
        if count < N {
            return None;
        }
        let mut at = 3 + 8 * count;
        let mut out = [""; N];
        for (i, slot) in out.iter_mut().enumerate() {
            let len = unhex8(b.get(3 + 8 * i..11 + 8 * i)?)? as usize;
            *slot = text.get(at..at.checked_add(len)?)?;
            at += len;
        }
        Some(out)
    }

    const BAD: &str = "turn fields: not the compact form this SDK reads";

    fn set(into: &mut String, value: &str) {
        if into != value {
            into.clear();
            into.push_str(value);
        }
    }

    fn read_call(f: &[&str], into: &mut TurnCall) -> Result<(), String> {
        set(&mut into.sweep_id, f[0]);
        set(&mut into.scenario_id, f[1]);
        set(&mut into.run_id, f[2]);
        set(&mut into.session_id, f[3]);
        set(&mut into.agent, f[4]);
        into.turn = f[5].parse().map_err(|_| BAD.to_owned())?;
        set(&mut into.input, f[6]);
        set(&mut into.started_at, f[7]);
        match (f[8], &mut into.cause) {
            ("scenario", c) => *c = Cause::Scenario,
            ("converse", Cause::Converse { hook }) => set(hook, f[9]),
            ("converse", c) => {
                *c = Cause::Converse {
                    hook: f[9].to_owned(),
                }
            }
            (_, c) => *c = Cause::Unknown,
        }
        Ok(())
    }

    fn opt(field: &str) -> Result<Option<&str>, String> {
        match field.as_bytes().first() {
            Some(b'-') if field.len() == 1 => Ok(None),
            Some(b'+') => Ok(Some(&field[1..])),
            _ => Err(BAD.to_owned()),
        }
    }

    /// Decodes a call into `into`, reusing its strings' buffers.
    pub fn read_call_into(text: &str, into: &mut TurnCall) -> Result<(), String> {
        let f = split::<CALL_FIELDS>(text).ok_or(BAD)?;
        read_call(&f, into)
    }

    /// A result's own fields (`f`: ended_at, outcome, error, kind, denial) into `into`.
    fn read_own(f: &[&str], into: &mut TurnResult) -> Result<(), String> {
        set(&mut into.ended_at, f[0]);
        into.outcome = outcome_of(f[1]);
        match (opt(f[2])?, &mut into.error) {
            (None, e) => *e = None,
            (Some(v), Some(e)) => set(e, v),
            (Some(v), e) => *e = Some(v.to_owned()),
        }
        into.error_kind = opt(f[3])?.map(kind_of);
        into.denial = match opt(f[4])? {
            None => None,
            Some(json) => {
                Some(serde_json::from_str(json).map_err(|e| format!("turn fields: denial: {e}"))?)
            }
        };
        Ok(())
    }

    /// Decodes a result into `into`, reusing its strings' buffers.
    pub fn read_result_into(text: &str, into: &mut TurnResult) -> Result<(), String> {
        let f = split::<RESULT_FIELDS>(text).ok_or(BAD)?;
        read_call(&f, &mut into.call)?;
        read_own(&f[CALL_FIELDS..], into)
    }

    /// The id of the call snapshot a tail goes with.
    pub fn tail_call_id(text: &str) -> Result<u32, String> {
        let f = split::<1>(text).ok_or(BAD)?;
        unhex8(f[0].as_bytes()).ok_or_else(|| BAD.to_owned())
    }

    /// Decodes a tail's own fields into `into`, leaving its call as it is: the caller holds
    /// the call the tail names ([`tail_call_id`]) in `into.call`.
    pub fn read_tail_into(text: &str, into: &mut TurnResult) -> Result<(), String> {
        let f = split::<6>(text).ok_or(BAD)?;
        read_own(&f[1..], into)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn lengths_are_written_and_read_as_eight_hex_digits_and_nothing_else_is_read() {
            let mut samples = vec![
                0,
                1,
                9,
                10,
                15,
                16,
                0x9a,
                0xabcd_ef12,
                0x1234_5678,
                u32::MAX,
            ];
            samples.extend(
                (0..32)
                    .map(|i| 1u32 << (i % 32))
                    .chain((0..16).map(|d| d * 0x1111_1111)),
            );
            for n in samples {
                let text = format!("{n:08x}");
                assert_eq!(hex8(n), text.as_bytes(), "{n:#x}");
                assert_eq!(unhex8(text.as_bytes()), Some(n), "{text}");
            }
            for bad in [
                "0000000A",
                "0000000g",
                "000000/0",
                "0000000:",
                "0000000`",
                "0000 000",
                "+0000000",
                "0000000\u{0}",
                "00000000f",
                "0000000",
            ] {
                assert_eq!(unhex8(bad.as_bytes()), None, "{bad:?}");
            }
            // Every single byte in every place: only the 16 lowercase digits read.
            for place in 0..8 {
                for b in 0..=255u8 {
                    let mut digits = *b"00000000";
                    digits[place] = b;
                    let want = HEX
                        .iter()
                        .position(|&h| h == b)
                        .map(|d| (d as u32) << (4 * (7 - place)));
                    assert_eq!(unhex8(&digits), want, "byte {b:#x} at {place}");
                }
            }
        }

        #[test]
        fn calls_and_results_round_trip_whatever_their_text() {
            let mut call = TurnCall::new("run-1", 3, "a:b\n12:x, é 🚀 \u{202e}");
            call.sweep_id = "sweep".into();
            call.scenario_id = "order-status".into();
            call.session_id = "s-1".into();
            call.agent = "demo".into();
            call.started_at = "2026-12-01T00:00:00Z".into();
            call.cause = Cause::Converse {
                hook: "debrief".into(),
            };
            let mut back = TurnCall::default();
            read_call_into(&super::call(&call), &mut back).unwrap();
            assert_eq!(back, call);

            let mut result = TurnResult::new(call.clone(), Outcome::Denied);
            result.ended_at = "2026-12-01T00:00:01Z".into();
            result.error = Some(String::new());
            result.error_kind = Some(TurnErrorKind::Timeout);
            let mut denial = crate::model::Denial::default();
            denial.guard = "g".into();
            denial.code = "no".into();
            result.denial = Some(denial);
            let mut into = TurnResult::new(TurnCall::default(), Outcome::Done);
            into.error = Some("old text".into());
            read_result_into(&super::result(&result), &mut into).unwrap();
            assert_eq!(into, result);
            // Absent fields read back absent, over a result that had them.
            let plain = TurnResult::new(call, Outcome::Done);
            read_result_into(&super::result(&plain), &mut into).unwrap();
            assert_eq!(into, plain);
        }

        #[test]
        fn a_tail_names_its_call_and_reads_back_only_the_results_own_fields() {
            let call = TurnCall::new("run-1", 2, "kept");
            let mut result = TurnResult::new(call.clone(), Outcome::Failed);
            result.ended_at = "2026-12-02T00:00:01.000Z".into();
            result.error = Some("agent said no \u{202e}".into());
            result.error_kind = Some(TurnErrorKind::Agent);
            for id in [1, 0x9a, 0xab_cdef, super::super::ids::MAX] {
                let text = tail(&result, id);
                assert_eq!(tail_call_id(&text), Ok(id));
                // The call stays whatever the reader holds: only the own fields change.
                let mut into = TurnResult::new(call.clone(), Outcome::Done);
                into.denial = Some(crate::model::Denial::default());
                read_tail_into(&text, &mut into).unwrap();
                assert_eq!(into, result);
            }
            // A tail is not a full result, nor a call: each reader refuses the other's form.
            let text = tail(&result, 7);
            assert!(read_result_into(&text, &mut result.clone()).is_err());
            assert!(read_call_into(&text, &mut TurnCall::default()).is_err());
            assert!(tail_call_id(&super::call(&call)).is_err());
            for cut in (0..text.len()).filter(|&c| text.is_char_boundary(c)) {
                assert!(
                    read_tail_into(&text[..cut], &mut result.clone()).is_err(),
                    "{cut}"
                );
            }
        }

        #[test]
        fn a_malformed_form_is_an_error_never_a_panic() {
            let good = super::call(&TurnCall::new("r", 0, "é"));
            let mut into = TurnCall::default();
            for cut in 0..good.len() {
                if good.is_char_boundary(cut) {
                    assert!(read_call_into(&good[..cut], &mut into).is_err(), "{cut}");
                }
            }
            // A length that splits a character, a bad digit, too few fields.
            let split_char = good.replacen("00000002", "00000001", 1);
            for bad in [
                "",
                "x",
                "10a",
                "2",
                &split_char,
                &good.replacen('1', "2", 1),
            ] {
                assert!(read_call_into(bad, &mut into).is_err(), "{bad}");
            }
            // A result is not a call's form, nor a call a result's.
            let mut result = TurnResult::new(TurnCall::default(), Outcome::Done);
            assert!(read_result_into(&good, &mut result).is_err());
        }

        #[test]
        fn fields_a_newer_wt_appends_are_ignored() {
            let call = TurnCall::new("r", 7, "hello");
            let good = super::call(&call);
            // Eleven fields: the count, one more length, one more field.
            let newer = format!("1{:02x}{}{:08x}{}new", 11, &good[3..83], 3, &good[83..]);
            let mut into = TurnCall::default();
            read_call_into(&newer, &mut into).unwrap();
            assert_eq!(into, call);
        }
    }
}
