use stampede::cached;

#[cached(fresh = "60s")]
struct Profile;

fn main() {}
