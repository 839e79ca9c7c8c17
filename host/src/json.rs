//! JSON written byte for byte as serde_json writes it, compact or pretty, at less cost.
//!
//! A sweep writes a pretty trace, a pretty score and six compact journal lines per run, and
//! serde_json's writer was the largest part of a run's own work: it looks at every byte of
//! every key and string through a table, one at a time, and writes each level of indentation
//! as its own call. This writer looks at eight bytes at a time (sixteen on x86-64) for one
//! that needs escaping and writes what serde_json writes; numbers with a fraction (a few a
//! run) it has serde_json write, so they come from the same formatter. What it does not
//! handle itself (map keys that are not strings, byte strings, serde_json's raw values, a
//! serializer error, elements after a sequence or map said it was empty) it hands back: the
//! document is then written again by serde_json, so the output, and any error, are always
//! serde_json's own. Tests compare the two on every form of serde's data model, thousands of
//! generated documents and every byte that needs escaping at every offset.

use serde::ser::{self, Serialize};

/// Appends `value` to `out` as `serde_json::to_writer` would.
pub(crate) fn to_vec<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<()> {
    write::<T, false>(out, value, 0)
}

/// Appends `value` to `out` as `serde_json::to_writer_pretty` would.
pub(crate) fn to_vec_pretty<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
) -> serde_json::Result<()> {
    write::<T, true>(out, value, 0)
}

/// Appends `value` as it reads nested `depth` levels deep in a pretty document: the pretty
/// rendering with every newline followed by `depth` more levels of indentation.
pub(crate) fn to_vec_pretty_at<T: Serialize + ?Sized>(
    out: &mut Vec<u8>,
    value: &T,
    depth: usize,
) -> serde_json::Result<()> {
    write::<T, true>(out, value, depth)
}

fn write<T: Serialize + ?Sized, const PRETTY: bool>(
    out: &mut Vec<u8>,
    value: &T,
    depth: usize,
) -> serde_json::Result<()> {
    let start = out.len();
    let mut w = Writer::<PRETTY> { out, depth };
    if value.serialize(&mut w).is_ok() {
        return Ok(());
    }
    out.truncate(start);
    if PRETTY {
        let mut text = Vec::new();
        serde_json::to_writer_pretty(&mut text, value)?;
        push_nested(out, &text, depth);
        Ok(())
    } else {
        let written = serde_json::to_writer(&mut *out, value);
        if written.is_err() {
            // Nothing of a document that failed is left behind.
            out.truncate(start);
        }
        written
    }
}

/// `text` with `depth` levels of indentation after each of its newlines.
fn push_nested(out: &mut Vec<u8>, text: &[u8], depth: usize) {
    let mut lines = text.split(|&b| b == b'\n');
    if let Some(first) = lines.next() {
        out.extend_from_slice(first);
    }
    for line in lines {
        out.push(b'\n');
        indent(out, depth);
        out.extend_from_slice(line);
    }
}

const SPACES: &[u8; 64] = b"                                                                ";

fn indent(out: &mut Vec<u8>, depth: usize) {
    let mut n = depth * 2;
    while n > SPACES.len() {
        out.extend_from_slice(SPACES);
        n -= SPACES.len();
    }
    out.extend_from_slice(&SPACES[..n]);
}

/// Appends `s` as a JSON string, escaped as serde_json escapes it: `"` and `\` with a
/// backslash, the control characters below U+0020 as `\b \t \n \f \r` or `\u00xx`, nothing
/// else.
pub(crate) fn push_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    if clean(bytes) {
        out.extend_from_slice(bytes);
    } else {
        push_escaped(out, bytes);
    }
    out.push(b'"');
}

