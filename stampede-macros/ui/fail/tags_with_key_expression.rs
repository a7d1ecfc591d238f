// The key is a string made of the arguments: they cannot be read back from it.
use stampede::cached;

#[cached(fresh = "60s", key = format!("{tenant}:{id}"), key_type = String, tags = [format!("tenant:{tenant}")])]
async fn get(tenant: u32, id: u64) -> u64 {
    u64::from(tenant) + id
}

fn main() {}
