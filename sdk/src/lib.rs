//! # Wind Tunnel hook SDK
//!
//! Everything needed to extend `wt` with a hook: the [`Hook`] trait and its [`Context`],
//! the data model ([`model`]), the [`hook`](macro@hook) attribute that derives which points
//! a hook declares, [`export_hooks!`], which turns a `cdylib` crate into a plugin `wt` loads
//! with `wt run --hook NAME`, the [`StateProbeHook`] base, turn hooks and guards
//! ([`turn`]), and a kit to unit-test hooks without `wt` ([`testing`], feature `testing`).
//!
//! `wt hooks new NAME` writes a crate like the one below, ready to build, test and run.
//!
//! ## A complete hook
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "run_counter"
//! version = "0.1.0"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib"]
//!
//! [dependencies]
//! windtunnel-sdk = "~1.5"
//! serde_json = "1"
//!
//! [dev-dependencies]
//! windtunnel-sdk = { version = "~1.5", features = ["testing"] }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```standalone_crate
//! use windtunnel_sdk::{Context, Hook, Result, export_hooks, hook};
//!
//! #[derive(Default)]          // wt builds one instance per `wt run` with Default
//! pub struct RunCounter { runs: u32 }
//!
//! #[hook]                     // derives the declared points from the methods below
//! impl Hook for RunCounter {
//!     const NAME: &'static str = "run_counter";   // slug: [a-z0-9_-]+, at most 64 chars
//!
//!     fn on_run_end(&mut self, ctx: &Context<'_>) -> Result {
//!         self.runs += 1;
//!         ctx.emit_artifact(&serde_json::json!({"runs_so_far": self.runs}), None)
//!     }
//! }
//!
//! export_hooks!(RunCounter);  // one call per crate; list several types to export several hooks
//!
//! #[cfg(test)]
//! mod tests {
//!     use super::*;
//!     use windtunnel_sdk::testing::{HookTester, Sweep};
//!
//!     #[test]
//!     fn counts_every_run() {
//!         let log = HookTester::<RunCounter>::new().run_sweep(&Sweep::demo().runs(3));
//!         assert!(log.errors().is_empty());
//!         assert_eq!(log.artifacts()[2].payload["runs_so_far"], 3);
//!     }
//! }
//! # fn main() {
//! #     use windtunnel_sdk::testing::{HookTester, Sweep};
//! #     let log = HookTester::<RunCounter>::new().run_sweep(&Sweep::demo().runs(3));
//! #     assert!(log.errors().is_empty());
//! #     assert_eq!(log.artifacts()[2].payload["runs_so_far"], 3);
//! # }
//! ```
//!
//! Then `cargo test`, `cargo build --release`, and
//! `wt run --hook run_counter --plugin-dir target/release`.
//!
//! ## Depending on the SDK
//!
//! The crate does not need `abi_stable` (the export macro reaches it through the SDK).
//!
//! | where the SDK comes from | `[dependencies]` line |
//! | --- | --- |
//! | a registry (once published) | `windtunnel-sdk = "~1.5"` |
//! | a git repository | `windtunnel-sdk = { git = "https://…/windtunnel", rev = "…" }` |
//! | a local checkout | `windtunnel-sdk = { path = "/path/to/windtunnel/sdk" }` |
//!
//! `~1.5` keeps cargo on 1.5.x: a `wt` accepts plugins built against its own SDK minor or an
//! older one, so a plugin must not be built against a newer minor than the `wt` that loads
//! it.
//!
//! ## Compatibility
//!
//! Within 1.x, a plugin built against an older SDK keeps loading in a newer `wt`. From 1.1
//! on, its hooks also keep reading the context whatever a newer `wt` adds: the data model
//! ignores fields it does not know, enums have an `Unknown` variant for values from a newer
//! `wt`, and what cannot be read is an error you can see ([`MemberError`]), never a silent
//! `None`. A hook that compiles against 1.1 compiles against every later 1.x: types that
//! will grow are `#[non_exhaustive]`, so build them with their constructors and give
//! `match`es a `_` arm.
//!
//! ## Features
//!
//! - `testing`: the [`testing`] module.

#![warn(missing_docs)]
#![expect(
    clippy::test_attr_in_doctest,
    reason = "the crate example shows a hook crate's own unit test; its hidden main runs the same checks"
)]

