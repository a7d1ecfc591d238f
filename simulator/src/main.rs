//! `cargo run --release -p stampede-simulator -- [--seeds N] [--first S] [--replicas R|A-B]
//! [--operations N] [--no-faults] [--no-load-timeouts] [--no-fleet-admission]
//! [--no-acknowledged] [--no-hearing-leases] [--faults-end-together] [--no-tell-delays]
//! [--no-short-lingers] [--no-few-buckets] [--no-small-memories] [--digests]
//! [--seed S --trace]`: runs seeds and reports runs per second, violations and the first
//! failing seeds; `--seed S --trace` replays one seed and prints every event; `--digests`
//! prints a line per seed with a digest of its events, so two soaks of one range can be
//! compared run by run (a seed whose line differs did not replay bit for bit).
use stampede_simulator::{run, Config};
use std::time::Instant;

fn main() {
    let mut config = Config::default();
    let (mut seeds, mut first, mut only, mut trace) = (10_000_u64, 0_u64, None, false);
    let mut digests = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| -> u64 {
            let text = args
                .next()
                .unwrap_or_else(|| usage(&format!("{name} needs a number")));
            text.parse()
                .unwrap_or_else(|_| usage(&format!("{name}: `{text}` is not a number")))
        };
        match arg.as_str() {
            "--seeds" => seeds = value("--seeds"),
            "--first" => first = value("--first"),
            "--seed" => only = Some(value("--seed")),
            "--replicas" => {
                let text = args
                    .next()
                    .unwrap_or_else(|| usage("--replicas needs a number or a range A-B"));
                let number = |n: &str| {
                    n.parse::<usize>().unwrap_or_else(|_| {
                        usage(&format!(
                            "--replicas: `{text}` is not a number or a range A-B"
                        ))
                    })
                };
                config.replicas = match text.split_once('-') {
                    Some((fewest, most)) => (number(fewest).max(1), number(most).max(1)),
                    None => (number(&text).max(1), number(&text).max(1)),
                };
            }
            "--operations" => config.operations = value("--operations") as usize,
            "--no-faults" => config.faults = false,
            "--no-load-timeouts" => config.load_timeouts = false,
            "--no-fleet-admission" => config.fleet_admission = false,
            "--no-acknowledged" => config.acknowledged = false,
            "--no-hearing-leases" => config.hearing_leases = false,
            "--faults-end-together" => config.faults_end_apart = false,
            "--no-tell-delays" => config.tell_delays = false,
            "--no-short-lingers" => config.short_lingers = false,
            "--no-few-buckets" => config.few_buckets = false,
            "--no-small-memories" => config.small_memories = false,
            "--trace" => trace = true,
            "--digests" => digests = true,
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if let Some(seed) = only {
        let report = run(seed, &config);
        if trace {
            say(format_args!("{}", report.trace().trim_end()));
        }
        for violation in &report.violations {
            say(format_args!("VIOLATION {violation}"));
        }
        std::process::exit(i32::from(!report.violations.is_empty()));
    }
    let started = Instant::now();
    let (mut failed, mut calls, mut origin_calls) = (Vec::new(), 0, 0);
    for seed in first..first + seeds {
        let report = run(seed, &config);
        calls += report.calls;
        origin_calls += report.origin_calls;
        if digests {
            say(format_args!(
                "seed {seed}: {} calls, {} origin calls, events {:016x}",
                report.calls,
                report.origin_calls,
                report.digest()
            ));
        }
        if !report.violations.is_empty() {
            say(format_args!("seed {seed}: {}", report.violations[0]));
            failed.push(seed);
        }
    }
    let took = started.elapsed();
    say(format_args!(
        "{seeds} runs ({} replicas, {} operations each{}) in {:.1}s: {:.0} runs/s, {calls} calls, {origin_calls} origin calls, {} failing{}",
        match config.replicas {
            (fewest, most) if fewest == most => fewest.to_string(),
            (fewest, most) => format!("{fewest} to {most}"),
        },
        config.operations,
        if config.faults { ", faults in half" } else { ", no faults" },
        took.as_secs_f64(),
        seeds as f64 / took.as_secs_f64(),
        failed.len(),
        failed.first().map_or(String::new(), |seed| format!(
            " (replay the first: --seed {seed} --trace)"
        )),
    ));
    std::process::exit(i32::from(!failed.is_empty()));
}

/// Prints to standard output; once nobody reads it (piped into `head`), stops as a
/// process that SIGPIPE ended would, without a panic's backtrace.
fn say(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    if writeln!(std::io::stdout().lock(), "{text}").is_err() {
        std::process::exit(141);
    }
}

fn usage(why: &str) -> ! {
    eprintln!("stampede-simulator: {why}\nusage: stampede-simulator [--seeds N] [--first S] [--replicas R|A-B] [--operations N] [--no-faults] [--no-load-timeouts] [--no-fleet-admission] [--no-acknowledged] [--no-hearing-leases] [--faults-end-together] [--no-tell-delays] [--no-short-lingers] [--no-few-buckets] [--no-small-memories] [--digests] [--seed S --trace]");
    std::process::exit(2)
}
