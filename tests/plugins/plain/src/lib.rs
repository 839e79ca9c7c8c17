//! A plain C-ABI library with no Wind Tunnel root module; `wt` must refuse it.

#[unsafe(no_mangle)]
pub extern "C" fn plain_add(a: i32, b: i32) -> i32 {
    a + b
}
