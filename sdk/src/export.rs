//! What `export_hooks!` expands to: the adapter that turns a safe [`Hook`] into the FFI
//! trait object (catching panics on the plugin side of the boundary), the library
//! descriptor, and the plain-data metadata record the host reads without running plugin code.
//!
//! Nothing here is a stable API; it is public only for the macro's expansion and the host.

use std::{
    cell::RefCell,
    panic::AssertUnwindSafe,
    sync::{Mutex, Once},
};

use abi_stable::{
    sabi_trait::TD_Opaque,
    std_types::{RResult, RStr, RString},
};
use serde::{Deserialize, Serialize};
use windtunnel_abi::{FfiContextRef, FfiHook, FfiHook_TO, FfiHookBox, META_MAGIC, point};

use crate::hook::{Context, Hook};

/// Version of this SDK, recorded in every plugin built against it.
pub const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The target a plugin was built for, as `<arch>-<os>`.
pub const TARGET: &str = const_concat_target();

const fn const_concat_target() -> &'static str {
    // `std::env::consts` are consts, but joining them needs a fixed table.
    match (
        std::env::consts::ARCH.as_bytes(),
        std::env::consts::OS.as_bytes(),
    ) {
        (b"x86_64", b"linux") => "x86_64-linux",
        (b"aarch64", b"linux") => "aarch64-linux",
        (b"x86_64", b"macos") => "x86_64-macos",
        (b"aarch64", b"macos") => "aarch64-macos",
        _ => "other",
    }
}

/// One hook a library exports.
pub struct HookEntry {
    pub name: &'static str,
    pub points: u32,
    pub new: fn() -> FfiHookBox,
}

impl HookEntry {
    pub const fn of<H: Hook>() -> Self {
        HookEntry {
            name: H::NAME,
            points: H::DECLARED_POINTS,
            new: new_ffi_hook::<H>,
        }
    }
}

/// A library's descriptor, as returned by its root module (JSON over the boundary). `wt`
/// checks that it agrees with the library's metadata record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Descriptor {
    /// The SDK version the library was built against.
    pub sdk_version: String,
    /// The library crate's version.
    pub library_version: String,
    /// Whether the library unwinds on panic (`panic = "abort"` plugins are refused).
    pub panic_unwind: bool,
    /// `<arch>-<os>` the library was built for.
    pub target: String,
    /// The hooks it exports.
    pub hooks: Vec<DescriptorHook>,
}

/// One hook in a [`Descriptor`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DescriptorHook {
    /// The hook's name.
    pub name: String,
    /// Its capability bits (`1 << (point - 1)` per declared point).
    pub points: u32,
}

pub fn descriptor_json(hooks: &[HookEntry], library_version: &str, panic_unwind: bool) -> RString {
    let d = Descriptor {
        sdk_version: SDK_VERSION.to_owned(),
        library_version: library_version.to_owned(),
        panic_unwind,
        target: TARGET.to_owned(),
        hooks: hooks
            .iter()
            .map(|h| DescriptorHook {
                name: h.name.to_owned(),
                points: h.points,
            })
            .collect(),
    };
    serde_json::to_string(&d)
        .unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
        .into()
}

pub fn new_hook(hooks: &[HookEntry], name: RStr<'_>) -> RResult<FfiHookBox, RString> {
    match hooks.iter().find(|h| h.name == name.as_str()) {
        Some(h) => match catch_unwind(h.new) {
            Ok(hook) => RResult::ROk(hook),
            Err(payload) => RResult::RErr(panic_message(&*payload).into()),
        },
        None => RResult::RErr(format!("this library exports no hook named `{name}`").into()),
    }
}

/// Wraps a hook in the FFI adapter. Built-in hooks use this too, so they take the same
/// path as plugins.
pub fn new_ffi_hook<H: Hook>() -> FfiHookBox {
    install_panic_hook();
    FfiHook_TO::from_value(
        Adapter::<H> {
            inner: Mutex::new(H::default()),
        },
        TD_Opaque,
    )
}

struct Adapter<H> {
    inner: Mutex<H>,
}

