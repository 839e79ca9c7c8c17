//! The framed protocol between `wt` and an isolated hook process, over two pipes (the
//! child's stdin and its original stdout).
//!
//! It carries exactly what the FFI layer carries in-process — a point number, member names
//! and their JSON text, `call(op, arg)` services and their results, the hook's return —
//! so the JSON a hook sees is byte for byte the same on either side of the boundary.
//!
//! A frame is a tag byte, a little-endian `u32` body length, and the body:
//!
//! | tag | direction | body |
//! | --- | --- | --- |
//! | `H` ready | child → parent | JSON `{"protocol": 1, "sha256": "<library hash>"}` |
//! | `X` refused | child → parent | the refusal, one line |
//! | `c` call | parent → child | the point, `u32` LE, a flags byte (bit 0: a core is free, wait for answers spinning), then members sent ahead: for each, its index in [`AHEAD`] (a byte), `0` (absent) or `1` + `u32` LE length + JSON text |
//! | `G` get | child → parent | a member name |
//! | `m` member | parent → child | `0` (absent) or `1` + JSON text |
//! | `S` service | child → parent | op length `u32` LE, op, argument |
//! | `r` reply | parent → child | `0` + result, or `1` + error text |
//! | `R` return | child → parent | `0` + the hook's JSON (or empty), or `1` + error text |
//!
//! One child serves one hook instance, one call at a time; nothing in a frame names an
//! instance, a lane or a sweep, so running more instances (one per lane) is more children,
//! not a new protocol.
//!
//! Every frame from a child is hostile until checked: its tag must be one the parent expects
//! at that moment and its length at most [`CHILD_FRAME_LIMIT`], checked before a byte of the
//! body is read or allocated. This module only encodes and decodes; it never spawns, waits
//! or kills (see `parent`).

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// Version of this protocol, stated by the child in its ready frame.
pub const VERSION: u32 = 2;

/// The members a call frame may carry ahead of the child's asking, by index: the ones the
/// hook read at this point before. A hook that reads the trace and the score then costs one
/// round trip per call, not three (each a pair of process wakes on a machine without a
/// spare core).
pub const AHEAD: [&str; 13] = [
    windtunnel_sdk::member::SCENARIO,
    windtunnel_sdk::member::AGENT,
    windtunnel_sdk::member::RUN_ID,
    windtunnel_sdk::member::SESSION_ID,
    windtunnel_sdk::member::TRACE,
    windtunnel_sdk::member::SCORE,
    windtunnel_sdk::member::AGGREGATE,
    windtunnel_sdk::member::AGGREGATES,
    windtunnel_sdk::member::TURN_CALL,
    windtunnel_sdk::member::TURN_RESULT,
    windtunnel_sdk::member::TURN_CALL_FIELDS,
    windtunnel_sdk::member::TURN_RESULT_FIELDS,
    windtunnel_sdk::member::TURN_RESULT_TAIL,
];

/// The index of `name` in [`AHEAD`].
pub fn ahead_index(name: &str) -> Option<usize> {
    AHEAD.iter().position(|m| *m == name)
}

/// The largest frame a child may send: the host's artifact cap (16 MiB) plus 1 MiB for the
/// envelope (label, JSON framing). A frame over it means the child is broken or hostile:
/// the parent reads no further and kills it, so a 200 MB artifact never reaches the
/// parent's memory.
pub const CHILD_FRAME_LIMIT: usize = 17 << 20;

/// The largest frame a child accepts from its parent. The parent is trusted; this only
/// bounds what a corrupted pipe could make the child allocate.
pub const PARENT_FRAME_LIMIT: usize = 1 << 30;

