use stampede::cached;

#[derive(Clone, PartialEq, serde::Serialize)]
struct Point {
    x: f64,
    y: f64,
}

#[cached(fresh = "60s")]
async fn distance(point: Point) -> u64 {
    (point.x * point.x + point.y * point.y).sqrt() as u64
}

fn main() {}