/// Whether no byte of `bytes` needs escaping, looked at eight bytes at a time.
#[inline]
fn clean(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The bytes of a word that need escaping have their high bit set here (and, past the
    // first such byte, maybe others): exact for the word as a whole.
    let marks = |x: u64| {
        let below = |x: u64, n: u8| x.wrapping_sub(ONES * u64::from(n)) & !x;
        (below(x, 0x20)
            | below(x ^ (ONES * u64::from(b'"')), 1)
            | below(x ^ (ONES * u64::from(b'\\')), 1))
            & HIGHS
    };
    let word = |at: usize| u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("eight bytes"));
    let n = bytes.len();
    #[cfg(target_arch = "x86_64")]
    if n >= 16 {
        // SAFETY: SSE2 is part of every x86-64 target's baseline.
        return unsafe { clean_sse2(bytes) };
    }
    if n >= 8 {
        // Whole words, then the last eight bytes (which may overlap the last word).
        let mut at = 0;
        while at + 8 < n {
            if marks(word(at)) != 0 {
                return false;
            }
            at += 8;
        }
        return marks(word(n - 8)) == 0;
    }
    // Fewer than eight: the first and the last bytes (overlapping) in a word of letters.
    let mut padded = [b'a'; 8];
    match n {
        0 => return true,
        1 => padded[0] = bytes[0],
        2 | 3 => {
            padded[..2].copy_from_slice(&bytes[..2]);
            padded[4..6].copy_from_slice(&bytes[n - 2..]);
        }
        _ => {
            padded[..4].copy_from_slice(&bytes[..4]);
            padded[4..].copy_from_slice(&bytes[n - 4..]);
        }
    }
    marks(u64::from_ne_bytes(padded)) == 0
}

/// [`clean`] of sixteen bytes or more, sixteen at a time (SSE2, which every x86-64 has):
/// per sixteen bytes three compares and a mask, where the word-wise test takes a dozen
/// operations per eight.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
fn clean_sse2(bytes: &[u8]) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128, _mm_set_epi64x,
        _mm_set1_epi8,
    };
    let half = |at: usize| {
        let b: [u8; 8] = bytes[at..at + 8].try_into().expect("eight bytes");
        i64::from_le_bytes(b)
    };
    let lane = |at: usize| _mm_set_epi64x(half(at + 8), half(at));
    let quote = _mm_set1_epi8(b'"' as i8);
    let backslash = _mm_set1_epi8(b'\\' as i8);
    let control = _mm_set1_epi8(0x1f);
    // Whether any byte of `v` is `"`, `\` or at most 0x1f (unsigned: the minimum of it and
    // 0x1f is itself).
    let marked = |v: __m128i| {
        let quoted = _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash));
        let low = _mm_cmpeq_epi8(_mm_min_epu8(v, control), v);
        _mm_movemask_epi8(_mm_or_si128(quoted, low)) != 0
    };
    let n = bytes.len();
    // Whole lanes, then the last sixteen bytes (which may overlap the last lane).
    let mut at = 0;
    while at + 16 < n {
        if marked(lane(at)) {
            return false;
        }
        at += 16;
    }
    !marked(lane(n - 16))
}

/// `bytes` with what needs escaping escaped, a byte at a time.
#[cold]
#[inline(never)]
fn push_escaped(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut clean = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if ESCAPE[usize::from(b)] != 0 {
            escape(out, &bytes[clean..i], b);
            clean = i + 1;
        }
    }
    out.extend_from_slice(&bytes[clean..]);
}

/// Appends the clean bytes before `b`, then `b` escaped.
fn escape(out: &mut Vec<u8>, clean: &[u8], b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.extend_from_slice(clean);
    match ESCAPE[usize::from(b)] {
        b'u' => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 0xF)],
        ]),
        e => out.extend_from_slice(&[b'\\', e]),
    }
}

/// For each byte, 0 if it is written as it is, else the letter after its backslash (`u` for
/// a `\u00xx` escape).
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0A] = b'n';
    table[0x0C] = b'f';
    table[0x0D] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// This writer does not handle what it was asked to write: serde_json writes it instead.
#[derive(Debug)]
struct Unhandled;

impl std::fmt::Display for Unhandled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("left to serde_json")
    }
}

impl std::error::Error for Unhandled {}

impl ser::Error for Unhandled {
    fn custom<T: std::fmt::Display>(_: T) -> Self {
        Unhandled
    }
}

type Result<T = ()> = std::result::Result<T, Unhandled>;

struct Writer<'a, const PRETTY: bool> {
    out: &'a mut Vec<u8>,
    /// Levels of indentation (pretty only).
    depth: usize,
}

impl<const PRETTY: bool> Writer<'_, PRETTY> {
    fn open(&mut self, bracket: u8) {
        self.depth += 1;
        self.out.push(bracket);
    }

    /// Before an element or a key: the separator, then (pretty) a new line.
    fn item(&mut self, first: bool) {
        if !first {
            self.out.push(b',');
        }
        if PRETTY {
            self.out.push(b'\n');
            indent(self.out, self.depth);
        }
    }

    fn colon(&mut self) {
        self.out
            .extend_from_slice(if PRETTY { b": " } else { b":" });
    }

    fn close(&mut self, bracket: u8, had_items: bool) {
        self.depth -= 1;
        if PRETTY && had_items {
            self.out.push(b'\n');
            indent(self.out, self.depth);
        }
        self.out.push(bracket);
    }

    fn integer(&mut self, v: impl itoa::Integer) {
        self.out
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }

    /// Opens the `{"variant": ` that wraps a variant with content.
    fn variant(&mut self, variant: &str) {
        self.open(b'{');
        self.item(true);
        push_str(self.out, variant);
        self.colon();
    }
}

