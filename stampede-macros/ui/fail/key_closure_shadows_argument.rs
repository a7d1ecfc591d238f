use stampede::cached;

// The closure's own `id` shadows the argument: the argument `id` is not in the key.
#[cached(fresh = "60s", key = (|id: u64| id + 1)(tenant), key_type = u64)]
async fn balance(tenant: u64, id: u64) -> u64 {
    tenant + id
}

fn main() {}
