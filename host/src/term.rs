//! Human output that can neither panic nor be forged.
//!
//! - A closed stdout or stderr (`wt run 2>&1 | head -1`) must not end a sweep: every line is
//!   written with the error ignored, never with `println!`/`eprintln!`, which panic.
//! - Text from outside `wt` (agent replies, hook warnings, server error bodies) reaches the
//!   terminal with its control characters escaped, so a newline in `ctx.warn` cannot forge a
//!   `warning:` line and ANSI escapes cannot repaint the screen.

use std::borrow::Cow;
use std::io::Write;

/// The Unicode bidirectional controls: embeddings, overrides, isolates and marks. A label
/// holding one can make the text after it read backwards ("38 runs" for 83).
pub(crate) fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061C}' | '\u{200E}' | '\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}'
    )
}

/// `text` with every bidirectional control written as a visible `\u{..}` escape; for
/// outputs that escape their own markup already (HTML, XML, Markdown).
pub(crate) fn escape_bidi(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_bidi_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_bidi_control(c) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `text` with its control characters written as escapes: `\n`, `\r`, `\t`,
/// `\e` for ESC, `\u{..}` for the rest and for bidirectional controls.
pub(crate) fn sanitize(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{1b}' => out.push_str("\\e"),
            c if c.is_control() || is_bidi_control(c) => {
                out.push_str(&format!("\\u{{{:x}}}", c as u32));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn write_line(mut w: impl Write, line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(&sanitize(line));
    buf.push('\n');
    // One write per line, errors ignored: a reader that went away must not stop the sweep.
    let _ = w.write_all(buf.as_bytes()).and_then(|()| w.flush());
}

/// One line on stderr, sanitized.
pub(crate) fn err_line(line: &str) {
    write_line(std::io::stderr().lock(), line);
}

/// One line on stdout, sanitized (machine-readable text that is ours, e.g. tables).
pub(crate) fn out_line(line: &str) {
    write_line(std::io::stdout().lock(), line);
}

/// A blank line on stderr.
pub(crate) fn err_blank() {
    let _ = std::io::stderr().lock().write_all(b"\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(sanitize("plain"), "plain");
        assert_eq!(
            sanitize("a\nwarning: forged\u{1b}[31mred\u{7}"),
            "a\\nwarning: forged\\e[31mred\\u{7}"
        );
    }
}
