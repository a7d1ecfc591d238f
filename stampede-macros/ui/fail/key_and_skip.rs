use stampede::cached;

#[cached(fresh = "60s", key = (tenant, id), skip(tenant))]
async fn get(tenant: u32, id: u64) -> u64 {
    tenant as u64 + id
}

fn main() {}
