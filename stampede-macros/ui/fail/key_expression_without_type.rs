use stampede::cached;

#[cached(fresh = "60s", key = format!("{tenant}:{id}"))]
async fn get(tenant: String, id: u64) -> u64 {
    tenant.len() as u64 + id
}

fn main() {}
