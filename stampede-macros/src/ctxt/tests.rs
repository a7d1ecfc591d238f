use super::Ctxt;
use proc_macro2::Span;

#[test]
fn no_errors_finish_clean() {
    assert!(Ctxt::new().finish().is_ok());
}

#[test]
fn errors_are_combined_in_the_order_pushed() {
    let mut cx = Ctxt::new();
    cx.error_at(Span::call_site(), "first");
    cx.error(quote::quote!(x), "second");
    let messages: Vec<String> = cx
        .finish()
        .unwrap_err()
        .into_iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(messages, ["first", "second"]);
}

#[test]
#[should_panic(expected = "without finish")]
fn dropping_unfinished_errors_panics() {
    let mut cx = Ctxt::new();
    cx.error_at(Span::call_site(), "lost");
}
