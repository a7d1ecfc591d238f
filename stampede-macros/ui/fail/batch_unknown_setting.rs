use std::collections::HashMap;
use stampede::cached;

#[cached(fresh = "60s", batch(ids, one = price))]
async fn prices(ids: Vec<u64>) -> HashMap<u64, u64> {
    ids.into_iter().map(|id| (id, id)).collect()
}

fn main() {}