/// A sequence or map being written: `first` until its first element, `closed` when it said
/// it was empty (and so was closed when it was opened).
struct Compound<'w, 'a, const PRETTY: bool> {
    w: &'w mut Writer<'a, PRETTY>,
    first: bool,
    closed: bool,
    /// Wrapped in `{"variant": …}`, closed after the content.
    in_variant: bool,
}

impl<'w, 'a, const PRETTY: bool> Compound<'w, 'a, PRETTY> {
    fn open(
        w: &'w mut Writer<'a, PRETTY>,
        brackets: [u8; 2],
        len: Option<usize>,
        in_variant: bool,
    ) -> Self {
        w.open(brackets[0]);
        // serde_json closes what says it is empty at once.
        let closed = len == Some(0);
        if closed {
            w.close(brackets[1], false);
        }
        Compound {
            w,
            first: true,
            closed,
            in_variant,
        }
    }

    fn element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        if self.closed {
            return Err(Unhandled);
        }
        self.w.item(self.first);
        self.first = false;
        value.serialize(&mut *self.w)
    }

    fn before_key(&mut self) -> Result {
        if self.closed {
            return Err(Unhandled);
        }
        self.w.item(self.first);
        self.first = false;
        Ok(())
    }

    fn key(&mut self, key: &str) -> Result {
        self.before_key()?;
        push_str(self.w.out, key);
        self.w.colon();
        Ok(())
    }

    fn end(self, bracket: u8) -> Result {
        if !self.closed {
            self.w.close(bracket, !self.first);
        }
        if self.in_variant {
            self.w.close(b'}', true);
        }
        Ok(())
    }
}

impl<'w, 'a, const PRETTY: bool> ser::Serializer for &'w mut Writer<'a, PRETTY> {
    type Ok = ();
    type Error = Unhandled;
    type SerializeSeq = Compound<'w, 'a, PRETTY>;
    type SerializeTuple = Compound<'w, 'a, PRETTY>;
    type SerializeTupleStruct = Compound<'w, 'a, PRETTY>;
    type SerializeTupleVariant = Compound<'w, 'a, PRETTY>;
    type SerializeMap = Compound<'w, 'a, PRETTY>;
    type SerializeStruct = Compound<'w, 'a, PRETTY>;
    type SerializeStructVariant = Compound<'w, 'a, PRETTY>;

