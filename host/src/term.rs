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

/// The end of `text`, where the cause of a failure is (a traceback's last line, a
/// process's last words): its last whole lines within `max` characters — the last
/// `max` characters when its last line alone is longer — with `…` in front when the start
/// was cut (or already was, by a tail that kept only the last bytes). Not sanitized.
pub(crate) fn last_lines(text: &str, max: usize) -> String {
    let text = text.trim_end();
    let (cut_before, body) = match text.strip_prefix('…') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let n = body.chars().count();
    if n <= max {
        return if cut_before {
            format!("…{body}")
        } else {
            body.to_owned()
        };
    }
    // The byte offset of the first of the last `max` characters: always a char boundary.
    let from = body
        .char_indices()
        .nth(n - max)
        .map_or(body.len(), |(i, _)| i);
    let kept = &body[from..];
    // Whole lines when a line starts inside what is kept (and not at its very end).
    let kept = match kept.find('\n') {
        Some(nl) if !body[..from].ends_with('\n') && nl + 1 < kept.len() => &kept[nl + 1..],
        _ => kept,
    };
    format!("…{kept}")
}

/// `text` in at most about `max` characters for one line of a summary: its start (what
/// failed) and its end (why: a quoted stderr's last line), with ` … ` where the middle was
/// cut. Not sanitized.
pub(crate) fn head_and_end(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_owned();
    }
    let head = max / 3;
    let end = max - head;
    let at = |k: usize| text.char_indices().nth(k).map_or(text.len(), |(i, _)| i);
    format!("{} … {}", &text[..at(head)], &text[at(n - end)..])
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

    #[test]
    fn the_end_of_a_text_is_kept_in_whole_lines() {
        assert_eq!(last_lines("short\n", 10), "short");
        assert_eq!(last_lines("…cut before", 100), "…cut before");
        let tb = "Traceback:\n  File \"a.py\", line 1\nAttributeError: no é attribute";
        // The last line whole, the ones before it dropped rather than cut.
        assert_eq!(last_lines(tb, 40), "…AttributeError: no é attribute");
        assert_eq!(
            last_lines(tb, 60),
            "…  File \"a.py\", line 1\nAttributeError: no é attribute"
        );
        // A last line longer than the bound: its last characters, on a char boundary.
        assert_eq!(last_lines("ééééé", 3), "…ééé");
        assert_eq!(last_lines("…abc\ndef", 5), "…def");
        assert_eq!(last_lines("abc\ndef", 3), "…def");
    }

    #[test]
    fn a_summary_keeps_the_start_and_the_end() {
        assert_eq!(head_and_end("abc", 3), "abc");
        let s = format!("server failed{}the cause", "x".repeat(200));
        let cut = head_and_end(&s, 30);
        assert!(
            cut.starts_with("server fai") && cut.ends_with("the cause"),
            "{cut}"
        );
        assert_eq!(head_and_end("ééééééé", 6), "éé … éééé");
    }
}
