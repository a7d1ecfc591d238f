use std::collections::HashMap;
use stampede::cached;

#[cached(fresh = "60s", batch(ids), key = (tenant, ids))]
async fn prices(tenant: String, ids: Vec<u64>) -> HashMap<u64, String> {
    ids.into_iter().map(|id| (id, tenant.clone())).collect()
}

fn main() {}
