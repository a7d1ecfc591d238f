use stampede::cached;

#[cached(fresh = "60sec")]
async fn get(id: u64) -> u64 {
    id
}

fn main() {}
