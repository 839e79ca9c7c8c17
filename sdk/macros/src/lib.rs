//! `#[windtunnel_sdk::hook]`: derives the set of points a hook declares from the methods
//! its `impl Hook for …` block defines, so the declaration can never disagree with the
//! code. The host dispatches only declared points.
//!
//! The expansion only adds `const DECLARED_POINTS: u32 = …;` to the block, which every
//! 1.x SDK understands: a newer macros crate must keep working under an older SDK, since
//! cargo may pair them.

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::quote;
use syn::{ImplItem, ItemImpl, spanned::Spanned};

/// Method names in point order (point `i + 1`, capability bit `1 << i`). The same table as
/// `windtunnel_abi::point::name`, which this crate's tests check.
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

/// Put on an `impl Hook for T` block; see `windtunnel_sdk::hook`.
#[proc_macro_attribute]
pub fn hook(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr.into(), item.into()) {
        Ok(tokens) => tokens.into(),
        Err(err) => err.to_compile_error().into(),
    }
}

fn expand(attr: TokenStream2, item: TokenStream2) -> syn::Result<TokenStream2> {
    if !attr.is_empty() {
        return Err(syn::Error::new(attr.span(), "#[hook] takes no arguments"));
    }
    let mut imp: ItemImpl = syn::parse2(item)?;
    if imp.trait_.is_none() {
        return Err(syn::Error::new(
            imp.span(),
            "#[hook] goes on an `impl Hook for Type` block",
        ));
    }
    let mut bits: u32 = 0;
    let mut finish = None;
    for item in &imp.items {
        if let ImplItem::Fn(f) = item {
            let name = f.sig.ident.to_string();
            if let Some(i) = POINTS.iter().position(|p| *p == name) {
                bits |= 1 << i;
            }
            if name == "turn_finish" {
                finish = Some(f.sig.ident.span());
            }
        }
    }
    let begin_bit = 1 << POINTS.iter().position(|p| *p == "turn_begin").unwrap_or(6);
    if let (Some(span), 0) = (finish, bits & begin_bit) {
        return Err(syn::Error::new(
            span,
            "`turn_finish` needs `turn_begin`: wt calls a hook's turn_finish only for a \
             turn_begin of the same hook that returned Ok, so this one would never run; \
             define `turn_begin` too (it may just return Ok(()))",
        ));
    }
    imp.items.push(syn::parse_quote! {
        #[doc(hidden)]
        const DECLARED_POINTS: u32 = #bits;
    });
    Ok(quote!(#imp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_point_table_is_the_ffi_layers() {
        for (i, name) in POINTS.iter().enumerate() {
            let point = windtunnel_abi::point::ALL[i];
            assert_eq!(windtunnel_abi::point::name(point), *name);
            assert_eq!(windtunnel_abi::point::bit(point), 1 << i);
        }
        assert_eq!(POINTS.len(), windtunnel_abi::point::ALL.len());
    }

    fn declared(item: TokenStream2) -> syn::Result<String> {
        expand(TokenStream2::new(), item).map(|t| t.to_string())
    }

    #[test]
    fn declares_the_points_it_finds() {
        let out = declared(quote! {
            impl Hook for H {
                const NAME: &'static str = "h";
                fn on_run_end(&mut self, ctx: &Context<'_>) -> Result { Ok(()) }
                fn turn_begin(&mut self, c: &TurnCall, ctx: &Context<'_>) -> Result { Ok(()) }
                fn turn_finish(&mut self, r: &TurnResult, ctx: &Context<'_>) -> Result { Ok(()) }
                fn helper(&self) {}
            }
        })
        .unwrap();
        let bits = (1u32 << 3) | (1 << 6) | (1 << 7);
        assert!(
            out.contains(&format!("const DECLARED_POINTS : u32 = {bits}u32")),
            "{out}"
        );
    }

    #[test]
    fn refuses_a_finish_without_a_begin() {
        let err = declared(quote! {
            impl Hook for H {
                const NAME: &'static str = "h";
                fn turn_finish(&mut self, r: &TurnResult, ctx: &Context<'_>) -> Result { Ok(()) }
            }
        })
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`turn_finish` needs `turn_begin`"),
            "{err}"
        );
    }

    #[test]
    fn refuses_arguments_and_inherent_impls() {
        let err = expand(quote!(x), quote!(impl Hook for H {})).unwrap_err();
        assert_eq!(err.to_string(), "#[hook] takes no arguments");
        let err = declared(quote!(impl H {})).unwrap_err();
        assert!(err.to_string().contains("impl Hook for Type"), "{err}");
    }
}
