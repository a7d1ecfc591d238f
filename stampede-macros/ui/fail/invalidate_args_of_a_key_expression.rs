use stampede::cached;

#[cached(fresh = "60s", key = format!("{tenant}:{id}"), key_type = String)]
async fn get(tenant: &str, id: u64) -> u64 {
    let _ = tenant;
    id
}

async fn forget(tenant: &str) {
    // The key is an expression, not the argument list: `invalidate(&key)` is the way.
    let _ = GET.invalidate_args((tenant, 7)).await;
}

fn main() {
    let _ = forget("acme");
}
