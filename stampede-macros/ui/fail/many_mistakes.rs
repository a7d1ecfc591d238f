// Every mistake of one attribute is reported in one build, each under its own token.
use stampede::cached;

#[cached(fresh = "1 minute", jitter = 2.0, skip(nothing), key = id)]
async fn get(tenant: String, id: u64) -> u64 {
    tenant.len() as u64 + id
}

fn main() {}
