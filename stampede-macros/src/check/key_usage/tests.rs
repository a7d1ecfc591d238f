use super::variables_used;

/// The variables `expr` uses, sorted.
fn used(expr: &str) -> Vec<String> {
    let expr: syn::Expr = syn::parse_str(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
    variables_used(&expr).into_iter().collect()
}

#[test]
fn plain_arguments_are_used() {
    assert_eq!(used("id"), ["id"]);
    assert_eq!(used("(tenant, id)"), ["id", "tenant"]);
    assert_eq!(used("(id)"), ["id"]);
    assert_eq!(used("tenant.len() as u64 + id"), ["id", "tenant"]);
    assert_eq!(used("self.id"), ["self"]);
}

#[test]
fn fields_and_path_segments_are_not_variables() {
    assert_eq!(used("user.id"), ["user"]);
    assert_eq!(used("Foo::id"), Vec::<String>::new());
    assert_eq!(used("::id"), Vec::<String>::new());
    assert_eq!(used("<T>::id"), Vec::<String>::new());
    assert_eq!(used("id::<u8>"), Vec::<String>::new());
    assert_eq!(used("user.id.to_string()"), ["user"]);
}

#[test]
fn closure_parameters_shadow_arguments() {
    assert_eq!(used("(|id: u64| id + 1)(tenant)"), ["tenant"]);
    assert_eq!(used("(|x: u64| x + id)(tenant)"), ["id", "tenant"]);
    assert_eq!(used("(|(id, _): (u64, u8)| id)(pair)"), ["pair"]);
}

#[test]
fn a_let_shadows_from_the_next_statement_on() {
    assert_eq!(used("{ let id = tenant; id }"), ["tenant"]);
    // Its own initializer still reads the argument.
    assert_eq!(used("{ let id = id + 1; id }"), ["id"]);
    assert_eq!(used("{ let Some(x) = a else { return b }; x }"), ["a", "b"]);
    // The scope ends with the block.
    assert_eq!(used("({ let id = 1; id }, id)"), ["id"]);
}

#[test]
fn loop_patterns_shadow_in_the_body_only() {
    assert_eq!(
        used("{ let mut sum = tenant; for id in 0..3u64 { sum += id; } sum }"),
        ["tenant"]
    );
    assert_eq!(used("for id in ids { drop(id) }"), ["drop", "ids"]);
    assert_eq!(used("for id in id {}"), ["id"]);
    assert_eq!(
        used("{ let mut ids = vec![tenant]; let mut sum = 0; while let Some(id) = ids.pop() { sum += id; } sum }"),
        ["tenant"]
    );
}

#[test]
fn if_let_chains_bind_for_the_then_branch_only() {
    assert_eq!(
        used("if tenant > 0 && let Some(id) = Some(tenant) { id } else { 0 }"),
        ["Some", "tenant"]
    );
    assert_eq!(used("if let Some(id) = x { 0 } else { id }"), ["id", "x"]);
    // A link sees the bindings of the links before it, not after.
    assert_eq!(
        used("if let Some(a) = x && let Some(b) = a && b > id { 1 } else { 0 }"),
        ["id", "x"]
    );
}

#[test]
fn match_arms_bind_for_their_guard_and_body() {
    // Patterns are not uses: `Some(id)` binds `id` and uses nothing.
    assert_eq!(used("match x { Some(id) => id, None => 0 }"), ["x"]);
    assert_eq!(used("match x { Some(id) => id, None => id }"), ["id", "x"]);
    assert_eq!(
        used("match x { n if n > limit => n, _ => id }"),
        ["id", "limit", "x"]
    );
}

#[test]
fn nested_items_see_none_of_the_variables() {
    assert_eq!(
        used("{ fn double(id: u64) -> u64 { id * 2 } double(tenant) }"),
        ["double", "tenant"]
    );
    assert_eq!(used("{ const ID: u64 = id; ID }"), ["ID"]);
}

#[test]
fn format_strings_capture_variables() {
    assert_eq!(used(r#"format!("{tenant}:{id}")"#), ["id", "tenant"]);
    assert_eq!(used(r#"format!("{tenant}:{}", id)"#), ["id", "tenant"]);
    assert_eq!(used(r#"format!("{id:>8}/{0}", x)"#), ["id", "x"]);
    assert_eq!(used(r#"format!("{{id}}")"#), Vec::<String>::new());
    assert_eq!(used(r#"println!("{_id}")"#), ["_id"]);
}

#[test]
fn format_named_arguments_supply_their_captures() {
    assert_eq!(
        used(r#"format!("{region}:{user}", region = "eu", user = user)"#),
        ["user"]
    );
    assert_eq!(used(r#"format!("{r}", r = region)"#), ["region"]);
}

#[test]
fn text_macros_use_nothing() {
    assert_eq!(used("stringify!(id).to_owned()"), Vec::<String>::new());
    assert_eq!(used(r#"concat!("a", id)"#), Vec::<String>::new());
    assert_eq!(used("std::stringify!(id)"), Vec::<String>::new());
}

#[test]
fn other_macros_read_their_arguments_as_expressions() {
    assert_eq!(used("vec![tenant, id]"), ["id", "tenant"]);
    // A string literal of an unknown macro is not read as a format string.
    assert_eq!(used(r#"my_macro!("{id}", tenant)"#), ["tenant"]);
}

#[test]
fn macro_tokens_that_are_not_expressions_count_every_free_identifier() {
    assert_eq!(
        used("my_macro!(tenant => id.field, a::b)"),
        ["id", "tenant"]
    );
    assert_eq!(used("my_macro!(x; [y z])"), ["x", "y", "z"]);
}
