// The tenant changes the result but is not in the key: one tenant would get another's data.
use stampede::cached;

#[cached(fresh = "60s", key = id)]
async fn load_profile(tenant: String, id: u64) -> u64 {
    tenant.len() as u64 + id
}

fn main() {}
