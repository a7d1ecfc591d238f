use stampede::cached;

#[cached(fresh = "60s", tags = [format!("tenant:{tenant}")], tags = ["all"])]
async fn get(tenant: u32) -> u32 {
    tenant
}

fn main() {}
