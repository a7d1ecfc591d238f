use serde::{Deserialize, Serialize};
use stampede::cached;

#[derive(Serialize, Deserialize)]
struct Report {
    lines: Vec<String>,
}

#[cached(fresh = "60s")]
async fn report(id: u64) -> Report {
    Report {
        lines: vec![id.to_string()],
    }
}

fn main() {}
