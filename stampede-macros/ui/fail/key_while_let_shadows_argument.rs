use stampede::cached;

// The `while let`'s own `id` shadows the argument: the argument `id` is not in the key.
#[cached(fresh = "60s", key = { let mut ids = vec![tenant]; let mut sum = 0; while let Some(id) = ids.pop() { sum += id; } sum }, key_type = u64)]
async fn total(tenant: u64, id: u64) -> u64 {
    tenant + id
}

fn main() {}
