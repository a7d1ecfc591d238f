use std::collections::HashMap;
use stampede::cached;

#[cached(fresh = "60s", batch(ids))]
async fn prices(ids: Vec<u64>) -> HashMap<String, u64> {
    ids.into_iter().map(|id| (id.to_string(), id)).collect()
}

fn main() {}
