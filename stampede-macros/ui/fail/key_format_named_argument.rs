use stampede::cached;

// `region = "eu"` supplies `{region}` itself: the argument `region` is not in the key.
#[cached(fresh = "60s", key = format!("{region}:{user}", region = "eu", user = user), key_type = String)]
async fn quota(region: String, user: u64) -> u64 {
    region.len() as u64 + user
}

fn main() {}
