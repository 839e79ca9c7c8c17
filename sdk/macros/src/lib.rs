//! `#[windtunnel_sdk::hook]`: derives the set of points a hook declares from the methods
//! its `impl Hook for …` block defines, so the declaration can never disagree with the
//! code. The host dispatches only declared points.
//!
//! The expansion only adds `const DECLARED_POINTS: u32 = …;` to the block, which every
//! 1.x SDK understands: a newer macros crate must keep working under an older SDK, since
//! cargo may pair them.

use proc_macro::TokenStream;
use proc_macro2::{Delimiter, Group, Literal, Span, TokenStream as TokenStream2, TokenTree};
use quote::{quote, quote_spanned};

/// Method names in point order (point `i + 1`, capability bit `1 << i`). The same table as
/// `windtunnel_abi::point::name`, which the SDK's tests check through this macro
/// (`declared_bits_follow_the_point_table`).
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
        Err((span, message)) => quote_spanned!(span=> ::core::compile_error!(#message);).into(),
    }
}

type Error = (Span, String);

// The attribute reads tokens rather than parsing with syn: it only needs the names of the
// block's methods, and syn would be one more crate for every hook to compile (the rest of
// a hook's dependency tree uses other syn versions).
fn expand(attr: TokenStream2, item: TokenStream2) -> Result<TokenStream2, Error> {
    if let Some(first) = attr.into_iter().next() {
        return Err((first.span(), "#[hook] takes no arguments".into()));
    }
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let wrong_item = |span: Span| (span, "#[hook] goes on an `impl Hook for Type` block".into());
    let Some(TokenTree::Group(body)) = tokens.last() else {
        return Err(wrong_item(Span::call_site()));
    };
    if body.delimiter() != Delimiter::Brace || !is_trait_impl(&tokens[..tokens.len() - 1]) {
        return Err(wrong_item(body.span()));
    }
    let mut bits: u32 = 0;
    let mut finish = None;
    let items: Vec<TokenTree> = body.stream().into_iter().collect();
    // Methods are `fn name` at the top level of the block; a `fn` inside a method body sits
    // in a nested group and is not seen here.
    for pair in items.windows(2) {
        if let [TokenTree::Ident(kw), TokenTree::Ident(name)] = pair {
            if kw == "fn" {
                let name_text = name.to_string();
                if let Some(i) = POINTS.iter().position(|p| *p == name_text) {
                    bits |= 1 << i;
                }
                if name_text == "turn_finish" {
                    finish = Some(name.span());
                }
            }
        }
    }
    let begin_bit = 1 << POINTS.iter().position(|p| *p == "turn_begin").unwrap_or(6);
    if let (Some(span), 0) = (finish, bits & begin_bit) {
        return Err((
            span,
            "`turn_finish` needs `turn_begin`: wt calls a hook's turn_finish only for a \
             turn_begin of the same hook that returned Ok, so this one would never run; \
             define `turn_begin` too (it may just return Ok(()))"
                .into(),
        ));
    }
    let bits = Literal::u32_suffixed(bits);
    let mut stream = body.stream();
    stream.extend(quote! {
        #[doc(hidden)]
        const DECLARED_POINTS: u32 = #bits;
    });
    let mut group = Group::new(Delimiter::Brace, stream);
    group.set_span(body.span());
    let last = tokens.len() - 1;
    tokens[last] = TokenTree::Group(group);
    Ok(tokens.into_iter().collect())
}

/// Is this the head of an `impl … Trait for Type` block: an `impl` followed, outside its
/// generics, by `for`?
fn is_trait_impl(head: &[TokenTree]) -> bool {
    let Some(start) = head
        .iter()
        .position(|t| matches!(t, TokenTree::Ident(i) if i == "impl"))
    else {
        return false;
    };
    // `<`/`>` are plain punctuation in token streams; count them so that a `for` in
    // generics (`impl<F: for<'a> Fn(&'a str)>`) is not taken for the trait's.
    let mut depth = 0i32;
    let mut previous_dash = false;
    for t in &head[start + 1..] {
        match t {
            TokenTree::Punct(p) if p.as_char() == '<' => depth += 1,
            TokenTree::Punct(p) if p.as_char() == '>' && !previous_dash => depth -= 1,
            TokenTree::Ident(i) if i == "for" && depth == 0 => return true,
            _ => {}
        }
        previous_dash = matches!(t, TokenTree::Punct(p) if p.as_char() == '-');
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(item: TokenStream2) -> Result<String, String> {
        expand(TokenStream2::new(), item)
            .map(|t| t.to_string())
            .map_err(|(_, message)| message)
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
        // A `fn` nested in a method body and a `for` in the generics do not count.
        let out = declared(quote! {
            impl<F: for<'a> Fn(&'a str)> Hook for H<F> {
                fn on_run_start(&mut self, ctx: &Context<'_>) -> Result {
                    fn on_pack_end() {}
                    Ok(())
                }
            }
        })
        .unwrap();
        assert!(out.contains("const DECLARED_POINTS : u32 = 2u32"), "{out}");
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
        let (_, err) = expand(quote!(x), quote!(impl Hook for H {})).unwrap_err();
        assert_eq!(err, "#[hook] takes no arguments");
        let err = declared(quote!(impl H {})).unwrap_err();
        assert!(err.contains("impl Hook for Type"), "{err}");
        let err = declared(quote!(
            impl<F: for<'a> Fn(&'a u8)> H<F> {}
        ))
        .unwrap_err();
        assert!(err.contains("impl Hook for Type"), "{err}");
        let err = declared(quote!(
            struct S;
        ))
        .unwrap_err();
        assert!(err.contains("impl Hook for Type"), "{err}");
    }
}
