use std::collections::HashMap;
use stampede::cached;

#[cached(fresh = "60s", batch(ids, max_batch = 0))]
async fn prices(ids: Vec<u64>) -> HashMap<u64, u64> {
    ids.into_iter().map(|id| (id, id)).collect()
}

fn main() {}
