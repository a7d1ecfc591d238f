use stampede::cached;

// The nested function's own `id` is not the argument: the argument `id` is not in the key.
#[cached(fresh = "60s", key = { fn double(id: u64) -> u64 { id * 2 } double(tenant) }, key_type = u64)]
async fn total(tenant: u64, id: u64) -> u64 {
    tenant + id
}

fn main() {}
