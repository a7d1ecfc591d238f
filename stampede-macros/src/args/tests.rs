use super::Args;
use crate::ctxt::Ctxt;

/// The options `tokens` parse into, and the messages of the errors reported.
fn parse(tokens: &str) -> (Args, Vec<String>) {
    let mut cx = Ctxt::new();
    let args = Args::parse(tokens.parse().unwrap(), &mut cx);
    let errors = match cx.finish() {
        Ok(()) => Vec::new(),
        Err(errors) => errors.into_iter().map(|e| e.to_string()).collect(),
    };
    (args, errors)
}

#[test]
fn each_kind_of_value_is_read() {
    let (args, errors) = parse(
        r#"fresh = "1m30s", coalesce = false, xfetch, jitter = 0.25, skip(db, self), local, returns = value"#,
    );
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(args.fresh.map(|s| s.value.millis), Some(90_000));
    assert_eq!(args.coalesce.map(|s| s.value), Some(false));
    assert_eq!(args.xfetch.map(|s| s.value), Some(Some(1.0)));
    assert_eq!(args.jitter.map(|s| s.value), Some(0.25));
    let skipped: Vec<String> = args
        .skip
        .unwrap()
        .value
        .iter()
        .map(|i| i.to_string())
        .collect();
    assert_eq!(skipped, ["db", "self"]);
    assert!(args.local.is_some());
    assert!(args
        .returns
        .is_some_and(|s| s.value == super::Returning::Value));
}

#[test]
fn an_option_given_twice_is_reported_once_and_its_second_value_not_read() {
    let (args, errors) = parse(r#"fresh = "1s", fresh = "not a duration""#);
    assert_eq!(errors, ["`fresh` is given twice"]);
    assert_eq!(args.fresh.map(|s| s.value.millis), Some(1_000));
}

#[test]
fn a_renamed_option_names_its_name_here_and_counts_as_written() {
    let (args, errors) = parse(r#"ttl = "5s""#);
    assert_eq!(errors, ["`ttl` is `fresh` here"]);
    assert!(args.fresh.is_none());
    assert_eq!(args.written, ["ttl", "fresh"]);
}

#[test]
fn every_mistake_is_reported_in_order() {
    let (_, errors) = parse(r#"fresh = 5, local = 1, bogus, capacity = "x""#);
    let unknown = format!(
        "unknown option `bogus`; the options are: {}",
        super::OPTIONS
    );
    assert_eq!(
        errors,
        [
            "durations are strings with a unit: write `fresh = \"5s\"`",
            "`local` takes no value: write `local`",
            &unknown,
            "`capacity` is a whole number: write `capacity = 10_000`",
        ]
    );
}

#[test]
fn settings_inside_parentheses_are_read() {
    let (args, errors) = parse(r#"xfetch(beta = 2.5), cache_errors(if = is_missing, for = "5s")"#);
    assert_eq!(errors, Vec::<String>::new());
    assert_eq!(args.xfetch.map(|s| s.value), Some(Some(2.5)));
    let kept = args.cache_errors.unwrap().value;
    assert_eq!(kept.ttl.millis, 5_000);
    assert!(kept.keep.is_ident("is_missing"));
}

#[test]
fn xfetch_is_off_when_written_false_or_with_a_beta_of_zero() {
    for off in ["xfetch = false", "xfetch(beta = 0.0)", "xfetch(beta = 0)"] {
        let (args, errors) = parse(off);
        assert_eq!(errors, Vec::<String>::new(), "{off}");
        assert_eq!(args.xfetch.map(|s| s.value), Some(None), "{off}");
    }
    let (args, _) = parse("xfetch = true");
    assert_eq!(args.xfetch.map(|s| s.value), Some(Some(1.0)));
    let (args, errors) = parse("xfetch = 2.0");
    assert!(args.xfetch.is_none());
    assert_eq!(
        errors,
        ["write `xfetch`, `xfetch(beta = 1.0)` or `xfetch = false`"]
    );
}

#[test]
fn tags_are_an_expression() {
    let (args, errors) = parse(r#"tags = [format!("tenant:{tenant}"), "all".to_owned()]"#);
    assert_eq!(errors, Vec::<String>::new());
    assert!(matches!(
        args.tags.map(|s| s.value),
        Some(syn::Expr::Array(_))
    ));
    let (args, errors) = parse("tags(tenant)");
    assert!(args.tags.is_none());
    assert_eq!(
        errors,
        ["write `tags = [format!(\"tenant:{tenant}\")]`, an expression over the keyed arguments whose items are strings (`impl AsRef<str>`)"]
    );
}

#[test]
fn the_attributes_documentation_names_every_option() {
    let docs = include_str!("../lib.rs");
    let start = docs.find("/// Options:").expect("lib.rs lists the options");
    let end = start
        + docs[start..]
            .find("`docs/attribute.md`")
            .expect("the list ends");
    let docs = &docs[start..end];
    for option in super::OPTIONS.split(", ") {
        assert!(
            docs.contains(&format!("`{option}`")),
            "`#[cached]`'s documentation (lib.rs) does not name `{option}`"
        );
    }
}
