use super::*;

/// The file and the environment read the attribute's grammar: the shared examples,
/// through both.
#[test]
fn the_file_and_the_environment_read_the_one_duration_grammar() {
    use stampede_settings::examples::{DURATIONS, NOT_DURATIONS};
    let path = Path::new("stampede.toml");
    let from_file = |text: &str| {
        let settings = file::parse(path, &format!("[functions.f]\nstale = {text:?}\n"))?;
        let mut layers = Layers::default();
        for (name, overrides) in settings.functions {
            layers.set_function(name, overrides.value);
        }
        Ok::<_, ConfigError>(layers.functions[&Arc::from("f")].value.stale)
    };
    let from_env = |text: &str| {
        let variables = [("STAMPEDE_FUNCTION_F_STALE".into(), text.into())];
        let mut layers = Layers::default();
        layers.read_env(variables)?;
        Ok::<_, ConfigError>(layers.env_functions["F"].value.stale)
    };
    for &(text, millis) in DURATIONS {
        let expected = Some(Duration::from_millis(millis));
        assert_eq!(from_file(text), Ok(expected), "file: {text}");
        assert_eq!(from_env(text), Ok(expected), "environment: {text}");
    }
    for &(text, why) in NOT_DURATIONS {
        let refusal = format!("`{text}` is not a duration: {why}");
        let in_file = from_file(text).unwrap_err();
        assert_eq!(
            (in_file.line(), in_file.key()),
            (Some(2), Some("functions.f.stale"))
        );
        assert!(in_file.message().starts_with(&refusal), "{in_file}");
        let in_env = from_env(text).unwrap_err();
        assert_eq!(in_env.key(), Some("STAMPEDE_FUNCTION_F_STALE"));
        assert!(in_env.message().starts_with(&refusal), "{in_env}");
    }
}

/// A file naming Redis: accepted with the `redis` feature; without it, refused when the
/// runtime is built, under the key that asked for it, rather than caching per process.
#[test]
fn a_redis_backend_needs_the_redis_feature() {
    let path = Path::new("stampede.toml");
    let text = "[backend]\nkind = \"tiered\"\nurl = \"redis://127.0.0.1:6379\"\n";
    let settings = file::parse(path, text).unwrap();
    let mut layers = Layers::default();
    layers.backend.merge(settings.backend);
    let checked = layers.check(|_| Ok(()));
    if cfg!(feature = "redis") {
        assert!(checked.is_ok(), "{checked:?}");
    } else {
        let refused = checked.expect_err("refused without the feature");
        assert_eq!(refused.key(), Some("backend.kind"));
        assert!(refused.message().contains("`redis` feature"), "{refused}");
    }
}

/// The environment, read after the file, turns off the file's XFetch whichever spelling
/// either uses; the policy's compiled β is then off too.
#[test]
fn the_environment_turns_off_the_files_xfetch() {
    let path = Path::new("stampede.toml");
    let compiled = || {
        Policy::builder("f")
            .fresh(Duration::from_secs(60))
            .xfetch(1.0)
            .build()
            .unwrap()
    };
    let beta_of = |file: &str, vars: &[(&str, &str)]| {
        let mut layers = Layers::default();
        for (name, overrides) in file::parse(path, file).unwrap().functions {
            layers.functions.entry(name).or_default().merge(overrides);
        }
        let vars = vars.iter().map(|(k, v)| ((*k).into(), (*v).into()));
        layers.read_env(vars).unwrap();
        let config = layers.check(|_| Ok(())).unwrap();
        let policy = config.policy_of(compiled(), &Arc::from("f")).unwrap();
        policy.xfetch_beta()
    };
    assert_eq!(beta_of("", &[]), Some(1.0), "compiled");
    assert_eq!(beta_of("[functions.f]\nxfetch = false\n", &[]), None);
    assert_eq!(beta_of("[functions.f]\nxfetch_beta = 0\n", &[]), None);
    assert_eq!(beta_of("[functions.f]\nxfetch = 2.5\n", &[]), Some(2.5));
    let file = "[functions.f]\nxfetch_beta = 3\n";
    assert_eq!(beta_of(file, &[]), Some(3.0));
    assert_eq!(
        beta_of(file, &[("STAMPEDE_FUNCTION_F_XFETCH", "false")]),
        None
    );
    assert_eq!(
        beta_of(file, &[("STAMPEDE_FUNCTION_F_XFETCH_BETA", "0")]),
        None
    );
    let off = "[functions.f]\nxfetch = false\n";
    assert_eq!(
        beta_of(off, &[("STAMPEDE_FUNCTION_F_XFETCH_BETA", "2")]),
        Some(2.0)
    );
}
