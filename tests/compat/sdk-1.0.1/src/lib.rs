//! # Wind Tunnel hook SDK
//!
//! Everything a hook author needs to extend `wt`: the [`Hook`] trait and its [`Context`],
//! the data model ([`model`]), the `#[hook]` attribute that derives which lifecycle points a
//! hook declares, and [`export_hooks!`], which turns a `cdylib` crate into a plugin `wt` can
//! load with `wt run --hook NAME`.
//!
//! A plugin crate needs `crate-type = ["cdylib"]` and two dependencies: this crate and
//! `abi_stable` (the export expands to `::abi_stable::…` paths). See `plugins/` in the
//! Wind Tunnel repository for complete examples.

pub mod export;
pub mod hook;
pub mod model;
pub mod state_probe;
pub mod turn;

#[doc(hidden)]
pub mod __private {
    pub use crate::export::*;
    pub use abi_stable;
    pub use windtunnel_abi as abi;
}

pub use export::{Descriptor, DescriptorHook, SDK_VERSION};
pub use hook::{Context, Error, Hook, Result};
pub use state_probe::{StateProbe, StateProbeHook};
pub use turn::{Cause, GuardDecision, Outcome, TurnCall, TurnResult};
pub use windtunnel_abi as abi;
pub use windtunnel_sdk_macros::hook;

/// Exports one or more hook types from a `cdylib`:
///
/// ```ignore
/// windtunnel_sdk::export_hooks!(MyHook, MyOtherHook);
/// ```
///
/// Each type implements [`Hook`] (with `#[windtunnel_sdk::hook]` on the impl) and
/// `Default`. The macro emits the `abi_stable` root module and a metadata record that lets
/// `wt hooks list` describe the library without loading it. Use it once per crate.
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
        #[::abi_stable::export_root_module]
        pub fn __wt_root_module() -> $crate::__private::abi::HookLibRef {
            use $crate::__private::abi_stable::prefix_type::PrefixTypeTrait;
            $crate::__private::abi::HookLib {
                descriptor: __wt_descriptor,
                new_hook: __wt_new_hook,
            }
            .leak_into_prefix()
        }
    };
}