impl<H: Hook> FfiHook for Adapter<H> {
    fn on_event(&self, point: u32, ctx: FfiContextRef<'_>) -> RResult<RString, RString> {
        let (point, turn) = crate::turn::ids::split(point);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(mut hook) = self.inner.lock() else {
                return Err("hook is disabled after an earlier panic".to_owned());
            };
            let cx = Context::from_ffi(&ctx);
            // Lifecycle points return no value: the empty string, which allocates nothing.
            let done = |r: crate::Result| r.map(|()| String::new()).map_err(|e| e.to_string());
            match point {
                point::ON_PROVISIONED => done(hook.on_provisioned(&cx)),
                point::ON_RUN_START => done(hook.on_run_start(&cx)),
                point::ON_RUN_SCORED => done(hook.on_run_scored(&cx)),
                point::ON_RUN_END => done(hook.on_run_end(&cx)),
                point::ON_SCENARIO_END => done(hook.on_scenario_end(&cx)),
                point::ON_PACK_END => done(hook.on_pack_end(&cx)),
                point::TURN_BEGIN => {
                    with_turn_call(&cx, turn, |call| done(hook.turn_begin(call, &cx)))
                }
                point::TURN_FINISH => {
                    with_turn_result(&cx, turn, |result| done(hook.turn_finish(result, &cx)))
                }
                point::GUARD_CHECK => with_turn_call(&cx, turn, |call| {
                    let decision = hook.guard_check(call, &cx).map_err(|e| e.to_string())?;
                    serde_json::to_string(&decision).map_err(|e| e.to_string())
                }),
                other => Err(format!("hook does not implement point {other}")),
            }
        }));
        match outcome {
            Ok(Ok(value)) => RResult::ROk(value.into()),
            Ok(Err(message)) => RResult::RErr(message.into()),
            Err(payload) => RResult::RErr(panic_message(&*payload).into()),
        }
    }
}

/// The last turn read on this thread: the call a begin (or a guard) read, under the snapshot
/// id it was served with, and the result a finish read, in one place. The next hook called
/// about the same snapshot (another hook of this library, at the same point) reads nothing
/// from the host; a finish whose result's tail names the call held here reads only the
/// result's own five fields; a new turn reuses the strings' buffers. A turn observer costs a
/// compare, or a copy per field, and no allocation.
struct LastTurn {
    /// The id `value.call` was read under at a begin (0: none, or not known).
    call_id: u32,
    /// The id the whole of `value` was read under at a finish (0: none).
    result_id: u32,
    value: crate::TurnResult,
}

thread_local! {
    static TURN: RefCell<LastTurn> = RefCell::new(LastTurn {
        call_id: 0,
        result_id: 0,
        value: crate::TurnResult::new(crate::TurnCall::default(), crate::Outcome::Unknown),
    });
}

/// Calls `f` with the turn about to start: read from its compact form when the host serves
/// one (`wt` 1.5 and later), else parsed from its JSON member.
fn with_turn_call<R>(
    cx: &Context<'_>,
    id: u32,
    f: impl FnOnce(&crate::TurnCall) -> Result<R, String>,
) -> Result<R, String> {
    let mut f = Some(f);
    if let Some(result) = TURN.with(|cell| {
        let last = cell.try_borrow().ok()?;
        (id != 0 && last.call_id == id).then(|| f.take().expect("called once")(&last.value.call))
    }) {
        return result;
    }
    let read = cx.with_raw(crate::member::TURN_CALL_FIELDS, |text| {
        let f = f.take().expect("called once");
        TURN.with(|cell| match cell.try_borrow_mut() {
            Ok(mut last) => {
                // The result held here had the call about to be overwritten.
                (last.call_id, last.result_id) = (0, 0);
                crate::turn::fields::read_call_into(text, &mut last.value.call)?;
                last.call_id = id;
                f(&last.value.call)
            }
            // A hook called while another's call is read on this thread: a call of its own.
            Err(_) => {
                let mut call = crate::TurnCall::default();
                crate::turn::fields::read_call_into(text, &mut call)?;
                f(&call)
            }
        })
    });
    match (read, f) {
        (Some(result), _) => result,
        (None, Some(f)) => {
            let call = cx
                .try_turn_call()
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "no turn_call in context".to_owned())?;
            f(&call)
        }
        (None, None) => Err("no turn_call in context".to_owned()),
    }
}

