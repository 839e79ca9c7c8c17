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
//! | `c` call | parent → child | the point, `u32` LE, then a flags byte (bit 0: a core is free, wait for answers spinning) |
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
pub const VERSION: u32 = 1;

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
pub fn call_body(point: u32, spin: bool) -> [u8; 5] {
    let p = point.to_le_bytes();
    [p[0], p[1], p[2], p[3], u8::from(spin)]
}

/// The point of a call frame, and whether the child may spin for its answers.
pub fn decode_call(body: &[u8]) -> Result<(u32, bool), FrameError> {
    let b: [u8; 5] = body
        .try_into()
        .map_err(|_| FrameError::Malformed("bad call frame"))?;
    Ok((u32::from_le_bytes([b[0], b[1], b[2], b[3]]), b[4] & 1 != 0))
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
    fn call_frames_carry_the_point_and_the_spin_flag_and_nothing_else() {
        assert_eq!(decode_call(&call_body(7, true)).unwrap(), (7, true));
        assert_eq!(
            decode_call(&call_body(u32::MAX, false)).unwrap(),
            (u32::MAX, false)
        );
        // Only bit 0 is the flag; a 4-byte (or any other length) body is malformed.
        assert_eq!(decode_call(&[1, 0, 0, 0, 2]).unwrap(), (1, false));
        for body in [&[1u8, 0, 0, 0][..], &[1, 0, 0, 0, 1, 0][..], &[][..]] {
            assert!(matches!(decode_call(body), Err(FrameError::Malformed(_))));
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
