//! `acme_state_probe`: after every reset, checks that the agent under test kept nothing
//! from earlier sessions — written the way a third party would, against the SDK's
//! `StateProbeHook` base: only `probe` is ours.
//!
//! Where the state comes from:
//! - `WT_ACME_STATE_PROBE_DIR=DIR`: the agent's state directory — every regular file's name,
//!   size and content hash;
//! - otherwise the runtime's state probe (the demo agent's memory, or the `http` runtime's
//!   state endpoint).
//!
//! `WT_ACME_STATE_PROBE_BASELINE=FILE` takes the clean baseline from a file (for example one
//! written by `wt doctor --write-baseline FILE`) instead of the first run.

use serde_json::{Value, json};
use windtunnel_sdk::{Context, Error, Result, StateProbe, StateProbeHook, export_hooks};

#[derive(Default)]
pub struct AcmeProbe;

impl StateProbe for AcmeProbe {
    const NAME: &'static str = "acme_state_probe";

    fn probe(&mut self, ctx: &Context<'_>) -> Result<Value> {
        match std::env::var("WT_ACME_STATE_PROBE_DIR") {
            Ok(dir) if !dir.is_empty() => directory_state(std::path::Path::new(&dir)),
            _ => ctx.probe_state(),
        }
    }
}

/// The files of a state directory, recursively: path → size and FNV-1a hash of the content.
fn directory_state(dir: &std::path::Path) -> Result<Value> {
    let mut files = serde_json::Map::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d)
            .map_err(|e| Error::msg(format!("cannot read state directory {}: {e}", d.display())))?;
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                let bytes = std::fs::read(&path)?;
                let rel = path
                    .strip_prefix(dir)
                    .unwrap_or(&path)
                    .display()
                    .to_string();
                files.insert(
                    rel,
                    json!({"size": bytes.len(), "fnv1a": format!("{:016x}", fnv1a(&bytes))}),
                );
            }
        }
    }
    Ok(json!({ "files": files }))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

export_hooks!(StateProbeHook<AcmeProbe>);
