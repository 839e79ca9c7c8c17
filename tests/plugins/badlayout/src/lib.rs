//! A library that looks like a Wind Tunnel plugin before loading (root symbol, a valid
//! metadata record) but whose root module has another layout; abi_stable's layout check
//! must refuse it with one line.

use abi_stable::{
    StableAbi, declare_root_module_statics, export_root_module, library::RootModule,
    package_version_strings, prefix_type::PrefixTypeTrait, sabi_types::VersionStrings,
    std_types::RString,
};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = HookLibRef)))]
#[sabi(missing_field(panic))]
pub struct HookLib {
    pub descriptor: extern "C" fn() -> RString,
    #[sabi(last_prefix_field)]
    pub new_hook: extern "C" fn(u64) -> u64,
}

impl RootModule for HookLibRef {
    declare_root_module_statics! {HookLibRef}
    const BASE_NAME: &'static str = "windtunnel_hook";
    const NAME: &'static str = "windtunnel_hook";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

extern "C" fn descriptor() -> RString {
    RString::from("{}")
}

extern "C" fn new_hook(x: u64) -> u64 {
    x
}

#[export_root_module]
pub fn root() -> HookLibRef {
    HookLib {
        descriptor,
        new_hook,
    }
    .leak_into_prefix()
}

const META: &[u8] =
    b"WTMETA1\nsdk 1.0.0\nversion 1.0.0\nunwind 1\ntarget x86_64-linux\nhook badlayout 00000008\n";

#[used]
#[unsafe(no_mangle)]
#[unsafe(link_section = ".wt_meta")]
pub static WT_PLUGIN_META: [u8; META.len()] = {
    let mut out = [0u8; META.len()];
    let mut i = 0;
    while i < META.len() {
        out[i] = META[i];
        i += 1;
    }
    out
};
