//! `wt`'s own log lines and those of the libraries it uses (the MCP server, HTTP): one plain
//! stream on stderr that an agent cannot flood or forge.
//!
//! - Plain text, never ANSI colours, TTY or not; each line goes through [`term::err_line`],
//!   so control characters and bidirectional controls a message carries (a tool name, a Host
//!   header an agent sent) are escaped.
//! - A library's message that repeats — one per refused MCP call, say — is shown
//!   [`REPEATS_SHOWN`] times per place in its code, then one line says that further ones are
//!   not shown. The trace records every refused call; the terminal needs three. `WT_LOG`
//!   set (e.g. `WT_LOG=debug`) shows every message.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;

use tracing::Metadata;
use tracing::callsite::Identifier;
use tracing::subscriber::Interest;
use tracing_subscriber::layer::{Context, Filter};

use crate::term;

/// How many times one library message (one place in its code) is shown.
pub(crate) const REPEATS_SHOWN: u32 = 3;

/// Starts logging: `WT_LOG` (an `EnvFilter`, default `warn`), plain, sanitized, and library
/// repeats held back unless `WT_LOG` is set.
pub(crate) fn init() {
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::prelude::*;
    use tracing_subscriber::{EnvFilter, fmt};
    let chosen = std::env::var_os("WT_LOG").is_some();
    let filter = EnvFilter::try_from_env("WT_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let layer = fmt::layer()
        .with_writer(|| Lines(Vec::new()))
        .without_time()
        .with_ansi(false);
    let throttle = Throttle {
        on: !chosen,
        seen: Mutex::new(HashMap::new()),
    };
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(filter.and(throttle)))
        .try_init();
}

/// One formatted event, written as sanitized lines when dropped.
struct Lines(Vec<u8>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Lines {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.0);
        for line in text.lines() {
            term::err_line(line);
        }
    }
}

/// Shows each library message [`REPEATS_SHOWN`] times, then says once that it holds the
/// rest back.
struct Throttle {
    on: bool,
    seen: Mutex<HashMap<Identifier, u32>>,
}

impl Throttle {
    fn applies(&self, meta: &Metadata<'_>) -> bool {
        self.on && meta.is_event() && !meta.target().starts_with("windtunnel")
    }
}

impl<S> Filter<S> for Throttle {
    fn enabled(&self, meta: &Metadata<'_>, _: &Context<'_, S>) -> bool {
        if !self.applies(meta) {
            return true;
        }
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let n = seen.entry(meta.callsite()).or_insert(0);
        *n = n.saturating_add(1);
        if *n == REPEATS_SHOWN + 1 {
            term::err_line(&format!(
                " {} {}: this message repeats; further ones are not shown (WT_LOG=warn shows them all)",
                meta.level(),
                meta.target(),
            ));
        }
        *n <= REPEATS_SHOWN
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> Interest {
        if self.applies(meta) {
            // Asked per event: the count is per event, not per callsite.
            Interest::sometimes()
        } else {
            Interest::always()
        }
    }
}
