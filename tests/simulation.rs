//! The simulated fleet: seeded runs of replicas on a model Redis, with faults, each
//! checked against the fleet's guarantees (`simulator/src/checker.rs`). A failing seed
//! replays with `cargo run --release -p stampede-simulator -- --seed S --trace`; CI runs
//! twenty thousand more with the simulator's own command.
use stampede_simulator::{run, Config};

/// Seeds each of the two seeded tests runs here (they run side by side; a debug build
/// runs about twenty a second). `STAMPEDE_SIMULATION_SEEDS` sets another count.
const SEEDS: u64 = 100;

fn seeds(first: u64) {
    let count = std::env::var("STAMPEDE_SIMULATION_SEEDS")
        .ok()
        .and_then(|seeds| seeds.parse().ok())
        .unwrap_or(SEEDS);
    let config = Config::default();
    for seed in first..first + count {
        let report = run(seed, &config);
        assert!(
            report.violations.is_empty(),
            "seed {seed}: {:#?}\n{}",
            report.violations,
            report.trace()
        );
    }
}

#[test]
fn seeded_runs_break_no_guarantee() {
    seeds(0);
}

#[test]
fn more_seeded_runs_break_no_guarantee() {
    seeds(1_000_000);
}

#[test]
fn a_seed_replays_bit_for_bit() {
    let config = Config::default();
    for seed in [3, 11, 42] {
        let (first, again) = (run(seed, &config), run(seed, &config));
        let events = |report: &stampede_simulator::Report| format!("{:?}", report.events);
        assert_eq!(
            events(&first),
            events(&again),
            "seed {seed} ran differently twice"
        );
        assert!(first.calls > 0, "seed {seed} made calls");
    }
}
