use stampede::cached;

// The loop's own `id` shadows the argument: the argument `id` is not in the key.
#[cached(fresh = "60s", key = { let mut sum = tenant; for id in 0..3u64 { sum += id; } sum }, key_type = u64)]
async fn total(tenant: u64, id: u64) -> u64 {
    tenant + id
}

fn main() {}