    fn serialize_bool(self, v: bool) -> Result {
        self.out
            .extend_from_slice(if v { b"true" } else { b"false" });
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_i16(self, v: i16) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_i32(self, v: i32) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_i64(self, v: i64) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_u16(self, v: u16) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_u32(self, v: u32) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_u64(self, v: u64) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result {
        self.integer(v);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result {
        // Numbers with a fraction are few in a run's files: serde_json writes them, with
        // whichever shortest-digits formatter it uses.
        serde_json::to_writer(&mut *self.out, &v).map_err(|_| Unhandled)
    }

    fn serialize_f64(self, v: f64) -> Result {
        // Numbers with a fraction are few in a run's files: serde_json writes them, with
        // whichever shortest-digits formatter it uses.
        serde_json::to_writer(&mut *self.out, &v).map_err(|_| Unhandled)
    }

    fn serialize_char(self, v: char) -> Result {
        push_str(self.out, v.encode_utf8(&mut [0; 4]));
        Ok(())
    }

    fn serialize_str(self, v: &str) -> Result {
        push_str(self.out, v);
        Ok(())
    }

    fn serialize_bytes(self, _: &[u8]) -> Result {
        Err(Unhandled)
    }

    fn serialize_none(self) -> Result {
        self.serialize_unit()
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result {
        self.out.extend_from_slice(b"null");
        Ok(())
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result {
        self.serialize_unit()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result {
        self.serialize_str(variant)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Result {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result {
        self.variant(variant);
        value.serialize(&mut *self)?;
        self.close(b'}', true);
        Ok(())
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq> {
        Ok(Compound::open(self, *b"[]", len, false))
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_struct(
        self,
        _: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct> {
        self.serialize_seq(Some(len))
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant> {
        self.variant(variant);
        Ok(Compound::open(self, *b"[]", Some(len), true))
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap> {
        Ok(Compound::open(self, *b"{}", len, false))
    }

    fn serialize_struct(self, name: &'static str, len: usize) -> Result<Self::SerializeStruct> {
        // serde_json's raw values and arbitrary-precision numbers travel as such structs.
        if name.starts_with("$serde_json::") {
            return Err(Unhandled);
        }
        self.serialize_map(Some(len))
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant> {
        self.variant(variant);
        Ok(Compound::open(self, *b"{}", Some(len), true))
    }
}

/// The four forms of a sequence: elements, then `]`.
macro_rules! sequence {
    ($($form:ident: $element:ident),* $(,)?) => {
        $(impl<const PRETTY: bool> ser::$form for Compound<'_, '_, PRETTY> {
            type Ok = ();
            type Error = Unhandled;

            fn $element<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
                self.element(value)
            }

            fn end(self) -> Result {
                Compound::end(self, b']')
            }
        })*
    };
}

sequence!(
    SerializeSeq: serialize_element,
    SerializeTuple: serialize_element,
    SerializeTupleStruct: serialize_field,
    SerializeTupleVariant: serialize_field,
);

impl<const PRETTY: bool> ser::SerializeMap for Compound<'_, '_, PRETTY> {
    type Ok = ();
    type Error = Unhandled;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Result {
        self.before_key()?;
        let at = self.w.out.len();
        key.serialize(&mut *self.w)?;
        // A key written as a string (a string, a char, a unit variant, through newtypes and
        // `Some`) is what serde_json writes for it; anything else serde_json quotes or refuses
        // itself.
        if self.w.out.get(at) != Some(&b'"') {
            return Err(Unhandled);
        }
        self.w.colon();
        Ok(())
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Result {
        value.serialize(&mut *self.w)
    }

    fn end(self) -> Result {
        Compound::end(self, b'}')
    }
}

/// The two forms of a struct: fields, then `}`.
macro_rules! structure {
    ($($form:ident),*) => {
        $(impl<const PRETTY: bool> ser::$form for Compound<'_, '_, PRETTY> {
            type Ok = ();
            type Error = Unhandled;

            fn serialize_field<T: Serialize + ?Sized>(
                &mut self,
                key: &'static str,
                value: &T,
            ) -> Result {
                self.key(key)?;
                value.serialize(&mut *self.w)
            }

            fn end(self) -> Result {
                Compound::end(self, b'}')
            }
        })*
    };
}

structure!(SerializeStruct, SerializeStructVariant);

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Serialize;
    use serde_json::{Value, json};

    /// Both forms of `value`, as this writer and as serde_json write them.
    #[track_caller]
    fn same<T: Serialize + ?Sized>(value: &T) {
        let mut compact = b"prefix".to_vec();
        let ours = to_vec(&mut compact, value).map(|()| compact[6..].to_vec());
        let theirs = serde_json::to_vec(value);
        assert_eq!(ours.as_ref().ok(), theirs.as_ref().ok(), "compact");
        assert_eq!(ours.is_err(), theirs.is_err());
        let mut pretty = b"prefix".to_vec();
        let ours = to_vec_pretty(&mut pretty, value).map(|()| pretty[6..].to_vec());
        let theirs = serde_json::to_vec_pretty(value);
        assert_eq!(
            ours.as_ref()
                .ok()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            theirs
                .as_ref()
                .ok()
                .map(|b| String::from_utf8_lossy(b).into_owned()),
            "pretty"
        );
        if let Ok(theirs) = theirs {
            for depth in [1, 2, 40] {
                let mut nested = Vec::new();
                to_vec_pretty_at(&mut nested, value, depth).unwrap();
                let newline = format!("\n{}", "  ".repeat(depth));
                let want = String::from_utf8(theirs.clone())
                    .unwrap()
                    .replace('\n', &newline);
                assert_eq!(String::from_utf8(nested).unwrap(), want, "at depth {depth}");
            }
        }
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        // Every byte that needs escaping (and its neighbours) at every offset of strings
        // longer and shorter than a word and than a sixteen-byte lane, so each lands in a
        // word, a lane and the overlapping tail of either.
        let specials: Vec<char> = (0u8..0x20)
            .map(char::from)
            .chain([
                '"', '\\', '\u{7f}', '/', ' ', '!', '#', '[', ']', 'é', '\u{202e}', '\u{2066}',
                '😀',
            ])
            .collect();
        let letters = "abcdefghijklmnopqrstuvwxyz".repeat(2);
        for len in [1, 7, 8, 9, 15, 16, 17, 25, 31, 32, 33, 47, 48, 49] {
            for at in 0..len {
                for &c in &specials {
                    let mut s: String = letters.chars().take(len).collect();
                    s.replace_range(at..=at, c.encode_utf8(&mut [0; 4]));
                    same(&s);
                    let doubled = format!("{s}{c}{s}");
                    same(&doubled);
                }
            }
        }
        same("");
        same(&"\u{1}\"\\".repeat(50));
        let mut out = Vec::new();
        push_str(&mut out, "tab\there \u{1f} \u{0} \u{202e}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"tab\\there \\u001f \\u0000 \u{202e}\""
        );
    }

    /// A small deterministic generator (xorshift), so a failure names its seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        fn string(&mut self) -> String {
            const ALPHABET: &[char] = &[
                'a', 'Z', '0', ' ', '"', '\\', '\n', '\t', '\u{1}', '\u{1f}', '\u{7f}', 'é',
                '\u{202e}', '😀', '/',
            ];
            (0..self.below(20))
                .map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize])
                .collect()
        }

        fn value(&mut self, depth: u32) -> Value {
            let pick = if depth > 4 {
                self.below(6)
            } else {
                self.below(8)
            };
            match pick {
                0 => Value::Null,
                1 => Value::Bool(self.below(2) == 1),
                2 => json!(self.next() as i64),
                3 => json!(self.below(1000)),
                4 => {
                    let bits = self.next();
                    let f = match self.below(4) {
                        0 => f64::from_bits(bits),
                        1 => (bits % 100_000) as f64 / 7.0,
                        2 => -((bits % 1000) as f64),
                        _ => [0.0, -0.0, 1e300, 5e-324, 1e-7, 123456789012345680.0, 0.1]
                            [bits as usize % 7],
                    };
                    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
                }
                5 => Value::String(self.string()),
                6 => Value::Array((0..self.below(5)).map(|_| self.value(depth + 1)).collect()),
                _ => Value::Object(
                    (0..self.below(5))
                        .map(|_| (self.string(), self.value(depth + 1)))
                        .collect(),
                ),
            }
        }
    }

    #[test]
    fn any_json_value_is_written_as_serde_json_writes_it() {
        for seed in 1..3000u64 {
            let value = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)).value(0);
            same(&value);
        }
        same(&json!({"a": [], "b": {}, "c": [[], {}, [[]]], "d": [{"e": []}]}));
        same(&json!([]));
        same(&json!({}));
    }

    #[derive(Serialize)]
    struct Unit;

    #[derive(Serialize)]
    struct Newtype(u8);

    #[derive(Serialize)]
    struct Pair(i8, &'static str);

    #[derive(Serialize)]
    struct Empty {}

    #[derive(Serialize)]
    #[serde(rename_all = "snake_case")]
    enum Shape {
        Point,
        Circle(f32),
        Line(i32, i32),
        NoPoints(),
        Rect { w: u16, h: u16 },
        NoSides {},
        Nested(Vec<Shape>),
    }

    #[derive(Serialize)]
    #[serde(tag = "kind")]
    enum Tagged {
        A { x: u8 },
        B(Newtype2),
    }

    #[derive(Serialize)]
    struct Newtype2 {
        y: Option<u8>,
    }

    #[derive(Serialize)]
    struct Everything {
        unit: (),
        unit_struct: Unit,
        newtype: Newtype,
        pair: Pair,
        empty: Empty,
        tuple: (u8, char, bool),
        shapes: Vec<Shape>,
        tagged: Vec<Tagged>,
        #[serde(skip_serializing_if = "Option::is_none")]
        skipped: Option<u8>,
        none: Option<String>,
        wide: (i128, u128, i64, u64, i16, u16),
        floats: (f32, f32, f64, f64, f64),
        #[serde(flatten)]
        flat: std::collections::BTreeMap<String, u8>,
        char_keys: std::collections::BTreeMap<char, u8>,
        variant_keys: std::collections::BTreeMap<Key, u8>,
    }

    #[derive(Serialize, PartialEq, Eq, PartialOrd, Ord)]
    enum Key {
        First,
        Second,
    }

    #[test]
    fn every_form_of_serde_s_data_model_is_written_as_serde_json_writes_it() {
        let everything = Everything {
            unit: (),
            unit_struct: Unit,
            newtype: Newtype(7),
            pair: Pair(-3, "p"),
            empty: Empty {},
            tuple: (1, '"', true),
            shapes: vec![
                Shape::Point,
                Shape::Circle(1.5),
                Shape::Line(-1, 2),
                Shape::NoPoints(),
                Shape::Rect { w: 3, h: 4 },
                Shape::NoSides {},
                Shape::Nested(vec![]),
                Shape::Nested(vec![
                    Shape::Point,
                    Shape::Nested(vec![Shape::Circle(f32::NAN)]),
                ]),
            ],
            tagged: vec![Tagged::A { x: 1 }, Tagged::B(Newtype2 { y: None })],
            skipped: None,
            none: None,
            wide: (i128::MIN, u128::MAX, i64::MIN, u64::MAX, i16::MIN, u16::MAX),
            floats: (f32::INFINITY, 0.1, f64::NAN, -0.0, 1e21),
            flat: [("f1".to_owned(), 1), ("f\n2".to_owned(), 2)].into(),
            char_keys: [('k', 1), ('\u{1}', 2)].into(),
            variant_keys: [(Key::First, 1), (Key::Second, 2)].into(),
        };
        same(&everything);
        same(&Shape::Rect { w: 1, h: 2 });
        same(&vec![Some(1), None]);
    }

    /// What this writer leaves to serde_json comes out as serde_json writes it, errors
    /// included.
    #[test]
    fn what_it_leaves_to_serde_json_is_still_serde_json_s() {
        struct Bytes;
        impl Serialize for Bytes {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                s.serialize_bytes(b"\x00ab")
            }
        }
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(
                &self,
                _: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        /// Says it is empty, then is not.
        struct Liar;
        impl Serialize for Liar {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut seq = s.serialize_seq(Some(0))?;
                seq.serialize_element(&1)?;
                seq.end()
            }
        }
        struct FloatKey(f64);
        impl Serialize for FloatKey {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                use serde::ser::SerializeMap;
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(&self.0, "v")?;
                map.end()
            }
        }
        /// Looks like serde_json's raw value on the way through.
        struct Raw;
        impl Serialize for Raw {
            fn serialize<S: serde::Serializer>(
                &self,
                s: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct;
                const TOKEN: &str = "$serde_json::private::RawValue";
                let mut raw = s.serialize_struct(TOKEN, 1)?;
                raw.serialize_field(TOKEN, "{\"raw\" :  1}")?;
                raw.end()
            }
        }
        let int_keys: std::collections::BTreeMap<i32, &str> = [(-1, "a"), (2, "b")].into();
        let bool_keys: std::collections::BTreeMap<bool, u8> = [(true, 1)].into();
        let some_keys: std::collections::BTreeMap<Option<&str>, u8> = [(Some("k"), 1)].into();
        let none_keys: std::collections::BTreeMap<Option<&str>, u8> = [(None, 1)].into();
        let unit_keys: std::collections::BTreeMap<(), u8> = [((), 1)].into();
        let seq_keys: std::collections::BTreeMap<Vec<&str>, u8> = [(vec!["a"], 1)].into();
        same(&some_keys);
        same(&none_keys);
        same(&unit_keys);
        same(&seq_keys);
        same(&json!({"before": [1, 2], "then": serde_json::to_value(&int_keys).unwrap()}));
        same(&int_keys);
        same(&bool_keys);
        same(&vec![Bytes, Bytes]);
        // (serde_json's pretty writer trips on this one in a debug build.)
        let mut out = Vec::new();
        to_vec(&mut out, &(1, Liar)).unwrap();
        assert_eq!(out, serde_json::to_vec(&(1, Liar)).unwrap());
        same(&[Fails]);
        same(&[FloatKey(1.5), FloatKey(f64::NAN)]);
        same(&Raw);
        // And what it left behind in the buffer before handing over is gone.
        for pretty in [false, true] {
            let mut out = b"kept".to_vec();
            let failed = [Raw, Raw];
            let value = (1, "two", &failed, Fails);
            let written = if pretty {
                to_vec_pretty(&mut out, &value)
            } else {
                to_vec(&mut out, &value)
            };
            assert!(written.is_err());
            assert_eq!(out, b"kept");
        }
    }
}
