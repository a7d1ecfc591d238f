use std::collections::HashMap;
use stampede::cached;

pub struct Db;

#[cached(fresh = "60s", batch(ids), skip(db))]
async fn prices(ids: Vec<u64>, db: &Db) -> HashMap<u64, u64> {
    let _ = db;
    ids.into_iter().map(|id| (id, id)).collect()
}

fn main() {}