/// Frame tags.
pub mod tag {
    pub const READY: u8 = b'H';
    pub const REFUSED: u8 = b'X';
    pub const CALL: u8 = b'c';
    pub const GET: u8 = b'G';
    pub const MEMBER: u8 = b'm';
    pub const SERVICE: u8 = b'S';
    pub const REPLY: u8 = b'r';
    pub const RETURN: u8 = b'R';
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("closed the pipe")]
    Eof,
    #[error("pipe error: {0}")]
    Io(#[from] io::Error),
    #[error("sent garbage on the pipe (frame tag {0:#04x})")]
    Garbage(u8),
    #[error("sent a frame of {len} bytes, over the {} MiB frame limit", limit >> 20)]
    Oversized { len: usize, limit: usize },
    #[error("sent a malformed frame: {0}")]
    Malformed(&'static str),
}

impl FrameError {
    /// Did the other side break the protocol (rather than go away)?
    pub fn is_violation(&self) -> bool {
        matches!(
            self,
            FrameError::Garbage(_) | FrameError::Oversized { .. } | FrameError::Malformed(_)
        )
    }
}

/// Writes one frame whose body is the concatenation of `parts`, in one `write` where it fits.
pub fn write_frame(
    w: &mut impl Write,
    tag: u8,
    parts: &[&[u8]],
    buf: &mut Vec<u8>,
) -> io::Result<()> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let len32 = u32::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame over 4 GiB"))?;
    buf.clear();
    buf.push(tag);
    buf.extend_from_slice(&len32.to_le_bytes());
    if len <= 64 << 10 {
        for p in parts {
            buf.extend_from_slice(p);
        }
        w.write_all(buf)?;
    } else {
        // Large bodies (a trace) go out without a copy.
        w.write_all(buf)?;
        for p in parts {
            w.write_all(p)?;
        }
    }
    w.flush()
}

/// Reads one frame into `body` and returns its tag. The tag must be in `expected` and the
/// length at most `limit`, both checked before the body is read.
pub fn read_frame(
    r: &mut impl Read,
    expected: &[u8],
    limit: usize,
    body: &mut Vec<u8>,
) -> Result<u8, FrameError> {
    let mut head = [0u8; 5];
    match r.read_exact(&mut head[..1]) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameError::Eof),
        Err(e) => return Err(e.into()),
    }
    if !expected.contains(&head[0]) {
        return Err(FrameError::Garbage(head[0]));
    }
    r.read_exact(&mut head[1..]).map_err(eof_is_malformed)?;
    let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if len > limit {
        return Err(FrameError::Oversized { len, limit });
    }
    body.clear();
    body.resize(len, 0);
    r.read_exact(body).map_err(eof_is_malformed)?;
    Ok(head[0])
}

fn eof_is_malformed(e: io::Error) -> FrameError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        FrameError::Malformed("truncated frame")
    } else {
        FrameError::Io(e)
    }
}

/// A pipe end that, for up to `spin`, polls before a read blocks. An answer a few
/// microseconds away then costs no sleep and no wake: on a virtual machine whose idle CPU
/// halts, each process wake-up over a pipe costs about 50 µs, against a few µs for the
/// answer itself. `spin` is zero unless the reader knows an answer is coming soon and a core
/// is free to wait for it.
pub struct Eager<R> {
    inner: R,
    pub spin: Duration,
}

impl<R> Eager<R> {
    pub fn new(inner: R) -> Self {
        Eager {
            inner,
            spin: Duration::ZERO,
        }
    }
}