#[doc(hidden)]
pub mod export;
pub mod hook;
pub mod member;
pub mod model;
pub mod rules;
pub mod state_probe;
// Documented even without the feature, so `cargo doc` shows the kit.
#[cfg(any(feature = "testing", doc))]
pub mod testing;
pub mod turn;

#[doc(hidden)]
pub mod __private {
    pub use crate::export::*;
    pub use abi_stable;
    pub use windtunnel_abi as abi;
}

pub use export::SDK_VERSION;
// Hidden since 1.2 (`wt` reads descriptors with types of its own); kept for 1.x callers.
#[doc(hidden)]
pub use export::{Descriptor, DescriptorHook};
pub use hook::{Context, Error, Hook, MemberError, Result};
pub use state_probe::{StateProbe, StateProbeHook};
pub use turn::{Cause, GuardDecision, Outcome, TurnCall, TurnResult};
/// The frozen FFI layer (`windtunnel-abi` 1.0.0). Hook authors do not need it.
pub use windtunnel_abi as abi;
/// Lifecycle and turn points: their numbers (`ON_RUN_END`, …), capability bits and method
/// names.
pub use windtunnel_abi::point;

/// Put on an `impl Hook for T` block. Derives the set of points the hook declares from the
/// methods the block defines, so the declaration can never disagree with the code; `wt`
/// calls exactly the declared points. Refuses a block that defines `turn_finish` without
/// `turn_begin` (that finish would never be called).
///
/// ```
/// use windtunnel_sdk::{Context, Hook, Result, hook, point, testing::HookTester};
///
/// #[derive(Default)]
/// pub struct Two;
///
/// #[hook]
/// impl Hook for Two {
///     const NAME: &'static str = "two";
///     fn on_run_start(&mut self, _ctx: &Context<'_>) -> Result { Ok(()) }
///     fn on_pack_end(&mut self, _ctx: &Context<'_>) -> Result { Ok(()) }
/// }
///
/// let tester = HookTester::<Two>::new();
/// assert!(tester.declares(point::ON_RUN_START) && tester.declares(point::ON_PACK_END));
/// assert!(!tester.declares(point::ON_RUN_END));
/// ```
pub use windtunnel_sdk_macros::hook;

