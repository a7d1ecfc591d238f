use super::*;

#[test]
fn an_instance_is_the_item_a_closure_was_written_in() {
    assert_eq!(
        instance("app::Repo<app::A>::get::{{closure}}::{{closure}}"),
        "app::Repo<app::A>::get"
    );
    assert_eq!(instance("app::free<u8>::{{closure}}"), "app::free<u8>");
    assert_eq!(parent("app::Repo<app::m::A>::GET"), "app::Repo<app::m::A>");
    assert_eq!(parent("app::m::GET"), "app::m");
}
