use stampede::cached;

// The let-chain's own `id` shadows the argument: the argument `id` is not in the key.
#[cached(fresh = "60s", key = if tenant > 0 && let Some(id) = Some(tenant) { id } else { 0 }, key_type = u64)]
async fn total(tenant: u64, id: u64) -> u64 {
    tenant + id
}

fn main() {}
