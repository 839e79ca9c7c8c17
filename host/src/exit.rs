//! Exit codes, in one place.

/// Every run passed (or the command succeeded).
pub const SUCCESS: u8 = 0;
/// At least one run failed.
pub const RUN_FAILED: u8 = 1;
/// Usage or configuration error: bad flags, a malformed pack, an unknown hook, a refused plugin.
pub const USAGE: u8 = 2;
/// At least one run could not be judged (ERROR).
pub const RUN_ERROR: u8 = 3;
/// The sweep was cut short: something inside `wt` (a plugin, the agent runtime) ended the
/// process before the sweep finished, whatever exit status it asked for.
pub const ABORTED: u8 = 4;
/// Interrupted (Ctrl-C, SIGTERM or SIGHUP).
pub const INTERRUPTED: u8 = 130;

/// The exit code for a set of scenario aggregates (ERROR wins over FAIL).
pub(crate) fn of_aggregates<'a>(
    aggs: impl IntoIterator<Item = &'a windtunnel_model::AggregateResult>,
) -> u8 {
    let mut code = SUCCESS;
    for a in aggs {
        if a.errored > 0 || a.error.is_some() {
            return RUN_ERROR;
        }
        if a.failed > 0 {
            code = RUN_FAILED;
        }
    }
    code
}

/// Set in a supervised sweep's process (see `cli::supervise`): where `wt` records the exit
/// code it decided.
pub(crate) const RECORD_ENV: &str = "WT_SWEEP_RECORD";

/// Records `code` as the sweep's own result, when this process is a supervised sweep: the
/// supervising `wt` exits with it. Called by `wt`'s own code paths only — the end of a
/// subcommand, a second signal's stop —, never on any other way out.
pub(crate) fn record(code: u8) {
    let Some(path) = std::env::var_os(RECORD_ENV) else {
        return;
    };
    if let Err(e) = std::fs::write(&path, format!("{code}\n")) {
        tracing::error!("cannot write the sweep's completion record: {e}");
    }
}

/// Where a supervised sweep names the in-process plugin hooks it runs, beside its completion
/// record: the supervisor names them when the process ends some other way than `wt`'s own.
pub(crate) fn suspects_path(record: &std::path::Path) -> std::path::PathBuf {
    let mut name = record.as_os_str().to_owned();
    name.push(".hooks");
    name.into()
}

/// In a supervised sweep, names `hooks` (comma-separated) for the supervisor.
pub(crate) fn record_suspects(hooks: &str) {
    let Some(path) = std::env::var_os(RECORD_ENV) else {
        return;
    };
    if hooks.is_empty() {
        return;
    }
    if let Err(e) = std::fs::write(suspects_path(path.as_ref()), hooks) {
        tracing::warn!("cannot name the sweep's hooks for its supervisor: {e}");
    }
}

/// An error that carries the exit code it should end the process with.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct CodedError {
    pub code: u8,
    pub message: String,
}

impl CodedError {
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        CodedError {
            code: USAGE,
            message: message.into(),
        }
    }
}

/// The exit code for an error that reached `main`: a [`CodedError`] anywhere in the chain
/// decides; anything else is a configuration or environment problem (2).
pub(crate) fn code_for(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|e| e.downcast_ref::<CodedError>())
        .map_or(USAGE, |c| c.code)
}
