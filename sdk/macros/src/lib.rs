//! `#[windtunnel_sdk::hook]`: derives the set of lifecycle points a hook declares from the
//! methods its `impl Hook for …` block defines, so the declaration can never disagree with
//! the code. The host dispatches only declared points.

use proc_macro::TokenStream;
use quote::quote;
use syn::{ImplItem, ItemImpl, parse_macro_input, spanned::Spanned};

/// Method names in point order; bit `i` is set when the method is defined.
const POINTS: [&str; 9] = [
    "on_provisioned",
    "on_run_start",
    "on_run_scored",
    "on_run_end",
    "on_scenario_end",
    "on_pack_end",
    "turn_begin",
    "turn_finish",
    "guard_check",
];

/// Put on an `impl Hook for T` (or `impl TurnHook for T`) block.
#[proc_macro_attribute]
pub fn hook(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let err = syn::Error::new(
            proc_macro2::TokenStream::from(attr).span(),
            "#[hook] takes no arguments",
        );
        return err.to_compile_error().into();
    }
    let mut imp = parse_macro_input!(item as ItemImpl);
    if imp.trait_.is_none() {
        return syn::Error::new(imp.span(), "#[hook] goes on an `impl Hook for Type` block")
            .to_compile_error()
            .into();
    }
    let mut bits: u32 = 0;
    for item in &imp.items {
        if let ImplItem::Fn(f) = item {
            let name = f.sig.ident.to_string();
            if let Some(i) = POINTS.iter().position(|p| *p == name) {
                bits |= 1 << i;
            }
        }
    }
    imp.items.push(syn::parse_quote! {
        #[doc(hidden)]
        const DECLARED_POINTS: u32 = #bits;
    });
    quote!(#imp).into()
}