/// Calls `f` with the turn that ended: its own fields only when the host names the call held
/// here as its call (`wt` 1.5 and later), else read whole (see [`with_turn_call`]).
fn with_turn_result<R>(
    cx: &Context<'_>,
    id: u32,
    f: impl FnOnce(&crate::TurnResult) -> Result<R, String>,
) -> Result<R, String> {
    let mut f = Some(f);
    let held = TURN.with(|cell| {
        let last = cell.try_borrow().ok()?;
        if id != 0 && last.result_id == id {
            return Some(Ok(f.take().expect("called once")(&last.value)));
        }
        Some(Err(last.call_id))
    });
    let held = match held {
        Some(Ok(result)) => return result,
        Some(Err(call_id)) => call_id,
        None => 0,
    };
    if held != 0 && id != 0 {
        let read = cx.with_raw(crate::member::TURN_RESULT_TAIL, |text| {
            if crate::turn::fields::tail_call_id(text) != Ok(held) {
                return None;
            }
            TURN.with(|cell| {
                let mut last = cell.try_borrow_mut().ok()?;
                if last.call_id != held {
                    return None;
                }
                last.result_id = 0;
                // A tail that does not read is read whole below.
                crate::turn::fields::read_tail_into(text, &mut last.value).ok()?;
                last.result_id = id;
                Some(f.take().expect("called once")(&last.value))
            })
        });
        if let Some(Some(result)) = read {
            return result;
        }
    }
    let read = cx.with_raw(crate::member::TURN_RESULT_FIELDS, |text| {
        let f = f.take().expect("called once");
        TURN.with(|cell| match cell.try_borrow_mut() {
            Ok(mut last) => {
                // The call is the result's now; under which begin's id, nobody said.
                (last.call_id, last.result_id) = (0, 0);
                crate::turn::fields::read_result_into(text, &mut last.value)?;
                last.result_id = id;
                f(&last.value)
            }
            Err(_) => {
                let mut result =
                    crate::TurnResult::new(crate::TurnCall::default(), crate::Outcome::Unknown);
                crate::turn::fields::read_result_into(text, &mut result)?;
                f(&result)
            }
        })
    });
    match (read, f) {
        (Some(result), _) => result,
        (None, Some(f)) => {
            let result = cx
                .try_turn_result()
                .map_err(|e| e.to_string())?
                .ok_or("no turn_result in context")?;
            f(&result)
        }
        (None, None) => Err("no turn_result in context".to_owned()),
    }
}

thread_local! {
    static PANIC_LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Records where a panic happened (for the error message) instead of printing the default
/// report; panics outside hook calls still reach the previous panic hook.
fn install_panic_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_hook = IN_HOOK.with(|c| c.get());
            if in_hook {
                let location = info
                    .location()
                    .map(|l| format!("{}:{}", l.file(), l.line()));
                PANIC_LOCATION.with(|c| *c.borrow_mut() = location);
            } else {
                previous(info);
            }
        }));
    });
}

thread_local! {
    static IN_HOOK: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn catch_unwind<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
    IN_HOOK.with(|c| c.set(true));
    let result = std::panic::catch_unwind(AssertUnwindSafe(f));
    IN_HOOK.with(|c| c.set(false));
    result
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    let text = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned());
    match PANIC_LOCATION.with(|c| c.borrow_mut().take()) {
        Some(at) => format!("panicked at {at}: {text}"),
        None => format!("panicked: {text}"),
    }
}

// ---------------------------------------------------------------------------------------
// The metadata record: plain bytes in the `.wt_meta` section, built at compile time.
//
//   WTMETA1\n
//   sdk <sdk version>\n
//   version <library version>\n
//   unwind <0|1>\n
//   target <arch-os>\n
//   hook <name> <points as 8 hex digits>\n      (one line per hook)

const HEX: &[u8; 16] = b"0123456789abcdef";

struct Writer<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Writer<N> {
    const fn push(mut self, bytes: &[u8]) -> Self {
        let mut i = 0;
        while i < bytes.len() {
            if self.len < N {
                self.buf[self.len] = bytes[i];
            }
            self.len += 1;
            i += 1;
        }
        self
    }

    const fn push_hex(mut self, value: u32) -> Self {
        let mut shift = 32;
        while shift > 0 {
            shift -= 4;
            let digit = HEX[((value >> shift) & 0xf) as usize];
            self = self.push(&[digit]);
        }
        self
    }
}

const fn write_meta<const N: usize>(
    hooks: &[HookEntry],
    library_version: &str,
    unwind: bool,
) -> Writer<N> {
    let mut w = Writer {
        buf: [0; N],
        len: 0,
    };
    w = w.push(META_MAGIC);
    w = w.push(b"sdk ").push(SDK_VERSION.as_bytes()).push(b"\n");
    w = w
        .push(b"version ")
        .push(library_version.as_bytes())
        .push(b"\n");
    w = w.push(if unwind { b"unwind 1\n" } else { b"unwind 0\n" });
    w = w.push(b"target ").push(TARGET.as_bytes()).push(b"\n");
    let mut i = 0;
    while i < hooks.len() {
        w = w.push(b"hook ").push(hooks[i].name.as_bytes()).push(b" ");
        w = w.push_hex(hooks[i].points).push(b"\n");
        i += 1;
    }
    w
}

/// Length of the metadata record.
pub const fn meta_len(hooks: &[HookEntry], library_version: &str) -> usize {
    write_meta::<0>(hooks, library_version, true).len
}

/// The metadata record's bytes.
pub const fn meta_bytes<const N: usize>(
    hooks: &[HookEntry],
    library_version: &str,
    unwind: bool,
) -> [u8; N] {
    write_meta::<N>(hooks, library_version, unwind).buf
}