impl<R: Read + AsFd> Read for Eager<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.spin.is_zero() {
            let until = Instant::now() + self.spin;
            let mut fd = libc::pollfd {
                fd: self.inner.as_fd().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            loop {
                // SAFETY: one valid `pollfd` for a descriptor this value owns; a zero timeout
                // never blocks.
                let ready = unsafe { libc::poll(&mut fd, 1, 0) };
                if ready != 0 || Instant::now() >= until {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        self.inner.read(buf)
    }
}

/// The body of a result frame (`r`, `R`): a status byte and the text.
pub fn result_parts(result: &Result<String, String>) -> [&[u8]; 2] {
    match result {
        Ok(v) => [b"\x00", v.as_bytes()],
        Err(e) => [b"\x01", e.as_bytes()],
    }
}

/// Decodes a result frame's body.
pub fn decode_result(body: &[u8]) -> Result<Result<String, String>, FrameError> {
    let (&status, text) = body
        .split_first()
        .ok_or(FrameError::Malformed("empty result"))?;
    let text = utf8(text)?;
    match status {
        0 => Ok(Ok(text)),
        1 => Ok(Err(text)),
        _ => Err(FrameError::Malformed("bad result status")),
    }
}

/// Decodes a member frame's body.
pub fn decode_member(body: &[u8]) -> Result<Option<String>, FrameError> {
    match body.split_first() {
        Some((0, [])) => Ok(None),
        Some((1, text)) => utf8(text).map(Some),
        _ => Err(FrameError::Malformed("bad member frame")),
    }
}

/// Splits a service frame's body into `(op, arg)`.
pub fn decode_service(body: &[u8]) -> Result<(String, String), FrameError> {
    let malformed = FrameError::Malformed("bad service frame");
    let (len, rest) = body.split_first_chunk::<4>().ok_or(malformed)?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() {
        return Err(FrameError::Malformed("bad service frame"));
    }
    let (op, arg) = rest.split_at(len);
    Ok((utf8(op)?, utf8(arg)?))
}

/// A call frame's body: the point, and whether the child may spin for its answers.
/// A call frame's body: the point, the flags, and the members sent ahead (index in
/// [`AHEAD`], value).
pub fn call_body(point: u32, spin: bool, ahead: &[(usize, Option<String>)], into: &mut Vec<u8>) {
    into.clear();
    into.extend_from_slice(&point.to_le_bytes());
    into.push(u8::from(spin));
    for (i, value) in ahead {
        into.push(*i as u8);
        match value {
            None => into.push(0),
            Some(json) => {
                into.push(1);
                into.extend_from_slice(&(json.len() as u32).to_le_bytes());
                into.extend_from_slice(json.as_bytes());
            }
        }
    }
}

/// A decoded call frame.
#[derive(Debug, PartialEq)]
pub struct CallFrame {
    pub point: u32,
    /// The child may spin for its answers.
    pub spin: bool,
    /// Members sent ahead, by index in [`AHEAD`]: `Some(value)` for each sent.
    pub ahead: [Option<Option<String>>; AHEAD.len()],
}

/// The point of a call frame, whether the child may spin for its answers, and the members
/// sent ahead.
pub fn decode_call(body: &[u8]) -> Result<CallFrame, FrameError> {
    let bad = || FrameError::Malformed("bad call frame");
    let head: [u8; 5] = body.get(..5).ok_or_else(bad)?.try_into().map_err(|_| bad())?;
    let mut frame = CallFrame {
        point: u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
        spin: head[4] & 1 != 0,
        ahead: Default::default(),
    };
    let mut rest = &body[5..];
    while let [i, present, tail @ ..] = rest {
        let slot = frame.ahead.get_mut(usize::from(*i)).ok_or_else(bad)?;
        match present {
            0 => {
                *slot = Some(None);
                rest = tail;
            }
            1 => {
                let len: [u8; 4] = tail.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?;
                let len = u32::from_le_bytes(len) as usize;
                let json = tail.get(4..4 + len).ok_or_else(bad)?;
                *slot = Some(Some(
                    String::from_utf8(json.to_vec()).map_err(|_| bad())?,
                ));
                rest = &tail[4 + len..];
            }
            _ => return Err(bad()),
        }
    }
    if !rest.is_empty() {
        return Err(bad());
    }
    Ok(frame)
}

pub fn utf8(bytes: &[u8]) -> Result<String, FrameError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| FrameError::Malformed("text is not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, parts: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, tag, parts, &mut Vec::new()).unwrap();
        out
    }

    #[test]
    fn call_frames_carry_the_point_the_spin_flag_and_the_members_sent_ahead() {
        let mut body = Vec::new();
        call_body(7, true, &[], &mut body);
        let f = decode_call(&body).unwrap();
        assert_eq!((f.point, f.spin), (7, true));
        assert!(f.ahead.iter().all(Option::is_none));
        let trace = "{\"run_id\":\"r é\"}".to_owned();
        call_body(u32::MAX, false, &[(4, Some(trace.clone())), (6, None)], &mut body);
        let f = decode_call(&body).unwrap();
        assert_eq!((f.point, f.spin), (u32::MAX, false));
        assert_eq!(f.ahead[4], Some(Some(trace)));
        assert_eq!(f.ahead[6], Some(None));
        assert_eq!(f.ahead[5], None);
        // Only bit 0 is the flag.
        assert!(!decode_call(&[1, 0, 0, 0, 2]).unwrap().spin);
        // Short, cut, out of range, unknown presence bytes and bad UTF-8 are malformed.
        for body in [
            &[1u8, 0, 0, 0][..],
            &[1, 0, 0, 0, 1, 0][..],
            &[][..],
            &[1, 0, 0, 0, 0, AHEAD.len() as u8, 0][..],
            &[1, 0, 0, 0, 0, 4, 2][..],
            &[1, 0, 0, 0, 0, 4, 1, 9, 0, 0, 0, b'x'][..],
            &[1, 0, 0, 0, 0, 4, 1, 1, 0, 0, 0, 0xff][..],
        ] {
            assert!(matches!(decode_call(body), Err(FrameError::Malformed(_))), "{body:?}");
        }
    }

    #[test]
    fn an_eager_reader_reads_what_is_there_and_waits_for_what_is_not() {
        let (mut r, mut w) = std::io::pipe().unwrap();
        w.write_all(b"ab").unwrap();
        let mut eager = Eager::new(&mut r);
        eager.spin = Duration::from_micros(200);
        let mut buf = [0u8; 4];
        assert_eq!(eager.read(&mut buf).unwrap(), 2);
        // Nothing ready: the spin runs out, then the read blocks until data comes.
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w.write_all(b"c").unwrap();
        });
        assert_eq!(eager.read(&mut buf).unwrap(), 1);
        assert_eq!(buf[0], b'c');
        writer.join().unwrap();
    }

    #[test]
    fn frames_round_trip_small_and_large() {
        let big = vec![b'x'; 100 << 10];
        for body in [&b"{\"a\":1}"[..], &big[..]] {
            let bytes = frame(tag::GET, &[body]);
            let mut buf = Vec::new();
            let t = read_frame(&mut &bytes[..], &[tag::GET], 1 << 20, &mut buf).unwrap();
            assert_eq!((t, &buf[..]), (tag::GET, body));
        }
        let bytes = frame(tag::SERVICE, &[&3u32.to_le_bytes(), b"op!", b"arg"]);
        let mut buf = Vec::new();
        read_frame(&mut &bytes[..], &[tag::SERVICE], 64, &mut buf).unwrap();
        assert_eq!(decode_service(&buf).unwrap(), ("op!".into(), "arg".into()));
        let r: Result<String, String> = Err("no".into());
        let bytes = frame(tag::RETURN, &result_parts(&r));
        read_frame(&mut &bytes[..], &[tag::RETURN], 64, &mut buf).unwrap();
        assert_eq!(decode_result(&buf).unwrap(), r);
    }

    #[test]
    fn unexpected_tags_oversized_and_truncated_frames_are_refused_before_the_body() {
        let mut buf = Vec::new();
        let garbage = b"garbage on the pipe";
        assert!(matches!(
            read_frame(&mut &garbage[..], &[tag::RETURN], 64, &mut buf),
            Err(FrameError::Garbage(b'g'))
        ));
        // The header claims 200 MB; only the header is there, and nothing is allocated.
        let mut huge = vec![tag::SERVICE];
        huge.extend_from_slice(&(200_000_000u32).to_le_bytes());
        let err =
            read_frame(&mut &huge[..], &[tag::SERVICE], CHILD_FRAME_LIMIT, &mut buf).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Oversized {
                len: 200_000_000,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "sent a frame of 200000000 bytes, over the 17 MiB frame limit"
        );
        assert!(buf.capacity() < 1 << 20);
        let truncated = &frame(tag::RETURN, &[b"\x00abc"])[..7];
        assert!(matches!(
            read_frame(&mut &truncated[..], &[tag::RETURN], 64, &mut buf),
            Err(FrameError::Malformed(_))
        ));
        assert!(matches!(
            read_frame(&mut &b""[..], &[tag::RETURN], 64, &mut buf),
            Err(FrameError::Eof)
        ));
        assert!(decode_service(&[9, 0, 0, 0, b'x']).is_err());
        assert!(decode_member(&[2]).is_err());
    }
}
