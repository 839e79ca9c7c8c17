//! The frozen FFI layer between the `wt` host and hook plugins.
//!
//! Everything here crosses a shared-library boundary through `abi_stable`, so its layout is
//! frozen for the whole 1.x line: a field or method added here would make every older plugin
//! fail the host's layout check. New lifecycle points and new host services are added as new
//! *constants* routed through the two generic slots instead:
//!
//! - [`FfiHook::on_event`] — the host calls a hook at point `point` (see [`point`]);
//! - [`FfiContext::call`] — a hook asks the host for a service named by a string `op`
//!   (see [`op`]); [`FfiContext::get`] reads a context member as JSON text.
//!
//! Rich data crosses as JSON text; the typed structs live in the `windtunnel-sdk` crate.
//! Hook authors never use this crate directly: the SDK's `export_hooks!` macro wires it up.

#![expect(
    non_local_definitions,
    reason = "abi_stable's #[sabi_trait] expansion implements foreign traits in a const block"
)]

use abi_stable::{
    StableAbi, declare_root_module_statics,
    library::RootModule,
    package_version_strings, sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, ROption, RResult, RStr, RString},
};

/// Name of the ELF section holding a plugin's plain-data metadata record, which the host
/// reads before it runs any plugin code.
pub const META_SECTION: &str = ".wt_meta";
/// First bytes of the metadata record.
pub const META_MAGIC: &[u8; 8] = b"WTMETA1\n";

/// Lifecycle and turn points. Their capability bit is `1 << (point - 1)`.
pub mod point {
    pub const ON_PROVISIONED: u32 = 1;
    pub const ON_RUN_START: u32 = 2;
    pub const ON_RUN_SCORED: u32 = 3;
    pub const ON_RUN_END: u32 = 4;
    pub const ON_SCENARIO_END: u32 = 5;
    pub const ON_PACK_END: u32 = 6;
    /// Turn around-hook: before `TurnStarted`.
    pub const TURN_BEGIN: u32 = 7;
    /// Turn around-hook: after the turn's terminal event is durable.
    pub const TURN_FINISH: u32 = 8;
    /// Guard: may deny a turn before `TurnStarted`.
    pub const GUARD_CHECK: u32 = 9;

    /// Every point this version of the ABI knows, in dispatch-table order.
    pub const ALL: [u32; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];

    /// The capability bit of a point.
    pub const fn bit(point: u32) -> u32 {
        1 << (point - 1)
    }

    /// All capability bits this ABI version defines; any other bit is refused at load.
    pub const KNOWN_BITS: u32 = (1 << 9) - 1;

    /// The method name of a point, as hook authors write it.
    pub const fn name(point: u32) -> &'static str {
        match point {
            ON_PROVISIONED => "on_provisioned",
            ON_RUN_START => "on_run_start",
            ON_RUN_SCORED => "on_run_scored",
            ON_RUN_END => "on_run_end",
            ON_SCENARIO_END => "on_scenario_end",
            ON_PACK_END => "on_pack_end",
            TURN_BEGIN => "turn_begin",
            TURN_FINISH => "turn_finish",
            GUARD_CHECK => "guard_check",
            _ => "unknown",
        }
    }
}

/// Host services a hook may request through [`FfiContext::call`].
pub mod op {
    /// Argument: the text of a turn. Returns the agent's normalized reply.
    pub const CONVERSE: &str = "converse";
    /// Argument: `{"label": <slug or null>, "payload": <any JSON>}`. Returns `null`.
    pub const EMIT_ARTIFACT: &str = "emit_artifact";
    /// Argument: the warning text. Returns `null`.
    pub const WARN: &str = "warn";
    /// No argument. Returns the agent's internal state as JSON, as its runtime reports it
    /// (run points only; an error where the runtime cannot report state).
    pub const PROBE_STATE: &str = "probe_state";
}

/// The root module every hook library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HookLibRef)))]
#[sabi(missing_field(panic))]
pub struct HookLib {
    /// The library's descriptor as JSON text (see `windtunnel_sdk::Descriptor`).
    pub descriptor: extern "C" fn() -> RString,
    /// Builds the hook called `name` with its `Default` value.
    #[sabi(last_prefix_field)]
    pub new_hook: extern "C" fn(name: RStr<'_>) -> RResult<FfiHookBox, RString>,
}

impl RootModule for HookLibRef {
    declare_root_module_statics! {HookLibRef}
    const BASE_NAME: &'static str = "windtunnel_hook";
    const NAME: &'static str = "windtunnel_hook";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// A hook instance inside a plugin. The host never calls one instance from two threads at
/// once, but may call it from different threads over its life.
#[sabi_trait]
pub trait FfiHook: Send + Sync {
    /// Calls the hook at `point` with the host's context. `Ok` carries JSON text, or the
    /// empty string for no value (lifecycle points); `Err` an error message. The plugin side
    /// catches panics and reports them as `Err`. The point is in the low 8 bits; a host may
    /// set the bits above them at turn points for plugins built against SDK 1.5 or later
    /// (a turn snapshot id, `windtunnel_sdk::turn::ids`), never for older ones.
    #[sabi(last_prefix_field)]
    fn on_event(&self, point: u32, ctx: FfiContextRef<'_>) -> RResult<RString, RString>;
}

/// A boxed hook as the plugin hands it to the host.
pub type FfiHookBox = FfiHook_TO<'static, RBox<()>>;

/// The host's per-call context, borrowed for the duration of one [`FfiHook::on_event`] call.
/// It is not `Send`, and its lifetime keeps a plugin from holding it past the call.
#[sabi_trait]
pub trait FfiContext {
    /// A context member as JSON text, or `None` when absent at this point.
    fn get(&self, member: RStr<'_>) -> ROption<RString>;
    /// A host service; see [`op`]. Unknown ops return an error, never panic.
    #[sabi(last_prefix_field)]
    fn call(&self, op: RStr<'_>, arg: RStr<'_>) -> RResult<RString, RString>;
}

/// The context as passed to a hook.
pub type FfiContextRef<'a> = FfiContext_TO<'a, abi_stable::sabi_types::RRef<'a, ()>>;