/// Exports one or more hook types from a `cdylib` crate:
///
/// ```standalone_crate
/// use windtunnel_sdk::{Context, Hook, Result, hook};
///
/// #[derive(Default)]
/// pub struct MyHook;
///
/// #[hook]
/// impl Hook for MyHook {
///     const NAME: &'static str = "my_hook";
///     fn on_run_end(&mut self, _ctx: &Context<'_>) -> Result { Ok(()) }
/// }
///
/// windtunnel_sdk::export_hooks!(MyHook);
/// # fn main() {}
/// ```
///
/// Each type implements [`Hook`] (with `#[windtunnel_sdk::hook]` on the impl) and
/// `Default`. The macro emits the `abi_stable` root module `wt` loads, and a metadata record
/// (SDK version, library version, panic strategy, target, each hook's name and points) that
/// lets `wt hooks list` describe the library without running any of its code. Use it once
/// per crate. The crate needs no `abi_stable` dependency of its own.
#[macro_export]
macro_rules! export_hooks {
    ($($hook:ty),+ $(,)?) => {
        #[doc(hidden)]
        const __WT_HOOKS: &[$crate::__private::HookEntry] =
            &[$($crate::__private::HookEntry::of::<$hook>()),+];

        #[doc(hidden)]
        #[used]
        #[unsafe(no_mangle)]
        #[unsafe(link_section = ".wt_meta")]
        pub static WT_PLUGIN_META: [u8; $crate::__private::meta_len(
            __WT_HOOKS,
            ::core::env!("CARGO_PKG_VERSION"),
        )] = $crate::__private::meta_bytes(
            __WT_HOOKS,
            ::core::env!("CARGO_PKG_VERSION"),
            ::core::cfg!(panic = "unwind"),
        );

        #[doc(hidden)]
        extern "C" fn __wt_descriptor() -> $crate::__private::abi_stable::std_types::RString {
            $crate::__private::descriptor_json(
                __WT_HOOKS,
                ::core::env!("CARGO_PKG_VERSION"),
                ::core::cfg!(panic = "unwind"),
            )
        }

        #[doc(hidden)]
        extern "C" fn __wt_new_hook(
            name: $crate::__private::abi_stable::std_types::RStr<'_>,
        ) -> $crate::__private::abi_stable::std_types::RResult<
            $crate::__private::abi::FfiHookBox,
            $crate::__private::abi_stable::std_types::RString,
        > {
            $crate::__private::new_hook(__WT_HOOKS, name)
        }

        #[doc(hidden)]
        fn __wt_root_module() -> $crate::__private::abi::HookLibRef {
            use $crate::__private::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::__private::abi::HookLib {
                descriptor: __wt_descriptor,
                new_hook: __wt_new_hook,
            }
            .leak_into_prefix()
        }

        // What `#[abi_stable::export_root_module]` expands to, spelled through the SDK so
        // that a hook crate needs no `abi_stable` dependency of its own. The symbol name is
        // abi_stable's `ROOT_MODULE_LOADER_NAME` (checked by the SDK's tests).
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        #[unsafe(no_mangle)]
        pub static _1as_0lib_1header_0root_bmodule_bloader:
            $crate::__private::abi_stable::library::LibHeader = {
            extern "C" fn __wt_erased_root_module(
            ) -> $crate::__private::abi_stable::library::RootModuleResult {
                $crate::__private::abi_stable::library::__call_root_module_loader(__wt_root_module)
            }
            // SAFETY: the constructor returns the `HookLibRef` root module named here.
            unsafe {
                $crate::__private::abi_stable::library::LibHeader::from_constructor::<
                    $crate::__private::abi::HookLibRef,
                >(
                    __wt_erased_root_module,
                    $crate::__private::abi_stable::library::CheckTypeLayout::Yes,
                )
            }
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `export_hooks!` spells abi_stable's root-module symbol itself; it must be the name
    /// abi_stable looks up.
    #[test]
    fn the_root_symbol_is_abi_stables() {
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }

    /// The macro's list, the FFI point numbers and the trait's method names agree: a hook
    /// defining exactly the method `point::name(p)` declares exactly `point::bit(p)`.
    #[test]
    fn declared_bits_follow_the_point_table() {
        macro_rules! one_point {
            ($($ty:ident: $method:ident = $point:expr),+ $(,)?) => {{
                let mut seen = Vec::new();
                $(
                    #[derive(Default)]
                    struct $ty;
                    #[hook]
                    impl Hook for $ty {
                        const NAME: &'static str = stringify!($method);
                        fn $method(&mut self, _: &Context<'_>) -> Result { Ok(()) }
                    }
                    assert_eq!(point::name($point), stringify!($method));
                    assert_eq!(<$ty as Hook>::DECLARED_POINTS, point::bit($point));
                    seen.push($point);
                )+
                seen
            }};
        }
        let mut seen = one_point!(
            A: on_provisioned = point::ON_PROVISIONED,
            B: on_run_start = point::ON_RUN_START,
            C: on_run_scored = point::ON_RUN_SCORED,
            D: on_run_end = point::ON_RUN_END,
            E: on_scenario_end = point::ON_SCENARIO_END,
            F: on_pack_end = point::ON_PACK_END,
        );

        #[derive(Default)]
        struct Turns;
        #[hook]
        impl Hook for Turns {
            const NAME: &'static str = "turns";
            fn turn_begin(&mut self, _: &TurnCall, _: &Context<'_>) -> Result {
                Ok(())
            }
            fn turn_finish(&mut self, _: &TurnResult, _: &Context<'_>) -> Result {
                Ok(())
            }
        }
        assert_eq!(
            Turns::DECLARED_POINTS,
            point::bit(point::TURN_BEGIN) | point::bit(point::TURN_FINISH)
        );
        assert_eq!(point::name(point::TURN_BEGIN), "turn_begin");
        assert_eq!(point::name(point::TURN_FINISH), "turn_finish");

        #[derive(Default)]
        struct Guard;
        #[hook]
        impl Hook for Guard {
            const NAME: &'static str = "guard";
            fn guard_check(&mut self, _: &TurnCall, _: &Context<'_>) -> Result<GuardDecision> {
                Ok(GuardDecision::Allow)
            }
        }
        assert_eq!(Guard::DECLARED_POINTS, point::bit(point::GUARD_CHECK));
        assert_eq!(point::name(point::GUARD_CHECK), "guard_check");

        seen.extend([point::TURN_BEGIN, point::TURN_FINISH, point::GUARD_CHECK]);
        assert_eq!(
            seen,
            point::ALL,
            "every point of the FFI table is covered, in order"
        );
    }
}
