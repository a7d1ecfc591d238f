// Tags are strings: a number must be formatted into one.
use stampede::cached;

#[cached(fresh = "60s", tags = [tenant])]
async fn get(tenant: u32) -> u32 {
    tenant
}

fn main() {}
